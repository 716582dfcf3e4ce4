"""The Slurm collector itself: one poll runs the commands, diffs each job and this node against
what the previous polls saw and returns the events of the changes; and the factory the agent
calls."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from rankscope.collectors.base import EventFactory
from rankscope.collectors.slurm.client import CommandRunner, SubprocessRunner, _SlurmCommands
from rankscope.collectors.slurm.config import SlurmCollectorConfig
from rankscope.collectors.slurm.errors import SlurmError
from rankscope.collectors.slurm.parsing import SacctJob, exit_code_value, expand_hostlist
from rankscope.collectors.slurm.snapshots import (
    STEP_CHECK_STATES,
    JobSnapshot,
    NodeClass,
    NodeSnapshot,
    _job_sort_key,
    _previous_run,
)
from rankscope.collectors.slurm.state import _JobTrack, _PartialPoll, _Plan
from rankscope.schemas.events import Event
from rankscope.schemas.payloads import SchedulerEventType

log = logging.getLogger("rankscope.collectors.slurm")  # one logger for the package, as before


class SlurmCollector(_SlurmCommands):
    """Polls squeue/sacct/scontrol and emits SchedulerEventEvents for job and node changes."""

    name = "slurm"

    def __init__(
        self,
        config: SlurmCollectorConfig,
        factory: EventFactory,
        runner: CommandRunner | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.runner: CommandRunner = runner or SubprocessRunner()
        env = os.environ if environ is None else environ
        self.interval_s = config.interval_s
        self.node = config.node or env.get("SLURMD_NODENAME") or factory.node
        if config.job_ids is not None:
            self.job_ids: list[str] | None = [str(j) for j in config.job_ids]
        elif env.get("SLURM_JOB_ID"):
            self.job_ids = [env["SLURM_JOB_ID"]]
        else:
            self.job_ids = None
        self._jobs: dict[str, _JobTrack] = {}
        self._missing: dict[str, int] = {}
        self._finished: dict[str, None] = {}  # insertion-ordered set
        self._nodes: dict[str, NodeSnapshot] = {}
        self._pending: list[Event] = []
        self._runs = {}
        #: the data_parser version of the last squeue output (diagnostics)
        self.data_parser = ""

    # -- poll --------------------------------------------------------------------------------

    def poll(self, now_ns: int) -> list[Event]:
        """One cycle: the events of every change seen since the previous poll.

        Raises one :class:`SlurmError` naming every command that failed; what the other
        commands showed is applied, and its events come out of the next poll.
        """
        events: list[Event] = self._pending
        self._pending = []
        errors: list[SlurmError] = []
        try:
            try:
                events.extend(self._poll_jobs(now_ns))
            except _PartialPoll as partial:
                events.extend(partial.events)
                errors.append(partial.error)
            except SlurmError as exc:
                errors.append(exc)
            if self.config.watch_node:
                try:
                    events.extend(self._poll_node(now_ns))
                except SlurmError as exc:
                    errors.append(exc)
        except BaseException:
            self._pending = events  # an unexpected failure must not drop carried-over events
            raise
        events.sort(key=lambda e: e.ts)  # stable: same-time events keep their causal order
        if errors:
            self._pending = events
            if len(errors) == 1:
                raise errors[0]
            raise SlurmError("; ".join(str(e) for e in errors)) from errors[0]
        return events

    def _query_jobs(self) -> tuple[dict[str, JobSnapshot], set[str]]:
        """squeue: the snapshots seen now, and the ids that should have been seen."""
        if self.job_ids is not None:
            wanted = [j for j in self.job_ids if j not in self._finished]
            rows = self._squeue([f"--jobs={','.join(wanted)}"]) if wanted else []
            seen = {str(r.job_id): JobSnapshot.from_squeue(r) for r in rows}
            seen = {j: s for j, s in seen.items() if j in wanted}
            return seen, set(wanted)
        rows = self._squeue([f"--nodelist={self.node}"])
        seen = {
            str(r.job_id): JobSnapshot.from_squeue(r)
            for r in rows
            if str(r.job_id) not in self._finished
            and (not r.nodes or self.node in expand_hostlist(r.nodes))
        }
        # a requeued job loses its nodes and leaves this node's list: follow it by id
        gone = sorted(
            (j for j, t in self._jobs.items() if j not in seen and not t.last.terminal),
            key=_job_sort_key,
        )
        if gone:
            for r in self._squeue([f"--jobs={','.join(gone)}"]):
                snap = JobSnapshot.from_squeue(r)
                if snap.job_id not in gone:
                    continue
                if snap.base == "RUNNING" and self.node not in expand_hostlist(snap.nodes):
                    # restarted elsewhere: the agents of those nodes report it from now on
                    self._jobs.pop(snap.job_id, None)
                    continue
                seen[snap.job_id] = snap
        return seen, set(self._jobs) | set(seen)

    def _poll_jobs(self, now_ns: int) -> list[Event]:
        seen, expected = self._query_jobs()
        events: list[Event] = []
        plan = _Plan()
        for job_id in sorted(seen, key=_job_sort_key):
            self._missing.pop(job_id, None)
            events.extend(self._apply_job(seen[job_id], now_ns, plan))
        gone = expected - set(seen)
        for job_id in gone:
            track = self._jobs.get(job_id)
            if track is None or not track.last.terminal:
                plan.missing.add(job_id)
            elif not track.steps_checked:
                plan.steps.add(job_id)
            else:
                self._mark_finished(job_id)
        if not plan.ids:
            return events
        if not self.config.use_sacct:
            for job_id in plan.missing:
                self._count_missing(job_id)
            return events
        try:
            records = self._sacct(plan.ids)
        except SlurmError as exc:
            # the requeue itself is known; only its cause is not: report it without one
            for job_id in sorted(plan.requeued, key=_job_sort_key):
                track = self._jobs[job_id]
                events.append(self._job_requeued(track.last, track.requeues_reported, now_ns))
            raise _PartialPoll(events, exc) from exc
        events.extend(self._apply_sacct(plan, records, gone, now_ns))
        return events

    def _apply_job(self, cur: JobSnapshot, now_ns: int, plan: _Plan) -> list[Event]:
        """Diff one job against its previous snapshot; the requeue cause is left to sacct."""
        self._link_run(cur)
        track = self._jobs.get(cur.job_id)
        prev = track.last if track else None
        if track is None:
            track = _JobTrack(last=cur)
            self._jobs[cur.job_id] = track
        events: list[Event] = []
        if cur.restart_cnt > track.requeues_reported:
            track.requeues_reported = cur.restart_cnt
            track.steps_checked = False
            if self.config.use_sacct:
                plan.requeued.add(cur.job_id)
            else:
                events.append(self._job_requeued(cur, cur.restart_cnt, now_ns))
        if prev is None or prev.base != cur.base or prev.restart_cnt != cur.restart_cnt:
            ev = self._job_state_event(cur, now_ns, first_sight=prev is None)
            if ev is not None:
                events.append(ev)
        if cur.terminal and not track.steps_checked:
            if self.config.use_sacct and cur.base in STEP_CHECK_STATES:
                plan.steps.add(cur.job_id)
            else:
                track.steps_checked = True
        track.last = cur
        return events

    def _apply_sacct(
        self, plan: _Plan, records: list[SacctJob], gone: set[str], now_ns: int
    ) -> list[Event]:
        """Requeue causes, the end of purged jobs and OOM-killed steps, from one sacct call."""
        by_job: dict[str, list[SacctJob]] = {}
        for rec in records:
            by_job.setdefault(str(rec.job_id), []).append(rec)
        for recs in by_job.values():
            recs.sort(key=lambda r: (r.time.submission or 0, r.time.start or 0, r.time.end or 0))
        events: list[Event] = []

        for job_id in sorted(plan.requeued, key=_job_sort_key):
            track = self._jobs[job_id]
            cause = _previous_run(by_job.get(job_id, []), track.last)
            ended_at = track.requeues_reported - 1  # the restart count of the run that ended
            cause_snap = (
                JobSnapshot.from_sacct(cause, restart_cnt=ended_at) if cause is not None else None
            )
            events.append(
                self._job_requeued(track.last, track.requeues_reported, now_ns, cause_snap)
            )
            if cause is None or cause_snap is None:
                continue
            if cause_snap.base in {"PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}:
                # the run that ended is the news: preempted / node failure / OOM, then requeued
                ev = self._job_state_event(cause_snap, now_ns, first_sight=False)
                if ev is not None:
                    events.append(ev)
            events.extend(self._oom_steps(job_id, cause, now_ns, restart=ended_at))

        for job_id in sorted(plan.missing, key=_job_sort_key):
            runs = by_job.get(job_id)
            if not runs:
                self._count_missing(job_id)
                continue
            known = self._jobs.get(job_id)
            restart = known.last.restart_cnt if known else 0
            snap = JobSnapshot.from_sacct(runs[-1], restart_cnt=restart)
            events.extend(self._apply_job(snap, now_ns, _Plan()))
            if not snap.terminal:
                self._count_missing(job_id)  # accounting lags behind: ask again next poll
                continue
            if snap.base in STEP_CHECK_STATES:
                events.extend(self._oom_steps(job_id, runs[-1], now_ns))
            self._mark_finished(job_id)

        for job_id in sorted(plan.steps - plan.missing, key=_job_sort_key):
            ended = self._jobs.get(job_id)
            if ended is None:
                continue
            found = by_job.get(job_id)
            if found:
                events.extend(self._oom_steps(job_id, found[-1], now_ns))
                ended.steps_checked = True
            elif self._count_missing(job_id, forget=False):
                ended.steps_checked = True
            if ended.steps_checked and job_id in gone:
                self._mark_finished(job_id)
        return events

    def _oom_steps(
        self, job_id: str, rec: SacctJob, now_ns: int, restart: int | None = None
    ) -> list[Event]:
        """An OUT_OF_MEMORY step inside a run that ended otherwise names the node it hit."""
        if "OUT_OF_MEMORY" in rec.state.current:
            return []  # the run's own event is already oom_killed
        events: list[Event] = []
        for step in rec.steps:
            if "OUT_OF_MEMORY" not in step.state:
                continue
            end_s = step.time.end or rec.time.end
            nodes = step.nodes.names or expand_hostlist(step.nodes.range)
            step_id = step.step.id or step.step.name
            events.append(
                self._event(
                    "oom_killed",
                    job_id=job_id,
                    state="+".join(step.state),
                    reason=f"step {step_id} ran out of memory on {','.join(nodes) or '?'}",
                    exit_code=exit_code_value(step.exit_code),
                    ts_s=end_s,
                    now_ns=now_ns,
                    key=(job_id, "oom_killed", step_id, end_s) if end_s else None,
                    node=nodes[0] if len(nodes) == 1 else None,
                    restart=restart,
                )
            )
        return events

    def _count_missing(self, job_id: str, forget: bool = True) -> bool:
        """One more poll without an answer; True (and forgotten if asked) when out of tries."""
        n = self._missing.get(job_id, 0) + 1
        self._missing[job_id] = n
        if n < self.config.max_missing_polls:
            return False
        log.warning("slurm job %s: no answer from squeue or sacct after %d polls", job_id, n)
        if forget:
            self._mark_finished(job_id)
        else:
            self._missing.pop(job_id, None)
        return True

    def _mark_finished(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._missing.pop(job_id, None)
        self._finished[job_id] = None
        while len(self._finished) > self.config.max_finished_jobs:
            self._finished.pop(next(iter(self._finished)))

    # -- this node ---------------------------------------------------------------------------

    def _poll_node(self, now_ns: int) -> list[Event]:
        events: list[Event] = []
        for raw in self._scontrol_node(self.node):
            cur = NodeSnapshot.from_scontrol(raw)
            prev = self._nodes.get(cur.name)
            self._nodes[cur.name] = cur
            new_class = cur.node_class
            old_class = prev.node_class if prev else None
            if new_class == old_class or (old_class is None and new_class == "up"):
                continue
            etype = _NODE_EVENT[new_class]
            ts_s = cur.reason_changed_s if new_class != "up" else None
            events.append(
                self._event(
                    etype,
                    job_id=self._job_on_node(cur.name, ts_s),
                    state=cur.state_text,
                    reason=cur.reason,
                    exit_code=None,
                    ts_s=ts_s,
                    now_ns=now_ns,
                    key=(cur.name, etype, ts_s) if ts_s else None,
                    node=cur.name,
                )
            )
        return events

    def _job_on_node(self, node: str, ts_s: int | None) -> str | None:
        """The watched job the node event concerns: one whose run on ``node`` covers the
        event time (a drain for "Kill task failed" comes as that job ends), else a running
        one; the lowest job id when several do."""
        on_node = [
            t.last
            for t in self._jobs.values()
            if t.last.nodes and node in expand_hostlist(t.last.nodes)
        ]
        covering = [
            s
            for s in on_node
            if ts_s is not None
            and (s.start_s or 0) <= ts_s
            and (not s.terminal or ts_s <= (s.end_s or 0))
        ]
        pick = covering or [s for s in on_node if not s.terminal]
        if not pick:
            return None
        return min(pick, key=lambda s: _job_sort_key(s.job_id)).job_id


_NODE_EVENT: dict[NodeClass, SchedulerEventType] = {
    "down": "node_down",
    "drain": "node_drain",
    "up": "node_up",
}


def create_slurm_collector(
    config: SlurmCollectorConfig,
    factory: EventFactory,
    runner: CommandRunner | None = None,
    environ: Mapping[str, str] | None = None,
) -> SlurmCollector:
    """The component factory the agent calls (tests pass a ``runner`` of recorded outputs)."""
    return SlurmCollector(config, factory, runner=runner, environ=environ)
