"""What an OpenTelemetry Collector's Kafka exporter writes -> rankscope events.

``traces`` (spans -> ``span/1``), ``logs`` (NCCL/PyTorch lines -> ``comm_event/1``), ``wire``
(which of ``otlp_proto``/``otlp_json`` a record is) and ``record`` (one record of a signal ->
events, the validate stage's entry point). Importing this package loads the traces decoder only:
the logs decoder uses the NCCL line grammar it shares with the agent
(``rankscope.schemas.comm_lines``).
"""

from rankscope.streams.otlp.common import OtlpDecodeError, otlp_attributes
from rankscope.streams.otlp.traces import decode_otlp_traces

__all__ = ["OtlpDecodeError", "decode_otlp_traces", "otlp_attributes"]
