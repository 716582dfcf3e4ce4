"""The recovery policy file: which findings lead to which action, and the bounds around it.

Operators review ``streams/recovery/policy.yaml`` like the redaction rules: rules from incidents
(by cause class, the XID catalogue's resolution bucket, and confidence) and detections (by type
and score) to actions, per-job bounds
(at most N actions in a window, exponential backoff, a cool-down), the progress deadline after
an action, and the fleet circuit breaker.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rankscope.schemas.derived import CauseClass, DetectionType, Incident, RecoveryAction
from rankscope.schemas.xid_catalogue import XidBucket, xid_bucket

DEFAULT_POLICY_PATH = Path(__file__).with_name("policy.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Strict):
    """What a rule reacts to: an incident (its cause and/or its XID's catalogue bucket), or a
    detection's type (not both)."""

    incident_cause: list[CauseClass] = Field(default_factory=list)
    xid_bucket: list[XidBucket] = Field(
        default_factory=list,
        description="Incidents whose XID is in one of these buckets of NVIDIA's XID catalogue "
        "(RESTART_APP, RESET_GPU, RESTART_BM, ...); with incident_cause, both must hold.",
    )
    detection: list[DetectionType] = Field(default_factory=list)
    min_confidence: float = Field(default=0.0, ge=0, le=1, description="Incidents.")
    min_score: float = Field(default=0.0, ge=0, description="Detections.")
    job_id_pattern: str = Field(
        default="",
        description="A regex the job id must match in full (teams encode project and queue in "
        "job names); empty: every job.",
    )
    node_repeats: int = Field(
        default=0,
        ge=0,
        description="A node rule: it acts when the finding's node was named by this many "
        "matching findings (in any job) within repeat_window_s; 0: a job rule.",
    )
    repeat_window_s: float = Field(default=86400, gt=0, description="Node rules.")

    @model_validator(mode="after")
    def _one(self) -> Match:
        if bool(self.incident_cause or self.xid_bucket) == bool(self.detection):
            raise ValueError(
                "a rule matches incidents (incident_cause and/or xid_bucket) or detection, "
                "exactly one of them"
            )
        if self.node_repeats == 1 and not self.xid_bucket:
            raise ValueError(
                "node_repeats counts repeats: 0 (a job rule) or at least 2; 1 (act on the "
                "first finding) only with xid_bucket, where the catalogue names the node's fault"
            )
        if self.job_id_pattern:
            try:
                re.compile(self.job_id_pattern)
            except re.error as exc:
                raise ValueError(f"job_id_pattern does not compile: {exc}") from exc
        return self

    def matches_incident(self, inc: Incident) -> bool:
        """Cause (if named), the XID's bucket (if named) and the confidence all hold."""
        if not (self.incident_cause or self.xid_bucket) or inc.confidence < self.min_confidence:
            return False
        if self.incident_cause and inc.cause_class not in self.incident_cause:
            return False
        return not self.xid_bucket or xid_bucket(inc.xid) in self.xid_bucket

    def job_matches(self, job_id: str) -> bool:
        return not self.job_id_pattern or re.fullmatch(self.job_id_pattern, job_id) is not None


class Rule(_Strict):
    """A job rule acts on the job a finding names (the first matching job rule wins); a node
    rule (``when.node_repeats``) acts on a node that keeps failing, whichever jobs it ran."""

    name: str
    when: Match
    action: RecoveryAction
    description: str = ""

    @property
    def per_node(self) -> bool:
        return self.when.node_repeats > 0


class JobLimits(_Strict):
    max_actions: int = Field(default=3, ge=1, description="Per job within window_s.")
    window_s: float = Field(default=3600, gt=0)
    backoff_base_s: float = Field(default=300, ge=0, description="Wait before the 2nd action.")
    backoff_factor: float = Field(default=2.0, ge=1, description="Each later wait grows by it.")
    cooldown_s: float = Field(
        default=120,
        ge=0,
        description="After an action, findings of the same job are ignored "
        "this long (a cascade's other findings are not new failures).",
    )
    progress_deadline_s: float = Field(
        default=900, gt=0, description="After an action, the step counter must move within it."
    )


class Breaker(_Strict):
    """Stop acting when a fleet-wide cause (storage, the scheduler) hits many jobs at once."""

    window_s: float = Field(default=600, gt=0)
    max_job_share: float = Field(default=0.25, gt=0, le=1)
    min_jobs: int = Field(default=4, ge=1, description="Never trip on fewer jobs than this.")
    max_node_share: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="Of the fleet's nodes, the share that node actions (exclude, drain) may "
        "name within window_s before it trips.",
    )
    min_nodes: int = Field(default=4, ge=1, description="Never trip on fewer nodes than this.")
    fleet_jobs: int | None = Field(
        default=None,
        ge=1,
        description="Jobs in the fleet: the job share's denominator. Unset: the jobs acted on "
        "(the share is 1, so it trips at min_jobs). Never the ids seen in telemetry, which "
        "anyone writing telemetry could inflate.",
    )
    fleet_nodes: int | None = Field(
        default=None, ge=1, description="Nodes in the fleet; unset: as fleet_jobs."
    )
    reset_s: float = Field(default=1800, gt=0, description="Stay open this long, then re-arm.")


class Policy(_Strict):
    version: str
    mode: Literal["act", "dry_run"] = "dry_run"
    rules: list[Rule]
    limits: JobLimits = JobLimits()
    breaker: Breaker = Breaker()

    @model_validator(mode="after")
    def _unique(self) -> Policy:
        names = [r.name for r in self.rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate rule names: {dupes}")
        return self


def load_policy(path: Path | None = None) -> Policy:
    doc = yaml.safe_load((path or DEFAULT_POLICY_PATH).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("a recovery policy is a YAML mapping")
    return Policy.model_validate(doc)
