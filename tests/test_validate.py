"""The validate stage on its own: every way a record can be bad, and the good ones around it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rankscope.schemas.events import dump_event, dump_events
from rankscope.streams.config import ValidationLimits
from rankscope.streams.validate import RecordRef, validate_message
from tests.factories import NOW_NS, gpu_sample, heartbeat, span

LIMITS = ValidationLimits()
REF = RecordRef(topic="rankscope.raw.span", partition=2, offset=41, timestamp_ns=NOW_NS)
SECRET = "hunter2-super-secret-token"


def run(value: bytes | None):  # type: ignore[no-untyped-def]
    return validate_message(value, REF, LIMITS, now_ns=NOW_NS)


def test_valid_batch_passes_whole() -> None:
    evs = [span(r, NOW_NS) for r in range(4)] + [gpu_sample(0, NOW_NS), heartbeat("n1", NOW_NS)]
    res = run(dump_events(evs))
    assert res.dead == []
    assert [e.event_id for e in res.events] == [e.event_id for e in evs]


def test_single_event_object_is_accepted() -> None:
    ev = span(3, NOW_NS)
    res = run(dump_event(ev))
    assert res.dead == [] and res.events == [ev]


@pytest.mark.parametrize(
    ("value", "code", "needle"),
    [
        (b"GPU0 util=97%", "not_json", "not JSON"),
        (b"\xff\xfe\x00garbage", "not_utf8", "not UTF-8"),
        (b"", "not_json", "empty message"),
        (b"42", "not_an_event", "JSON number"),
        (b"[]", "empty_batch", "empty JSON array"),
        (json.dumps({"schema": "gpu_sample/9"}).encode(), "unknown_schema", "'gpu_sample/9'"),
        (json.dumps({"kind": "span"}).encode(), "unknown_schema", "unknown schema missing"),
    ],
)
def test_refused_whole_message(value: bytes, code: str, needle: str) -> None:
    res = run(value)
    assert res.events == []
    assert len(res.dead) == 1
    dead = res.dead[0]
    assert dead.reason_code == code
    assert needle in dead.reason
    assert (dead.source_topic, dead.partition, dead.offset) == ("rankscope.raw.span", 2, 41)
    assert dead.size_bytes == len(value)


def test_too_large_is_refused_before_parsing() -> None:
    value = b"[" + b" " * 2_000_000 + b"]"
    res = run(value)
    assert [d.reason_code for d in res.dead] == ["too_large"]
    assert "2,000,002 bytes exceeds the 1,048,576-byte limit" in res.dead[0].reason


def test_missing_fields_named_without_values() -> None:
    doc = json.loads(dump_event(span(1, NOW_NS)))
    del doc["payload"]["trace_id"]
    del doc["node"]
    doc["payload"]["error_message"] = SECRET
    doc["payload"]["phase"] = SECRET
    res = run(json.dumps(doc).encode())
    assert res.events == []
    (dead,) = res.dead
    assert dead.reason_code == "invalid_event"
    assert "node: Field required" in dead.reason
    assert "payload.trace_id: Field required" in dead.reason
    assert "payload.phase" in dead.reason
    assert SECRET not in dead.reason  # values are never quoted
    assert dead.event_id == doc["event_id"] and dead.schema_id == "span/1"


def test_bad_element_is_refused_alone_in_a_batch() -> None:
    good = [span(r, NOW_NS) for r in range(3)]
    docs = [json.loads(dump_event(e)) for e in good]
    docs.insert(1, {"schema": "span/1", "kind": "span"})
    docs.append("not an object")
    res = run(json.dumps(docs).encode())
    assert [e.event_id for e in res.events] == [e.event_id for e in good]
    assert [(d.reason_code, d.index_in_batch) for d in res.dead] == [
        ("invalid_event", 1),
        ("not_an_event", 4),
    ]
    assert len({d.dead_letter_id for d in res.dead}) == 2


def test_timestamp_ten_years_off_is_refused() -> None:
    ten_years_ns = int(10 * 365.25 * 86400 * 1e9)
    past = span(0, NOW_NS - ten_years_ns)
    future = span(1, NOW_NS + ten_years_ns)
    ok = span(2, NOW_NS - 3600 * 10**9)
    res = run(dump_events([past, ok, future]))
    assert [e.event_id for e in res.events] == [ok.event_id]
    codes = [(d.reason_code, d.index_in_batch) for d in res.dead]
    assert codes == [("ts_out_of_range", 0), ("ts_out_of_range", 2)]
    assert "3,652.5 days before the record time" in res.dead[0].reason
    assert "after" in res.dead[1].reason


def test_dead_letter_ids_are_stable_across_reprocessing() -> None:
    a = run(b"nope").dead[0]
    b = validate_message(b"nope", REF, LIMITS, now_ns=NOW_NS + 10**9).dead[0]
    assert a.dead_letter_id == b.dead_letter_id
    other = validate_message(
        b"nope", RecordRef(REF.topic, REF.partition, REF.offset + 1, 0), LIMITS, now_ns=NOW_NS
    ).dead[0]
    assert other.dead_letter_id != a.dead_letter_id


# -- hostile inputs (issue 15): total, linear, bounded output ---------------------------------
def test_deep_nesting_is_a_dead_letter_not_a_crash() -> None:
    for value in (b"[" * 2_000, b'{"a":' * 5_000, b"[" * 200_000):
        res = run(value)
        assert res.events == []
        assert [d.reason_code for d in res.dead] in (["too_deep"], ["not_json"])
    assert run(b"[" * 2_000).dead[0].reason_code == "too_deep"


def test_five_thousand_digits_refuse_only_their_element() -> None:
    digits = "9" * 5_000
    assert run(digits.encode()).dead[0].reason_code == "not_an_event"
    good = [json.loads(dump_event(span(r, NOW_NS))) for r in range(2)]
    bad = json.loads(dump_event(span(7, NOW_NS)))
    text = json.dumps([good[0], bad, good[1]]).replace(
        f'"rank": {bad["rank"]}', f'"rank": {digits}', 1
    )
    assert digits in text
    res = run(text.encode())
    assert [e.event_id for e in res.events] == [g["event_id"] for g in good]
    assert [(d.reason_code, d.index_in_batch) for d in res.dead] == [("invalid_event", 1)]
    assert "rank" in res.dead[0].reason and digits[:50] not in res.dead[0].reason


def test_a_mebibyte_of_bad_elements_gives_a_bounded_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Output and hashing per record do not grow with the number of bad elements."""
    import hashlib

    calls = 0
    real = hashlib.sha256

    def counting(data: bytes = b"") -> Any:
        nonlocal calls
        calls += 1
        return real(data)

    monkeypatch.setattr("rankscope.streams.validate.hashlib.sha256", counting)
    limits = ValidationLimits(max_batch_events=1_000_000)
    value = b"[" + b",".join([b"{}"] * 349_000) + b"]"
    assert 0.6 * 2**20 < len(value) <= LIMITS.max_message_bytes
    res = validate_message(value, REF, limits, now_ns=NOW_NS)
    cap = limits.max_dead_letters_per_record
    assert len(res.dead) == cap + 1 and res.events == []
    assert [d.index_in_batch for d in res.dead] == [*range(cap), cap]
    summary = res.dead[-1]
    assert summary.reason_code == "too_many_errors"
    assert f"{349_000 - cap:,} more bad elements" in summary.reason
    assert "unknown_schema" in summary.reason
    assert calls == 1


def test_a_batch_over_the_element_limit_is_refused_whole() -> None:
    evs = [heartbeat(f"n{i}", NOW_NS) for i in range(6)]
    res = validate_message(
        dump_events(evs), REF, ValidationLimits(max_batch_events=5), now_ns=NOW_NS
    )
    assert res.events == []
    assert [(d.reason_code, d.index_in_batch) for d in res.dead] == [("too_large", -1)]
    assert "6 elements exceeds the 5-element limit" in res.dead[0].reason


def test_internal_error_letter_names_the_record_not_its_contents() -> None:
    from rankscope.streams.validate import internal_error_letter

    letter = internal_error_letter(SECRET.encode(), REF, KeyError(SECRET), now_ns=NOW_NS)
    assert letter.reason_code == "internal_error" and letter.offset == REF.offset
    assert SECRET not in letter.model_dump_json()


# -- text that is not Unicode: JSON's unpaired surrogate escapes -------------------------------


def _with_text(doc: dict[str, Any], field: str, escaped: str) -> bytes:
    """``doc`` as JSON with ``field`` of the payload set to the raw JSON escape ``escaped``
    (``attributes`` gets it as the value of one attribute)."""
    doc = json.loads(json.dumps(doc))
    doc["payload"][field] = {"k": "MARK"} if field == "attributes" else "MARK"
    return json.dumps(doc).replace('"MARK"', f'"{escaped}"').encode()


@pytest.mark.parametrize("field", ["error_message", "attributes"])
@pytest.mark.parametrize("neighbour_bad", [False, True], ids=["batch-path", "element-path"])
def test_an_unpaired_surrogate_is_refused_alone_and_every_output_is_writable(
    neighbour_bad: bool, field: str
) -> None:
    """A lone ``\\ud800`` decodes into a Python string no UTF-8 writer accepts: the event is a
    dead letter with a readable reason, its neighbours pass, and nothing left can fail to
    serialise downstream (it stopped the validate stage's dump before). pydantic's batch parser
    refuses it itself; a batch with another bad element goes element by element through
    ``json.loads``; an attribute value (a union of types) passed both before (the case the fuzz
    test found)."""
    good = json.loads(dump_event(span(1, NOW_NS)))
    bad = _with_text(json.loads(dump_event(span(2, NOW_NS))), field, "x\\ud800y")
    parts = [json.dumps(good).encode(), bad]
    if neighbour_bad:
        parts.append(b'{"schema": "span/1"}')
    res = validate_message(b"[" + b",".join(parts) + b"]", REF, LIMITS, now_ns=NOW_NS)
    assert [ev.rank for ev in res.events] == [1]
    letter = res.dead[0]
    assert letter.reason_code == "invalid_event"
    assert letter.index_in_batch == 1
    assert "surrogate" in letter.reason or "unicode string" in letter.reason
    assert len(res.dead) == 1 + neighbour_bad
    dump_events(res.events)  # raises on a surrogate
    for d in res.dead:
        d.model_dump_json().encode()


def test_an_unpaired_surrogate_in_a_single_event_record_is_refused() -> None:
    bad = _with_text(json.loads(dump_event(span(2, NOW_NS))), "error_message", "\\udfff")
    res = validate_message(bad, REF, LIMITS, now_ns=NOW_NS)
    assert res.events == []
    assert [d.reason_code for d in res.dead] == ["invalid_event"]


def test_a_paired_surrogate_escape_is_text_and_passes() -> None:
    """An escaped pair is one character (here U+1F600): valid Unicode, kept as it was."""
    ok = _with_text(json.loads(dump_event(span(2, NOW_NS))), "error_message", "a\\ud83d\\ude00b")
    res = validate_message(b"[" + ok + b"]", REF, LIMITS, now_ns=NOW_NS)
    assert res.dead == []
    assert res.events[0].payload.error_message == "a\U0001f600b"  # type: ignore[union-attr]
    assert validate_message(dump_events(res.events), REF, LIMITS, now_ns=NOW_NS).events == (
        res.events
    )


def test_a_refused_element_naming_itself_with_a_surrogate_still_gets_a_writable_letter() -> None:
    doc = json.loads(dump_event(span(2, NOW_NS)))
    doc["schema"] = "nope/1"
    doc["event_id"] = "MARK"
    value = json.dumps([doc]).replace('"MARK"', '"evt\\ud800evt000001"').encode()
    res = validate_message(value, REF, LIMITS, now_ns=NOW_NS)
    (letter,) = res.dead
    assert letter.reason_code == "unknown_schema"
    assert "\ud800" not in letter.event_id
    letter.model_dump_json().encode()
