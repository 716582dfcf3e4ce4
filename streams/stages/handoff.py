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

#: records held for the windows agent; beyond this the oldest go (the agent then parses them)
CAPACITY = 1024


class ParsedHandoff:
    """(source header, record bytes) -> the events those bytes hold, taken at most once."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._held: OrderedDict[bytes, tuple[bytes, list[Event]]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def put(self, source: bytes, value: bytes, events: list[Event]) -> None:
        """The validate agent produced ``value`` (the serialised ``events``) from ``source``."""
        if self.capacity <= 0:
            return
        self._held[source] = (value, events)
        self._held.move_to_end(source)
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)

    def take(self, source: bytes | None, value: bytes) -> list[Event] | None:
        """The events of the record just read, if this worker produced exactly these bytes."""
        held = self._held.pop(source, None) if source is not None else None
        if held is None or held[0] != value:
            self.misses += 1
            return None
        self.hits += 1
        return held[1]
