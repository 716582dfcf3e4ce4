"""What the Slurm collector can be told (the agent's ``slurm:`` section): which jobs and node
to watch, and how to call the Slurm commands."""

from __future__ import annotations

from pydantic import Field

from rankscope.collectors.base import CollectorConfig
from rankscope.collectors.runs import RunRule


class SlurmCollectorConfig(CollectorConfig):
    """Which jobs and node to watch, and how to call the Slurm commands."""

    interval_s: float = Field(default=10.0, gt=0)
    #: jobs to watch; None = SLURM_JOB_ID if set, else every job squeue shows on ``node``
    job_ids: list[str] | None = None
    #: the Slurm node name of this host; None = SLURMD_NODENAME, else the agent's node name
    node: str | None = None
    squeue_cmd: list[str] = Field(default_factory=lambda: ["squeue", "--json"], min_length=1)
    sacct_cmd: list[str] = Field(default_factory=lambda: ["sacct", "--json"], min_length=1)
    scontrol_cmd: list[str] = Field(
        default_factory=lambda: ["scontrol", "--json", "show", "node"], min_length=1
    )
    command_timeout_s: float = Field(default=20.0, gt=0)
    #: watch this node's state with scontrol
    watch_node: bool = True
    #: ask sacct (slurmdbd) for requeue causes, purged jobs and OOM-killed steps; turn off on
    #: clusters without accounting, where every sacct call fails
    use_sacct: bool = True
    #: polls a vanished job (or a finished job's steps) is looked up in sacct before giving up
    max_missing_polls: int = Field(default=30, ge=1)
    #: finished job ids remembered so that none is reported twice
    max_finished_jobs: int = Field(default=4096, ge=16)
    #: which run each job attempt belongs to (collectors/runs.py): mapping, name/comment regex,
    #: array jobs; dependency chains and requeues are linked without it
    runs: RunRule = Field(default_factory=RunRule)
