"""What job to simulate: the typed config and the simulated GPU's physical constants.

Why a module of its own: the config is the one input of every other simulation module (and of the
demo, the evaluation suite and the label files, which record it for reproduction), and it depends
on nothing else in the simulator.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["H100_SXM", "GpuProfile", "SimulationConfig"]


class SimulationConfig(BaseModel):
    """What job to simulate. Every field has a default so ``rankscope demo`` needs no flags."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(default="sim", min_length=1, max_length=256)
    job_id: str = Field(default="sim-job-1", min_length=1, max_length=256)
    ranks: int = Field(default=16, ge=1, le=100_000)
    gpus_per_node: int = Field(default=8, ge=1, le=64)
    duration_s: float = Field(default=120.0, gt=0, description="Event-time length of the job.")
    step_time_s: float = Field(default=1.0, gt=0, description="Nominal step time.")
    jitter: float = Field(default=0.03, ge=0, le=0.5, description="Relative, per phase.")
    sample_interval_s: float = Field(default=1.0, gt=0, description="GPU samples per rank.")
    heartbeat_interval_s: float = Field(default=5.0, gt=0, description="Per node.")
    seed: int = 7
    start_ns: int | None = Field(default=None, ge=0, description="Default: now, whole second.")
    node_prefix: str = Field(default="node", min_length=1, max_length=200)
    nccl_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="PyTorch NCCL watchdog timeout in event time (production default 600 s; "
        "compressed so a failure plays out in seconds while the order of events stays real).",
    )
    inventory: bool = Field(default=False, description="node_inventory per node at job start.")
    fabric_interval_s: float | None = Field(
        default=None, gt=0, description="fabric_counters per HCA port every N s; None: off."
    )
    hcas_per_node: int = Field(
        default=8, ge=1, le=64, description="IB HCAs per node (rail-optimised: GPU i -> HCA i)."
    )
    first_node_index: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="Number of the job's first node (node names start there): two jobs whose "
        "ranges overlap share those nodes, as jobs packed onto one cluster do.",
    )

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.gpus_per_node)

    def node_name(self, rank: int) -> str:
        return self.node_name_at(rank // self.gpus_per_node)

    def node_name_at(self, index: int) -> str:
        return f"{self.node_prefix}{index + self.first_node_index:03d}"


class GpuProfile(NamedTuple):
    """Physical constants of the simulated GPU (an H100 SXM 80GB)."""

    idle_power_w: float = 90.0
    max_power_w: float = 700.0
    sm_clock_mhz: float = 1980.0
    mem_clock_mhz: float = 2619.0
    mem_total_bytes: int = 85_520_809_984
    ambient_c: float = 32.0
    #: Steady-state temperature rise at 100 % utilisation.
    load_rise_c: float = 42.0
    #: Thermal time constant of the heat sink.
    thermal_tau_s: float = 40.0


H100_SXM = GpuProfile()
