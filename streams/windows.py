"""Event-time tumbling windows per job and rank, Kafka Streams semantics.

- Window of an event: ``[start, start + size)`` with ``start = t - t % size`` where ``t`` is the
  event time corrected by the source's clock offset when one is known.
- Stream time (the watermark) is per job, and it is the *minimum* over the job's input channels
  (one per event kind and node) of the highest corrected event time each has delivered, as in
  Flink. Collectors batch per kind and node, so one channel can run far ahead of another; taking
  the maximum would declare the slower channel's events late. A channel silent for
  ``channel_idle_s`` of processing time stops holding the watermark back (a dead node must not
  stall its job's windows forever). Channels are discovered as events arrive, so a job's
  watermark stays at its start for ``channel_discovery_s`` of processing time after the job is
  first seen: a kind whose topic is read a moment later must not find its windows closed.
- A window closes, and is emitted exactly once, when ``stream_time >= end + grace``.
- An event for a window that already closed is *late*: counted and returned to the caller,
  which routes it to the late topic. It never changes an emitted window.
- A job whose every channel is silent for ``idle_close_s`` has its open windows closed, so the
  last windows of a finished job are not held forever.
- Work per record does not grow with the number of jobs: a record checks only its own jobs'
  windows (the one-second timer sweeps the rest, for watermarks moved by idle channels), and a
  job with nothing open is forgotten after ``evict_idle``'s retention of quiet.

Pure Python, no Kafka: the faust agent owns one instance and drives it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rankscope.schemas.derived import LateEvent, RankWindow
from rankscope.schemas.events import Event, GpuSampleEvent, SpanEvent
from rankscope.streams.config import WindowConfig


@dataclass(slots=True)
class _Acc:
    cluster: str
    node: str
    step_count: int = 0
    step_time_sum: float = 0.0
    step_time_max: float = 0.0
    util_sum: float = 0.0
    util_count: int = 0
    event_count: int = 0


@dataclass(slots=True)
class _Channel:
    max_ts: int
    last_seen_wall: float


@dataclass(slots=True)
class _JobState:
    first_seen_wall: float
    closed_until: int = -1  # every window with end <= closed_until has been emitted
    last_seen_wall: float = 0.0
    lead: int = -1  # highest corrected time seen: the stream time can never pass it
    channels: dict[tuple[str, str], _Channel] = field(default_factory=dict)  # (kind, node)
    #: window_start -> rank -> accumulator (by start, so closing never scans every open window)
    open: dict[int, dict[int, _Acc]] = field(default_factory=dict)

    def stream_time(self, wall_s: float, channel_idle_s: float, discovery_s: float) -> int:
        """Min over active channels of their max event time (max over all if all are idle)."""
        if not self.channels or wall_s - self.first_seen_wall < discovery_s:
            return -1
        active = [
            c.max_ts for c in self.channels.values() if wall_s - c.last_seen_wall < channel_idle_s
        ]
        if active:
            return min(active)
        return max(c.max_ts for c in self.channels.values())


@dataclass
class WindowStats:
    events: int = 0
    windows_emitted: int = 0
    late_events: int = 0


def corrected_ts(ev: Event) -> int:
    """Event time on the reference clock: source clock minus its estimated offset."""
    return ev.ts - (ev.clock_offset_ns or 0)


class WindowAggregator:
    def __init__(self, config: WindowConfig) -> None:
        self.size_ns = int(config.size_s * 1e9)
        self.grace_ns = int(config.grace_s * 1e9)
        self.idle_close_s = config.idle_close_s
        self.channel_idle_s = config.channel_idle_s
        self.discovery_s = config.channel_discovery_s
        self._jobs: dict[str, _JobState] = {}
        #: the jobs with open windows (insertion-ordered set): what a sweep visits
        self._open_jobs: dict[str, None] = {}
        self.stats = WindowStats()

    # -- feeding -------------------------------------------------------------------------
    def add(self, ev: Event, wall_s: float) -> LateEvent | None:
        """Account one event. Returns a LateEvent when its window has already closed."""
        if ev.rank is None:
            return None  # node/job-level events (heartbeats, scheduler) are not windowed
        job = self._jobs.get(ev.job_id)
        if job is None:
            job = self._jobs[ev.job_id] = _JobState(first_seen_wall=wall_s)
        job.last_seen_wall = wall_s
        t = corrected_ts(ev)
        self.stats.events += 1
        start = t - t % self.size_ns
        if start + self.size_ns <= job.closed_until:
            self.stats.late_events += 1
            watermark = job.stream_time(wall_s, self.channel_idle_s, self.discovery_s)
            return LateEvent(
                event_id=ev.event_id,
                kind=ev.kind,
                cluster=ev.cluster,
                job_id=ev.job_id,
                rank=ev.rank,
                node=ev.node,
                ts=ev.ts,
                window_start_ns=start,
                watermark_ns=watermark,
                lateness_ns=max(0, watermark - (start + self.size_ns)),
                received_ts=int(wall_s * 1e9),
            )
        if t > job.lead:
            job.lead = t
        key = (ev.kind, ev.node)
        ch = job.channels.get(key)
        if ch is None:
            job.channels[key] = _Channel(t, wall_s)
        else:
            if t > ch.max_ts:
                ch.max_ts = t
            ch.last_seen_wall = wall_s
        ranks = job.open.get(start)
        if ranks is None:
            ranks = job.open[start] = {}
            self._open_jobs[ev.job_id] = None
        acc = ranks.get(ev.rank)
        if acc is None:
            acc = ranks[ev.rank] = _Acc(cluster=ev.cluster, node=ev.node)
        acc.event_count += 1
        if isinstance(ev, SpanEvent) and ev.payload.phase == "step":
            d = ev.payload.duration_s
            acc.step_count += 1
            acc.step_time_sum += d
            if d > acc.step_time_max:
                acc.step_time_max = d
        elif isinstance(ev, GpuSampleEvent):
            acc.util_sum += ev.payload.sm_util_pct
            acc.util_count += 1
        return None

    # -- emitting ------------------------------------------------------------------------
    def close_ready(self, wall_s: float, jobs: Iterable[str] | None = None) -> list[RankWindow]:
        """Emit every window whose end + grace the job's stream time has passed (or idle jobs),
        for ``jobs`` (a record's) or, when None, every job with open windows (the sweep)."""
        out: list[RankWindow] = []
        for job_id in list(self._open_jobs) if jobs is None else jobs:
            job = self._jobs.get(job_id)
            if job is None or job_id not in self._open_jobs:
                continue
            if wall_s - job.last_seen_wall >= self.idle_close_s:
                boundary: int | float = math.inf  # an int ns boundary, or none (mypyc: no float())
            elif min(job.open) + self.size_ns + self.grace_ns > job.lead:
                continue  # nothing can close yet: skip the O(channels) stream time
            else:
                stream_time = job.stream_time(wall_s, self.channel_idle_s, self.discovery_s)
                boundary = stream_time - self.grace_ns
            out.extend(self._close(job_id, job, boundary, wall_s))
            if not job.open:
                del self._open_jobs[job_id]
        return out

    def evict_idle(self, wall_s: float, retention_s: float) -> list[str]:
        """Forget the jobs with nothing open and no event for ``retention_s``; their ids.

        Bounded memory under a stream of ever-new job ids. A forgotten job that sends again
        starts afresh: its watermark no longer knows what closed before it went quiet."""
        gone = [
            job_id
            for job_id, job in self._jobs.items()
            if not job.open and wall_s - job.last_seen_wall >= retention_s
        ]
        for job_id in gone:
            del self._jobs[job_id]
        return gone

    def _close(
        self, job_id: str, job: _JobState, boundary: float, wall_s: float
    ) -> Iterable[RankWindow]:
        emitted_ns = int(wall_s * 1e9)
        for start in sorted(st for st in job.open if st + self.size_ns <= boundary):
            ranks = job.open.pop(start)
            for rank in sorted(ranks):
                acc = ranks[rank]
                self.stats.windows_emitted += 1
                yield RankWindow(
                    window_id=RankWindow.make_id(job_id, rank, start),
                    cluster=acc.cluster,
                    job_id=job_id,
                    rank=rank,
                    node=acc.node,
                    window_start_ns=start,
                    window_end_ns=start + self.size_ns,
                    step_count=acc.step_count,
                    step_time_mean_s=(
                        acc.step_time_sum / acc.step_count if acc.step_count else None
                    ),
                    step_time_max_s=acc.step_time_max if acc.step_count else None,
                    gpu_util_mean_pct=acc.util_sum / acc.util_count if acc.util_count else None,
                    gpu_sample_count=acc.util_count,
                    event_count=acc.event_count,
                    emitted_ts=emitted_ns,
                )
            job.closed_until = max(job.closed_until, start + self.size_ns)
        if boundary != math.inf:
            b = int(boundary)
            job.closed_until = max(job.closed_until, b - b % self.size_ns)

    def export(self, job_ids: Iterable[str]) -> dict[str, Any]:
        """The open windows and stream time of some jobs (what a snapshot holds)."""
        return {j: self._jobs[j] for j in job_ids if j in self._jobs}

    def install(self, jobs: dict[str, Any], wall_s: float) -> None:
        """Take over jobs from a snapshot; their processing-time clocks restart at ``wall_s``
        (the worker that wrote it had another clock, and time passed since)."""
        for job_id, job in jobs.items():
            job.first_seen_wall = min(job.first_seen_wall, wall_s)
            job.last_seen_wall = wall_s
            for channel in job.channels.values():
                channel.last_seen_wall = wall_s
            self._jobs[job_id] = job
            if job.open:
                self._open_jobs[job_id] = None

    def forget(self, job_id: str) -> None:
        """Drop a job's open windows and stream time (its partition moved to another worker)."""
        self._jobs.pop(job_id, None)
        self._open_jobs.pop(job_id, None)

    def jobs(self) -> int:
        return len(self._jobs)

    def open_windows(self) -> int:
        return sum(len(r) for j in self._jobs.values() for r in j.open.values())

    def oldest_open_start(self, job_id: str) -> int | None:
        job = self._jobs.get(job_id)
        if not job or not job.open:
            return None
        return min(job.open)

    def closed_until(self, job_id: str) -> int:
        job = self._jobs.get(job_id)
        return job.closed_until if job else -1

    def settled_until(self, job_id: str) -> float:
        """Up to where a job's windows are emitted, for acknowledging its records: a job
        forgotten for quiet had all its windows emitted."""
        job = self._jobs.get(job_id)
        return job.closed_until if job else math.inf


class JobShapeGuard:
    """Caps the distinct ranks and nodes one job may bring into the worker's state.

    Events past a cap are left out of windows and analysis (the sink still stores them), and
    the job is reported once. Which ranks are admitted is the first ones in log order, so the
    same log is always treated the same way."""

    def __init__(self, max_ranks: int, max_nodes: int) -> None:
        self.max_ranks = max_ranks
        self.max_nodes = max_nodes
        self._ranks: dict[str, set[int]] = {}
        self._nodes: dict[str, set[str]] = {}
        #: job -> events left out (what the worker logs once per job)
        self.over: dict[str, int] = {}

    def admit(self, ev: Event) -> bool:
        job = ev.job_id
        if not job:
            return True
        ok = _within(self._ranks, job, ev.rank, self.max_ranks) and _within(
            self._nodes, job, ev.node, self.max_nodes
        )
        if not ok:
            self.over[job] = self.over.get(job, 0) + 1
        return ok

    def forget(self, job_id: str) -> None:
        self._ranks.pop(job_id, None)
        self._nodes.pop(job_id, None)
        self.over.pop(job_id, None)


def _within(seen: dict[str, set[Any]], job: str, value: Any, cap: int) -> bool:
    if value is None:
        return True
    values = seen.get(job)
    if values is None:
        values = seen[job] = set()
    if value in values:
        return True
    if len(values) >= cap:
        return False
    values.add(value)
    return True
