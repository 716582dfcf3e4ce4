"""The validate agent's parsed events, handed to the windows agent of the same worker.

Why: the windows agent reads ``<p>.events`` in order (Kafka stays the source of truth and the
analysis decides from the log alone), but most records it reads were written a moment ago by
this very process, which still holds them parsed. Parsing them again cost the worker ~3% of its
time (bench/results/worker_profile_before.json). The agent still reads every record from Kafka;
only when the record's source header and its bytes match what this worker just produced does it
take the events it already has instead of parsing the same bytes again, so what it sees is the
same either way: a miss (another worker's record, a restart, a backlog past the bound) parses.
"""

from __future__ import annotations

from collections import OrderedDict

from rankscope.schemas.events import Event

#: events held for the windows agent; beyond this the oldest records go (the agent then parses
#: them). Live, the agent is a few records behind; in a bulk replay the validate agent runs
#: ahead, and the bound keeps what it holds to tens of MB (a parsed event is ~1 KB).
CAPACITY = 20_000


class ParsedHandoff:
    """(source header, record bytes) -> the events those bytes hold, taken at most once."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity  # in events
        self._held: OrderedDict[bytes, tuple[bytes, list[Event]]] = OrderedDict()
        self._events = 0
        self.hits = 0
        self.misses = 0

    def put(self, source: bytes, value: bytes, events: list[Event]) -> None:
        """The validate agent produced ``value`` (the serialised ``events``) from ``source``."""
        if len(events) > self.capacity:
            return
        self._drop(source)
        self._held[source] = (value, events)
        self._events += len(events)
        while self._events > self.capacity:
            self._events -= len(self._held.popitem(last=False)[1][1])

    def take(self, source: bytes | None, value: bytes) -> list[Event] | None:
        """The events of the record just read, if this worker produced exactly these bytes."""
        held = self._drop(source) if source is not None else None
        if held is None or held[0] != value:
            self.misses += 1
            return None
        self.hits += 1
        return held[1]

    def _drop(self, source: bytes) -> tuple[bytes, list[Event]] | None:
        held = self._held.pop(source, None)
        if held is not None:
            self._events -= len(held[1])
        return held
