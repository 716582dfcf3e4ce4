"""OTLP record bytes -> protobuf message, in either encoding the Collector's Kafka exporter writes.

The kafkaexporter (opentelemetry-collector-contrib ``exporter/kafkaexporter``) writes one
``TracesData`` / ``LogsData`` per record as ``otlp_proto`` (pdata's ProtoMarshaler) or
``otlp_json`` (pdata's JSONMarshaler), and sets no header that names the encoding (only
``record_headers`` and ``include_metadata_keys`` the operator configures). So the encoding is
told by a ``content-type`` header when an operator adds one (OTLP/HTTP's ``application/json`` or
``application/x-protobuf``), else by the content: a JSON document starts with ``{``, which can
never start a protobuf ``TracesData``/``LogsData`` (0x7B is field 15, wire type 3, a group).

OTLP/JSON is the proto3 JSON mapping with the deviations of the OTLP specification
(opentelemetry-proto ``docs/specification.md``, "JSON Protobuf Encoding"): ``traceId``/``spanId``
are hex, not base64; enums are integers (names are accepted too, as protobuf's parser does);
unknown fields are ignored; 64-bit integers are strings or numbers. The hex ids are turned into
base64 before ``google.protobuf.json_format`` parses the rest, so the mapping is the library's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Literal, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from rankscope.streams.otlp.common import OtlpDecodeError

__all__ = ["CONTENT_TYPE_HEADER", "Encoding", "detect_encoding", "parse_otlp"]

Encoding = Literal["otlp_proto", "otlp_json"]
M = TypeVar("M", bound=Message)

CONTENT_TYPE_HEADER = "content-type"
_BY_CONTENT_TYPE: dict[str, Encoding] = {
    "application/json": "otlp_json",
    "application/x-protobuf": "otlp_proto",
    "application/protobuf": "otlp_proto",
}
#: the id fields OTLP/JSON writes as hex (Span, Span.Link, LogRecord), camelCase and snake_case
_HEX_ID_FIELDS = frozenset(
    {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
)
#: OTLP/JSON nests resource -> scope -> item -> attributes/events/links: a handful of levels;
#: a deeper document is refused before it costs a recursion per level
_MAX_JSON_DEPTH = 64


def content_type_of(headers: Iterable[tuple[str, bytes]] | None) -> str | None:
    """The ``content-type`` header's media type (lower case, parameters dropped), if any."""
    for name, value in headers or ():
        if name.lower() == CONTENT_TYPE_HEADER and value:
            return value.decode("ascii", "replace").split(";", 1)[0].strip().lower()
    return None


def detect_encoding(data: bytes, content_type: str | None = None) -> Encoding:
    """The record's encoding: from a known ``content-type``, else from its first byte."""
    if content_type in _BY_CONTENT_TYPE:
        return _BY_CONTENT_TYPE[content_type]
    return "otlp_json" if data.lstrip()[:1] == b"{" else "otlp_proto"


def parse_otlp(data: bytes, message: M, what: str, content_type: str | None = None) -> M:
    """Fill ``message`` (an empty ``TracesData``/``LogsData``) from ``data``.

    Raises :class:`OtlpDecodeError` naming the encoding tried and why it failed; never quotes
    the record's content.
    """
    encoding = detect_encoding(data, content_type)
    try:
        if encoding == "otlp_json":
            _parse_json(data, message, what)
        else:
            try:
                message.ParseFromString(data)
            except DecodeError as exc:
                raise OtlpDecodeError(
                    f"neither otlp_json (no leading '{{') nor otlp_proto (corrupt protobuf: {exc})"
                ) from None
    except OtlpDecodeError as exc:
        raise OtlpDecodeError(f"not an OTLP {what} message: {exc}") from None
    return message


def _parse_json(data: bytes, message: Message, what: str) -> None:
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise OtlpDecodeError(f"otlp_json record is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise OtlpDecodeError(
            f"otlp_json record is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise OtlpDecodeError("otlp_json record nested too deep") from None
    if not isinstance(doc, dict):
        raise OtlpDecodeError("otlp_json record is not a JSON object")
    try:
        _hex_ids_to_base64(doc, 0)
        json_format.ParseDict(doc, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        # the library's message names the field path and the rule, not the value
        raise OtlpDecodeError(f"otlp_json record is not OTLP {what}: {exc}"[:512]) from None
    except RecursionError:
        raise OtlpDecodeError("otlp_json record nested too deep") from None


def _hex_ids_to_base64(node: object, depth: int) -> None:
    """OTLP/JSON's hex ids -> the base64 that protobuf's JSON mapping reads, in place."""
    if depth > _MAX_JSON_DEPTH:
        raise OtlpDecodeError(f"otlp_json record nested deeper than {_MAX_JSON_DEPTH} levels")
    if isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item, depth + 1)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in _HEX_ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise OtlpDecodeError(f"otlp_json field {key} is not hex") from None
            elif isinstance(value, dict | list):
                _hex_ids_to_base64(value, depth + 1)
