"""One normalised view of a job (from squeue or sacct) and of a node (from scontrol), with the
data_parser version differences removed, and the job state tables the collector diffs by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rankscope.collectors.slurm.parsing import (
    SacctJob,
    ScontrolNode,
    SqueueJob,
    exit_code_value,
)
from rankscope.schemas.payloads import SchedulerEventType

# --------------------------------------------------------------------------------------------
# Job states and normalised snapshots
# --------------------------------------------------------------------------------------------

#: base job states (job_state_codes.shtml "Job states"); everything else in the list is a flag
BASE_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "RUNNING",
        "SUSPENDED",
        "TIMEOUT",
    }
)
TERMINAL_JOB_STATES = frozenset(BASE_JOB_STATES - {"PENDING", "RUNNING", "SUSPENDED"})
REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})

#: base state -> event type for a change into it (None: not an event)
JOB_EVENT_BY_STATE: dict[str, SchedulerEventType | None] = {
    "RUNNING": "job_started",
    "COMPLETED": "job_completed",
    "FAILED": "job_failed",
    "NODE_FAIL": "job_failed",
    "BOOT_FAIL": "job_failed",
    "CANCELLED": "job_cancelled",
    "TIMEOUT": "job_timeout",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "oom_killed",
    "DEADLINE": "other",
    "SUSPENDED": "other",
    "PENDING": None,
    # sacct's record of a run that ended in a requeue (21.08+: state "REQUEUED" alone)
    "REQUEUED": "job_requeued",
}

#: terminal states after which sacct is asked for the steps (an OOM-killed step hides there)
STEP_CHECK_STATES = frozenset({"FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "PREEMPTED"})

NodeClass = Literal["up", "drain", "down"]


@dataclass(frozen=True)
class JobSnapshot:
    """What a poll knows about one job, from squeue or sacct, version differences removed."""

    job_id: str
    states: tuple[str, ...]
    reason: str = ""
    nodes: str = ""
    exit_code: int | None = None
    start_s: int | None = None
    end_s: int | None = None
    restart_cnt: int = 0
    failed_node: str = ""
    source: Literal["squeue", "sacct"] = "squeue"
    # what links the job to a run (collectors/runs.py)
    name: str = ""
    comment: str = ""
    dependency: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None

    @property
    def base(self) -> str:
        for s in self.states:
            if s in BASE_JOB_STATES:
                return s
        return self.states[0] if self.states else "UNKNOWN"

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(s for s in self.states if s != self.base)

    @property
    def terminal(self) -> bool:
        return self.base in TERMINAL_JOB_STATES

    @property
    def state_text(self) -> str:
        return "+".join(self.states) or "UNKNOWN"

    @classmethod
    def from_squeue(cls, job: SqueueJob) -> JobSnapshot:
        return cls(
            job_id=str(job.job_id),
            states=tuple(job.job_state),
            reason=_reason_text(job.state_reason, job.state_description, job.failed_node),
            nodes=job.nodes,
            exit_code=exit_code_value(job.exit_code),
            start_s=job.start_time or None,
            end_s=job.end_time or None,
            restart_cnt=job.restart_cnt,
            failed_node=job.failed_node,
            source="squeue",
            name=job.name,
            comment=job.comment,
            dependency=job.dependency,
            array_job_id=job.array_job_id or None,
            array_task_id=job.array_task_id,
        )

    @classmethod
    def from_sacct(cls, job: SacctJob, restart_cnt: int = 0) -> JobSnapshot:
        return cls(
            job_id=str(job.job_id),
            states=tuple(job.state.current),
            reason=_reason_text(job.state.reason, "", job.failed_node),
            nodes=job.nodes,
            exit_code=exit_code_value(job.exit_code),
            start_s=job.time.start or None,
            end_s=job.time.end or None,
            restart_cnt=restart_cnt,
            failed_node=job.failed_node,
            source="sacct",
            name=job.name,
            comment=job.comment.job,
            array_job_id=job.array.job_id or None,
            array_task_id=job.array.task_id,
        )


def _reason_text(reason: str, description: str, failed_node: str) -> str:
    parts = [p for p in (reason if reason != "None" else "", description) if p]
    if failed_node:
        parts.append(f"failed_node={failed_node}")
    return "; ".join(parts)


@dataclass(frozen=True)
class NodeSnapshot:
    name: str
    states: tuple[str, ...]
    reason: str = ""
    reason_changed_s: int | None = None

    @property
    def node_class(self) -> NodeClass:
        """DOWN / NOT_RESPONDING -> down; DRAIN (drained or draining) / FAIL -> drain."""
        s = set(self.states)
        if s & {"DOWN", "NOT_RESPONDING"}:
            return "down"
        if s & {"DRAIN", "FAIL"}:
            return "drain"
        return "up"

    @property
    def state_text(self) -> str:
        return "+".join(self.states) or "UNKNOWN"

    @classmethod
    def from_scontrol(cls, node: ScontrolNode) -> NodeSnapshot:
        reason = node.reason
        if reason and node.reason_set_by_user:
            reason = f"{reason} (set by {node.reason_set_by_user})"
        return cls(
            name=node.name,
            states=tuple(dict.fromkeys([*node.state, *node.state_flags])),
            reason=reason,
            reason_changed_s=node.reason_changed_at or None,
        )


def _previous_run(records: list[SacctJob], current: JobSnapshot) -> SacctJob | None:
    """The accounting record of the run that ended in the requeue (the latest finished one)."""
    done = [
        r
        for r in records
        if any(s in TERMINAL_JOB_STATES or s == "REQUEUED" for s in r.state.current)
    ]
    if current.start_s:
        done = [r for r in done if (r.time.end or 0) <= current.start_s] or done
    if not done:
        return None
    return max(done, key=lambda r: (r.time.end or 0, r.time.start or 0))


def _job_sort_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)
