"""A parsed line -> the ``comm_event`` payload, with the field bounds the schema allows.

One mapping for the agent's NCCL log collector and the worker's OTLP logs decoder, so a line
stores the same whichever way it came (tests/test_otlp_collector.py compares the rows).
"""

from __future__ import annotations

from typing import Final

from rankscope.schemas.comm_lines.parsing import ParsedCommLine
from rankscope.schemas.payloads import CommEvent

__all__ = ["comm_payload"]

#: bounds of ShortText / LongText fields (schemas/envelope.py), cut here rather than refused
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
