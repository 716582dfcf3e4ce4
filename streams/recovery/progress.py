"""Step progress for the recovery decider, thinned from every step span to a note per job.

The decider needs two things from a job's spans: whether its step counter moved (to close or
fail a recovery's progress watch) and which nodes are alive (the circuit breaker's share of
nodes). A note carries the highest step completed and the nodes seen since the last note, at
most every ``interval_s`` of event time per job, so the decider's single partition carries
a few records per job per minute instead of one per rank per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rankscope.schemas.derived import StepProgress

NS = 1_000_000_000


@dataclass
class _JobNotes:
    cluster: str
    step: int = -1
    step_ts: int = 0
    noted_step: int = -1
    noted_ts: int = 0
    wall: float = 0.0  # worker clock of the last observation
    nodes: set[str] = field(default_factory=set)


class ProgressNotes:
    def __init__(self, interval_s: float = 5.0, retain_s: float = 3600.0) -> None:
        self.interval_ns = int(interval_s * NS)
        self.retain_s = retain_s
        self._jobs: dict[str, _JobNotes] = {}

    def observe(
        self, cluster: str, job_id: str, step: int, ts: int, node: str, wall: float
    ) -> StepProgress | None:
        """A rank on ``node`` completed ``step`` at ``ts`` (read at worker clock ``wall``): a
        note when one is due."""
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = _JobNotes(cluster)
        job.wall = wall
        if node:
            job.nodes.add(node)
        if step > job.step:
            job.step, job.step_ts = step, ts
        if job.step > job.noted_step and ts - job.noted_ts >= self.interval_ns:
            return self._note(job_id, job)
        return None

    def flush_idle(self, wall: float, idle_s: float) -> list[StepProgress]:
        """Notes for the jobs whose counter moved since their last note and whose spans stopped
        ``idle_s`` ago: a job's last step must reach the decider even when nothing follows."""
        notes = [
            self._note(j, job)
            for j, job in self._jobs.items()
            if job.step > job.noted_step and wall - job.wall >= idle_s
        ]
        for j in [j for j, job in self._jobs.items() if wall - job.wall > self.retain_s]:
            del self._jobs[j]  # a job gone quiet this long has ended
        return notes

    def _note(self, job_id: str, job: _JobNotes) -> StepProgress:
        note = StepProgress(
            cluster=job.cluster,
            job_id=job_id,
            step=job.step,
            ts=job.step_ts,
            nodes=sorted(job.nodes),
        )
        job.noted_step, job.noted_ts = job.step, job.step_ts
        job.nodes = set()
        return note
