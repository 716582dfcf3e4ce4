"""The windows stage: the events agent (event-time rank windows, late events, manual acks).

Acks are manual: a record is acknowledged once every window it contributed to has been emitted,
so a crash re-reads the records of open windows and recomputes them. The events agent parses a
record once and hands each event to the recovery host's progress notes and to the analysis
stage before the aggregator. The worker's one-second timer (``rankscope.streams.app``) calls
``close_ready`` between the decider host's tick and the analysis' flush.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, cast

import faust

from rankscope.schemas.derived import RankWindow, StepProgress
from rankscope.schemas.events import EVENT_LIST_ADAPTER
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.recovery import DeciderHost
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.windows import WindowAggregator, corrected_ts


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
    ):
        self.config = config
        self.topics = topics
        self.counters = counters
        self.analysis = analysis
        self.recovery = recovery
        self.agg = WindowAggregator(config.windows)
        # (job_id, last window end the record touched, faust event) in arrival order
        self.pending: deque[tuple[str, int, Any]] = deque()

    async def emit(self, windows: list[RankWindow]) -> None:
        for w in windows:
            self.counters.windows_emitted += 1
            await self.topics.windows.send(
                key=w.job_id.encode(), value=w.model_dump_json().encode()
            )

    def ack_settled(self) -> None:
        """Ack records whose windows have all been emitted (pending is scanned, not popped
        in order, because several jobs interleave on one partition)."""
        pending = self.pending
        keep: deque[tuple[str, int, Any]] = deque()
        while pending:
            job_id, last_end, ev = pending.popleft()
            if last_end <= self.agg.closed_until(job_id):
                ev.ack()
            else:
                keep.append((job_id, last_end, ev))
        pending.extend(keep)
        self.counters.pending_acks = len(pending)

    async def close_ready(self, now: float) -> None:
        """Emit the windows the watermark (or idleness at ``now``) has closed, then ack the
        records they settle: a held record can only settle when one of its windows is emitted."""
        closed = self.agg.close_ready(now)
        await self.emit(closed)
        if closed:
            self.ack_settled()

    def register(self, app: faust.App) -> None:
        topics = self.topics
        counters = self.counters
        agg = self.agg
        analysis = self.analysis
        recovery = self.recovery
        size_ns = agg.size_ns

        @app.agent(topics.events, name=f"{self.config.app_id}.windows")
        async def windows(stream: faust.StreamT[bytes]) -> None:
            # Acks are manual: a record is acked once all the windows it touched are emitted.
            async for event in cast(Any, stream).noack().events():
                counters.window_records_in += 1
                now = time.time()
                tp = event.message.tp
                analysis.read(tp, event.message.offset)
                last_end = -1
                job_id = ""
                touched: set[str] = set()
                progress: list[StepProgress] = []
                for ev in EVENT_LIST_ADAPTER.validate_json(event.value):
                    job_id = ev.job_id
                    note = recovery.observe(ev, now)
                    if note is not None:
                        progress.append(note)
                    if job_id and analysis.enabled:
                        analysis.observe(ev, now, tp)
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
                if last_end < 0:
                    event.ack()
                else:
                    self.pending.append((job_id, last_end, event))
                await self.close_ready(now)
                await analysis.publish(touched)
                await recovery.send_progress(progress)
