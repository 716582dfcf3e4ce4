"""The validate agent's parsed events, handed to the windows agent of the same worker, and the
back-pressure that keeps the validate agent from running ahead of it.

Why: the windows agent reads ``<p>.events`` in order (Kafka stays the source of truth and the
analysis decides from the log alone), but most records it reads were written a moment ago by
this very process, which still holds them parsed. Parsing them again cost the worker ~3% of its
time (bench/results/worker_profile_before.json). The agent still reads every record from Kafka;
only when the record's source header and its bytes match what this worker just produced does it
take the events it already has instead of parsing the same bytes again, so what it sees is the
same either way: a miss (another worker's record, a restart, a backlog past the bound) parses.

In a bulk replay the validate agent (cheap per record) used to run tens of thousands of events
ahead of the windows agent (the analysis), the bound pushed the oldest records out and the
windows agent parsed them again (7.5% of the worker's time in the e2e bench). ``RawFlow`` pauses
the raw partitions while the handoff holds more than ``pause_at`` events bound for this worker's
windows agent and resumes them below ``resume_at``: Kafka Streams' ``buffered.records.per.
partition`` in spirit. It changes when records are read, never what is read or decided. It is
opt-in (``StreamsConfig.backpressure_events``, default 0): paced by the analysis, the validate
agent writes the events topic later, so rows reach ClickHouse later (docs/decisions.md).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from rankscope.schemas.events import Event

log = logging.getLogger("rankscope.streams")

#: events held for the windows agent; beyond this the oldest records go (the agent then parses
#: them). With back-pressure on, the handoff stays under the pause threshold plus what was
#: already fetched, so the bound only bites when the pause cannot (a parsed event is ~1 KB).
CAPACITY = 40_000
#: a pause with no take for this long is given up (the windows agent is stuck or gone: the
#: records held are dropped, the agent parses them when it reads them, the raw topics flow)
STALL_S = 5.0


class ParsedHandoff:
    """(source header, record bytes) -> the events those bytes hold, taken at most once."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity  # in events
        self._held: OrderedDict[bytes, tuple[bytes, list[Event]]] = OrderedDict()
        self._events = 0
        self.hits = 0
        self.misses = 0
        self.last_take = time.monotonic()

    @property
    def held_events(self) -> int:
        return self._events

    def put(self, source: bytes, value: bytes, events: list[Event]) -> None:
        """The validate agent produced ``value`` (the serialised ``events``) from ``source``."""
        if len(events) > self.capacity:
            return
        self.discard(source)
        self._held[source] = (value, events)
        self._events += len(events)
        while self._events > self.capacity:
            self._events -= len(self._held.popitem(last=False)[1][1])

    def take(self, source: bytes | None, value: bytes) -> list[Event] | None:
        """The events of the record just read, if this worker produced exactly these bytes."""
        self.last_take = time.monotonic()
        held = self.discard(source) if source is not None else None
        if held is None or held[0] != value:
            self.misses += 1
            return None
        self.hits += 1
        return held[1]

    def discard(self, source: bytes | None) -> tuple[bytes, list[Event]] | None:
        """Stop holding ``source``'s events: another worker reads its events partition, or the
        windows agent skipped the record (a duplicate, one a restored snapshot includes)."""
        held = self._held.pop(source, None) if source is not None else None
        if held is not None:
            self._events -= len(held[1])
        return held

    def clear(self) -> None:
        self._held.clear()
        self._events = 0


class RawFlow:
    """Back-pressure from the windows agent to the validate agent of one worker.

    ``pause`` and ``resume`` stop and restart fetching the worker's raw partitions
    (``streams/app.py``, ``raw_flow``); records already fetched are still validated. Pause when
    ``pause_at`` events wait for the local windows agent, resume when it has taken all but
    ``resume_at``.
    """

    def __init__(
        self,
        handoff: ParsedHandoff,
        pause: Callable[[], None],
        resume: Callable[[], None],
        pause_at: int,
        resume_at: int,
        stall_s: float = STALL_S,
    ) -> None:
        if not 0 <= resume_at < pause_at:
            raise ValueError("resume_at must be below pause_at")
        self.handoff = handoff
        self._pause = pause
        self._resume = resume
        self.pause_at = pause_at
        self.resume_at = resume_at
        self.stall_s = stall_s
        self.paused = False
        self.pauses = 0
        self.stalls = 0

    def after_put(self) -> None:
        if not self.paused and self.handoff.held_events >= self.pause_at:
            self.paused = True
            self.pauses += 1
            self.handoff.last_take = time.monotonic()  # the stall clock starts at the pause
            self._pause()

    def after_take(self) -> None:
        if self.paused and self.handoff.held_events <= self.resume_at:
            self.paused = False
            self._resume()

    def tick(self, now_monotonic: float | None = None) -> None:
        """Once a second: a pause the windows agent has not relieved for ``stall_s`` ends."""
        now = time.monotonic() if now_monotonic is None else now_monotonic
        if self.paused and now - self.handoff.last_take >= self.stall_s:
            self.stalls += 1
            log.warning(
                "the windows agent took nothing for %.0f s with %d events waiting: resuming "
                "the raw topics (it parses what it reads)", self.stall_s,
                self.handoff.held_events,
            )  # fmt: skip
            self.reset()

    def reset(self) -> None:
        """Partitions moved: what is held may belong to another worker now; flow again."""
        self.handoff.clear()
        if self.paused:
            self.paused = False
            self._resume()
