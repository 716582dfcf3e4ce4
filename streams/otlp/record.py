"""One OTLP Kafka record of a known signal -> events, reasons and a count of ignored log lines.

The signal comes from the topic the record was read from (the Collector writes one signal per
topic: ``otlp_spans``, ``otlp_logs`` by default), the encoding from the record itself
(:mod:`rankscope.streams.otlp.wire`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rankscope.schemas.events import Event
from rankscope.streams.otlp.traces import decode_otlp_traces

__all__ = ["OtlpDecoded", "Signal", "decode_otlp_record"]

Signal = Literal["traces", "logs"]


@dataclass
class OtlpDecoded:
    events: list[Event] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    ignored: int = 0


def decode_otlp_record(
    data: bytes, signal: Signal, *, observed_ns: int, content_type: str | None = None
) -> OtlpDecoded:
    """Decode ``data`` as ``signal``; raises :class:`~rankscope.streams.otlp.OtlpDecodeError`."""
    if signal == "logs":
        from rankscope.streams.otlp.logs import decode_otlp_logs  # the agent's parser: see logs

        logs = decode_otlp_logs(data, observed_ns=observed_ns, content_type=content_type)
        return OtlpDecoded(list(logs.events), logs.reasons, logs.ignored)
    events, reasons = decode_otlp_traces(data, observed_ns=observed_ns, content_type=content_type)
    return OtlpDecoded(list(events), reasons)
