"""Which training run a job attempt belongs to: the rule the Slurm and Kubernetes collectors
share, so the run id of one run is the same whichever collector saw it.

Order (first that says wins): an explicit ``mapping`` of job id to run; the ``pattern`` rule
(a regex with a ``run`` group over the job's name or comment); the scheduler's own link (a
dependency on a job of a known run, an array job, a Kubernetes job); the job id itself, so a
Slurm requeue (same job id, restart count + 1) is one run without any configuration.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RunRule(BaseModel):
    """The ``runs:`` part of a collector's section (typed; the agent's YAML or env)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: job id -> run id, for runs no name or comment tells apart
    mapping: dict[str, str] = Field(default_factory=dict)
    #: a regex with a named group ``run``, searched in ``match_on``; e.g. ``run=(?P<run>\S+)``
    #: over a Slurm comment (``sbatch --comment run=llama-7b-0412``)
    pattern: str | None = None
    match_on: Literal["name", "comment"] = "comment"
    #: an array job's tasks are one run's attempts (a chain submitted with ``--array=0-9%1``)
    array_is_run: bool = False

    @field_validator("pattern")
    @classmethod
    def _has_run_group(cls, value: str | None) -> str | None:
        if value is not None and "run" not in re.compile(value).groupindex:
            raise ValueError(f"pattern {value!r} has no named group 'run'")
        return value

    def resolve(
        self, job_id: str, *, name: str = "", comment: str = "", linked: str | None = None
    ) -> str:
        """The run id of ``job_id``; ``linked`` is the scheduler's link when it has one."""
        if job_id in self.mapping:
            return self.mapping[job_id]
        if self.pattern:
            m = re.search(self.pattern, name if self.match_on == "name" else comment)
            if m and m.group("run"):
                return m.group("run")[:256]
        return (linked or job_id)[:256]


def dependency_job_ids(dependency: str) -> list[str]:
    """Job ids a Slurm ``dependency`` string names (``afterany:123(unfulfilled),afterok:45``,
    sbatch(1) ``--dependency``); ``after:`` (start, not end) is no chain and is skipped."""
    out: list[str] = []
    for part in re.split(r"[,?]", dependency):
        kind, _, rest = part.partition(":")
        if kind.strip() in ("afterany", "afterok", "afternotok", "aftercorr"):
            for job in rest.split(":"):  # afterok:12:13, afterany:12+60, afterany:12(failed)
                if m := re.match(r"\s*(\d+)", job):
                    out.append(m.group(1))
    return out
