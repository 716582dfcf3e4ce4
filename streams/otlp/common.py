"""What the OTLP traces and logs decoders share: the decode error and attribute lists -> dicts."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpDecodeError", "any_value", "otlp_attributes"]


class OtlpDecodeError(ValueError):
    """The bytes are not an OTLP message of the expected signal, in either encoding."""


def any_value(value: AnyValue) -> object:
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
        value = any_value(kv.value)
        if value is not None:
            out[kv.key] = value
    return out
