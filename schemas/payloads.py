"""Typed payloads, one per event kind (version 1).

Compatibility rule: a version may only gain optional fields. A breaking change is a new model
with a new ``schema`` value (``gpu_sample/2``) that the workers read side by side with the old.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from rankscope.schemas.envelope import (
    INT16_MAX,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    UINT16_MAX,
    UINT32_MAX,
    UINT64_MAX,
    Int64,
)

ShortText = Annotated[str, StringConstraints(max_length=256)]
LongText = Annotated[str, StringConstraints(max_length=16_384)]
Pct = Annotated[float, Field(ge=0, le=100)]
AttrValue = str | int | float | bool


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSample(Payload):
    """One poll of one GPU: NVML sampled by the agent, or dcgm-exporter's page (``source``).

    ``sm_util_pct`` keeps its name for stored data and queries, but it is NVML's *GPU
    utilization* (``DCGM_FI_DEV_GPU_UTIL``: the share of time any kernel ran), not SM activity;
    ``sm_active_pct`` is the SM activity (``DCGM_FI_PROF_SM_ACTIVE``) where DCGM profiling gives
    it (docs/dcgm-exporter.md).
    """

    gpu_uuid: ShortText
    sm_util_pct: Pct = Field(
        description=(
            "GPU utilization (NVML nvmlDeviceGetUtilizationRates().gpu = DCGM_FI_DEV_GPU_UTIL): "
            "percent of time one or more kernels ran. NOT SM activity: a single small kernel "
            "reads 100; see sm_active_pct."
        )
    )
    mem_util_pct: Pct | None = None
    mem_used_bytes: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    mem_total_bytes: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    sm_clock_mhz: float | None = Field(default=None, ge=0)
    mem_clock_mhz: float | None = Field(default=None, ge=0)
    power_w: float | None = Field(default=None, ge=0)
    energy_mj: int | None = Field(
        default=None, ge=0, le=UINT64_MAX, description="NVML total energy counter (mJ)."
    )
    temperature_c: float | None = None
    throttle_reasons: int | None = Field(
        default=None, ge=0, le=UINT64_MAX, description="NVML bitmask."
    )
    pcie_replay_count: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    ecc_sbe_total: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    ecc_dbe_total: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    remapped_rows: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    nvlink_errors_total: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    # Optional since issue 17 (dcgm-exporter source; migration 0012). None from NVML.
    source: ShortText = Field(default="", description="'' = NVML (the agent); 'dcgm-exporter'.")
    sm_active_pct: Pct | None = Field(
        default=None, description="DCGM_FI_PROF_SM_ACTIVE x 100: cycles an SM had a warp."
    )
    sm_occupancy_pct: Pct | None = Field(
        default=None, description="DCGM_FI_PROF_SM_OCCUPANCY x 100: resident warps / maximum."
    )
    tensor_active_pct: Pct | None = Field(
        default=None, description="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE x 100: tensor pipe busy."
    )
    dram_active_pct: Pct | None = Field(
        default=None, description="DCGM_FI_PROF_DRAM_ACTIVE x 100: memory interface busy."
    )
    gr_engine_active_pct: Pct | None = Field(
        default=None, description="DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100: graphics engine busy."
    )
    nvlink_tx_bytes_per_s: float | None = Field(
        default=None, ge=0, description="DCGM_FI_PROF_NVLINK_TX_BYTES (bytes/s)."
    )
    nvlink_rx_bytes_per_s: float | None = Field(
        default=None, ge=0, description="DCGM_FI_PROF_NVLINK_RX_BYTES (bytes/s)."
    )
    pcie_tx_bytes_per_s: float | None = Field(
        default=None, ge=0, description="DCGM_FI_PROF_PCIE_TX_BYTES (bytes/s)."
    )
    pcie_rx_bytes_per_s: float | None = Field(
        default=None, ge=0, description="DCGM_FI_PROF_PCIE_RX_BYTES (bytes/s)."
    )
    nvlink_bandwidth_total: float | None = Field(
        default=None,
        ge=0,
        description="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL as DCGM reports it (all lanes).",
    )


GpuEventType = Literal[
    "xid", "ecc", "throttle_start", "throttle_stop", "gpu_unresponsive", "gpu_recovered", "other"
]


class GpuEvent(Payload):
    """A discrete GPU event (XID, ECC increase, throttle change, GPU not answering)."""

    event_type: GpuEventType
    gpu_uuid: ShortText = ""
    xid: int | None = Field(default=None, ge=0, le=UINT32_MAX)
    count: int = Field(default=1, ge=1, le=UINT32_MAX)
    message: LongText = ""
    # Optional fields added for the kernel-log collector (issue 17); absent/defaults from NVML.
    pci_bus_id: ShortText = Field(
        default="", description="PCI address the kernel line names (dddd:bb:dd.f); '' if none."
    )
    source: ShortText = Field(
        default="", description="'' = NVML; 'kmsg', 'journal' or 'file' = the kernel log."
    )
    pattern: ShortText = Field(
        default="",
        description="Kernel-log line shape: xid, sxid, fallen_off_bus, gsp_timeout, aer.",
    )
    sxid: int | None = Field(default=None, ge=0, le=UINT32_MAX, description="NVSwitch SXid code.")
    # Optional since migration 0011 (issue 17): the XID catalogue's immediate-action bucket.
    xid_bucket: ShortText = Field(
        default="",
        description="NVIDIA XID catalogue bucket of `xid` (RESTART_APP, RESET_GPU, RESTART_BM, "
        "...); '' when no XID or not catalogued.",
    )


class Heartbeat(Payload):
    """A collector's liveness signal; its absence is what marks a node unresponsive."""

    agent: ShortText
    agent_version: ShortText = ""
    seq: int = Field(ge=0, le=UINT64_MAX)
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
    exit_code: int | None = Field(default=None, ge=INT32_MIN, le=INT32_MAX)
    # Optional since migration 0014 (issue 19): which run this job attempt belongs to.
    run_id: ShortText = Field(
        default="",
        description="The training run this job attempt belongs to (requeues, restarts, "
        "dependency chains share it); '' = not resolved (docs/reference.md 'Runs').",
    )
    attempt: int = Field(
        default=0,
        ge=0,
        le=UINT32_MAX,
        description="1-based attempt of the run this event belongs to; 0 = unknown.",
    )


SpanPhase = Literal[
    "step", "data", "forward", "backward", "optimizer", "collective", "checkpoint", "other"
]


class Span(Payload):
    """An application span (OpenTelemetry-shaped): a training step or one phase of it.

    The envelope ``ts`` of a span is its end time: that is when it is known to have happened.
    """

    name: ShortText
    phase: SpanPhase
    trace_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    span_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
    parent_span_id: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{16})?$")] = ""
    start_ns: int = Field(ge=0, le=INT64_MAX)
    end_ns: int = Field(ge=0, le=INT64_MAX)
    step: int | None = Field(default=None, ge=0, le=INT64_MAX)
    status: Literal["ok", "error", "unset"] = "unset"
    error_type: ShortText = ""
    error_message: LongText = ""
    attributes: dict[ShortText, AttrValue] = Field(default_factory=dict, max_length=64)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


class FabricCounters(Payload):
    """One poll of one InfiniBand/RoCE port: raw counter totals and per-second rates.

    Counter names are the sysfs file names (``port_xmit_data``, ``symbol_error``, ...). Rates
    are computed by the collector across polls with counter wrap handled; the first poll of a
    port has totals but no rates.
    """

    device: ShortText  # e.g. mlx5_0
    port: int = Field(ge=0, le=UINT16_MAX)
    link_layer: ShortText = ""  # InfiniBand | Ethernet
    state: ShortText = ""  # e.g. "4: ACTIVE"
    phys_state: ShortText = ""  # e.g. "5: LinkUp"
    rate: ShortText = ""  # e.g. "400 Gb/sec (4X NDR)"
    counters: dict[ShortText, Int64] = Field(default_factory=dict, max_length=256)
    rates_per_s: dict[ShortText, float] = Field(default_factory=dict, max_length=256)
    interval_s: float | None = Field(default=None, gt=0)


FabricEventType = Literal[
    "link_down",
    "link_up",
    "state_change",
    "error_counter_increase",
    "port_unreadable",
    "nvlink_down",
    "nvlink_error",
    "other",
]


class FabricEvent(Payload):
    """A discrete fabric event: link state change, error-counter increase, NVLink trouble."""

    event_type: FabricEventType
    device: ShortText = ""  # HCA (mlx5_0) or GPU uuid for NVLink
    port: int | None = Field(default=None, ge=0, le=UINT16_MAX)  # HCA port or NVLink link index
    counter: ShortText = ""
    delta: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    old_state: ShortText = ""
    new_state: ShortText = ""
    message: LongText = ""


CommEventType = Literal[
    "nccl_warn",
    "nccl_error",
    "watchdog_timeout",
    "net_ib_error",
    "remote_process_exited",
    "process_group_abort",
    "other",
]


class CommEvent(Payload):
    """A communication-library message (NCCL, PyTorch ProcessGroupNCCL) parsed from a log line.

    ``message`` is the human text of the line (free text: redaction scans it); the structured
    fields are what correlation uses.
    """

    source: Literal["nccl", "pytorch", "other"]
    event_type: CommEventType
    op: ShortText = ""  # e.g. ALLREDUCE
    seq: int | None = Field(default=None, ge=0, le=UINT64_MAX)  # collective sequence number
    peer_rank: int | None = Field(default=None, ge=0, le=INT32_MAX)
    peer: ShortText = ""  # peer host/address as logged
    timeout_ms: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    elapsed_ms: int | None = Field(default=None, ge=0, le=UINT64_MAX)
    process_group: ShortText = ""
    pid: int | None = Field(default=None, ge=0, le=UINT32_MAX)
    log_file: ShortText = ""
    message: LongText = ""
    host: ShortText = ""  # host as printed in the line (log directories may be shared)
    hca: ShortText = ""  # e.g. mlx5_1:1, joins NCCL errors to this node's fabric events
    cuda_dev: int | None = Field(default=None, ge=0, le=INT16_MAX)  # NCCL's [cudaDev]
    ib_status: int | None = Field(
        default=None, ge=INT32_MIN, le=INT32_MAX
    )  # ibv_wc_status of a NET/IB completion error
    vendor_err: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    pg_rank: int | None = Field(
        default=None, ge=0, le=INT32_MAX
    )  # rank within a non-default process group


class NodeInventory(Payload):
    """Software and hardware versions of a node; ``fingerprint`` changes when any of them does."""

    driver_version: ShortText = ""
    cuda_version: ShortText = ""
    nccl_version: ShortText = ""
    kernel: ShortText = ""
    os: ShortText = ""
    gpu_model: ShortText = ""
    gpu_count: int = Field(default=0, ge=0, le=UINT16_MAX)
    gpu_vbios: dict[ShortText, ShortText] = Field(default_factory=dict, max_length=64)
    hca_firmware: dict[ShortText, ShortText] = Field(default_factory=dict, max_length=64)
    extra: dict[ShortText, ShortText] = Field(default_factory=dict, max_length=64)
    fingerprint: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16,64}$")]


def inventory_fingerprint(fields: Mapping[str, Any]) -> str:
    """sha256 over the canonical JSON of the fields (sorted keys, ``fingerprint`` left out), first
    32 hex digits: equal exactly when every version string, count and firmware map is equal.

    The contract's own rule, so the node agent and the simulator cannot drift apart."""
    canonical = json.dumps(
        {k: v for k, v in fields.items() if k != "fingerprint"},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


AgentEventType = Literal[
    "agent_started",
    "agent_stopped",
    "collector_error",
    "collector_recovered",
    "spool_overflow",
    "spool_replayed",
    "other",
]


class AgentEvent(Payload):
    """What the node agent says about itself: errors, recoveries, spool loss (counted)."""

    event_type: AgentEventType
    agent: ShortText = "rankscope-agent"
    collector: ShortText = ""
    count: int = Field(default=0, ge=0, le=UINT64_MAX)
    message: LongText = ""
