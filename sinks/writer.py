"""Writing rows to ClickHouse so that no row can wedge the sink.

Two kinds of failure, told apart by what a smaller insert would do:

* **refused**: ClickHouse (or the client serialising for it) rejects the data: a value its column
  cannot hold, more partitions than one insert may touch. A smaller insert can succeed, so the
  batch is bisected until each refused row is alone; those rows come back to the caller (the sink
  dead-letters them with ClickHouse's error) and every other row is stored.
* **unavailable**: the server is not there or cannot take writes now (connection refused,
  timeouts, memory limits, too many parts, a missing table). No split helps; it raises
  :class:`ClickHouseUnavailable` and the caller waits for the server instead.

Bisection costs ``O(k log n)`` extra inserts for ``k`` refused rows in ``n``; ClickHouse's
ReplacingMergeTree keys make a row stored twice (a chunk written before a later failure) one row
to ``FINAL`` readers.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from clickhouse_connect.driver.exceptions import (
    DatabaseError,
    DataError,
    OperationalError,
    ProgrammingError,
)

__all__ = ["ClickHouseUnavailable", "Refused", "classify", "write_rows"]

#: Server error codes that say "not now" (or "not configured"), not "not this data"
UNAVAILABLE_CODES: Final = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE
        16,  # NO_SUCH_COLUMN_IN_TABLE (schema drift: migrate, don't dead-letter)
        47,  # UNKNOWN_IDENTIFIER
        60,  # UNKNOWN_TABLE
        81,  # UNKNOWN_DATABASE
        159,  # TIMEOUT_EXCEEDED
        164,  # READONLY
        192,  # UNKNOWN_USER
        193,  # WRONG_PASSWORD
        194,  # REQUIRED_PASSWORD
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        243,  # NOT_ENOUGH_SPACE
        285,  # TOO_FEW_LIVE_REPLICAS
        319,  # UNKNOWN_STATUS_OF_INSERT
        394,  # QUERY_WAS_CANCELLED
        425,  # SYSTEM_ERROR
        497,  # ACCESS_DENIED
        516,  # AUTHENTICATION_FAILED
        999,  # KEEPER_EXCEPTION
    }
)
#: code 252 is both "too many parts" (merge backpressure: wait) and "too many partitions for
#: single INSERT block" (this data: split)
_TOO_MANY_PARTS = 252
_CODE = re.compile(r"\bcode: (\d+)", re.IGNORECASE)
#: what the client raises when a value cannot be serialised for its column type
_CLIENT_DATA_ERRORS = (
    ValueError,
    TypeError,
    OverflowError,
    struct.error,
    UnicodeError,
    KeyError,
    IndexError,
    DataError,
    ProgrammingError,
)


class ClickHouseUnavailable(RuntimeError):
    """ClickHouse cannot take this write now; retrying the same rows later is the remedy."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A row ClickHouse refused on its own: its position in the rows given, and why."""

    position: int
    error: str


def error_code(exc: BaseException) -> int | None:
    """ClickHouse's error code in a server exception's text, if any."""
    m = _CODE.search(str(exc))
    return int(m.group(1)) if m else None


def classify(exc: BaseException) -> Literal["refused", "unavailable"]:
    """Could a smaller insert succeed (``refused``), or only a later one (``unavailable``)?"""
    if isinstance(exc, OperationalError | OSError):
        return "unavailable"
    if isinstance(exc, DatabaseError) and not isinstance(exc, DataError | ProgrammingError):
        code = error_code(exc)
        if code is None or code in UNAVAILABLE_CODES:
            return "unavailable"
        if code == _TOO_MANY_PARTS and "partitions" not in str(exc):
            return "unavailable"
        return "refused"
    if isinstance(exc, _CLIENT_DATA_ERRORS):
        return "refused"
    return "unavailable"


def describe(exc: BaseException) -> str:
    """One line for a dead letter or a log: ClickHouse's own message, without the client's
    wrapping and the URL (which may carry a user name)."""
    text = " ".join(str(exc).split())
    marker = "DB::Exception:"
    if marker in text:
        code = error_code(exc)
        text = f"Code {code}: {text.split(marker, 1)[1].strip()}"
    else:
        text = f"{type(exc).__name__}: {text}"
    return text[:1000]


def write_rows(insert: Callable[[Sequence[Any]], None], rows: Sequence[Any]) -> list[Refused]:
    """Insert ``rows`` with ``insert``; return the rows refused for their data, in order.

    Raises :class:`ClickHouseUnavailable` (rows before it may be stored already) when the
    server, not the data, is the problem.
    """
    refused: list[Refused] = []
    pending: list[tuple[int, Sequence[Any]]] = [(0, rows)] if rows else []
    while pending:
        start, chunk = pending.pop()
        try:
            insert(chunk)
        except Exception as exc:
            if classify(exc) == "unavailable":
                raise ClickHouseUnavailable(describe(exc)) from exc
            if len(chunk) == 1:
                refused.append(Refused(start, describe(exc)))
                continue
            mid = len(chunk) // 2
            pending.append((start + mid, chunk[mid:]))
            pending.append((start, chunk[:mid]))  # popped first: refused rows stay in order
    return refused
