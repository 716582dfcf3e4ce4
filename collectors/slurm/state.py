"""What the Slurm collector tracks between polls (per job: the last snapshot, the reported
requeues, the sacct plan) and the SchedulerEvents it builds, with ids derived from what happened
so that the copies of one occurrence are one row."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from rankscope.collectors.base import BaseCollector, EventFactory
from rankscope.collectors.runs import dependency_job_ids
from rankscope.collectors.slurm.config import SlurmCollectorConfig
from rankscope.collectors.slurm.errors import SlurmError
from rankscope.collectors.slurm.snapshots import JOB_EVENT_BY_STATE, JobSnapshot
from rankscope.schemas.events import Event, SchedulerEventEvent
from rankscope.schemas.payloads import SchedulerEvent, SchedulerEventType


@dataclass
class _JobTrack:
    last: JobSnapshot
    #: the restart count whose requeue was reported
    requeues_reported: int = 0
    #: sacct was asked for the steps of the run that ended (or there is nothing to ask)
    steps_checked: bool = False


@dataclass
class _RunLink:
    """The run a job belongs to, the run's attempts before this job's first, and the job's
    restart count so far (a job that depends on this one continues after its last attempt)."""

    run_id: str
    before: int = 0
    restarts: int = 0


@dataclass
class _Plan:
    """Jobs that need sacct this poll, and why."""

    missing: set[str] = field(default_factory=set)
    requeued: set[str] = field(default_factory=set)
    steps: set[str] = field(default_factory=set)

    @property
    def ids(self) -> set[str]:
        return self.missing | self.requeued | self.steps


class _PartialPoll(Exception):
    """A command failed after some events were derived: carry both out of the job poll."""

    def __init__(self, events: list[Event], error: SlurmError) -> None:
        super().__init__(str(error))
        self.events = events
        self.error = error


def _stable_id(*parts: object) -> str:
    """An event id derived from what happened, so that copies of one occurrence share it."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return f"sch-{digest[:40]}"


class _SlurmCollectorBase(BaseCollector):
    """What ``SlurmCollector.__init__`` sets that the command calls and event builders use."""

    config: SlurmCollectorConfig
    factory: EventFactory
    #: the data_parser version of the last squeue output (diagnostics)
    data_parser: str
    #: job id -> its run (insertion-ordered, bounded like the finished jobs)
    _runs: dict[str, _RunLink]

    # -- runs --------------------------------------------------------------------------------

    def _link_run(self, cur: JobSnapshot) -> None:
        """The job's run, resolved when it is first seen: a dependency on a job of a known run
        continues that run; an array job is one run when configured; the rule decides last
        (collectors/runs.py). A requeue keeps the job id and so the run; its count is kept."""
        link = self._runs.get(cur.job_id)
        if link is not None:
            link.restarts = max(link.restarts, cur.restart_cnt)
            return
        linked, before = None, 0
        for dep in dependency_job_ids(cur.dependency):
            if (prev := self._runs.get(dep)) is not None:
                linked, before = prev.run_id, prev.before + prev.restarts + 1
        if linked is None and self.config.runs.array_is_run and cur.array_job_id:
            linked, before = str(cur.array_job_id), cur.array_task_id or 0
        run_id = self.config.runs.resolve(
            cur.job_id, name=cur.name, comment=cur.comment, linked=linked
        )
        self._runs[cur.job_id] = _RunLink(run_id, before, cur.restart_cnt)
        while len(self._runs) > 2 * self.config.max_finished_jobs:
            self._runs.pop(next(iter(self._runs)))

    def _run_fields(self, job_id: str | None, restart: int | None) -> tuple[str, int]:
        """(run id, 1-based attempt) of the job's run ``restart`` (None: its latest)."""
        link = self._runs.get(job_id or "")
        if link is None:
            return "", 0
        return link.run_id, link.before + (link.restarts if restart is None else restart) + 1

    # -- events ------------------------------------------------------------------------------

    def _job_state_event(
        self, cur: JobSnapshot, now_ns: int, first_sight: bool
    ) -> SchedulerEventEvent | None:
        etype = JOB_EVENT_BY_STATE.get(cur.base, "other")
        if etype is None or (first_sight and cur.base == "SUSPENDED"):
            return None
        if cur.base == "RUNNING":
            ts_s = cur.start_s
        elif cur.terminal:
            ts_s = cur.end_s
        else:
            ts_s = None
        return self._event(
            etype,
            job_id=cur.job_id,
            state=cur.state_text,
            reason=cur.reason,
            exit_code=cur.exit_code if cur.terminal else None,
            ts_s=ts_s,
            now_ns=now_ns,
            key=(cur.job_id, etype, cur.base, ts_s) if ts_s else None,
            node=cur.failed_node or None,
            restart=cur.restart_cnt,
        )

    def _job_requeued(
        self, cur: JobSnapshot, count: int, now_ns: int, cause: JobSnapshot | None = None
    ) -> SchedulerEventEvent:
        parts = [f"restart {count}"]
        if cause is not None:
            parts.append(f"previous run {cause.state_text}")
            if cause.reason:
                parts.append(cause.reason)
        elif cur.reason:
            parts.append(cur.reason)
        return self._event(
            "job_requeued",
            job_id=cur.job_id,
            state=cur.state_text,
            reason="; ".join(parts),
            exit_code=cause.exit_code if cause is not None else None,
            ts_s=cause.end_s if cause is not None else None,
            now_ns=now_ns,
            key=(cur.job_id, "job_requeued", count),
            restart=count - 1,  # the attempt that ended in the requeue
        )

    def _event(
        self,
        event_type: SchedulerEventType,
        *,
        job_id: str | None,
        state: str,
        reason: str,
        exit_code: int | None,
        ts_s: int | None,
        now_ns: int,
        key: tuple[object, ...] | None,
        node: str | None = None,
        restart: int | None = None,
    ) -> SchedulerEventEvent:
        """Stamp one event; ``key`` (when the occurrence is identifiable) fixes its id;
        ``restart``: the job's restart count the event is about (None: its latest)."""
        run_id, attempt = self._run_fields(job_id, restart)
        payload = SchedulerEvent(
            source="slurm",
            event_type=event_type,
            state=state[:256],
            reason=reason[:16_384],
            exit_code=exit_code,
            run_id=run_id,
            attempt=attempt,
        )
        ts_ns = ts_s * 1_000_000_000 if ts_s else now_ns
        ev = self.factory.make(SchedulerEventEvent, payload, ts_ns=ts_ns, job_id=job_id)
        update: dict[str, Any] = {}
        if node and node != ev.node:
            update["node"] = node
        if key is not None:
            update["event_id"] = _stable_id(self.factory.cluster, "slurm", *key)
        return ev.model_copy(update=update) if update else ev
