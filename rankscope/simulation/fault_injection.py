"""The fault injector's base: its state, the resolved-fault and failure records, small helpers.

Why a module of its own: the injector is built in layers (up-front effects, the failure cascade,
the hook overrides, each a module) that all read and write the same bookkeeping (timing and
sample changes per rank, scheduled events, silent or departed nodes, the planned failure); this
base declares that state once, so every layer is type-checked against it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rankscope.schemas import Event
from rankscope.schemas.payloads import CommEvent
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.fault_labels import FaultLabel
from rankscope.simulation.fault_specs import Fault, ScenarioName, _check_composition
from rankscope.simulation.simulator import TrainingJobSimulator
from rankscope.simulation.timing import RankState, StepPlan

__all__ = ["FaultInjectorBase"]


_OP = "ALLREDUCE"
#: the simulator models one port per HCA (``mlx5_<i>`` port 1), as on NDR compute rails
_IB_PORT = 1


@dataclass
class _Resolved:
    """A fault spec with every choice made (target, onset, magnitude)."""

    spec: Fault
    rng: random.Random
    onset_ns: int
    rank: RankState | None = None
    node: str | None = None
    hca: int | None = None
    link: int | None = None
    magnitude: float = 1.0


@dataclass
class _SampleMod:
    """A change to one GPU's samples in [from_ns, to_ns)."""

    from_ns: int
    to_ns: int | None = None
    throttle: int = 0
    clock_factor: float = 1.0
    hot: bool = False
    sbe: int = 0
    dbe: int = 0


@dataclass
class _Failure:
    """How the job dies (or hangs): per-rank fates in the step in flight at the onset."""

    scenario: ScenarioName
    onset_ns: int
    plan: StepPlan
    seq: int
    #: rank -> true time it stops making progress silently (frozen, killed, hung)
    stop: dict[int, int] = field(default_factory=dict)
    #: rank -> (true time, error type, message): the open phase and step spans end in error
    errors: dict[int, tuple[int, str, str]] = field(default_factory=dict)
    #: (rank, true time, payload) of the NCCL / PyTorch log lines
    comm: list[tuple[int, int, CommEvent]] = field(default_factory=list)
    #: rank -> true time its GPU samples stop (GPU lost, released, node dead)
    gone: dict[int, int] = field(default_factory=dict)
    #: rank -> true time its GPU goes idle (process hung or exited)
    idle: dict[int, int] = field(default_factory=dict)
    watchdog: bool = True
    job_failed: tuple[str, str, int | None] | None = ("FAILED", "NonZeroExitCode", 1)
    end_ns: int = 0


class FaultInjectorBase(TrainingJobSimulator):
    """The state every fault layer shares (a base of the fault injector, not used alone).

    :class:`~rankscope.simulation.faults.FaultInjectingSimulator` resolves the faults and fills it.
    """

    def __init__(self, config: SimulationConfig, faults: Sequence[Fault]) -> None:
        super().__init__(config)
        self.faults: tuple[Fault, ...] = tuple(faults)
        _check_composition(config, self.faults)
        self.failure: _Failure | None = None
        self.labels: list[FaultLabel] = []
        self.emit_inventory = config.inventory
        self._compute_mods: dict[int, list[tuple[int, float]]] = {}
        self._data_mods: dict[int, list[tuple[int, float, random.Random]]] = {}
        self._transient: dict[tuple[int, int], tuple[str, float]] = {}
        self._sample_mods: dict[int, list[_SampleMod]] = {}
        self._inventory: dict[str, dict[str, Any]] = {}
        self._port_errors: dict[tuple[str, int], list[tuple[int, dict[str, int]]]] = {}
        self._port_down: dict[tuple[str, int], tuple[int, int]] = {}
        self._pending: list[tuple[int, int, Event]] = []
        self._pending_pos = 0
        self._silent: dict[str, int] = {}
        self._left: dict[str, int] = {}
        self._pids = {r.rank: 20_000 + 97 * r.local_rank + r.node_index % 89 for r in self.ranks}

    def _node_ranks(self, node: str) -> list[RankState]:
        i = self.node_index[node]
        gpn = self.config.gpus_per_node
        return self.ranks[i * gpn : min((i + 1) * gpn, len(self.ranks))]

    def _next_tick(self, t_ns: int, period_ns: int) -> int:
        """The first periodic poll at or after ``t_ns`` (polls are aligned to the job start)."""
        k = -(-(t_ns - self.start_ns) // period_ns)
        return self.start_ns + k * period_ns

    def _add(self, t_ns: int, event: Event) -> None:
        """Schedule a discrete event at true time ``t_ns``."""
        self._pending.append((t_ns, len(self._pending), event))
