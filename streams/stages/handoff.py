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
ahead of the windows agent (the analysis), the bound was reached and the windows agent parsed
the records it no longer held (7.5% of the worker's time in the e2e bench). ``RawFlow`` pauses
the raw partitions while the handoff holds more than ``pause_at`` events bound for this worker's
windows agent and resumes them below ``resume_at``: Kafka Streams' ``buffered.records.per.
partition`` in spirit. It changes when records are read, never what is read or decided. It is
opt-in (``StreamsConfig.backpressure_events``, default 0): paced by the analysis, the validate
agent writes the events topic later, so rows reach ClickHouse later (docs/decisions.md).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from rankscope.schemas.events import Event
from rankscope.streams.stages.shared import StageCounters

log = logging.getLogger("rankscope.streams")

#: events held for the windows agent; past it, newly validated records are not held (the agent
#: parses them). With back-pressure on, the handoff stays under the pause threshold plus what was
#: already fetched, so the bound only bites when the pause cannot (a parsed event is ~1 KB).
CAPACITY = 40_000
#: a pause with no take for this long is given up (the windows agent is stuck or gone: the
#: records held are dropped, the agent parses them when it reads them, the raw topics flow)
STALL_S = 5.0
#: a held record not taken this long after it was put is let go when the handoff is full: one
#: the windows agent will never read (its delivery never reported), so it cannot hold a place
STALE_S = 60.0


class _Held:
    """One produced events record waiting for the windows agent."""

    __slots__ = ("events", "partition", "put_at", "value")

    def __init__(self, value: bytes, events: list[Event], put_at: float) -> None:
        self.value = value
        self.events = events
        self.put_at = put_at
        self.partition: int | None = None  # known at delivery


class ParsedHandoff:
    """(source header, record bytes) -> the events those bytes hold, taken at most once.

    When full it keeps what it holds and lets the new record go, not the oldest: the windows
    agent reads in the order the records were produced, so the oldest is the one it needs next.
    Dropping the oldest (an LRU's choice) made every record a miss while the validate agent led
    by more than the bound, as in a long backlog (bench/results/perf9/). What the agent has read
    past is let go at once: taking a record releases the records delivered before it to the same
    events partition (the agent skipped or passed them), so nothing stale holds a place.
    """

    def __init__(self, capacity: int = CAPACITY, stale_s: float = STALE_S) -> None:
        self.capacity = capacity  # in events
        self.stale_s = stale_s
        self._held: OrderedDict[bytes, _Held] = OrderedDict()
        #: sources in delivery order per events partition (the order the agent reads them)
        self._delivered: dict[int, deque[bytes]] = {}
        self._events = 0
        self.hits = 0
        self.misses = 0
        #: records not held because the handoff was full (the agent parses them)
        self.not_held = 0
        self.last_take = time.monotonic()

    @property
    def held_events(self) -> int:
        return self._events

    def report(self, counters: StageCounters) -> None:
        """Copy what an operator sizing the handoff watches into the worker's counters (the
        metrics read those): records not held because it was full, events held now."""
        counters.handoff_not_held = self.not_held
        counters.handoff_held_events = self._events

    def put(self, source: bytes, value: bytes, events: list[Event]) -> None:
        """The validate agent produced ``value`` (the serialised ``events``) from ``source``."""
        self.discard(source)
        if self._events + len(events) > self.capacity:
            self._let_stale_go()
            if self._events + len(events) > self.capacity:
                self.not_held += 1
                return
        self._held[source] = _Held(value, events, time.monotonic())
        self._events += len(events)

    def delivered(self, source: bytes, partition: int) -> None:
        """``source``'s events record reached ``partition`` of the events topic, which this
        worker's windows agent reads."""
        held = self._held.get(source)
        if held is not None:
            held.partition = partition
            order = self._delivered.get(partition)
            if order is None:  # bounded: it never lists more records than the handoff holds
                order = self._delivered[partition] = deque(maxlen=self.capacity)
            order.append(source)

    def take(self, source: bytes | None, value: bytes) -> list[Event] | None:
        """The events of the record just read, if this worker produced exactly these bytes."""
        self.last_take = time.monotonic()
        held = self.discard(source) if source is not None else None
        if held is not None and held.partition is not None:
            self._passed(held.partition, source)
        if held is None or held.value != value:
            self.misses += 1
            return None
        self.hits += 1
        return held.events

    def discard(self, source: bytes | None) -> _Held | None:
        """Stop holding ``source``'s events: another worker reads its events partition, or the
        windows agent skipped the record (a duplicate, one a restored snapshot includes)."""
        held = self._held.pop(source, None) if source is not None else None
        if held is not None:
            self._events -= len(held.events)
        return held

    def clear(self) -> None:
        self._held.clear()
        self._delivered.clear()
        self._events = 0

    def _passed(self, partition: int, source: bytes | None) -> None:
        """The agent read ``source`` on ``partition``: what was delivered there before it is
        behind the agent and will not be read again."""
        order = self._delivered.get(partition)
        while order:
            earlier = order.popleft()
            if earlier == source:
                return
            held = self._held.get(earlier)
            if held is not None and held.partition == partition:
                self.discard(earlier)

    def _let_stale_go(self) -> None:
        cutoff = time.monotonic() - self.stale_s
        while self._held:
            source, oldest = next(iter(self._held.items()))
            if oldest.put_at > cutoff:
                return
            self.discard(source)


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
