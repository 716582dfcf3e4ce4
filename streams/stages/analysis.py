"""The analysis stage: one incremental ``JobAnalyzer`` per job, fed by the events agent, whose
detections and incidents go to their topics and on to the recovery decider.

It registers no agent of its own: the windows stage's events agent hands it each parsed event
(so a record is parsed once) and the worker's timer flushes the jobs whose events stopped.

A flush is the one decision not driven by the log (a job that died has no more event time to
push its analysis forward), so it waits until the worker has read its partition to the end:
a worker that is behind, replaying or restarting never flushes a job whose events it has not
read yet, the way Kafka Streams only lets a task idle when the partition has nothing fetched.
It also waits until the job's raw partition was validated past the end it had when the job went
quiet (``streams/upstream.py``): a job whose validating worker died is not quiet, only stuck.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rankscope.schemas.derived import RecoveryInput
from rankscope.schemas.events import Event
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.baselines import BaselineBook
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.state import PartitionState
from rankscope.streams.upstream import Upstream

log = logging.getLogger(__name__)

ToDecider = Callable[[RecoveryInput, str], Awaitable[None]]
#: the log end offset of a partition as the consumer last fetched it (None: not known yet)
Highwater = Callable[[Any], int | None]


class AnalysisStage:
    """Owns the analyzers, when each job last had an event, and which jobs were flushed."""

    def __init__(
        self,
        config: StreamsConfig,
        topics: StageTopics,
        counters: StageCounters,
        to_decider: ToDecider,
        highwater: Highwater | None = None,
        upstream: Upstream | None = None,
        baselines: BaselineBook | None = None,
    ):
        self.config = config
        self.topics = topics
        self.counters = counters
        self.to_decider = to_decider
        self.enabled = config.analysis_enabled
        self.analyzers: dict[str, JobAnalyzer] = {}
        #: a new job's first events, until it has ``analysis_admit_events`` of them (or goes
        #: quiet, or its partition is snapshotted): a stream of one-event job ids then costs a
        #: list append each, not an analyzer each. The analyzer is fed them in order on
        #: admission, so what it finds is the same.
        self.probation: dict[str, list[Event]] = {}
        self.analyzer_seen: dict[str, float] = {}  # job -> worker wall clock of its last event
        self.flushed: set[str] = set()
        self.highwater = highwater
        self.partition_of: dict[str, Any] = {}  # job -> the events partition it was read from
        self.read_upto: dict[Any, int] = {}  # partition -> offset of the newest record read
        self.upstream = upstream
        self.source_of: dict[str, str] = {}  # job -> raw partition of its newest record
        self.raw_mark: dict[str, int] = {}  # job -> its raw partition's end when it went quiet
        self.raw_done: set[str] = set()  # jobs whose raw partition was validated past the mark
        #: the reference baselines (issue 19): their findings join each job's detections
        self.baselines = baselines or BaselineBook()

    def read(self, tp: Any, offset: int) -> None:
        """The windows agent read the record at ``offset`` of ``tp`` (or skipped it)."""
        self.read_upto[tp] = max(offset, self.read_upto.get(tp, -1))

    def caught_up(self, job_id: str) -> bool:
        """Whether everything on the job's partition up to its log end has been read."""
        tp = self.partition_of.get(job_id)
        return tp is None or self.partition_caught_up(tp)

    def partition_caught_up(self, tp: Any) -> bool:
        if self.highwater is None:
            return True  # not read through a consumer (in-process use)
        end = self.highwater(tp)
        return end is not None and self.read_upto.get(tp, -1) + 1 >= end

    # -- one partition's state: what a snapshot holds ---------------------------------------
    def jobs_of(self, tp: Any) -> list[str]:
        return [j for j, t in self.partition_of.items() if t == tp]

    def export(self, tp: Any) -> PartitionState:
        """The analysis of the jobs read from ``tp``, up to the newest record read."""
        jobs = self.jobs_of(tp)
        return PartitionState(
            partition=tp.partition,
            offset=self.read_upto.get(tp, -1),
            analyzers={j: self._analyzer(j) for j in jobs if j in self.analyzer_seen},
            flushed={j for j in jobs if j in self.flushed},
        )

    def install(self, tp: Any, state: PartitionState, now: float) -> None:
        """Take over a partition's analysis from its snapshot (after a restart or rebalance)."""
        for job_id, analyzer in state.analyzers.items():
            self.analyzers[job_id] = analyzer
            self.partition_of[job_id] = tp
            self.analyzer_seen[job_id] = now
            if job_id in state.flushed:
                self.flushed.add(job_id)
        self.read_upto[tp] = state.offset

    def drop(self, tp: Any) -> list[str]:
        """Forget a partition this worker no longer holds; returns its jobs."""
        jobs = self.jobs_of(tp)
        for job_id in jobs:
            self.analyzers.pop(job_id, None)
            self.probation.pop(job_id, None)
            self.analyzer_seen.pop(job_id, None)
            self.partition_of.pop(job_id, None)
            self.flushed.discard(job_id)
            self._forget_upstream(job_id)
            self.source_of.pop(job_id, None)
        self.read_upto.pop(tp, None)
        return jobs

    def _forget_upstream(self, job_id: str) -> None:
        self.raw_mark.pop(job_id, None)
        self.raw_done.discard(job_id)

    async def upstream_done(self, job_id: str) -> bool:
        """Whether every raw record of the job's raw partition that existed when the job went
        quiet has been validated (two timer ticks at least: the mark, then the check)."""
        where = self.source_of.get(job_id)
        if self.upstream is None or where is None:
            return True  # in-process use, or records without a source header
        if job_id in self.raw_done:
            return True  # found on an earlier tick; the events partition was read since
        try:
            mark = self.raw_mark.get(job_id)
            if mark is None:
                self.raw_mark[job_id] = await self.upstream.end(where)
            elif await self.upstream.committed(where) >= mark:
                self.raw_done.add(job_id)
        except Exception as exc:  # the broker is unreachable: the flush waits
            log.warning("cannot tell how far %s was validated (%s): the flush of %s waits",
                        where, exc, job_id)  # fmt: skip
        return False

    def observe(self, ev: Event, now: float, tp: Any = None, source: str | None = None) -> None:
        """One event of ``ev.job_id`` (non-empty; the stage is enabled), read at ``now`` from
        partition ``tp``, validated from raw partition ``source``."""
        job_id = ev.job_id
        if tp is not None:
            self.partition_of[job_id] = tp
        if source is not None:
            self.source_of[job_id] = source
        self._forget_upstream(job_id)
        self.analyzer_seen[job_id] = now
        self.flushed.discard(job_id)
        analyzer = self.analyzers.get(job_id)
        if analyzer is not None:
            analyzer.observe(ev)
            return
        waiting = self.probation.get(job_id)
        if waiting is None:
            waiting = self.probation[job_id] = []
        waiting.append(ev)
        if len(waiting) >= self.config.analysis_admit_events:
            self._analyzer(job_id)

    def _analyzer(self, job_id: str) -> JobAnalyzer:
        """The job's analyzer, made (and fed its waiting events, in order) if it has none."""
        analyzer = self.analyzers.get(job_id)
        if analyzer is None:
            waiting = self.probation.pop(job_id)
            analyzer = JobAnalyzer(waiting[0].cluster, job_id, self.config.analysis)
            for ev in waiting:
                analyzer.observe(ev)
            self.analyzers[job_id] = analyzer
        return analyzer

    async def publish(self, touched: set[str]) -> None:
        """Advance the jobs a record touched and publish what they found."""
        for jid in touched:
            analyzer = self.analyzers.get(jid)
            if analyzer is not None:  # a job still on probation has found nothing yet
                await self.publish_findings(analyzer)

    async def publish_findings(self, analyzer: JobAnalyzer, flush: bool = False) -> None:
        detections, incidents = analyzer.flush() if flush else analyzer.take()
        detections = [*detections, *self.baselines.findings(analyzer)]
        for d in detections:
            self.counters.detections += 1
            self.counters.detections_by_type[d.detection_type] += 1
            await self.topics.detections.send(
                key=d.job_id.encode(), value=d.model_dump_json().encode()
            )
            await self.to_decider(RecoveryInput(detection=d), d.job_id)
        for i in incidents:
            self.counters.incidents += 1
            await self.topics.incidents.send(
                key=i.job_id.encode(), value=i.model_dump_json().encode()
            )
            await self.to_decider(RecoveryInput(incident=i), i.job_id)

    async def tick(self, now: float) -> None:
        """The timer's analysis part (after the windows' close): flush idle jobs, drop old ones."""
        config = self.config
        if await self.baselines.poll():  # a new baseline: judge the jobs already profiled
            for analyzer in list(self.analyzers.values()):
                await self.publish_findings(analyzer)
        # A job whose events stopped (it died, or the stream ended) has no more event time to
        # push its analysis forward: attribute what is still settling, once.
        for jid, seen in list(self.analyzer_seen.items()):
            idle = now - seen
            # before the windows' idle close, so findings are on Kafka before the job's
            # records are fully acknowledged (what "drained" means to callers)
            if (
                idle >= config.analysis_flush_idle_s
                and jid not in self.flushed
                and self.caught_up(jid)
                and await self.upstream_done(jid)
            ):
                self.flushed.add(jid)
                await self.publish_findings(self._analyzer(jid), flush=True)
            if idle >= config.analysis_retention_s and jid in self.flushed:
                self.analyzers.pop(jid, None)
                self.probation.pop(jid, None)
                self.analyzer_seen.pop(jid, None)
                self.partition_of.pop(jid, None)
                self.flushed.discard(jid)
                self.source_of.pop(jid, None)
                self._forget_upstream(jid)
