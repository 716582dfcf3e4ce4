"""Where each events record came from, so a raw record validated twice is analysed once.

Why: the validate agent commits its raw offsets once a second. A worker that dies, or loses its
raw partitions in a rebalance, after producing an events record but before committing the raw
record it came from has that raw record validated again by the next owner, which produces the
same events a second time. The events topic is therefore at least once; the windows and the
analysis must not be: a batch read twice counts twice in its windows and changes what the
detectors see (measured: a clean-clone run found a hang two seconds late after a worker was
killed). Each events record carries the position of its raw record in a header; per events
partition, the highest raw offset seen from each raw partition travels with the analysis
snapshot, and a record at or below it is a duplicate (the Kafka idiom of an idempotent consumer
keyed by the producer's source offset; docs/decisions.md, "Duplicates from re-validation").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SOURCE_HEADER = "rankscope-source"

#: a raw record's partition ("topic:partition") and offset
Source = tuple[str, int]


def source_headers(
    topic: str, partition: int, offset: int, split: int = 0
) -> list[tuple[str, bytes]]:
    """The header the validate stage puts on the events record of raw record ``offset``.

    ``split`` numbers the events records one raw record became (an OTLP batch split per job):
    each split is its own source, so two splits that land on one events partition are not
    taken for duplicates of each other."""
    where = f"{topic}:{partition}" if split == 0 else f"{topic}:{partition}/{split}"
    return [(SOURCE_HEADER, f"{where}:{offset}".encode())]


Headers = Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None


def source_value(headers: Headers) -> bytes | None:
    """The raw source header of an events record (None: it has none)."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs:
        if name == SOURCE_HEADER and value:
            return bytes(value)
    return None


def record_source(headers: Headers) -> Source | None:
    """The source of an events record (None: a record without one, e.g. written by hand)."""
    value = source_value(headers)
    if value is None:
        return None
    # topic names cannot hold ':' (Kafka allows letters, digits, '.', '_', '-')
    where, _, offset = value.decode("ascii", "replace").rpartition(":")
    try:
        return where, int(offset)
    except ValueError:
        return None


class SourceOffsets:
    """Per events partition: the newest raw offset read from each raw partition."""

    def __init__(self) -> None:
        self._seen: dict[Any, dict[str, int]] = {}

    def first_time(self, tp: Any, source: Source | None) -> bool:
        """Whether the record (from ``source``) on events partition ``tp`` is new; remembers it."""
        if source is None:
            return True
        where, offset = source
        seen = self._seen.setdefault(tp, {})
        if offset <= seen.get(where, -1):
            return False
        seen[where] = offset
        return True

    def export(self, tp: Any) -> dict[str, int]:
        return dict(self._seen.get(tp, {}))

    def install(self, tp: Any, seen: dict[str, int]) -> None:
        self._seen[tp] = dict(seen)

    def drop(self, tp: Any) -> None:
        self._seen.pop(tp, None)
