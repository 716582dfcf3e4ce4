"""A seeded, synchronous data-parallel training job that emits the same events real collectors do.

Why a simulator: every downstream stage (alignment, straggler and hang detection, root cause) is
tested against ground truth, and the only way to have ground truth for a 1,000-rank job on a laptop
is to generate it. The simulator therefore models the one property those stages rely on: in
synchronous training the collective of step N completes for every rank at the same moment, when
the *last* rank arrives, so every rank's step time is equal and the fast ranks wait in the
collective. The straggler is visible as the rank with the longest compute and the shortest
collective.

Determinism: a run is a pure function of its config. Jitter comes from per-rank random streams
(so that a later fault injected on one rank does not reshuffle every other rank's timings), and
event ids come from a stream seeded with (seed, cluster, job id, start time), so identical configs
give byte-identical streams while two jobs, or two runs at different start times, never share an
event id (ClickHouse deduplicates on it).

Plan, then render: :meth:`TrainingJobSimulator.plan_step` fixes a step's timings (per-rank phase
durations, the collective) and caches them, so a fault injector can look ahead (which step is in
flight when a GPU falls off the bus, when will every rank's watchdog fire) *before* any event is
rendered, and its ground-truth labels are known up front while the events stay a lazy iterator.

Background telemetry that a real node agent also sends (``node_inventory`` at start,
``fabric_counters`` per HCA port) is off by default (``inventory``, ``fabric_interval_s``) so the
plain demo stream keeps its four kinds; ``rankscope.simulation.faults`` turns it on.

Clock skew: :attr:`TrainingJobSimulator.clock_offsets` shifts every timestamp a node stamps
(envelope ``ts`` and ``observed_ts``, span ``start_ns``/``end_ns``), because a real agent stamps
all of them from the same wrong clock. Events are generated, and yielded, in *true* time order;
a skewed node's own events therefore stay in non-decreasing source-clock order.

Fault injection lives in :mod:`rankscope.simulation.faults`; it plugs in by overriding the hooks
:meth:`~TrainingJobSimulator.phase_durations`, :meth:`~TrainingJobSimulator.collective_duration`,
:meth:`~TrainingJobSimulator.gpu_sample_payload`, :meth:`~TrainingJobSimulator.extra_events`,
:meth:`~TrainingJobSimulator.node_job`, :meth:`~TrainingJobSimulator.fabric_deltas`,
:meth:`~TrainingJobSimulator.fabric_port_state`, :meth:`~TrainingJobSimulator.inventory_fields`
and, for a job that dies, :attr:`~TrainingJobSimulator.stall_ns` plus
:meth:`~TrainingJobSimulator.failing_step`.

Speed: the hot kinds (spans, GPU samples, heartbeats, fabric counters) are built without
re-validation (:func:`fast_model`): every value comes from this module's own arithmetic, and the
tests validate every event of every fault scenario against ``schemas.EVENT_ADAPTER``.
"""

from __future__ import annotations

import gc
import math
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas import (
    CommEventEvent,
    Envelope,
    Event,
    FabricCountersEvent,
    FabricEventEvent,
    GpuEventEvent,
    GpuSampleEvent,
    HeartbeatEvent,
    NodeInventoryEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from rankscope.schemas.payloads import (
    CommEvent,
    FabricCounters,
    FabricEvent,
    GpuEvent,
    GpuEventType,
    GpuSample,
    Heartbeat,
    NodeInventory,
    SchedulerEvent,
    SchedulerEventType,
    Span,
    SpanPhase,
    inventory_fingerprint,
)

__all__ = [
    "AGENT_NAME",
    "COMPUTE_PHASES",
    "ERROR_COUNTERS",
    "INIT_COLLECTIVES",
    "GpuProfile",
    "PhaseDurations",
    "RankState",
    "SimulationConfig",
    "SimulationSummary",
    "StepPlan",
    "TrainingJobSimulator",
    "create_simulator",
    "fast_model",
    "pace",
    "phase_at",
    "simulate",
    "summarize",
]

AGENT_NAME = "rankscope-sim"
AGENT_VERSION = "0.1.0"
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
#: PMA/sysfs error counters of an IB port (``/sys/class/infiniband/<dev>/ports/<n>/counters``).
ERROR_COUNTERS: tuple[str, ...] = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
_TRAFFIC_COUNTERS: tuple[str, ...] = (
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_wait",
)
#: rate names of the two data counters (bytes/s = 4-byte words x 4), as the fabric collector
_BYTE_RATES = {"port_xmit_data": "xmit_bytes", "port_rcv_data": "rcv_bytes"}
#: every counter's rate, before a poll fills in the ones that moved
_ZERO_RATES: dict[str, float] = {
    _BYTE_RATES.get(name, name): 0.0 for name in (*_TRAFFIC_COUNTERS, *ERROR_COUNTERS)
}
_NS = 1_000_000_000
_GIB = 1 << 30
# Collector delay between the event time and when the agent publishes it (observed_ts - ts).
_MIN_DELAY_NS = 1_000_000
_MAX_DELAY_NS = 40_000_000
#: average all-reduce traffic per port while the job makes progress (4-byte words/s, ~15 GB/s)
_TRAFFIC_WORDS_PER_S = 3.75e9

M = TypeVar("M", bound=BaseModel)
_setattr = object.__setattr__
_new = object.__new__
_FIELDS_SET: dict[type[BaseModel], set[str]] = {}


def fast_model(cls: type[M], values: dict[str, Any]) -> M:
    """Build a pydantic model from *every* field's value without validating it.

    Why not ``model_construct``: in pydantic 2.11+ it is pure Python and measured slower than
    validation here (123k vs 156k spans/s); filling ``__dict__`` directly runs at ~900k/s. Only
    for values this module computed itself; ``values`` must name every field (the tests check
    that each event kind round-trips through ``EVENT_ADAPTER`` unchanged). The fields-set is one
    set per class: it always holds every field, the event models are frozen (pydantic never adds
    to it) and ``model_copy`` copies it before an update.
    """
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    fields = _FIELDS_SET.get(cls)
    if fields is None:
        fields = _FIELDS_SET[cls] = set(cls.model_fields)
    _setattr(obj, "__pydantic_fields_set__", fields)
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


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

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.gpus_per_node)

    def node_name(self, rank: int) -> str:
        return self.node_name_at(rank // self.gpus_per_node)

    def node_name_at(self, index: int) -> str:
        return f"{self.node_prefix}{index:03d}"


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


class _PortState:
    """One HCA port's cumulative sysfs counters (monotonic, like the kernel's)."""

    __slots__ = ("counters", "device", "prev_ns", "rng")

    def __init__(self, config: SimulationConfig, node: str, hca: int) -> None:
        self.device = f"mlx5_{hca}"
        hw = random.Random(f"{config.seed}:{config.cluster}:{node}:{self.device}:hw")
        self.counters: dict[str, int] = {
            "port_xmit_data": hw.randrange(10**11, 10**13),
            "port_rcv_data": hw.randrange(10**11, 10**13),
            "port_xmit_packets": hw.randrange(10**8, 10**10),
            "port_rcv_packets": hw.randrange(10**8, 10**10),
            "port_xmit_wait": hw.randrange(10**5, 10**7),
            **dict.fromkeys(ERROR_COUNTERS, 0),
        }
        self.prev_ns: int | None = None
        self.rng = random.Random(f"{config.seed}:fabric:{node}:{self.device}")


#: A sample's view of a rank at a time: the phase it is in, or None for "no sample".
PhaseOf = Callable[[RankState, int], SpanPhase | None]


class TrainingJobSimulator:
    """Generates the event stream of one job; subclass and override the hooks to inject faults."""

    def __init__(self, config: SimulationConfig, gpu: GpuProfile = H100_SXM) -> None:
        self.config = config
        self.gpu_profile = gpu
        self.start_ns = (
            config.start_ns if config.start_ns is not None else time.time_ns() // _NS * _NS
        )
        self.end_limit_ns = self.start_ns + round(config.duration_s * _NS)
        self.step_ns = round(config.step_time_s * _NS)
        self.sample_ns = max(1, round(config.sample_interval_s * _NS))
        self.heartbeat_ns = max(1, round(config.heartbeat_interval_s * _NS))
        self.fabric_ns = (
            max(1, round(config.fabric_interval_s * _NS)) if config.fabric_interval_s else None
        )
        self.timeout_ns = round(config.nccl_timeout_s * _NS)
        self.ranks = [RankState(config, r, gpu) for r in range(config.ranks)]
        self.node_names = [config.node_name_at(i) for i in range(config.nodes)]
        self.node_index = {name: i for i, name in enumerate(self.node_names)}
        #: Source-clock offset per node (ns): every timestamp that node stamps is shifted by it.
        self.clock_offsets: dict[str, int] = {}
        #: When set, the collective in flight at this (true) time never completes and
        #: :meth:`failing_step` renders the rest of the job.
        self.stall_ns: int | None = None
        #: node_inventory per node at start (a fault injector may need it regardless of config)
        self.emit_inventory = config.inventory
        #: The start of the step whose timings the hooks are being asked for.
        self.step_start_ns = self.start_ns
        self._id_rng = random.Random(
            f"{config.seed}:{config.cluster}:{config.job_id}:{self.start_ns}:ids"
        )
        self._delay_rng = random.Random(f"{config.seed}:delay")
        self._collective_rng = random.Random(f"{config.seed}:collective")
        self._heartbeat_seq = dict.fromkeys(self.node_names, 0)
        self._nominal = {p: round(share * self.step_ns) for p, share in NOMINAL_SHARE.items()}
        self._plans: dict[int, StepPlan] = {}
        self._templates: dict[str, list[dict[str, Any]]] = {}
        self._thermal_decay = 1.0 - math.exp(-(self.sample_ns / _NS) / gpu.thermal_tau_s)
        self._next_sample = self.start_ns
        self._next_heartbeat = self.start_ns
        self._next_fabric = self.start_ns
        self._ports = [
            [_PortState(config, node, h) for h in range(config.hcas_per_node)]
            for node in self.node_names
        ]

    # ----------------------------------------------------------------- hooks (fault injection)

    def phase_durations(self, step: int, rank: RankState) -> PhaseDurations:
        """How long ``rank`` spends in each compute phase of ``step`` (starting at
        :attr:`step_start_ns`).

        Hook for stragglers: thermal throttling and config drift stretch forward/backward,
        input stragglers stretch ``data_ns``.
        """
        rng, jitter, nominal = rank.timing_rng, self.config.jitter, self._nominal

        def jittered(phase: SpanPhase) -> int:
            return max(1, round(nominal[phase] * max(0.2, 1.0 + jitter * rng.gauss(0.0, 1.0))))

        return PhaseDurations(
            jittered("data"), jittered("forward"), jittered("backward"), jittered("optimizer")
        )

    def collective_duration(self, step: int) -> int:
        """The all-reduce itself, once the last rank has arrived (ns). Hook for fabric faults."""
        factor = max(0.2, 1.0 + self.config.jitter * self._collective_rng.gauss(0.0, 1.0))
        return max(1, round(self._nominal["collective"] * factor))

    def gpu_sample_payload(self, rank: RankState, phase: SpanPhase, t_ns: int) -> GpuSample:
        """One NVML-like sample of ``rank``'s GPU while it is in ``phase``.

        ``phase="other"`` means no kernel runs (the process hangs or has exited). Hook for
        thermal faults (clocks, throttle_reasons) and ECC/XID counters. Advances the rank's
        energy counter and temperature by one sample interval.
        """
        rng, gpu = rank.rng, self.gpu_profile
        if phase in ("forward", "backward"):
            util, mem_util, mem_extra = rng.uniform(90.0, 99.0), rng.uniform(35.0, 55.0), 14
        elif phase == "optimizer":
            util, mem_util, mem_extra = rng.uniform(60.0, 85.0), rng.uniform(25.0, 40.0), 10
        elif phase == "data":
            util, mem_util, mem_extra = rng.uniform(5.0, 25.0), rng.uniform(2.0, 10.0), 6
        elif phase == "other":
            util, mem_util, mem_extra = rng.uniform(0.0, 3.0), rng.uniform(0.0, 1.0), 6
        else:  # waiting in / running the collective
            util, mem_util, mem_extra = rng.uniform(20.0, 40.0), rng.uniform(8.0, 20.0), 8
        interval_s = self.sample_ns / _NS
        power = gpu.idle_power_w + (gpu.max_power_w - gpu.idle_power_w) * util / 100.0
        power = min(gpu.max_power_w, power * rng.uniform(0.96, 1.02))
        rank.energy_mj += max(1, round(power * interval_s * 1000.0))
        target = gpu.ambient_c + gpu.load_rise_c * util / 100.0
        rank.temperature_c += (target - rank.temperature_c) * self._thermal_decay
        return fast_model(
            GpuSample,
            {
                "gpu_uuid": rank.gpu_uuid,
                "sm_util_pct": round(util, 1),
                "mem_util_pct": round(mem_util, 1),
                "mem_used_bytes": rank.mem_base_bytes + mem_extra * _GIB,
                "mem_total_bytes": gpu.mem_total_bytes,
                "sm_clock_mhz": gpu.sm_clock_mhz,
                "mem_clock_mhz": gpu.mem_clock_mhz,
                "power_w": round(power, 1),
                "energy_mj": rank.energy_mj,
                "temperature_c": round(rank.temperature_c, 1),
                "throttle_reasons": 0,
                "pcie_replay_count": None,
                "ecc_sbe_total": 0,
                "ecc_dbe_total": 0,
                "remapped_rows": None,
                "nvlink_errors_total": None,
            },
        )

    def extra_events(self, step: int, start_ns: int, end_ns: int) -> list[Event]:
        """Discrete events (XIDs, link flaps, scheduler actions) with true ts in
        [start_ns, end_ns).

        Build them with the ``*_event`` builders below. The default job is healthy: none.
        """
        return []

    def node_job(self, node: str, t_ns: int) -> str | None:
        """The job a node's agent tags its node-level events (heartbeats, fabric counters) with
        at ``t_ns``; ``None``: the node sends nothing (it is dead)."""
        return self.config.job_id

    def fabric_port_state(self, node: str, hca: int, t_ns: int) -> tuple[str, str]:
        """(``state``, ``phys_state``) of the port as sysfs shows it. Hook for link flaps."""
        return "4: ACTIVE", "5: LinkUp"

    def fabric_deltas(self, node: str, hca: int, t_ns: int, interval_ns: int) -> dict[str, int]:
        """Counter increases of one port since its previous poll. Hook for link errors."""
        rng = self._ports[self.node_index[node]][hca].rng
        words = round(_TRAFFIC_WORDS_PER_S * interval_ns / _NS * rng.uniform(0.9, 1.1))
        rcv = round(words * rng.uniform(0.98, 1.02))
        return {
            "port_xmit_data": words,
            "port_rcv_data": rcv,
            "port_xmit_packets": words // 1024,  # 4 KiB MTU = 1024 words
            "port_rcv_packets": rcv // 1024,
            "port_xmit_wait": round(words * rng.uniform(1e-4, 5e-4)),
        }

    def inventory_fields(self, node: str) -> dict[str, Any]:
        """What a node runs (``NodeInventory`` fields but the fingerprint). Hook for drift."""
        hcas = [f"mlx5_{h}" for h in range(self.config.hcas_per_node)]
        return {
            "driver_version": "535.161.08",
            "cuda_version": "12.2",
            "nccl_version": "2.21.5",
            "kernel": "5.15.0-105-generic",
            "os": "Ubuntu 22.04.4 LTS",
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_count": self.config.gpus_per_node,
            "gpu_vbios": {str(g): "96.00.74.00.0C" for g in range(self.config.gpus_per_node)},
            "hca_firmware": dict.fromkeys(hcas, "28.39.1002"),
            # like the agent: nothing node-specific, so identical nodes share a fingerprint
            "extra": {"arch": "x86_64"},
        }

    def failing_step(self, plan: StepPlan) -> list[Event]:
        """All remaining events once the collective of ``plan`` can never complete (because
        :attr:`stall_ns` falls inside it). Fault injectors implement it."""
        raise NotImplementedError("stall_ns is set but failing_step is not implemented")

    # ----------------------------------------------------------------- planning

    def plan_step(self, step: int, start_ns: int) -> StepPlan:
        """The timings of ``step`` (asks the hooks once; cached so look-ahead and rendering agree).

        Steps must be planned in order: the hooks draw from per-rank random streams.
        """
        plan = self._plans.get(step)
        if plan is None:
            self.step_start_ns = start_ns
            phases = [self.phase_durations(step, r) for r in self.ranks]
            coll = self.collective_duration(step)
            end = start_ns + max(p.compute_ns for p in phases) + coll
            plan = StepPlan(step, start_ns, phases, coll, end)
            self._plans[step] = plan
        return plan

    def plan_until(self, t_ns: int) -> StepPlan:
        """Plan steps from the start until the one in flight at ``t_ns`` (which it returns)."""
        t, step = self.start_ns, 0
        while True:
            plan = self.plan_step(step, t)
            if t_ns < plan.end_ns:
                return plan
            t, step = plan.end_ns, step + 1

    @staticmethod
    def collective_seq(step: int) -> int:
        """PyTorch's ``SeqNum`` of step ``step``'s all-reduce (see :data:`INIT_COLLECTIVES`)."""
        return step + INIT_COLLECTIVES + 1

    def node_address(self, node: str) -> str:
        """The node's IPoIB address, as NCCL names a peer (``10.0.0.3<43210>`` in its logs)."""
        n = self.node_index[node] + 1
        return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"

    # ----------------------------------------------------------------- generation

    def run(self) -> Iterator[Event]:
        """Yield the job's events in non-decreasing true-time order (see the module docstring)."""
        batch_host = self.node_names[0]
        prologue: list[Event] = [
            self.scheduler_event(batch_host, self.start_ns, "job_started", "RUNNING")
        ]
        if self.emit_inventory:
            prologue.extend(self.node_inventory_event(n, self.start_ns) for n in self.node_names)
        yield from prologue
        t, step = self.start_ns, 0
        while True:
            with _gc_paused():
                plan = self.plan_step(step, t)
            self._plans.pop(step, None)
            if self.stall_ns is not None and self.stall_ns < plan.end_ns:
                with _gc_paused():
                    chunk = self.failing_step(plan)
                    self.sort_events(chunk)
                yield from chunk
                return
            if plan.end_ns > self.end_limit_ns:
                break
            with _gc_paused():
                chunk = self._render_step(plan)
            yield from chunk
            t, step = plan.end_ns, step + 1
        yield self.scheduler_event(batch_host, t, "job_completed", "COMPLETED", exit_code=0)

    def _render_step(self, plan: StepPlan) -> list[Event]:
        """Every event of a completed step, sorted."""
        chunk: list[Event] = []
        self._step_spans(plan, chunk)

        def phase_of(rank: RankState, t_ns: int) -> SpanPhase:
            return phase_at(plan, rank.rank, t_ns)

        self.periodic(plan.end_ns, chunk, phase_of)
        chunk.extend(self.extra_events(plan.step, plan.start_ns, plan.end_ns))
        # Chunks never overlap in time (a step ends where the next starts), so sorting each
        # chunk is enough for a globally ordered stream.
        self.sort_events(chunk)
        return chunk

    def sort_events(self, chunk: list[Event]) -> None:
        """Sort by true time (source ts minus the node's clock offset); stable."""
        offsets = self.clock_offsets
        if not offsets:
            chunk.sort(key=_BY_TS)
        else:
            chunk.sort(key=lambda e: e.ts - offsets.get(e.node, 0))

    def periodic(self, until_ns: int, out: list[Event], phase_of: PhaseOf) -> None:
        """GPU samples, heartbeats and fabric counters due before ``until_ns`` (true time)."""
        ns = self._next_sample
        while ns < until_ns:
            for r in self.ranks:
                phase = phase_of(r, ns)
                if phase is not None:
                    out.append(self.gpu_sample_event(r, phase, ns))
            ns += self.sample_ns
        self._next_sample = ns
        ns = self._next_heartbeat
        while ns < until_ns:
            for node in self.node_names:
                job = self.node_job(node, ns)
                if job is not None:
                    out.append(self.heartbeat_event(node, ns, job))
            ns += self.heartbeat_ns
        self._next_heartbeat = ns
        if self.fabric_ns is not None:
            ns = self._next_fabric
            while ns < until_ns:
                for node in self.node_names:
                    job = self.node_job(node, ns)
                    if job is not None:
                        for hca in range(self.config.hcas_per_node):
                            out.append(self.fabric_counters_event(node, hca, ns, job))
                ns += self.fabric_ns
            self._next_fabric = ns

    def next_event_id(self) -> str:
        """A deterministic event id (for hooks that add events, too)."""
        return f"{self._id_rng.getrandbits(128):032x}"

    def span_id(self) -> str:
        return f"{self._id_rng.getrandbits(64) or 1:016x}"

    def trace_id(self) -> str:
        return f"{self._id_rng.getrandbits(128) or 1:032x}"

    def observed_ts(self, ts: int) -> int:
        """``ts`` plus a small, seeded collector delay: when the agent publishes the event."""
        return ts + _MIN_DELAY_NS + int(self._delay_rng.random() * (_MAX_DELAY_NS - _MIN_DELAY_NS))

    def _step_spans(self, plan: StepPlan, out: list[Event]) -> None:
        """Per rank: data/forward/backward/optimizer, collective until ``plan.end_ns``, the step.

        All ranks share the step's trace id; the phase spans are children of the rank's step span.
        The hot path of the generator: the same events :meth:`span_event` builds, with the
        per-rank envelope fields copied from a template and the random streams bound locally.
        """
        trace_id = self.trace_id()
        step, start, end = plan.step, plan.start_ns, plan.end_ns
        attrs = self.collective_attributes(step)
        ids = self._id_rng.getrandbits
        delay = self._delay_rng.random
        offsets = self.clock_offsets
        lo, spread = _MIN_DELAY_NS, _MAX_DELAY_NS - _MIN_DELAY_NS
        append = out.append
        templates = self._span_templates()

        def emit(
            tpl: dict[str, Any], phase: SpanPhase, span_id: str, parent: str, s: int, e: int
        ) -> None:
            off = offsets.get(tpl["node"], 0) if offsets else 0
            env = tpl.copy()
            env["event_id"] = f"{ids(128):032x}"
            env["ts"] = e + off
            env["observed_ts"] = e + lo + int(delay() * spread) + off
            env["payload"] = fast_model(
                Span,
                {
                    "name": SPAN_NAME[phase],
                    "phase": phase,
                    "trace_id": trace_id,
                    "span_id": span_id,
                    "parent_span_id": parent,
                    "start_ns": s + off,
                    "end_ns": e + off,
                    "step": step,
                    "status": "ok",
                    "error_type": "",
                    "error_message": "",
                    "attributes": dict(attrs) if phase == "collective" else {},
                },
            )
            append(fast_model(SpanEvent, env))

        for tpl, durations in zip(templates, plan.phases, strict=True):
            step_id = f"{ids(64) or 1:016x}"
            t = start
            for phase, dur in zip(COMPUTE_PHASES, durations, strict=True):
                emit(tpl, phase, f"{ids(64) or 1:016x}", step_id, t, t + dur)
                t += dur
            emit(tpl, "collective", f"{ids(64) or 1:016x}", step_id, t, end)
            emit(tpl, "step", step_id, "", start, end)

    def _span_templates(self) -> list[dict[str, Any]]:
        """Per rank, the envelope fields every span of that rank shares."""
        return self._rank_templates("span/1", "span")

    def _rank_templates(self, schema_id: str, kind: str) -> list[dict[str, Any]]:
        """Per rank, the envelope fields every event of ``kind`` from that rank shares."""
        templates = self._templates.get(kind)
        if templates is None:
            cfg = self.config
            templates = self._templates[kind] = [
                {
                    "event_id": "",
                    "schema_id": schema_id,
                    "kind": kind,
                    "cluster": cfg.cluster,
                    "job_id": cfg.job_id,
                    "node": r.node,
                    "rank": r.rank,
                    "local_rank": r.local_rank,
                    "gpu": r.gpu,
                    "ts": 0,
                    "observed_ts": 0,
                    "clock_offset_ns": None,
                    "payload": None,
                }
                for r in self.ranks
            ]
        return templates

    def collective_attributes(self, step: int) -> dict[str, str | int | float | bool]:
        """Attributes of a collective span: the op and PyTorch's sequence number."""
        return {"collective.op": "all_reduce", "collective.seq": self.collective_seq(step)}

    # ----------------------------------------------------------------- event builders

    def _envelope(
        self, node: str, t_ns: int, rank: RankState | None, job_id: str | None = None
    ) -> dict[str, Any]:
        """Envelope fields for an event that ``node`` stamps at true time ``t_ns``."""
        off = self.clock_offsets.get(node, 0) if self.clock_offsets else 0
        return {
            "event_id": self.next_event_id(),
            "cluster": self.config.cluster,
            "job_id": self.config.job_id if job_id is None else job_id,
            "node": node,
            "rank": None if rank is None else rank.rank,
            "local_rank": None if rank is None else rank.local_rank,
            "gpu": None if rank is None else rank.gpu,
            "ts": t_ns + off,
            "observed_ts": self.observed_ts(t_ns) + off,
            "clock_offset_ns": None,
        }

    def span_event(
        self,
        rank: RankState,
        step: int,
        phase: SpanPhase,
        trace_id: str,
        parent_span_id: str | None,
        start_ns: int,
        end_ns: int,
        *,
        span_id: str | None = None,
        status: str = "ok",
        error_type: str = "",
        error_message: str = "",
        attrs: dict[str, str | int | float | bool] | None = None,
    ) -> SpanEvent:
        """One span ending at true ``end_ns`` (its envelope ts); ``parent_span_id=None``: root."""
        off = self.clock_offsets.get(rank.node, 0) if self.clock_offsets else 0
        payload = fast_model(
            Span,
            {
                "name": SPAN_NAME[phase],
                "phase": phase,
                "trace_id": trace_id,
                "span_id": span_id or self.span_id(),
                "parent_span_id": parent_span_id or "",
                "start_ns": start_ns + off,
                "end_ns": end_ns + off,
                "step": step,
                "status": status,
                "error_type": error_type,
                "error_message": error_message,
                "attributes": dict(attrs) if attrs else {},
            },
        )
        return fast_model(
            SpanEvent,
            {
                "event_id": f"{self._id_rng.getrandbits(128):032x}",
                "schema_id": "span/1",
                "kind": "span",
                "cluster": self.config.cluster,
                "job_id": self.config.job_id,
                "node": rank.node,
                "rank": rank.rank,
                "local_rank": rank.local_rank,
                "gpu": rank.gpu,
                "ts": end_ns + off,
                "observed_ts": self.observed_ts(end_ns) + off,
                "clock_offset_ns": None,
                "payload": payload,
            },
        )

    def gpu_sample_event(self, rank: RankState, phase: SpanPhase, t_ns: int) -> GpuSampleEvent:
        off = self.clock_offsets.get(rank.node, 0) if self.clock_offsets else 0
        env = self._rank_templates("gpu_sample/1", "gpu_sample")[rank.rank].copy()
        env["event_id"] = self.next_event_id()
        env["ts"] = t_ns + off
        env["observed_ts"] = self.observed_ts(t_ns) + off
        env["payload"] = self.gpu_sample_payload(rank, phase, t_ns)
        return fast_model(GpuSampleEvent, env)

    def heartbeat_event(self, node: str, t_ns: int, job_id: str | None = None) -> HeartbeatEvent:
        """The agent tags its heartbeats with the job that owns the node, so they share the
        job's partition and a per-job detector sees a silent node."""
        seq = self._heartbeat_seq[node]
        self._heartbeat_seq[node] = seq + 1
        env = self._envelope(node, t_ns, None, job_id)
        env["schema_id"] = "heartbeat/1"
        env["kind"] = "heartbeat"
        env["payload"] = fast_model(
            Heartbeat,
            {
                "agent": AGENT_NAME,
                "agent_version": AGENT_VERSION,
                "seq": seq,
                "interval_s": self.config.heartbeat_interval_s,
            },
        )
        return fast_model(HeartbeatEvent, env)

    def fabric_counters_event(
        self, node: str, hca: int, t_ns: int, job_id: str | None = None
    ) -> FabricCountersEvent:
        """One poll of ``mlx5_<hca>`` port 1: totals, and per-second rates after the first poll
        (data counters as bytes/s under ``xmit_bytes``/``rcv_bytes``, like the fabric collector).
        """
        port = self._ports[self.node_index[node]][hca]
        counters = port.counters
        rates: dict[str, float] = {}
        interval_s: float | None = None
        if port.prev_ns is not None:
            interval = t_ns - port.prev_ns
            interval_s = interval / _NS
            per_s = _NS / interval
            rates = dict(_ZERO_RATES)
            for name, d in self.fabric_deltas(node, hca, t_ns, interval).items():
                counters[name] += d
                rate_name = _BYTE_RATES.get(name)
                if rate_name is not None:
                    rates[rate_name] = round(d * 4 * per_s, 1)
                else:
                    rates[name] = round(d * per_s, 3)
        port.prev_ns = t_ns
        state, phys = self.fabric_port_state(node, hca, t_ns)
        env = self._envelope(node, t_ns, None, job_id)  # node-level: no rank
        env["schema_id"] = "fabric_counters/1"
        env["kind"] = "fabric_counters"
        env["payload"] = fast_model(
            FabricCounters,
            {
                "device": port.device,
                "port": 1,
                "link_layer": "InfiniBand",
                "state": state,
                "phys_state": phys,
                "rate": "400 Gb/sec (4X NDR)",
                "counters": dict(counters),
                "rates_per_s": rates,
                "interval_s": interval_s,
            },
        )
        return fast_model(FabricCountersEvent, env)

    def scheduler_event(
        self,
        node: str,
        t_ns: int,
        event_type: SchedulerEventType,
        state: str,
        *,
        exit_code: int | None = None,
        reason: str = "",
        rank: RankState | None = None,
    ) -> SchedulerEventEvent:
        return SchedulerEventEvent(
            **self._envelope(node, t_ns, rank),
            schema_id="scheduler_event/1",
            kind="scheduler_event",
            payload=SchedulerEvent(
                source="simulator",
                event_type=event_type,
                state=state,
                reason=reason,
                exit_code=exit_code,
            ),
        )

    def gpu_event(
        self,
        rank: RankState,
        t_ns: int,
        event_type: GpuEventType,
        *,
        xid: int | None = None,
        count: int = 1,
        message: str = "",
    ) -> GpuEventEvent:
        """A GPU event as the GPU collector sends it (job and rank from its process binding)."""
        return GpuEventEvent(
            **self._envelope(rank.node, t_ns, rank),
            schema_id="gpu_event/1",
            kind="gpu_event",
            payload=GpuEvent(
                event_type=event_type,
                gpu_uuid=rank.gpu_uuid,
                xid=xid,
                count=count,
                message=message,
            ),
        )

    def fabric_event(
        self, node: str, t_ns: int, payload: FabricEvent, rank: RankState | None = None
    ) -> FabricEventEvent:
        """An HCA port event (node-level, ``rank=None``) or an NVLink event (on a GPU's rank)."""
        return FabricEventEvent(
            **self._envelope(node, t_ns, rank),
            schema_id="fabric_event/1",
            kind="fabric_event",
            payload=payload,
        )

    def comm_event(self, rank: RankState, t_ns: int, payload: CommEvent) -> CommEventEvent:
        """A parsed NCCL / ProcessGroupNCCL log line of ``rank``'s process."""
        return CommEventEvent(
            **self._envelope(rank.node, t_ns, rank),
            schema_id="comm_event/1",
            kind="comm_event",
            payload=payload,
        )

    def node_inventory_event(self, node: str, t_ns: int) -> NodeInventoryEvent:
        fields = self.inventory_fields(node)
        return NodeInventoryEvent(
            **self._envelope(node, t_ns, None),
            schema_id="node_inventory/1",
            kind="node_inventory",
            payload=NodeInventory(**fields, fingerprint=inventory_fingerprint(fields)),
        )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while one chunk is built.

    Why: a chunk of a 4,096-rank step is ~30k events (~120k objects) that all stay alive until
    they are yielded, so the collector rescans them over and over for nothing (they hold no
    reference cycles); measured ~30 % of generation time. The pause covers only synchronous
    chunk building (no caller code runs inside it) and restores the previous state.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def phase_at(plan: StepPlan, rank: int, t_ns: int) -> SpanPhase:
    """Which phase ``rank`` is in at ``t_ns`` (inside the step ``plan``)."""
    offset = t_ns - plan.start_ns
    for phase, dur in zip(COMPUTE_PHASES, plan.phases[rank], strict=True):
        if offset < dur:
            return phase
        offset -= dur
    return "collective"


_BY_TS = attrgetter("ts")


def create_simulator(config: SimulationConfig | None = None) -> TrainingJobSimulator:
    """Factory (OpenTelemetry Collector style): typed config in, component out."""
    return TrainingJobSimulator(config or SimulationConfig())


def simulate(config: SimulationConfig | None = None) -> Iterator[Event]:
    """The events of one healthy synchronous training job, in event-time order."""
    return create_simulator(config).run()


class SimulationSummary(BaseModel):
    """What a stream contained: enough to print after ``rankscope demo`` and to assert in tests."""

    model_config = ConfigDict(frozen=True)

    counts: dict[str, int]
    total: int
    first_ts: int | None
    last_ts: int | None

    @property
    def duration_s(self) -> float:
        if self.first_ts is None or self.last_ts is None:
            return 0.0
        return (self.last_ts - self.first_ts) / _NS


def summarize(events: Iterable[Envelope]) -> SimulationSummary:
    """Count events per kind and the event-time span they cover (consumes ``events``)."""
    counts: dict[str, int] = {}
    first: int | None = None
    last: int | None = None
    total = 0
    for e in events:
        counts[e.kind] = counts.get(e.kind, 0) + 1
        total += 1
        first = e.ts if first is None or e.ts < first else first
        last = e.ts if last is None or e.ts > last else last
    return SimulationSummary(counts=counts, total=total, first_ts=first, last_ts=last)


E = TypeVar("E", bound=Envelope)


def pace(
    events: Iterable[E],
    speed: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[E]:
    """Release each event no earlier than its event-time offset from the first event / ``speed``.

    ``speed=60`` plays a two-minute job in two seconds; ``0`` or ``inf`` means no pacing. Used so
    a demo exercises the stream workers' windows and watermarks in (scaled) real time.
    """
    if math.isnan(speed) or speed < 0:
        raise ValueError(f"speed must be >= 0 (0 or inf: as fast as possible), got {speed}")
    if speed == 0 or math.isinf(speed):
        yield from events
        return
    first_ts: int | None = None
    wall0 = 0.0
    for e in events:
        if first_ts is None:
            first_ts, wall0 = e.ts, clock()
        else:
            delay = wall0 + (e.ts - first_ts) / _NS / speed - clock()
            if delay > 0:
                sleep(delay)
        yield e
