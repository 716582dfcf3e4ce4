"""The windows stage: the events agent (event-time rank windows, late events, manual acks).

Acks are manual: a record is acknowledged once every window it contributed to has been emitted
and a snapshot of the analysis includes it (``stages/snapshots.py``), so a crash re-reads the
records of open windows and recomputes them, and the analysis resumes from its snapshot. The
events agent parses a record once and hands each event to the recovery host's progress notes
and to the analysis stage before the aggregator. The worker's one-second timer
(``rankscope.streams.app``) calls ``close_ready`` between the decider host's tick and the
analysis' flush.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

import faust

from rankscope.schemas.derived import RankWindow, StepProgress, dump_rank_windows
from rankscope.schemas.events import EVENT_LIST_ADAPTER
from rankscope.streams.config import StreamsConfig
from rankscope.streams.sources import record_source, source_value
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.handoff import ParsedHandoff, RawFlow
from rankscope.streams.stages.recovery import DeciderHost
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.stages.snapshots import SnapshotKeeper
from rankscope.streams.windows import JobShapeGuard, WindowAggregator, corrected_ts

log = logging.getLogger("rankscope.streams")

#: windows per ``<p>.windows`` record at most (~300 bytes each: ~300 KB, far under the 8 MiB
#: record limit whatever the job's size)
WINDOWS_PER_RECORD = 1_000
#: a record held unacknowledged: (job id, end of the last window it touched or -1, faust event,
#: offset)
Held = tuple[str, int, Any, int]


class WindowsStage:
    """Owns the window aggregator and the records held unacknowledged; registers the
    ``<app_id>.windows`` agent."""

    def __init__(
        self,
        config: StreamsConfig,
        topics: StageTopics,
        counters: StageCounters,
        analysis: AnalysisStage,
        recovery: DeciderHost,
        snapshots: SnapshotKeeper,
        handoff: ParsedHandoff | None = None,
        flow: RawFlow | None = None,
    ):
        snapshots.windows = self
        #: the events the validate agent of this worker produced, still parsed
        self.handoff = handoff
        #: told when the agent takes from the handoff (it resumes the raw topics)
        self.flow = flow
        self.config = config
        self.topics = topics
        self.counters = counters
        self.analysis = analysis
        self.recovery = recovery
        self.snapshots = snapshots
        self.agg = WindowAggregator(config.windows)
        self.shape = JobShapeGuard(config.max_ranks_per_job, config.max_nodes_per_job)
        # partition -> (job_id, last window end the record touched or -1, faust event, offset)
        # of the records not yet acknowledged, in offset order
        self.pending: dict[Any, deque[Held]] = {}
        self.partition_of: dict[str, Any] = {}  # job -> events partition (for a revocation)

    def export(self, tp: Any) -> dict[str, Any]:
        """The open windows of the jobs read from ``tp`` (for its snapshot)."""
        return self.agg.export(j for j, t in self.partition_of.items() if t == tp)

    def install(self, tp: Any, jobs: dict[str, Any], now: float) -> None:
        self.agg.install(jobs, now)
        for job_id in jobs:
            self.partition_of[job_id] = tp

    def forget(self, partitions: set[Any]) -> None:
        """Forget the windows and held records of ``partitions`` (given up, or handed over
        again): their owner re-reads the records of open windows (never acknowledged)."""
        gone = {j for j, tp in self.partition_of.items() if tp in partitions}
        for job_id in gone:
            self.agg.forget(job_id)
            self.shape.forget(job_id)
            del self.partition_of[job_id]
        for tp in partitions:
            self.pending.pop(tp, None)
        self.counters.pending_acks = sum(len(held) for held in self.pending.values())

    async def emit(self, windows: list[RankWindow]) -> None:
        """Send closed windows, one record per job and up to ``WINDOWS_PER_RECORD`` of them: a
        close emits one window per rank, and a send per window was the worker's most numerous
        output (faust's cost is per record; docs/decisions.md, "Windows records")."""
        by_job: dict[str, list[RankWindow]] = {}
        for w in windows:
            self.counters.windows_emitted += 1
            self.counters.observe_close_delay((w.emitted_ts - w.window_end_ns) / 1e9)
            by_job.setdefault(w.job_id, []).append(w)
        for job_id, job_windows in by_job.items():
            key = job_id.encode()
            for i in range(0, len(job_windows), WINDOWS_PER_RECORD):
                chunk = job_windows[i : i + WINDOWS_PER_RECORD]
                await self.topics.windows.send(key=key, value=dump_rank_windows(chunk))

    def ack_settled(self) -> None:
        """Ack the records whose windows have all been emitted (what "drained" means to
        callers) and that a snapshot includes. Per partition, records past the newest snapshot
        wait in order; before it, each is checked (several jobs interleave on a partition)."""
        closed_until = self.agg.settled_until
        held_count = 0
        for tp, held in self.pending.items():
            upto = self.snapshots.durable_upto(tp)
            keep: list[Held] = []
            while held and held[0][3] <= upto:
                item = held.popleft()
                job_id, last_end, ev, _ = item
                if last_end < 0 or last_end <= closed_until(job_id):
                    ev.ack()
                else:
                    keep.append(item)
            held.extendleft(reversed(keep))
            held_count += len(held)
        self.counters.pending_acks = held_count

    def windows_touched(self, value: bytes) -> tuple[str, int]:
        """(job id, end of the last window) of a record's events, without counting them."""
        size_ns = self.agg.size_ns
        job_id, last_end = "", -1
        for ev in EVENT_LIST_ADAPTER.validate_json(value):
            job_id = ev.job_id
            if ev.rank is not None:
                t = corrected_ts(ev)
                last_end = max(last_end, t - t % size_ns + size_ns)
        return job_id, last_end

    def hold(self, tp: Any, item: Held, durable: bool) -> None:
        """Hold a record until it settles (or ack it now: no window, nothing to wait for)."""
        if item[1] < 0 and durable:
            item[2].ack()
            return
        held = self.pending.get(tp)
        if held is None:
            held = self.pending[tp] = deque()
        held.append(item)

    async def close_ready(self, now: float, jobs: Iterable[str] | None = None) -> None:
        """Emit the windows the watermark (or idleness at ``now``) has closed, for ``jobs``
        (a record's) or every job (the timer's sweep), then ack the records they settle: a held
        record can only settle when one of its windows is emitted."""
        closed = self.agg.close_ready(now, jobs)
        await self.emit(closed)
        if closed:
            self.ack_settled()

    def evict_idle(self, now: float) -> None:
        """Forget jobs quiet for the analysis retention (bounded state under new job ids)."""
        for job_id in self.agg.evict_idle(now, self.config.analysis_retention_s):
            self.partition_of.pop(job_id, None)
            self.shape.forget(job_id)

    def register(self, app: faust.App) -> None:
        topics = self.topics
        counters = self.counters
        agg = self.agg
        analysis = self.analysis
        recovery = self.recovery
        snapshots = self.snapshots
        agg_jobs = self.partition_of
        size_ns = agg.size_ns
        handoff = self.handoff
        flow = self.flow

        def taken(source: bytes | None, value: bytes | None) -> list[Any] | None:
            """The record's events from the handoff (None: parse), or only let them go."""
            if handoff is None:
                return None
            if value is None:
                handoff.discard(source)
                parsed = None
            else:
                parsed = handoff.take(source, value)
                if parsed is None:
                    counters.events_records_parsed_again += 1
            if flow is not None:
                flow.after_take()
            return parsed

        @app.agent(topics.events, name=f"{self.config.app_id}.windows")
        async def windows(stream: faust.StreamT[bytes]) -> None:
            # Acks are manual: a record is acked once all the windows it touched are emitted.
            async for event in cast(Any, stream).noack().events():
                counters.window_records_in += 1
                now = time.time()
                tp = event.message.tp
                offset = event.message.offset
                headers = event.message.headers
                source_bytes = source_value(headers)
                if await snapshots.begin(tp, offset, now):
                    taken(source_bytes, None)  # skipped: not parsed from the handoff
                    # a restored snapshot already includes this record: it waits, like the
                    # others, for the windows it touched (open in the snapshot) to be emitted
                    job_id, last_end = self.windows_touched(event.value)
                    self.hold(tp, (job_id, last_end, event, offset), True)
                    snapshots.end()
                    continue
                source = record_source(headers)
                if snapshots.duplicate(tp, source):
                    taken(source_bytes, None)
                    # its raw record was validated twice: acknowledged in offset order once
                    # a snapshot includes it (the snapshot remembers the source as read)
                    self.hold(tp, ("", -1, event, offset), snapshots.is_durable(tp, offset))
                    analysis.read(tp, offset)
                    snapshots.end()
                    continue
                last_end = -1
                job_id = ""
                touched: set[str] = set()
                window_jobs: set[str] = set()
                progress: list[StepProgress] = []
                parsed = taken(source_bytes, event.value)
                if parsed is None:
                    parsed = EVENT_LIST_ADAPTER.validate_json(event.value)
                for ev in parsed:
                    job_id = ev.job_id
                    if not self.shape.admit(ev):
                        counters.events_over_job_caps += 1
                        if self.shape.over[job_id] == 1:
                            log.warning(
                                "job %s has more than %d ranks or %d nodes: events of further "
                                "ranks and nodes are stored but not analyzed",
                                job_id[:256], self.shape.max_ranks, self.shape.max_nodes,
                            )  # fmt: skip
                        continue
                    window_jobs.add(job_id)
                    note = recovery.observe(ev, now)
                    if note is not None:
                        progress.append(note)
                    if job_id and analysis.enabled:
                        analysis.observe(ev, now, tp, source and source[0])
                        touched.add(job_id)
                    late = agg.add(ev, now)
                    if late is not None:
                        counters.late_events += 1
                        await topics.late.send(
                            key=late.job_id.encode(), value=late.model_dump_json().encode()
                        )
                    elif ev.rank is not None:
                        t = corrected_ts(ev)
                        last_end = max(last_end, t - t % size_ns + size_ns)
                if job_id:
                    agg_jobs[job_id] = tp
                self.hold(tp, (job_id, last_end, event, offset), snapshots.is_durable(tp, offset))
                analysis.read(tp, offset)
                snapshots.end()
                await self.close_ready(now, window_jobs)
                await analysis.publish(touched)
                await recovery.send_progress(progress)
