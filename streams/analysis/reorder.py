"""Event-time alignment of one job's inputs before the detectors see them.

The worker reads one Kafka topic per event kind, and Kafka orders records only within a
partition, so spans, GPU samples and heartbeats of the same second can arrive seconds apart
(much more in a fast replay). The detectors reason about *which happened first*, so they are fed
in event-time order: events wait in a heap until the watermark passes them.

Watermark = the minimum over the job's channels (event kind x node) of the newest corrected time
each has delivered, ignoring channels that lag the leading channel by more than ``idle_lag_s`` of
event time (a dead node, or a kind that stopped, must not hold the job back). Event-time idleness,
not wall-clock idleness, keeps the output a pure function of the input: a replay gives the same
detections as live operation. An event older than the watermark when it arrives is released at
once (out of order, counted) rather than dropped.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from rankscope.schemas.events import Event


@dataclass
class ReorderStats:
    released: int = 0
    out_of_order: int = 0
    max_buffered: int = 0


@dataclass
class EventTimeBuffer:
    idle_lag_s: float = 3.0
    max_buffered: int = 500_000
    recompute_s: float = 0.05
    stats: ReorderStats = field(default_factory=ReorderStats)

    def __post_init__(self) -> None:
        self._heap: list[tuple[int, int, Event]] = []
        self._seq = itertools.count()
        self._channels: dict[tuple[str, str], int] = {}
        self._watermark = -1
        self._idle_lag = int(self.idle_lag_s * 1e9)
        self._lead = -1  # newest corrected time pushed
        self._lead_at_watermark = -(2**62)  # lead when the watermark was last computed
        #: recompute the O(channels) watermark only once the lead has moved this much
        self._recompute_ns = int(self.recompute_s * 1e9)
        self._pushes = 0  # since the watermark was last computed

    @property
    def watermark(self) -> int:
        return self._watermark

    @property
    def lead(self) -> int:
        """The newest corrected time pushed (-1: none yet)."""
        return self._lead

    def push(self, ev: Event, corrected_ts: int) -> list[tuple[Event, int]]:
        """Add one event; returns the events (with corrected ts) now safe to process, in order."""
        self._pushes += 1
        key = (ev.kind, ev.node)
        channels = self._channels
        if corrected_ts > channels.get(key, -1):
            channels[key] = corrected_ts
            if corrected_ts > self._lead:
                self._lead = corrected_ts
        if corrected_ts <= self._watermark:
            self.stats.out_of_order += 1
            self.stats.released += 1
            return [(ev, corrected_ts)]
        heap = self._heap
        heapq.heappush(heap, (corrected_ts, next(self._seq), ev))
        stats = self.stats
        if len(heap) > stats.max_buffered:
            stats.max_buffered = len(heap)
        return []

    def release(self) -> list[tuple[Event, int]]:
        """Advance the watermark and pop everything at or before it."""
        if not self._channels:
            return []
        lead = self._lead
        # a lagging channel can catch up while the lead stands still: recompute after a while
        if lead - self._lead_at_watermark >= self._recompute_ns or self._pushes >= 2048:
            self._lead_at_watermark = lead
            self._pushes = 0
            active = [t for t in self._channels.values() if t >= lead - self._idle_lag]
            self._watermark = max(self._watermark, min(active))
        out: list[tuple[Event, int]] = []
        heap = self._heap
        limit = self._watermark
        # bounded memory: a pathological input cannot grow the buffer without limit
        watermark = self._watermark
        cap = self.max_buffered
        pop = heapq.heappop
        while heap and (heap[0][0] <= limit or len(heap) > cap):
            ts, _, ev = pop(heap)
            if ts > watermark:
                watermark = ts
            out.append((ev, ts))
        self._watermark = watermark
        self.stats.released += len(out)
        return out

    def drain(self) -> list[tuple[Event, int]]:
        """End of input: everything, in order."""
        out = [(ev, ts) for ts, _, ev in sorted(self._heap)]
        self._heap.clear()
        if out:
            self._watermark = max(self._watermark, out[-1][1])
        self.stats.released += len(out)
        return out
