"""OTLP protobuf traces -> ``span/1`` events, for spans that arrive through an OTel Collector.

Teams that already run an OpenTelemetry Collector can point its Kafka exporter at rankscope
instead of running our exporter in every training process. With the default ``otlp_proto``
encoding each Kafka record is one protobuf ``TracesData`` (pdata's ``ptrace.ProtoMarshaler``);
``ExportTraceServiceRequest`` (OTLP/gRPC and OTLP/HTTP bodies) has the same wire format, field 1
``resource_spans``, so both decode here.

The decoder is pure (bytes in, events and reasons out) so a faust agent or a test can call it.
It maps with :func:`rankscope.schemas.otel_mapping.build_span_event`, the mapping the in-process
exporter
uses, so a span looks the same whichever way it came. A record that is not OTLP at all raises
:class:`OtlpDecodeError`; a span that cannot be mapped is reported in the reasons (for the dead
letter topic) and its neighbours go on. Reasons never quote attribute values or names.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from rankscope.schemas.events import SpanEvent
from rankscope.schemas.otel_mapping import (
    IdentityDefaults,
    OtelEvent,
    OtelSpan,
    SpanMappingError,
    StatusText,
    build_span_event,
)

__all__ = ["OtlpDecodeError", "decode_otlp_traces", "otlp_attributes"]

_STATUS: dict[int, StatusText] = {
    PbStatus.STATUS_CODE_UNSET: "unset",
    PbStatus.STATUS_CODE_OK: "ok",
    PbStatus.STATUS_CODE_ERROR: "error",
}


class OtlpDecodeError(ValueError):
    """The bytes are not an OTLP traces message (corrupt protobuf, or some other message)."""


def _any_value(value: AnyValue) -> object:
    """The Python value of a scalar ``AnyValue``; None for arrays, maps, bytes and empty."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    return None


def otlp_attributes(pairs: Iterable[KeyValue]) -> dict[str, object]:
    """OTLP ``KeyValue`` list -> dict (a later duplicate key wins); non-scalars are skipped."""
    out: dict[str, object] = {}
    for kv in pairs:
        value = _any_value(kv.value)
        if value is not None:
            out[kv.key] = value
    return out


def _to_otel_span(span: PbSpan, resource: dict[str, object]) -> OtelSpan:
    return OtelSpan(
        name=span.name,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        status=_STATUS.get(span.status.code, "unset"),
        status_message=span.status.message,
        attributes=otlp_attributes(span.attributes),
        resource=resource,
        events=[OtelEvent(e.name, otlp_attributes(e.attributes)) for e in span.events],
    )


def decode_otlp_traces(
    data: bytes | bytearray | memoryview,
    *,
    cluster_default: str = "otel",
    node_default: str = "unknown",
    observed_ns: int | None = None,
) -> tuple[list[SpanEvent], list[str]]:
    """Decode one OTLP traces message into span events and per-span error reasons.

    ``cluster_default``/``node_default`` apply when the resource says nothing (no
    ``rankscope.cluster`` / ``k8s.cluster.name``, no ``rankscope.node`` / ``k8s.node.name`` /
    ``host.name``). ``observed_ns`` defaults to now.
    """
    message = TracesData()
    try:
        message.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise OtlpDecodeError(f"not an OTLP traces message: corrupt protobuf ({exc})") from None
    if data and not message.resource_spans:
        # Protobuf keeps unknown fields silently; non-empty bytes with no resource_spans are
        # some other message, not an empty export.
        raise OtlpDecodeError("not an OTLP traces message: no resource_spans in a non-empty body")

    observed = time.time_ns() if observed_ns is None else observed_ns
    defaults = IdentityDefaults(cluster=cluster_default, node=node_default)
    events: list[SpanEvent] = []
    reasons: list[str] = []
    for i, resource_spans in enumerate(message.resource_spans):
        resource = otlp_attributes(resource_spans.resource.attributes)
        for j, scope_spans in enumerate(resource_spans.scope_spans):
            for k, span in enumerate(scope_spans.spans):
                try:
                    events.append(
                        build_span_event(
                            _to_otel_span(span, resource), defaults=defaults, observed_ns=observed
                        )
                    )
                except SpanMappingError as exc:
                    where = f"resource_spans[{i}].scope_spans[{j}].spans[{k}]"
                    ids = f"span_id={span.span_id.hex() or '-'}"
                    reasons.append(f"{where} ({ids}): {exc}")
    return events, reasons
