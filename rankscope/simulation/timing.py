"""The timing model: a step's phases, per-rank state, step plans and which phase a rank is in.

Why a module of its own: these are the facts the planner, the event builders and the fault
injector share (a step's phases and their nominal shares, PyTorch's collective numbering, the
per-rank random streams that keep a fault on one rank from reshuffling every other rank's
timings), so they live below all three.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import NamedTuple

from rankscope.schemas.payloads import SpanPhase
from rankscope.simulation.config import H100_SXM, GpuProfile, SimulationConfig

__all__ = [
    "COMPUTE_PHASES",
    "INIT_COLLECTIVES",
    "NOMINAL_SHARE",
    "SPAN_NAME",
    "PhaseDurations",
    "PhaseOf",
    "RankState",
    "StepPlan",
    "phase_at",
]


#: Phases a rank runs before it enters the collective, in order.
COMPUTE_PHASES: tuple[SpanPhase, ...] = ("data", "forward", "backward", "optimizer")
#: Share of the nominal step time per phase; the rest (0.12) is the collective itself.
NOMINAL_SHARE: dict[SpanPhase, float] = {
    "data": 0.05,
    "forward": 0.28,
    "backward": 0.50,
    "optimizer": 0.05,
    "collective": 0.12,
}
SPAN_NAME: dict[SpanPhase, str] = {
    "step": "train_step",
    "data": "data_loading",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer_step",
    "collective": "nccl:all_reduce",
}
#: Collectives a DDP job issues before step 0 (the init barrier and the parameter broadcast).
#: PyTorch numbers collectives per process group from 1, so step N's all-reduce has
#: ``SeqNum = N + INIT_COLLECTIVES + 1``; it is also on the collective span
#: (``collective.seq``), which is what consumers should join on.
INIT_COLLECTIVES = 2
_GIB = 1 << 30


class PhaseDurations(NamedTuple):
    """One rank's time in each pre-collective phase of one step (ns)."""

    data_ns: int
    forward_ns: int
    backward_ns: int
    optimizer_ns: int

    @property
    def compute_ns(self) -> int:
        """Time from step start until the rank arrives at the collective."""
        return self.data_ns + self.forward_ns + self.backward_ns + self.optimizer_ns


class RankState:
    """Mutable per-rank (= per-GPU) state carried across steps: counters must stay monotonic."""

    __slots__ = (
        "energy_mj",
        "gpu",
        "gpu_uuid",
        "local_rank",
        "mem_base_bytes",
        "node",
        "node_index",
        "rank",
        "rng",
        "temperature_c",
        "timing_rng",
    )

    def __init__(self, config: SimulationConfig, rank: int, gpu: GpuProfile = H100_SXM) -> None:
        self.rank = rank
        self.local_rank = rank % config.gpus_per_node
        self.gpu = self.local_rank
        self.node_index = rank // config.gpus_per_node
        self.node = config.node_name(rank)
        # Stable per physical GPU (cluster, node, index), like a real NVML UUID: the same node in
        # another simulated job reports the same GPU.
        hw_rng = random.Random(f"{config.seed}:{config.cluster}:{self.node}:{self.gpu}:hw")
        self.gpu_uuid = f"GPU-{uuid.UUID(int=hw_rng.getrandbits(128), version=4)}"
        self.energy_mj = hw_rng.randrange(10**9, 10**11)  # counter since driver load
        self.temperature_c = gpu.ambient_c + hw_rng.uniform(2.0, 6.0)
        self.mem_base_bytes = 58 * _GIB + hw_rng.randrange(0, _GIB)
        self.timing_rng = random.Random(f"{config.seed}:timing:{rank}")
        self.rng = random.Random(f"{config.seed}:gpu:{rank}")


class StepPlan(NamedTuple):
    """The timings of one step, fixed before any of its events is rendered."""

    step: int
    start_ns: int
    phases: list[PhaseDurations]  # by rank
    collective_ns: int
    #: when the collective completes, if every rank arrives: last arrival + collective
    end_ns: int

    def arrival_ns(self, rank: int) -> int:
        """When ``rank`` enters the collective (ends its optimizer phase)."""
        return self.start_ns + self.phases[rank].compute_ns


#: A sample's view of a rank at a time: the phase it is in, or None for "no sample".
PhaseOf = Callable[[RankState, int], SpanPhase | None]


def phase_at(plan: StepPlan, rank: int, t_ns: int) -> SpanPhase:
    """Which phase ``rank`` is in at ``t_ns`` (inside the step ``plan``)."""
    offset = t_ns - plan.start_ns
    for phase, dur in zip(COMPUTE_PHASES, plan.phases[rank], strict=True):
        if offset < dur:
            return phase
        offset -= dur
    return "collective"
