"""OpenTelemetry span -> ``span/1`` event: the one mapping both OTel paths share.

Spans reach rankscope two ways: the in-process exporter (``rankscope.collectors.otel``, SDK spans)
and an OpenTelemetry Collector writing OTLP protobuf to Kafka (``rankscope.streams.otlp``). Both
must produce the same event for the same span, or a job traced through a Collector would look
different from one traced directly. Collectors and streams may only import ``schemas``, so the
mapping lives here, as a pure function over a neutral :class:`OtelSpan` that each side fills from
its own types.

Mapping rules (the names of the attributes are the contract with instrumented code):

* identity: each envelope field is looked up by its keys in order, span attributes before
  resource attributes for each key (``rankscope.rank`` on the span beats ``rankscope.rank`` on
  the resource, which beats a plain ``rank``); what is not found comes from ``defaults``;
* ``node``: ``rankscope.node``, ``k8s.node.name`` (the machine, which GPU and fabric telemetry
  are keyed by), then ``host.name`` (in a pod that is the pod's host name);
* ``phase``: ``rankscope.phase`` when it is a known phase, else the span name when it is one,
  else ``other``; ``step``: ``rankscope.step`` (a non-negative integer);
* ``status``: the OTel status code; the first ``exception`` event gives ``error_type`` and
  ``error_message`` (and the tail of its stack trace as the ``exception.stacktrace`` attribute);
  an error status without such an event gives its description as ``error_message``;
* ``attributes``: a few resource attributes that help correlation (:data:`RESOURCE_CONTEXT_KEYS`)
  then the span's own, scalars only, at most 64, keys and string values truncated; attributes
  that filled an envelope or payload field are not repeated;
* ``event_id`` is the trace id followed by the span id, so a span exported twice (an export
  retry, a replayed Kafka batch) is written once by the idempotent sink.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, cast, get_args

from pydantic import ValidationError

from rankscope.schemas.events import SpanEvent
from rankscope.schemas.payloads import AttrValue, Span, SpanPhase

__all__ = [
    "ATTR_CLUSTER",
    "ATTR_GPU",
    "ATTR_JOB_ID",
    "ATTR_LOCAL_RANK",
    "ATTR_NODE",
    "ATTR_PHASE",
    "ATTR_RANK",
    "ATTR_STEP",
    "ATTR_WORLD_SIZE",
    "CLUSTER_KEYS",
    "GPU_KEYS",
    "JOB_KEYS",
    "LOCAL_RANK_KEYS",
    "MAX_ATTRIBUTES",
    "MAX_ATTR_VALUE_CHARS",
    "MAX_KEY_CHARS",
    "NODE_KEYS",
    "PHASES",
    "RANK_KEYS",
    "RESOURCE_CONTEXT_KEYS",
    "IdentityDefaults",
    "OtelEvent",
    "OtelSpan",
    "SpanMappingError",
    "StatusText",
    "build_span_event",
    "scalar_attributes",
]

ATTR_PHASE = "rankscope.phase"
ATTR_STEP = "rankscope.step"
ATTR_RANK = "rankscope.rank"
ATTR_LOCAL_RANK = "rankscope.local_rank"
ATTR_WORLD_SIZE = "rankscope.world_size"
ATTR_JOB_ID = "rankscope.job_id"
ATTR_GPU = "rankscope.gpu"
ATTR_NODE = "rankscope.node"
ATTR_CLUSTER = "rankscope.cluster"
#: Run and throughput attributes (issue 19; docs/reference.md "Runs" and "Efficiency"): the
#: training run and 1-based attempt (resource), the model (resource), and per step span the
#: step's global batch in samples and tokens (the efficiency query's throughput).
ATTR_RUN_ID = "rankscope.run_id"
ATTR_ATTEMPT = "rankscope.attempt"
ATTR_MODEL = "rankscope.model"
ATTR_SAMPLES = "rankscope.samples"
ATTR_TOKENS = "rankscope.tokens"

#: Lookup order per envelope field (first key found wins; span before resource per key).
JOB_KEYS: tuple[str, ...] = (ATTR_JOB_ID, "job.id", "job_id")
RANK_KEYS: tuple[str, ...] = (ATTR_RANK, "rank")
LOCAL_RANK_KEYS: tuple[str, ...] = (ATTR_LOCAL_RANK, "local_rank")
GPU_KEYS: tuple[str, ...] = (ATTR_GPU,)
NODE_KEYS: tuple[str, ...] = (ATTR_NODE, "k8s.node.name", "host.name")
CLUSTER_KEYS: tuple[str, ...] = (ATTR_CLUSTER, "k8s.cluster.name")
#: Resource attributes copied into the span's attributes (they say which process it was).
RESOURCE_CONTEXT_KEYS: tuple[str, ...] = (
    "service.name",
    "service.instance.id",
    "k8s.namespace.name",
    "k8s.pod.name",
    ATTR_WORLD_SIZE,
    ATTR_RUN_ID,
    ATTR_ATTEMPT,
    ATTR_MODEL,
)

PHASES: frozenset[str] = frozenset(get_args(SpanPhase))
MAX_ATTRIBUTES = 64  # Span.attributes max_length
MAX_KEY_CHARS = 256  # ShortText
MAX_NAME_CHARS = 256  # ShortText
MAX_ERROR_TYPE_CHARS = 256  # ShortText
MAX_ERROR_MESSAGE_CHARS = 16_384  # LongText
MAX_IDENTIFIER_CHARS = 256  # envelope Identifier / OptionalText
#: The schema bounds attribute keys but not values; ClickHouse stores them as String, so a
#: bound keeps one chatty attribute from bloating every row.
MAX_ATTR_VALUE_CHARS = 1_024
STACKTRACE_ATTR = "exception.stacktrace"

StatusText = Literal["ok", "error", "unset"]
T = TypeVar("T")


class SpanMappingError(ValueError):
    """The span cannot become a ``span/1`` event (bad ids, no end time, schema violation)."""


@dataclass(frozen=True, slots=True)
class OtelEvent:
    """A span event (only ``exception`` events are used)."""

    name: str
    attributes: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OtelSpan:
    """The parts of an OTel span the mapping reads, independent of SDK or protobuf types."""

    name: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    start_ns: int
    end_ns: int
    status: StatusText = "unset"
    status_message: str = ""
    attributes: Mapping[str, object] = field(default_factory=dict)
    resource: Mapping[str, object] = field(default_factory=dict)
    events: Sequence[OtelEvent] = ()


@dataclass(frozen=True, slots=True)
class IdentityDefaults:
    """Used where neither the span nor its resource says (e.g. the exporter's process env)."""

    cluster: str = "default"
    node: str = "unknown"
    job_id: str = ""
    rank: int | None = None
    local_rank: int | None = None
    gpu: int | None = None


def _lookup(
    keys: Sequence[str],
    span_attrs: Mapping[str, object],
    resource: Mapping[str, object],
    parse: Callable[[object], T | None],
) -> tuple[T | None, str | None]:
    """First parseable value for ``keys``; returns (value, span attribute key it came from)."""
    for key in keys:
        for source, from_span in ((span_attrs, True), (resource, False)):
            if key in source and (value := parse(source[key])) is not None:
                return value, key if from_span else None
    return None, None


def _parse_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _parse_text(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()[:MAX_IDENTIFIER_CHARS]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _scalar(value: object) -> AttrValue | None:
    """A schema attribute value, or None for what the schema cannot hold (arrays, bytes, NaN)."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # JSON has no NaN/inf
    if isinstance(value, str):
        return value[:MAX_ATTR_VALUE_CHARS]
    return None


def scalar_attributes(
    *sources: Mapping[str, object], skip: frozenset[str] = frozenset()
) -> dict[str, AttrValue]:
    """Merge ``sources`` in order into at most 64 scalar attributes (first key wins)."""
    out: dict[str, AttrValue] = {}
    for source in sources:
        for raw_key, raw_value in source.items():
            if len(out) >= MAX_ATTRIBUTES:
                return out
            if raw_key in skip:
                continue
            key = raw_key[:MAX_KEY_CHARS]
            value = _scalar(raw_value)
            if value is None or key in out:
                continue
            out[key] = value
    return out


def _hex_id(raw: bytes, size: int, what: str, *, optional: bool = False) -> str:
    if optional and not raw:
        return ""
    if len(raw) != size:
        raise SpanMappingError(f"{what} has {len(raw)} bytes, expected {size}")
    if not any(raw):
        raise SpanMappingError(f"{what} is all zeros (invalid in OpenTelemetry)")
    return raw.hex()


def _error_fields(span: OtelSpan) -> tuple[str, str, str | None]:
    """(error_type, error_message, stacktrace tail) from the first exception event."""
    for event in span.events:
        if event.name != "exception":
            continue
        attrs = event.attributes
        etype = attrs.get("exception.type")
        message = attrs.get("exception.message")
        stack = attrs.get(STACKTRACE_ATTR)
        return (
            (etype if isinstance(etype, str) else "")[:MAX_ERROR_TYPE_CHARS],
            (message if isinstance(message, str) else "")[:MAX_ERROR_MESSAGE_CHARS],
            stack[-MAX_ATTR_VALUE_CHARS:] if isinstance(stack, str) and stack else None,
        )
    if span.status == "error":
        return "", span.status_message[:MAX_ERROR_MESSAGE_CHARS], None
    return "", "", None


def build_span_event(span: OtelSpan, *, defaults: IdentityDefaults, observed_ns: int) -> SpanEvent:
    """The ``span/1`` event for ``span``; raises :class:`SpanMappingError` with the reason."""
    trace_id = _hex_id(span.trace_id, 16, "trace_id")
    span_id = _hex_id(span.span_id, 8, "span_id")
    parent = _hex_id(span.parent_span_id, 8, "parent_span_id", optional=True)
    if span.end_ns <= 0:
        raise SpanMappingError("span has no end time")
    if span.start_ns <= 0:
        raise SpanMappingError("span has no start time")

    attrs, res = span.attributes, span.resource
    used: set[str] = set()

    def text(keys: Sequence[str], default: str) -> str:
        value, key = _lookup(keys, attrs, res, _parse_text)
        if key:
            used.add(key)
        return default if value is None else value

    def number(keys: Sequence[str], default: int | None) -> int | None:
        value, key = _lookup(keys, attrs, res, _parse_int)
        if key:
            used.add(key)
        return default if value is None else value

    cluster = text(CLUSTER_KEYS, defaults.cluster)
    node = text(NODE_KEYS, defaults.node)
    job_id = text(JOB_KEYS, defaults.job_id)
    rank = number(RANK_KEYS, defaults.rank)
    local_rank = number(LOCAL_RANK_KEYS, defaults.local_rank)
    gpu = number(GPU_KEYS, defaults.gpu)

    phase_attr = attrs.get(ATTR_PHASE)
    if isinstance(phase_attr, str) and phase_attr in PHASES:
        phase = phase_attr
        used.add(ATTR_PHASE)
    else:
        phase = span.name if span.name in PHASES else "other"
    step = _parse_int(attrs.get(ATTR_STEP))
    if step is not None:
        used.add(ATTR_STEP)

    error_type, error_message, stack = _error_fields(span)
    context = {k: res[k] for k in RESOURCE_CONTEXT_KEYS if k in res}
    extra = {STACKTRACE_ATTR: stack} if stack else {}
    attributes = scalar_attributes(context, attrs, extra, skip=frozenset(used))

    try:
        return SpanEvent.model_validate(
            {
                "event_id": f"{trace_id}{span_id}",
                "schema": "span/1",
                "kind": "span",
                "cluster": cluster[:MAX_IDENTIFIER_CHARS] or defaults.cluster,
                "job_id": job_id[:MAX_IDENTIFIER_CHARS],
                "node": node[:MAX_IDENTIFIER_CHARS] or defaults.node,
                "rank": rank,
                "local_rank": local_rank,
                "gpu": gpu,
                "ts": span.end_ns,
                "observed_ts": observed_ns,
                "payload": Span(
                    name=span.name[:MAX_NAME_CHARS],
                    phase=cast(SpanPhase, phase),  # checked against PHASES above
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=parent,
                    start_ns=span.start_ns,
                    end_ns=span.end_ns,
                    step=step,
                    status=span.status,
                    error_type=error_type,
                    error_message=error_message,
                    attributes=attributes,
                ),
            }
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise SpanMappingError(f"schema violation: {problems}") from None
