"""Validation logic: bytes in, typed events or dead letters with a readable reason out.

Pure functions, no Kafka: the validate stage (``streams/stages/validate.py``) calls
``validate_message`` once per record. A record
holds one event (a JSON object) or a batch (a JSON array, how collectors publish). One bad
element of a batch is dead-lettered alone; its neighbours go on.

Reasons never quote the offending values: a refused event may carry secrets that redaction has
not seen yet. They name the field and the rule instead.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from rankscope.schemas.derived import DeadLetter, DeadLetterCode
from rankscope.schemas.events import EVENT_ADAPTER, EVENT_LIST_ADAPTER, MODEL_BY_SCHEMA, Event
from rankscope.streams.config import ValidationLimits

_MAX_ERRORS_IN_REASON = 5
#: a JSON escape of a UTF-16 surrogate (``\\ud800``-``\\udfff``): JSON's grammar allows one
#: unpaired, Python and pydantic decode it into a string that is not Unicode, and that string
#: cannot be written back as UTF-8 (the events topic, ClickHouse). Raw UTF-8 cannot carry one
#: (the decoders refuse it), so only a record whose bytes match is checked further.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class RecordRef:
    """Where a record came from: enough to find the original on Kafka."""

    topic: str
    partition: int
    offset: int
    timestamp_ns: int  # Kafka record timestamp; 0 when the record has none


@dataclass
class ValidationResult:
    events: list[Event] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    #: OTLP log lines that were not NCCL/PyTorch lines (counted, not stored)
    ignored: int = 0


def validate_message(
    value: bytes | None, ref: RecordRef, limits: ValidationLimits, now_ns: int | None = None
) -> ValidationResult:
    """Validate one Kafka record. Never raises on bad input; work is linear in its size.

    Any byte string ends as events, dead letters or both. A batch's bad elements get one dead
    letter each up to ``limits.max_dead_letters_per_record``; the rest share one summary.
    """
    now_ns = now_ns if now_ns is not None else time.time_ns()
    raw = value or b""
    result = ValidationResult()
    dead = _DeadLetters(raw, ref, now_ns, limits, result)

    if len(raw) > limits.max_message_bytes:
        dead.refuse(
            "too_large",
            f"message of {len(raw):,} bytes exceeds the {limits.max_message_bytes:,}-byte limit "
            "(streams.limits.max_message_bytes); split the batch at the collector",
        )
        return result
    if not raw.strip():
        dead.refuse("not_json", "empty message: expected a JSON event or a JSON array of events")
        return result

    if not _validated_as_batch(raw, ref, limits, now_ns, result, dead):
        doc = _parse(raw, limits, dead)
        if doc is not _UNPARSED:
            _validate_document(doc, ref, limits, now_ns, result, dead)
    dead.summarise()
    return result


def _validated_as_batch(
    raw: bytes,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int,
    result: ValidationResult,
    dead: _DeadLetters,
) -> bool:
    """The fast path: a well-formed batch validates in one pass inside pydantic-core.

    False when the record is not one (then each element is validated on its own)."""
    if raw.lstrip()[:1] != b"[":
        return False
    try:
        events = EVENT_LIST_ADAPTER.validate_json(raw)
    except ValidationError:
        return False
    if not events:
        dead.refuse("empty_batch", "empty JSON array: a batch must hold at least one event")
    elif len(events) > limits.max_batch_events:
        dead.refuse("too_large", _too_many_events(len(events), limits))
    else:
        for i, ev in enumerate(events):
            _accept(ev, i, ref, limits, now_ns, result, dead)
    return True


def _validate_document(
    doc: Any,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int,
    result: ValidationResult,
    dead: _DeadLetters,
) -> None:
    if isinstance(doc, dict):
        _validate_element(doc, -1, ref, limits, now_ns, result, dead)
    elif not isinstance(doc, list):
        dead.refuse(
            "not_an_event",
            f"message is a JSON {_json_type(doc)}: expected an event object or an array of them",
        )
    elif not doc:
        dead.refuse("empty_batch", "empty JSON array: a batch must hold at least one event")
    elif len(doc) > limits.max_batch_events:
        dead.refuse("too_large", _too_many_events(len(doc), limits))
    else:
        for i, elem in enumerate(doc):
            _validate_element(elem, i, ref, limits, now_ns, result, dead)


class _HugeNumber:
    """Stands in for a JSON integer longer than the limit: fails validation as a wrong type
    ("a valid integer"), so only its element is refused and the int parser never sees it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<number too long>"


_HUGE = _HugeNumber()
_UNPARSED = object()


def _parse(raw: bytes, limits: ValidationLimits, dead: _DeadLetters) -> Any:
    """Bytes to a JSON document, or a dead letter and ``_UNPARSED``: never raises."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        dead.refuse("not_utf8", f"message is not UTF-8 (invalid byte at position {exc.start})")
        return _UNPARSED
    max_digits = limits.max_number_digits

    def parse_int(digits: str) -> int | _HugeNumber:
        return _HUGE if len(digits.lstrip("-")) > max_digits else int(digits)

    try:
        return json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as exc:
        dead.refuse(
            "not_json", f"message is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        )
    except RecursionError:
        dead.refuse(
            "too_deep",
            "JSON nested deeper than the worker parses (Python's recursion limit): events are "
            "flat objects, a batch is one array of them",
        )
    except (ValueError, OverflowError, MemoryError) as exc:
        dead.refuse("not_json", f"message is not JSON this worker can read: {type(exc).__name__}")
    return _UNPARSED


def _json_type(value: Any) -> str:
    """JSON's name for a parsed value's type (readers know JSON, not Python)."""
    if isinstance(value, _HugeNumber):
        return "number too long to read"
    if value is None:
        return "null"
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}
    return names.get(type(value), "object")


def _too_many_events(n: int, limits: ValidationLimits) -> str:
    return (
        f"batch of {n:,} elements exceeds the {limits.max_batch_events:,}-element limit "
        "(streams.limits.max_batch_events); split the batch at the collector"
    )


def validate_otlp_message(
    value: bytes | None,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int | None = None,
    *,
    signal: Literal["traces", "logs"] = "traces",
    content_type: str | None = None,
) -> ValidationResult:
    """Validate one OTLP record (``otlp_proto`` or ``otlp_json``) of ``signal``: spans become
    ``span/1`` events, NCCL/PyTorch log lines ``comm_event/1`` events."""
    from rankscope.streams.otlp import OtlpDecodeError
    from rankscope.streams.otlp.record import decode_otlp_record

    now_ns = now_ns if now_ns is not None else time.time_ns()
    raw = value or b""
    result = ValidationResult()
    dead = _DeadLetters(raw, ref, now_ns, limits, result)
    if len(raw) > limits.max_message_bytes:
        dead.refuse(
            "too_large",
            f"OTLP record of {len(raw):,} bytes exceeds the "
            f"{limits.max_message_bytes:,}-byte limit",
        )
        return result
    try:
        decoded = decode_otlp_record(raw, signal, observed_ns=now_ns, content_type=content_type)
    except OtlpDecodeError as exc:
        dead.refuse("not_an_event", str(exc))
        return result
    result.ignored = decoded.ignored
    what = "span" if signal == "traces" else "log line"
    for i, reason in enumerate(decoded.reasons):
        dead.refuse("invalid_event", f"OTLP {what} not mappable: {reason}", i)
    for i, ev in enumerate(decoded.events):
        _accept(ev, len(decoded.reasons) + i, ref, limits, now_ns, result, dead)
    dead.summarise()
    return result


def _validate_element(
    elem: Any,
    index: int,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int,
    result: ValidationResult,
    dead: _DeadLetters,
) -> None:
    if not isinstance(elem, dict):
        dead.refuse(
            "not_an_event",
            f"element is a JSON {_json_type(elem)}, expected an event object",
            index,
        )
        return
    schema = elem.get("schema")
    if not isinstance(schema, str) or schema not in MODEL_BY_SCHEMA:
        known = ", ".join(sorted(MODEL_BY_SCHEMA))
        shown = repr(schema)[:80] if isinstance(schema, str) else "missing"
        dead.refuse(
            "unknown_schema", f"unknown schema {shown}; this worker reads: {known}", index, elem
        )
        return
    try:
        ev = EVENT_ADAPTER.validate_python(elem)
    except ValidationError as exc:
        dead.refuse(
            "invalid_event", f"{schema} event is invalid: {describe_errors(exc)}", index, elem
        )
        return
    _accept(ev, index, ref, limits, now_ns, result, dead)


def _accept(
    ev: Event,
    index: int,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int,
    result: ValidationResult,
    dead: _DeadLetters,
) -> None:
    """Accept a valid event, or refuse it: its time implausible relative to when Kafka got it
    (the reference is the record timestamp, stable under replay, or the worker clock), or its
    text not Unicode."""
    reference = ref.timestamp_ns or now_ns
    delta_s = (ev.ts - reference) / 1e9
    if -limits.max_past_s <= delta_s <= limits.max_future_s:
        if dead.may_hold_surrogates and not _encodable(ev):
            dead.refuse(
                "invalid_event",
                f"{ev.schema_id} event has a text field with an unpaired UTF-16 surrogate "
                "(a \\ud800-\\udfff escape without its pair): not Unicode, so it cannot be "
                "stored; fix the producer's string encoding",
                index,
                _identity(ev),
            )
            return
        result.events.append(ev)
        return
    direction = "before" if delta_s < 0 else "after"
    days = abs(delta_s) / 86_400
    dead.refuse(
        "ts_out_of_range",
        f"event time is {days:,.1f} days {direction} the record time (allowed: "
        f"{limits.max_past_s / 86_400:g} days before, {limits.max_future_s:g} s after); "
        "check the source clock or the ts unit (ns since the epoch)",
        index,
        _identity(ev),
    )


def _identity(ev: Event) -> dict[str, Any]:
    """What a dead letter names an accepted-then-refused event by."""
    return ev.model_dump(by_alias=True, include={"event_id", "schema_id", "kind", "job_id", "node"})


def _encodable(ev: Event) -> bool:
    """Whether the event can be written as UTF-8 JSON (no unpaired surrogate in any string)."""
    try:
        ev.__pydantic_serializer__.to_json(ev)
    except PydanticSerializationError:
        return False
    return True


def describe_errors(exc: ValidationError) -> str:
    """Field paths and rules, never input values (they may hold secrets)."""
    parts = []
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    for err in errors[:_MAX_ERRORS_IN_REASON]:
        # Drop the discriminator tag from the path: "span/1.payload.x" -> "payload.x"
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] in MODEL_BY_SCHEMA:
            loc = loc[1:]
        parts.append(f"{'.'.join(loc) or '(event)'}: {err['msg']}")
    more = len(errors) - _MAX_ERRORS_IN_REASON
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


class _DeadLetters:
    """One record's dead letters: its hash computed once, per-element letters capped, the
    overflow counted by reason code and written as one summary letter."""

    def __init__(
        self,
        raw: bytes,
        ref: RecordRef,
        now_ns: int,
        limits: ValidationLimits,
        result: ValidationResult,
    ) -> None:
        self.raw = raw
        self.ref = ref
        self.now_ns = now_ns
        self.cap = limits.max_dead_letters_per_record
        self.result = result
        self._sha256: str | None = None
        #: the record has a surrogate escape: accepted events are checked for one
        self.may_hold_surrogates = _SURROGATE_ESCAPE.search(raw) is not None
        self._overflow: Counter[str] = Counter()
        self._first_overflow = -1

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.raw).hexdigest()
        return self._sha256

    def refuse(self, code: DeadLetterCode, reason: str, index: int = -1, elem: Any = None) -> None:
        if index >= 0 and len(self.result.dead) >= self.cap:
            if not self._overflow:
                self._first_overflow = index
            self._overflow[code] += 1
            return
        self.result.dead.append(self._letter(code, reason, index, elem))

    def summarise(self) -> None:
        """The summary letter for the bad elements past the cap (none when under it)."""
        if not self._overflow:
            return
        total = sum(self._overflow.values())
        counts = ", ".join(f"{code} {n:,}" for code, n in self._overflow.most_common())
        reason = (
            f"{total:,} more bad elements in this batch from index {self._first_overflow} "
            f"({counts}); the first {self.cap} have letters of their own "
            "(streams.limits.max_dead_letters_per_record)"
        )
        self.result.dead.append(self._letter("too_many_errors", reason, self._first_overflow, None))

    def _letter(self, code: DeadLetterCode, reason: str, index: int, elem: Any) -> DeadLetter:
        ident: dict[str, str] = {}
        if isinstance(elem, dict):
            for src, dst in (
                ("event_id", "event_id"),
                ("schema", "schema_id"),
                ("schema_id", "schema_id"),
                ("kind", "kind"),
                ("job_id", "job_id"),
                ("node", "node"),
            ):
                v = elem.get(src)
                if isinstance(v, str):
                    # a refused element's text may not be Unicode (an unpaired surrogate):
                    # the letter must still be writable as UTF-8
                    ident[dst] = v[:256].encode("utf-8", "replace").decode("utf-8")
        ref = self.ref
        return DeadLetter(
            dead_letter_id=DeadLetter.make_id(ref.topic, ref.partition, ref.offset, index),
            reason_code=code,
            reason=reason[:2048],
            source_topic=ref.topic,
            partition=ref.partition,
            offset=ref.offset,
            index_in_batch=index,
            size_bytes=len(self.raw),
            sha256=self.sha256,
            received_ts=self.now_ns,
            record_ts=ref.timestamp_ns,
            **ident,
        )


def internal_error_letter(
    value: bytes | None, ref: RecordRef, exc: BaseException, now_ns: int | None = None
) -> DeadLetter:
    """The dead letter for a record the validator itself failed on (a bug, never bad input):
    the stage records it and goes on instead of stopping."""
    raw = value or b""
    dead = _DeadLetters(raw, ref, now_ns or time.time_ns(), ValidationLimits(), ValidationResult())
    return dead._letter(
        "internal_error",
        f"the validator failed on this record ({type(exc).__name__}); it is kept on Kafka at "
        "this offset for a fixed worker to replay",
        -1,
        None,
    )
