"""The validate stage prepares everything a record writes before sending any of it, so a bug in
redaction or serialisation refuses that record (one internal-error letter) instead of stopping
the stage; what it prepares for a good record is what goes to the topics."""

from __future__ import annotations

import json
from typing import Any, cast

from rankscope.schemas.events import EVENT_ADAPTER, EVENT_LIST_ADAPTER, dump_event
from rankscope.streams.config import RedactionConfig, StreamsConfig, ValidationLimits
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.stages.validate import RawRecord, ValidateStage
from rankscope.streams.validate import RecordRef, ValidationResult, validate_message
from tests.factories import NOW_NS, span

REF = RecordRef(topic="rankscope.raw.span", partition=1, offset=7, timestamp_ns=NOW_NS)


def _record(value: bytes) -> RawRecord:
    return RawRecord(REF.topic, REF.partition, REF.offset, NOW_NS, key=b"k", value=value)


def _stage() -> ValidateStage:
    config = StreamsConfig(bootstrap="unused:9092", redaction=RedactionConfig(enabled=False))
    # prepare() sends nothing: the stage's topics are not touched here
    return ValidateStage(config, cast(StageTopics, None), StageCounters())


def _batch() -> bytes:
    return b"[" + b",".join(dump_event(span(r, NOW_NS)) for r in (1, 2)) + b"]"


def test_a_good_record_is_prepared_as_one_events_record_with_its_source_header() -> None:
    value = _batch()
    result = validate_message(value, REF, ValidationLimits(), now_ns=NOW_NS)
    out = _stage().outputs_of(_record(value), None, result)
    assert out.valid == 2 and out.dead == []
    ((key, payload, headers, events),) = out.events
    assert key == b"k"
    assert EVENT_LIST_ADAPTER.validate_json(payload) == events == result.events
    assert headers[0][0] and headers[0][1]


def test_a_redaction_bug_refuses_the_record_whole_with_one_internal_error_letter() -> None:
    value = _batch()
    result = validate_message(value, REF, ValidationLimits(), now_ns=NOW_NS)
    stage = _stage()

    def broken(events: Any, record: str) -> Any:
        raise RuntimeError("a bug with a secret: hunter2")

    stage.redact = broken
    out = stage.outputs_of(_record(value), None, result)
    assert out.events == [] and out.valid == 0
    ((letter, letter_json),) = out.dead
    assert letter.reason_code == "internal_error" and letter.offset == REF.offset
    assert "hunter2" not in letter_json.decode()


def test_an_event_that_cannot_be_written_as_utf8_refuses_the_record_instead_of_raising() -> None:
    """What stopped the stage before the validator refused unpaired surrogates: an event whose
    text is not Unicode reached ``dump_events``. Should another path let one through, the
    record becomes a dead letter."""
    doc = json.loads(dump_event(span(3, NOW_NS)))
    doc["payload"]["attributes"] = {"k": "\ud800"}
    ev = EVENT_ADAPTER.validate_python(doc)  # pydantic takes it from Python objects
    value = b"(not looked at)"
    out = _stage().outputs_of(_record(value), None, ValidationResult(events=[ev]))
    assert out.events == []
    assert [letter.reason_code for letter, _ in out.dead] == ["internal_error"]
