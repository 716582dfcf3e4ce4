"""Records produced by the stream workers (dead letters, window aggregates).

They are contracts between ``streams`` (producer) and ``sinks`` (consumer), so they live here.
Their ids are deterministic, so reprocessing after a crash rewrites the same row instead of
adding a new one.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

DeadLetterCode = Literal[
    "not_utf8",
    "not_json",
    "not_an_event",
    "unknown_schema",
    "invalid_event",
    "too_large",
    "ts_out_of_range",
    "empty_batch",
    "too_deep",
    "too_many_errors",
    "internal_error",
    "store_refused",
]


class DeadLetter(BaseModel):
    """Why one message (or one element of a batch) was refused.

    Never carries the raw bytes: they may hold secrets. ``source_topic``/``partition``/``offset``
    locate the original on Kafka (the access-controlled source of truth); ``sha256`` proves which.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dead_letter_id: str
    reason_code: DeadLetterCode
    reason: str = Field(max_length=2048)
    source_topic: str
    partition: int
    offset: int
    index_in_batch: int = Field(default=-1, description="-1 when the whole message was refused.")
    size_bytes: int
    sha256: str
    received_ts: int = Field(description="Worker wall clock when refused (ns).")
    record_ts: int = Field(default=0, description="Kafka record timestamp (ns), 0 if none.")
    event_id: str = ""
    schema_id: str = ""
    kind: str = ""
    job_id: str = ""
    node: str = ""

    @staticmethod
    def make_id(topic: str, partition: int, offset: int, index: int) -> str:
        """Stable id: the same message refused twice gives the same dead-letter row."""
        raw = f"{topic}|{partition}|{offset}|{index}".encode()
        return hashlib.blake2b(raw, digest_size=16).hexdigest()


class RankWindow(BaseModel):
    """Per job, rank and tumbling event-time window: what that rank did in the window."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_id: str
    cluster: str
    job_id: str
    rank: int
    node: str
    window_start_ns: int
    window_end_ns: int
    step_count: int = Field(ge=0)
    step_time_mean_s: float | None = None
    step_time_max_s: float | None = None
    gpu_util_mean_pct: float | None = None
    gpu_sample_count: int = Field(default=0, ge=0)
    event_count: int = Field(ge=0)
    emitted_ts: int = Field(description="Worker wall clock at emission (ns).")

    @staticmethod
    def make_id(job_id: str, rank: int, window_start_ns: int) -> str:
        return f"{job_id}/{rank}/{window_start_ns}"


#: a ``<p>.windows`` record: a JSON array of one job's windows (one object in older records)
RANK_WINDOWS_ADAPTER: TypeAdapter[list[RankWindow]] = TypeAdapter(list[RankWindow])


def dump_rank_windows(windows: list[RankWindow]) -> bytes:
    """One ``<p>.windows`` record's value: the windows as a JSON array, each by its model's own
    serializer (the bytes of ``RANK_WINDOWS_ADAPTER.dump_json``, as ``dump_events`` does)."""
    return b"[" + b",".join([w.__pydantic_serializer__.to_json(w) for w in windows]) + b"]"


class LateEvent(BaseModel):
    """An event that arrived after its window closed: counted and routed, never dropped silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str
    kind: str
    cluster: str
    job_id: str
    rank: int | None
    node: str
    ts: int
    window_start_ns: int
    watermark_ns: int
    lateness_ns: int
    received_ts: int


DetectionType = Literal[
    "straggler",
    "hang",
    "node_unresponsive",
    "collector_silent",
    # issue 19: a job below its recorded reference baseline; a node whose configuration diverges
    # from its pool's majority (fleet drift)
    "throughput_gap",
    "node_drift",
]
StragglerClass = Literal["compute", "thermal", "input_pipeline", "communication", "config_drift"]


class Detection(BaseModel):
    """A finding about one job from streaming telemetry (issue 4), on ``<p>.detections``.

    The id is deterministic (job, type, subject, onset) so re-emission after a restart
    rewrites the same row.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    detection_id: str
    detection_type: DetectionType
    cluster: str
    job_id: str
    node: str = ""
    rank: int | None = None
    gpu: int | None = None
    straggler_class: StragglerClass | None = None
    score: float = Field(description="Type-specific severity, e.g. compute time / job median.")
    onset_ts: int = Field(description="Event time (reference clock) the condition started, ns.")
    detected_ts: int = Field(description="Event time at which it was detected, ns.")
    emitted_ts: int = Field(description="Worker wall clock at emission, ns.")
    summary: str = Field(max_length=2048)
    evidence: list[str] = Field(default_factory=list, max_length=64)
    details: dict[str, float | int | str] = Field(default_factory=dict, max_length=64)


CauseClass = Literal[
    "gpu_xid",
    "gpu_ecc",
    "nvlink",
    "ib_link",
    "scheduler_preemption",
    "host_oom",
    "node_unresponsive",
    "hang",
    "application",
    "communication",
    "unknown",
]


class EvidenceItem(BaseModel):
    """One precursor or symptom in an incident's chain, in corrected (reference-clock) time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ts: int
    node: str
    rank: int | None = None
    kind: str
    what: str = Field(max_length=1024)
    event_id: str = ""
    role: Literal["cause", "precursor", "symptom"] = "precursor"


class Incident(BaseModel):
    """One cascade, one incident: the primary cause, its evidence chain and the symptom ranks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    incident_id: str
    revision: int = Field(
        default=0, ge=0, description="0 at first emission; later evidence re-emits it, +1."
    )
    cluster: str
    job_id: str
    cause_class: CauseClass
    node: str = ""
    gpu: int | None = None
    rank: int | None = None
    device: str = Field(default="", description="HCA or GPU uuid, with port where it applies.")
    xid: int | None = None
    confidence: float = Field(ge=0, le=1)
    summary: str = Field(max_length=4096)
    first_cause_ts: int = Field(description="Corrected event time of the primary cause, ns.")
    first_symptom_ts: int = Field(description="Corrected event time of the first failure signal.")
    attributed_ts: int = Field(description="Event time at which the incident was attributed.")
    emitted_ts: int
    symptom_ranks: list[int] = Field(default_factory=list, max_length=16_384)
    evidence: list[EvidenceItem] = Field(default_factory=list, max_length=256)
    clock_offsets_ns: dict[str, int] = Field(
        default_factory=dict, max_length=4096, description="Per-node offsets applied, ns."
    )


QuarantineCode = Literal["redaction_error", "redaction_timeout"]


class QuarantinedEvent(BaseModel):
    """An event the redaction stage could not redact: fail closed.

    ``event_json`` is the event with every scanned or dropped field emptied; the original stays
    only on the raw topic (the access-controlled source of truth), found by ``source_topic``,
    ``partition`` and ``offset``. ``reason`` names the field and the failure, never its content.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    quarantine_id: str = Field(description="The event id: a re-read rewrites the same row.")
    reason_code: QuarantineCode
    reason: str = Field(max_length=2048)
    fields_removed: list[str]
    rules_version: str
    source_topic: str
    partition: int
    offset: int
    quarantined_ts: int = Field(description="Worker wall clock (ns).")
    event_id: str
    schema_id: str
    kind: str
    cluster: str
    job_id: str
    node: str
    ts: int
    event_json: str


RedactionStageName = Literal["agent", "exporter", "stream"]


class RedactionAudit(BaseModel):
    """How many findings one raw record produced, per window, kind, field, entity and rule.

    Never a value. The id is derived from the raw record and the dimensions, so a record read
    twice after a crash rewrites its rows instead of counting again.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit_id: str
    window_start_ns: int
    cluster: str
    job_id: str
    kind: str
    field: str
    entity: str
    rule: str
    action: str
    count: int = Field(ge=1)
    rules_version: str
    #: where the finding was made: the node agent, the in-process OTel exporter (both before
    #: publishing) or the stream worker (the second line)
    stage: RedactionStageName = "stream"

    @staticmethod
    def make_id(record: str, *dims: str) -> str:
        raw = "|".join((record, *dims)).encode()
        return hashlib.blake2b(raw, digest_size=16).hexdigest()


RecoveryAction = Literal[
    "dump_stacks", "restart_from_checkpoint", "exclude_node_and_restart", "drain_node", "escalate"
]
RecoveryStage = Literal[
    "decided",  # the policy chose an action (the actuator runs it once per key)
    "suppressed",  # a rule matched but a bound, the breaker or a pause held it back
    "succeeded",  # the actuator ran the action
    "failed",  # the actuator could not run it
    "progress_resumed",  # the job's step counter moved after the action
    "progress_not_resumed",  # it did not, within the deadline
    "refused",  # nothing ran: unsigned, forged, replayed, expired, or an invalid identifier
]


class RecoveryEvent(BaseModel):
    """One step of automated recovery, on ``<p>.recovery``: auditable and replayable.

    ``key`` is the idempotency key of the action (job, trigger, rule, attempt): every stage of
    one action shares it, and an actuator runs a key at most once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    stage: RecoveryStage
    action: RecoveryAction
    cluster: str
    job_id: str
    node: str = ""
    rank: int | None = None
    rule: str
    reason: str = Field(max_length=2048)
    trigger_id: str = Field(description="The incident or detection that triggered it.")
    attempt: int = Field(ge=1, description="Recovery attempts for this job, this one included.")
    ts: int = Field(description="Event time of the decision or outcome, ns.")
    not_before_ts: int = Field(default=0, description="Backoff: run no earlier than this (ns).")
    mode: Literal["act", "dry_run"] = Field(
        default="dry_run", description="The policy's mode when decided (signed with it)."
    )
    decided_at: int = Field(default=0, description="Wall clock when signed, ns (expiry).")
    signature: str = Field(default="", description="v1:<key id>:<hmac> (signing.py).")

    @property
    def event_id(self) -> str:
        return self.make_id(self.key, self.stage)

    @staticmethod
    def make_key(*parts: str) -> str:
        return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()

    @staticmethod
    def make_id(key: str, stage: str) -> str:
        return f"{key}:{stage}"


class RecoveryControl(BaseModel):
    """An operator's command on ``<p>.recovery_control``: pause or resume automated recovery."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paused: bool
    by: str = Field(default="", max_length=256)
    reason: str = Field(default="", max_length=1024)
    ts: int
    signature: str = Field(default="", description="v1:<key id>:<hmac> (signing.py).")


class StepProgress(BaseModel):
    """A job's step counter, noted for the recovery decider at most every few seconds of event
    time (not per span): the highest step completed so far and the nodes that reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str
    job_id: str
    step: int = Field(ge=0)
    ts: int = Field(description="Event time of the span that completed ``step``, ns.")
    nodes: list[str] = Field(default_factory=list, description="Nodes seen since the last note.")


class RecoveryInput(BaseModel):
    """One record on ``<p>.recovery_input`` (one partition: one decider sees the whole fleet):
    a finding, a progress note or an operator's command, exactly one of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    detection: Detection | None = None
    incident: Incident | None = None
    progress: StepProgress | None = None
    control: RecoveryControl | None = None

    @model_validator(mode="after")
    def _one(self) -> RecoveryInput:
        given = [self.detection, self.incident, self.progress, self.control]
        if sum(x is not None for x in given) != 1:
            raise ValueError("a recovery input carries exactly one of its fields")
        return self

    @property
    def ts(self) -> int:
        """Event time of the input (a command's issue time)."""
        if self.detection is not None:
            return self.detection.detected_ts
        if self.incident is not None:
            return self.incident.attributed_ts
        if self.progress is not None:
            return self.progress.ts
        assert self.control is not None
        return self.control.ts
