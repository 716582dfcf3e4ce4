"""The NCCL/PyTorch log-line grammar: how a communication-library line becomes a ``comm_event``.

Why in ``schemas``: a line reaches rankscope two ways, tailed by the node agent's NCCL log
collector or shipped by an OpenTelemetry Collector's filelog receiver and decoded by the stream
worker. Both must produce the same ``comm_event``, so the grammar (patterns, line prefixes, the
pure parser) and the payload mapping are part of the event contract that collectors and streams
share, not code of either (docs/decisions.md, "The NCCL line grammar lives in schemas").
"""

from __future__ import annotations

from rankscope.schemas.comm_lines.parsing import ParsedCommLine, log_time_ns, parse_line
from rankscope.schemas.comm_lines.payload import comm_payload
from rankscope.schemas.comm_lines.prefixes import LogTime

__all__ = ["LogTime", "ParsedCommLine", "comm_payload", "log_time_ns", "parse_line"]
