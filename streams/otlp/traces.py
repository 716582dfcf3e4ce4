"""OTLP traces -> ``span/1`` events, for spans that arrive through an OTel Collector.

Teams that already run an OpenTelemetry Collector can point its Kafka exporter at rankscope
instead of running our exporter in every training process. Each Kafka record is one
``TracesData`` in ``otlp_proto`` (pdata's ``ptrace.ProtoMarshaler``) or ``otlp_json``
(:mod:`rankscope.streams.otlp.wire` tells which); ``ExportTraceServiceRequest`` (OTLP/gRPC and
OTLP/HTTP bodies) has the same wire format, field 1 ``resource_spans``, so both decode here.

The decoder is pure (bytes in, events and reasons out) so a faust agent or a test can call it.
It maps with :func:`rankscope.schemas.otel_mapping.build_span_event`, the mapping the
in-process exporter uses, so a span looks the same whichever way it came. A record that is not
OTLP at all raises :class:`OtlpDecodeError`; a span that cannot be mapped is reported in the
reasons (for the dead letter topic) and its neighbours go on. Reasons never quote attribute
values or names.
"""

from __future__ import annotations

import time

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
from rankscope.streams.otlp.common import OtlpDecodeError, otlp_attributes
from rankscope.streams.otlp.wire import parse_otlp

__all__ = ["decode_otlp_traces"]

_STATUS: dict[int, StatusText] = {
    PbStatus.STATUS_CODE_UNSET: "unset",
    PbStatus.STATUS_CODE_OK: "ok",
    PbStatus.STATUS_CODE_ERROR: "error",
}


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
    content_type: str | None = None,
) -> tuple[list[SpanEvent], list[str]]:
    """Decode one OTLP traces record (either encoding) into span events and per-span reasons.

    ``cluster_default``/``node_default`` apply when the resource says nothing (no
    ``rankscope.cluster`` / ``k8s.cluster.name``, no ``rankscope.node`` / ``k8s.node.name`` /
    ``host.name``). ``observed_ns`` defaults to now.
    """
    message = parse_otlp(bytes(data), TracesData(), "traces", content_type)
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
