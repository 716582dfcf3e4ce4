"""The fault catalogue: scenario names and the typed, composable fault specs.

Why a module of its own: a spec is what a user writes (``rankscope demo --faults``, a label
file's ``faults``) and what the evaluation suite enumerates; it says *what* goes wrong, with
every target, onset and magnitude optional (drawn from the run's seed when unset), and knows
nothing of how the injector makes it happen. The composition rules (at most one terminal fault,
one clock skew, one noise) live with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from rankscope.simulation.config import SimulationConfig

__all__ = [
    "SCENARIOS",
    "TERMINAL_SCENARIOS",
    "ClockSkew",
    "ConfigDrift",
    "EccDbe",
    "Fault",
    "GpuFellOffBus",
    "Hang",
    "HostOom",
    "IbLinkFlap",
    "InputStraggler",
    "NodeUnresponsive",
    "Noise",
    "NvlinkError",
    "Preemption",
    "ScenarioName",
    "ThermalStraggler",
    "parse_faults",
]


ScenarioName = Literal[
    "gpu_fell_off_bus",
    "ecc_dbe",
    "nvlink_error",
    "ib_link_flap",
    "thermal_straggler",
    "input_straggler",
    "hang",
    "node_unresponsive",
    "preemption",
    "host_oom",
    "config_drift",
    "clock_skew",
    "noise",
]
#: The fault catalogue (docs: /work/shared/design.md), in its order.
SCENARIOS: tuple[ScenarioName, ...] = get_args(ScenarioName)
#: Scenarios that end (or hang) the job; a run has at most one.
TERMINAL_SCENARIOS: frozenset[ScenarioName] = frozenset(
    {
        "gpu_fell_off_bus",
        "ecc_dbe",
        "nvlink_error",
        "ib_link_flap",
        "hang",
        "node_unresponsive",
        "preemption",
        "host_oom",
    }
)


# ==================================================================================== fault specs


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Timed(_Spec):
    onset_s: float | None = Field(
        default=None, ge=0, description="Seconds of event time after job start; None: drawn."
    )


class _OnRank(_Timed):
    rank: int | None = Field(default=None, ge=0, description="Global rank; None: drawn.")


class _OnNode(_Timed):
    node: int | None = Field(default=None, ge=0, description="Node index; None: drawn.")


class GpuFellOffBus(_OnRank):
    """XID 79: the GPU drops off PCIe; its rank freezes, NVML stops answering, peers time out."""

    scenario: Literal["gpu_fell_off_bus"] = "gpu_fell_off_bus"


class EccDbe(_OnRank):
    """XID 48 double-bit ECC error: the rank dies with a CUDA error, then the cascade."""

    scenario: Literal["ecc_dbe"] = "ecc_dbe"


class NvlinkError(_OnRank):
    """XID 74 on one GPU's NVLink: that node's ranks fail first (NCCL errors), then the rest
    time out."""

    scenario: Literal["nvlink_error"] = "nvlink_error"
    link: int | None = Field(default=None, ge=0, le=17, description="NVLink index; None: drawn.")


class IbLinkFlap(_OnNode):
    """An HCA port goes down and up; ring neighbours get IB completion errors naming the node's
    address; the collective never completes."""

    scenario: Literal["ib_link_flap"] = "ib_link_flap"
    hca: int | None = Field(default=None, ge=0, description="HCA index (mlx5_<hca>); None: drawn.")
    down_s: float | None = Field(default=None, gt=0, description="Link down time; 0.5-3 s.")


class ThermalStraggler(_OnRank):
    """One GPU's clocks are thermally throttled: its compute is 20-40 % slower from the onset,
    so it arrives last at every collective; the job keeps running."""

    scenario: Literal["thermal_straggler"] = "thermal_straggler"
    slowdown: float | None = Field(default=None, ge=1.0, le=5.0, description="1.2-1.4 drawn.")


class InputStraggler(_OnRank):
    """One rank's data loading is 3-10x slower from the onset (persistently)."""

    scenario: Literal["input_straggler"] = "input_straggler"
    factor: float | None = Field(default=None, ge=1.0, le=100.0, description="3-10 drawn.")


class Hang(_OnRank):
    """One rank stops making progress without any error; everyone else waits in the collective.

    ``hang_abort``: the PyTorch watchdog eventually fires on the waiting ranks (naming the
    collective's sequence number) and the job fails; otherwise the job just sits there.
    """

    scenario: Literal["hang"] = "hang"
    hang_abort: bool = False


class NodeUnresponsive(_OnNode):
    """A node goes silent (kernel panic, network isolation): no event of any kind from it after
    the onset; the others time out."""

    scenario: Literal["node_unresponsive"] = "node_unresponsive"


class Preemption(_OnNode):
    """The scheduler preempts one node: its ranks are killed, the others time out, the job fails
    with reason PREEMPTED. The cause is the scheduler, not hardware."""

    scenario: Literal["preemption"] = "preemption"


class HostOom(_OnRank):
    """The kernel OOM killer ends one rank's process (scheduler ``oom_killed``); cascade."""

    scenario: Literal["host_oom"] = "host_oom"


class ConfigDrift(_Spec):
    """One node runs another driver/NCCL version (different inventory fingerprint) and its
    ranks compute 5-10 % slower for the whole job."""

    scenario: Literal["config_drift"] = "config_drift"
    node: int | None = Field(default=None, ge=0, description="Node index; None: drawn.")
    slowdown: float | None = Field(default=None, ge=1.0, le=2.0, description="1.05-1.10 drawn.")
    driver_version: str = "550.54.15"
    nccl_version: str = "2.19.3"
    cuda_version: str = "12.4"


class ClockSkew(_Spec):
    """A modifier: one node's clock is ``offset_s`` off for every timestamp it stamps.

    ``node`` unset: with ``target="culprit"`` the node of the other fault (the XID node, the
    flapping HCA's node, the straggler's node), with ``target="other"`` a drawn node that is not
    it. Attribution must be the same as without the skew.
    """

    scenario: Literal["clock_skew"] = "clock_skew"
    node: int | None = Field(default=None, ge=0)
    offset_s: float = Field(default=5.0, description="Source clock minus true time.")
    target: Literal["culprit", "other"] = "culprit"


class Noise(_Spec):
    """Things that must not be flagged: transient 1-2 step slowdowns of random ranks, one
    corrected ECC error, a 1-2 s power-cap throttle blip, one IB symbol error, NCCL INFO lines."""

    scenario: Literal["noise"] = "noise"
    slowdowns: int | None = Field(default=None, ge=0, le=1000, description="3-6 drawn.")
    benign_events: bool = True


Fault = Annotated[
    GpuFellOffBus
    | EccDbe
    | NvlinkError
    | IbLinkFlap
    | ThermalStraggler
    | InputStraggler
    | Hang
    | NodeUnresponsive
    | Preemption
    | HostOom
    | ConfigDrift
    | ClockSkew
    | Noise,
    Field(discriminator="scenario"),
]
_FAULTS_ADAPTER: TypeAdapter[list[Fault]] = TypeAdapter(list[Fault])


def _check_composition(config: SimulationConfig, faults: Sequence[Fault]) -> None:
    """Reject combinations the simulation cannot give one right answer for."""
    names = [f.scenario for f in faults]
    terminal = [n for n in names if n in TERMINAL_SCENARIOS]
    if len(terminal) > 1:
        raise ValueError(f"at most one fault that ends the job per run, got {terminal}")
    for once in ("clock_skew", "noise"):
        if names.count(once) > 1:
            raise ValueError(f"at most one {once} per run")
    for f in faults:
        if isinstance(f, _OnRank) and f.rank is not None and f.rank >= config.ranks:
            raise ValueError(f"{f.scenario}: rank {f.rank} >= ranks {config.ranks}")
        node = getattr(f, "node", None)
        if node is not None and node >= config.nodes:
            raise ValueError(f"{f.scenario}: node {node} >= nodes {config.nodes}")
        if isinstance(f, _Timed) and f.onset_s is not None and f.onset_s >= config.duration_s:
            raise ValueError(f"{f.scenario}: onset_s {f.onset_s} >= duration_s")
        if isinstance(f, IbLinkFlap) and f.hca is not None and f.hca >= config.hcas_per_node:
            raise ValueError(f"ib_link_flap: hca {f.hca} >= hcas_per_node")
        if f.scenario in _NEEDS_NODES and config.nodes < 2:
            raise ValueError(f"{f.scenario} needs a job of at least 2 nodes")
    if terminal and config.nccl_timeout_s < 3 * config.step_time_s:
        raise ValueError("nccl_timeout_s must be >= 3 steps: a timeout must mean a stall")


#: Scenarios that have no meaning on a single node (no IB traffic, nobody left to notice, no
#: other node to compare with).
_NEEDS_NODES = frozenset({"ib_link_flap", "node_unresponsive", "config_drift"})


def parse_faults(data: Any) -> list[Fault]:
    """Fault specs from JSON-like data (a list of objects with a ``scenario`` key)."""
    return _FAULTS_ADAPTER.validate_python(data)
