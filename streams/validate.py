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
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rankscope.schemas.derived import DeadLetter, DeadLetterCode
from rankscope.schemas.events import EVENT_ADAPTER, EVENT_LIST_ADAPTER, MODEL_BY_SCHEMA, Event
from rankscope.streams.config import ValidationLimits

_MAX_ERRORS_IN_REASON = 5


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


def validate_message(
    value: bytes | None, ref: RecordRef, limits: ValidationLimits, now_ns: int | None = None
) -> ValidationResult:
    """Validate one Kafka record. Never raises on bad input."""
    now_ns = now_ns if now_ns is not None else time.time_ns()
    raw = value or b""
    result = ValidationResult()

    def refuse(code: DeadLetterCode, reason: str, index: int = -1, elem: Any = None) -> None:
        result.dead.append(_dead_letter(code, reason, raw, ref, now_ns, index, elem))

    if len(raw) > limits.max_message_bytes:
        refuse(
            "too_large",
            f"message of {len(raw):,} bytes exceeds the {limits.max_message_bytes:,}-byte limit "
            "(streams.limits.max_message_bytes); split the batch at the collector",
        )
        return result
    if not raw.strip():
        refuse("not_json", "empty message: expected a JSON event or a JSON array of events")
        return result

    # Fast path: a well-formed batch validates in one pass inside pydantic-core.
    if raw.lstrip()[:1] == b"[":
        try:
            events = EVENT_LIST_ADAPTER.validate_json(raw)
        except ValidationError:
            pass
        else:
            if not events:
                refuse("empty_batch", "empty JSON array: a batch must hold at least one event")
            for i, ev in enumerate(events):
                _check_time(ev, i, ref, limits, now_ns, result, raw)
            return result

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        refuse("not_utf8", f"message is not UTF-8 (invalid byte at position {exc.start})")
        return result
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        refuse(
            "not_json",
            f"message is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        )
        return result

    if isinstance(doc, dict):
        _validate_element(doc, -1, ref, limits, now_ns, result, raw)
    elif isinstance(doc, list):
        if not doc:
            refuse("empty_batch", "empty JSON array: a batch must hold at least one event")
        for i, elem in enumerate(doc):
            _validate_element(elem, i, ref, limits, now_ns, result, raw)
    else:
        refuse(
            "not_an_event",
            f"message is a JSON {type(doc).__name__}: expected an event object or an array of them",
        )
    return result


def validate_otlp_message(
    value: bytes | None, ref: RecordRef, limits: ValidationLimits, now_ns: int | None = None
) -> ValidationResult:
    """Validate one OTLP protobuf traces record: spans become ``span/1`` events."""
    from rankscope.streams.otlp import OtlpDecodeError, decode_otlp_traces

    now_ns = now_ns if now_ns is not None else time.time_ns()
    raw = value or b""
    result = ValidationResult()
    if len(raw) > limits.max_message_bytes:
        result.dead.append(
            _dead_letter(
                "too_large",
                f"OTLP record of {len(raw):,} bytes exceeds the "
                f"{limits.max_message_bytes:,}-byte limit",
                raw,
                ref,
                now_ns,
                -1,
                None,
            )
        )
        return result
    try:
        events, reasons = decode_otlp_traces(raw, observed_ns=now_ns)
    except OtlpDecodeError as exc:
        result.dead.append(
            _dead_letter(
                "not_an_event", f"not an OTLP traces message: {exc}", raw, ref, now_ns, -1, None
            )
        )
        return result
    for i, reason in enumerate(reasons):
        result.dead.append(
            _dead_letter(
                "invalid_event", f"OTLP span not mappable: {reason}", raw, ref, now_ns, i, None
            )
        )
    for i, ev in enumerate(events):
        _check_time(ev, len(reasons) + i, ref, limits, now_ns, result, raw)
    return result


def _validate_element(
    elem: Any,
    index: int,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int,
    result: ValidationResult,
    raw: bytes,
) -> None:
    if not isinstance(elem, dict):
        result.dead.append(
            _dead_letter(
                "not_an_event",
                f"element is a JSON {type(elem).__name__}, expected an event object",
                raw,
                ref,
                now_ns,
                index,
                None,
            )
        )
        return
    schema = elem.get("schema")
    if schema not in MODEL_BY_SCHEMA:
        known = ", ".join(sorted(MODEL_BY_SCHEMA))
        shown = repr(schema)[:80] if isinstance(schema, str) else "missing"
        result.dead.append(
            _dead_letter(
                "unknown_schema",
                f"unknown schema {shown}; this worker reads: {known}",
                raw,
                ref,
                now_ns,
                index,
                elem,
            )
        )
        return
    try:
        ev = EVENT_ADAPTER.validate_python(elem)
    except ValidationError as exc:
        result.dead.append(
            _dead_letter(
                "invalid_event",
                f"{schema} event is invalid: {describe_errors(exc)}",
                raw,
                ref,
                now_ns,
                index,
                elem,
            )
        )
        return
    _check_time(ev, index, ref, limits, now_ns, result, raw)


def _check_time(
    ev: Event,
    index: int,
    ref: RecordRef,
    limits: ValidationLimits,
    now_ns: int,
    result: ValidationResult,
    raw: bytes,
) -> None:
    """Refuse events whose time is implausible relative to when Kafka got them.

    The reference is the record timestamp (stable under replay), or the worker clock.
    """
    reference = ref.timestamp_ns or now_ns
    delta_s = (ev.ts - reference) / 1e9
    if -limits.max_past_s <= delta_s <= limits.max_future_s:
        result.events.append(ev)
        return
    direction = "before" if delta_s < 0 else "after"
    days = abs(delta_s) / 86_400
    result.dead.append(
        _dead_letter(
            "ts_out_of_range",
            f"event time is {days:,.1f} days {direction} the record time (allowed: "
            f"{limits.max_past_s / 86_400:g} days before, {limits.max_future_s:g} s after); "
            "check the source clock or the ts unit (ns since the epoch)",
            raw,
            ref,
            now_ns,
            index,
            ev.model_dump(
                by_alias=True, include={"event_id", "schema_id", "kind", "job_id", "node"}
            ),
        )
    )


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


def _dead_letter(
    code: DeadLetterCode,
    reason: str,
    raw: bytes,
    ref: RecordRef,
    now_ns: int,
    index: int,
    elem: Any,
) -> DeadLetter:
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
                ident[dst] = v[:256]
    return DeadLetter(
        dead_letter_id=DeadLetter.make_id(ref.topic, ref.partition, ref.offset, index),
        reason_code=code,
        reason=reason[:2048],
        source_topic=ref.topic,
        partition=ref.partition,
        offset=ref.offset,
        index_in_batch=index,
        size_bytes=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
        received_ts=now_ns,
        record_ts=ref.timestamp_ns,
        **ident,
    )
