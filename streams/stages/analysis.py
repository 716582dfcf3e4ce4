"""The analysis stage: one incremental ``JobAnalyzer`` per job, fed by the events agent, whose
detections and incidents go to their topics and on to the recovery decider.

It registers no agent of its own: the windows stage's events agent hands it each parsed event
(so a record is parsed once) and the worker's timer flushes the jobs whose events stopped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rankscope.schemas.derived import RecoveryInput
from rankscope.schemas.events import Event
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.shared import StageCounters, StageTopics

ToDecider = Callable[[RecoveryInput, str], Awaitable[None]]


class AnalysisStage:
    """Owns the analyzers, when each job last had an event, and which jobs were flushed."""

    def __init__(
        self,
        config: StreamsConfig,
        topics: StageTopics,
        counters: StageCounters,
        to_decider: ToDecider,
    ):
        self.config = config
        self.topics = topics
        self.counters = counters
        self.to_decider = to_decider
        self.enabled = config.analysis_enabled
        self.analyzers: dict[str, JobAnalyzer] = {}
        self.analyzer_seen: dict[str, float] = {}  # job -> worker wall clock of its last event
        self.flushed: set[str] = set()

    def observe(self, ev: Event, now: float) -> None:
        """One event of ``ev.job_id`` (non-empty; the stage is enabled), read at ``now``."""
        job_id = ev.job_id
        analyzer = self.analyzers.get(job_id)
        if analyzer is None:
            analyzer = self.analyzers[job_id] = JobAnalyzer(
                ev.cluster, job_id, self.config.analysis
            )
        analyzer.observe(ev)
        self.analyzer_seen[job_id] = now
        self.flushed.discard(job_id)

    async def publish(self, touched: set[str]) -> None:
        """Advance the jobs a record touched and publish what they found."""
        for jid in touched:
            await self.publish_findings(self.analyzers[jid])

    async def publish_findings(self, analyzer: JobAnalyzer, flush: bool = False) -> None:
        detections, incidents = analyzer.flush() if flush else analyzer.advance()
        for d in detections:
            self.counters.detections += 1
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
        # A job whose events stopped (it died, or the stream ended) has no more event time to
        # push its analysis forward: attribute what is still settling, once.
        for jid, seen in list(self.analyzer_seen.items()):
            idle = now - seen
            # before the windows' idle close, so findings are on Kafka before the job's
            # records are fully acknowledged (what "drained" means to callers)
            if idle >= config.windows.idle_close_s / 2 and jid not in self.flushed:
                self.flushed.add(jid)
                await self.publish_findings(self.analyzers[jid], flush=True)
            if idle >= config.analysis_retention_s:
                self.analyzers.pop(jid, None)
                self.analyzer_seen.pop(jid, None)
                self.flushed.discard(jid)
