"""Typed payloads, one per event kind (version 1).

Compatibility rule: a version may only gain optional fields. A breaking change is a new model
with a new ``schema`` value (``gpu_sample/2``) that the workers read side by side with the old.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

ShortText = Annotated[str, StringConstraints(max_length=256)]
LongText = Annotated[str, StringConstraints(max_length=16_384)]
Pct = Annotated[float, Field(ge=0, le=100)]
AttrValue = str | int | float | bool


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSample(Payload):
    """One NVML poll of one GPU."""

    gpu_uuid: ShortText
    sm_util_pct: Pct
    mem_util_pct: Pct | None = None
    mem_used_bytes: int | None = Field(default=None, ge=0)
    mem_total_bytes: int | None = Field(default=None, ge=0)
    sm_clock_mhz: float | None = Field(default=None, ge=0)
    mem_clock_mhz: float | None = Field(default=None, ge=0)
    power_w: float | None = Field(default=None, ge=0)
    energy_mj: int | None = Field(default=None, ge=0, description="NVML total energy counter (mJ).")
    temperature_c: float | None = None
    throttle_reasons: int | None = Field(default=None, ge=0, description="NVML bitmask.")
    pcie_replay_count: int | None = Field(default=None, ge=0)
    ecc_sbe_total: int | None = Field(default=None, ge=0)
    ecc_dbe_total: int | None = Field(default=None, ge=0)
    remapped_rows: int | None = Field(default=None, ge=0)
    nvlink_errors_total: int | None = Field(default=None, ge=0)


GpuEventType = Literal[
    "xid", "ecc", "throttle_start", "throttle_stop", "gpu_unresponsive", "gpu_recovered", "other"
]


class GpuEvent(Payload):
    """A discrete GPU event (XID, ECC increase, throttle change, GPU not answering)."""

    event_type: GpuEventType
    gpu_uuid: ShortText = ""
    xid: int | None = Field(default=None, ge=0)
    count: int = Field(default=1, ge=1)
    message: LongText = ""


class Heartbeat(Payload):
    """A collector's liveness signal; its absence is what marks a node unresponsive."""

    agent: ShortText
    agent_version: ShortText = ""
    seq: int = Field(ge=0)
    interval_s: float = Field(gt=0)


SchedulerEventType = Literal[
    "job_started",
    "job_completed",
    "job_failed",
    "job_requeued",
    "job_cancelled",
    "job_timeout",
    "preempted",
    "oom_killed",
    "node_drain",
    "node_down",
    "node_up",
    "other",
]


class SchedulerEvent(Payload):
    """A job/step/node state change reported by Slurm, Kubernetes or the simulator."""

    source: Literal["slurm", "kubernetes", "simulator"]
    event_type: SchedulerEventType
    state: ShortText = ""
    reason: LongText = ""
    exit_code: int | None = None


SpanPhase = Literal["step", "data", "forward", "backward", "optimizer", "collective", "checkpoint", "other"]


class Span(Payload):
    """An application span (OpenTelemetry-shaped): a training step or one phase of it.

    The envelope ``ts`` of a span is its end time: that is when it is known to have happened.
    """

    name: ShortText
    phase: SpanPhase
    trace_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    span_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
    parent_span_id: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{16})?$")] = ""
    start_ns: int = Field(ge=0)
    end_ns: int = Field(ge=0)
    step: int | None = Field(default=None, ge=0)
    status: Literal["ok", "error", "unset"] = "unset"
    error_type: ShortText = ""
    error_message: LongText = ""
    attributes: dict[ShortText, AttrValue] = Field(default_factory=dict, max_length=64)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9
