"""OTLP records as an OpenTelemetry Collector's kafkaexporter writes them, built with the official
protobuf classes (opentelemetry-proto) for ``otlp_proto`` and protobuf's JSON mapping plus the
OTLP/JSON deviations (hex ids, integer enums, camelCase) for ``otlp_json``: what pdata's
JSONMarshaler writes (opentelemetry-proto ``docs/specification.md``, "JSON Protobuf Encoding")."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Literal

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, LogsData, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, TracesData

DATA = Path(__file__).parent / "data" / "otlp_collector"
Encoding = Literal["otlp_proto", "otlp_json"]
_HEX = {"traceId", "spanId", "parentSpanId"}


def kv(key: str, value: str | int) -> KeyValue:
    v = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    return KeyValue(key=key, value=v)


def resource(**attrs: str | int) -> Resource:
    return Resource(attributes=[kv(k.replace("__", "."), v) for k, v in attrs.items()])


def span(
    trace: int, span_id: int, start_ns: int, *, name: str = "train_step", step: int = 0
) -> Span:
    return Span(
        trace_id=bytes.fromhex(f"{trace:032x}"),
        span_id=bytes.fromhex(f"{span_id:016x}"),
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 10**9,
        attributes=[kv("rankscope.phase", "step"), kv("rankscope.step", step)],
    )


def traces(*groups: tuple[Resource, list[Span]]) -> TracesData:
    return TracesData(
        resource_spans=[
            ResourceSpans(resource=r, scope_spans=[ScopeSpans(spans=spans)]) for r, spans in groups
        ]
    )


def log_lines(lines: list[str], observed_ns: int, **attrs: str) -> list[LogRecord]:
    """One LogRecord per line, as the filelog receiver emits them (no timestamp operator:
    ``time_unix_nano`` unset, ``observed_time_unix_nano`` the read time)."""
    return [
        LogRecord(
            observed_time_unix_nano=observed_ns + i,
            body=AnyValue(string_value=line),
            attributes=[kv(k, v) for k, v in attrs.items()],
        )
        for i, line in enumerate(lines)
    ]


def logs(*groups: tuple[Resource, list[LogRecord]]) -> LogsData:
    return LogsData(
        resource_logs=[
            ResourceLogs(resource=r, scope_logs=[ScopeLogs(log_records=recs)]) for r, recs in groups
        ]
    )


def _hex_ids(node: object) -> None:
    if isinstance(node, list):
        for item in node:
            _hex_ids(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in _HEX and isinstance(value, str):
                node[key] = base64.b64decode(value).hex().upper()
            else:
                _hex_ids(value)


def encode(message: Message, encoding: Encoding) -> bytes:
    if encoding == "otlp_proto":
        return message.SerializeToString()
    doc = json_format.MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(doc)
    return json.dumps(doc).encode()


def data_lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()
