"""The one place ``streams`` reaches into ``collectors``: the NCCL/PyTorch line parser.

Why: a log line shipped by an OpenTelemetry Collector's filelog receiver must become the same
``comm_event`` as the line read by the node agent's NCCL log collector, so it goes through the
same parser (``collectors/nccl_log/parsing.py``, pure, no I/O). Data flows collectors -> schemas
-> streams, and the parser does not live in ``schemas`` yet; importing it through this module
alone keeps the crossing to one line, to change when the parser moves to a shared module
(docs/decisions.md, "NCCL lines from the Collector use the agent's parser").

The payload mapping below mirrors ``NcclLogCollector._event`` (same bounds, same fields);
tests/test_otlp_collector.py stores a line both ways and compares the rows, so a drift fails.
"""

from __future__ import annotations

from typing import Final

from rankscope.collectors.nccl_log.parsing import ParsedCommLine, parse_line
from rankscope.schemas.payloads import CommEvent

__all__ = ["ParsedCommLine", "comm_payload", "parse_line"]

_SHORT: Final = 256
_LONG: Final = 16_384


def comm_payload(p: ParsedCommLine, log_file: str) -> CommEvent:
    """The ``comm_event`` payload of a parsed line (raises pydantic's ValidationError)."""
    short_file = log_file if len(log_file) <= _SHORT else "..." + log_file[-(_SHORT - 3) :]
    return CommEvent(
        source=p.source,
        event_type=p.event_type,
        op=p.op[:_SHORT],
        seq=p.seq,
        peer_rank=p.peer_rank,
        peer=p.peer[:_SHORT],
        timeout_ms=p.timeout_ms,
        elapsed_ms=p.elapsed_ms,
        process_group=p.process_group[:_SHORT],
        pid=p.pid,
        log_file=short_file,
        message=p.message[:_LONG],
        host=p.host[:_SHORT],
        hca=p.hca[:_SHORT],
        cuda_dev=p.cuda_dev,
        ib_status=p.ib_status,
        vendor_err=p.vendor_err,
        pg_rank=p.pg_rank,
    )
