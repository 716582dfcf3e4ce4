"""The fault catalogue as typed, composable specs, injected into the job simulator with labels.

Why: every detector (stragglers, hangs, unresponsive nodes) and the root-cause stage is judged
against ground truth, and the hard part of real incidents is the *cascade*: one GPU falls off the
bus and ten seconds later every other rank logs an NCCL watchdog timeout, so the last exception
points at the wrong place. This module reproduces those cascades with realistic event shapes and
ordering (the same kinds, fields and message texts the GPU, fabric, NCCL-log and scheduler
collectors produce), and says for each run what the right answer is (:class:`FaultLabel`).

Usage::

    events, labels = simulate_with_faults(config, [GpuFellOffBus(), ClockSkew()])
    write_labels(path, labels, config=config, faults=faults)

Composition: any number of non-terminal faults (stragglers, config drift), at most one terminal
fault (one that kills or hangs the job), at most one ``clock_skew`` (a modifier: it changes only
timestamps) and at most one ``noise``. Unset targets, onsets and magnitudes are drawn from a
random stream seeded by (config seed, scenario, occurrence), so a run is a pure function of
(config, faults) and a different seed moves the fault to another rank/node, time and size.

Time is compressed (``SimulationConfig.nccl_timeout_s`` defaults to 10 s instead of PyTorch's
600 s) but the order of events is the real one: precursor (XID, link down, preemption, OOM kill)
at the onset, then the collective that never completes, then the watchdog timeouts of the
surviving ranks ``nccl_timeout_s`` after each entered it, then ``job_failed``.

Onset markers (an event whose *true* time is exactly ``FaultLabel.onset_ns``):
gpu_fell_off_bus/ecc_dbe/nvlink_error: the ``gpu_event`` ``xid``; ib_link_flap: ``fabric_event``
``link_down``; thermal_straggler: ``gpu_event`` ``throttle_start``; preemption: ``scheduler_event``
``preempted``; host_oom: ``scheduler_event`` ``oom_killed``; hang: the hung rank's last span ends
at or before it; node_unresponsive: the node's last event is before it; input_straggler: the
first slowed data span is the first one starting at or after it; config_drift: the job start.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from rankscope.schemas import Event
from rankscope.schemas.derived import CauseClass, StragglerClass
from rankscope.schemas.payloads import CommEvent, FabricEvent, GpuSample, SpanPhase
from rankscope.simulation.simulator import (
    COMPUTE_PHASES,
    PhaseDurations,
    RankState,
    SimulationConfig,
    StepPlan,
    TrainingJobSimulator,
    phase_at,
)

__all__ = [
    "OUTCOMES",
    "SCENARIOS",
    "TERMINAL_SCENARIOS",
    "ClockSkew",
    "ConfigDrift",
    "EccDbe",
    "Fault",
    "FaultInjectingSimulator",
    "FaultLabel",
    "GpuFellOffBus",
    "Hang",
    "HostOom",
    "IbLinkFlap",
    "InputStraggler",
    "LabelCause",
    "LabelFile",
    "NodeUnresponsive",
    "Noise",
    "NvlinkError",
    "Outcome",
    "Preemption",
    "ScenarioName",
    "SuiteCase",
    "ThermalStraggler",
    "parse_faults",
    "read_labels",
    "scenario_suite",
    "simulate_with_faults",
    "write_labels",
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
Outcome = Literal["root_cause", "straggler", "hang", "unresponsive_node", "none"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
#: what a label names as the true cause: an incident's cause class, or a straggler's class for the
#: faults that only slow a job down (both declared once, in the event contracts)
LabelCause = CauseClass | StragglerClass

_NS = 1_000_000_000
_MS = 1_000_000
# NVML clocks-event reason bits (nvmlClocksEventReason*; checked against pynvml).
_SW_POWER_CAP = 0x4
_SW_THERMAL = 0x20
_HW_THERMAL = 0x40
_NCCL_VERSION = "2.21.5"
#: elements of one DDP gradient bucket (25 MiB of fp32): what WorkNCCL's NumelIn shows
_NUMEL = 6_553_600
_OP = "ALLREDUCE"
#: the simulator models one port per HCA (``mlx5_<i>`` port 1), as on NDR compute rails
_IB_PORT = 1
_PG_DESC = "0(default_pg)"
_CUDA_HINT = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
_NVLINK_CUDA = "Cuda failure 'uncorrectable NVLink error detected during the execution'"
_REMOTE = (
    "NCCL error: remote process exited or there was a network error, NCCL version "
    f"{_NCCL_VERSION}\nncclRemoteError: A call failed possibly due to a network error or a "
    "remote process exiting prematurely."
)


def _pg(rank: int) -> str:
    """PyTorch >= 2.5's ProcessGroupNCCL log prefix for the default process group."""
    return f"[PG ID 0 PG GUID {_PG_DESC} Rank {rank}]"


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


# ==================================================================================== labels


class FaultLabel(BaseModel):
    """The right answer for one fault of one run (true times, never skewed ones).

    ``fault_ranks``: ranks the fault hits directly (the dead/slow/hung rank, a killed node's
    ranks). ``symptom_ranks``: ranks that only show the consequence (NCCL timeouts or errors,
    error spans, waiting longer on a straggler). ``collective_seq``: PyTorch's SeqNum of the
    collective that never completed (= the ``collective.seq`` span attribute of that step).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: ScenarioName
    cluster: str
    job_id: str
    seed: int
    onset_ns: int | None
    outcome: Outcome
    cause_class: LabelCause | None = None
    node: str | None = None
    gpu: int | None = None
    rank: int | None = None
    hca_device: str | None = None
    hca_port: int | None = None
    xid: int | None = None
    fault_ranks: list[int] = Field(default_factory=list)
    symptom_ranks: list[int] = Field(default_factory=list)
    collective_op: str | None = None
    collective_seq: int | None = None
    step: int | None = None
    failure_ns: int | None = Field(default=None, description="True time of job_failed.")
    skewed_node: str | None = None
    skew_offset_ns: int | None = None
    modifiers: list[str] = Field(default_factory=list)
    details: dict[str, str | int | float | bool] = Field(default_factory=dict)


class LabelFile(BaseModel):
    """One run's label file: what was simulated and the answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    cluster: str
    job_id: str
    config: SimulationConfig | None = None
    faults: list[Fault] = Field(default_factory=list)
    labels: list[FaultLabel]


def write_labels(
    path: str | Path,
    labels: Sequence[FaultLabel],
    *,
    config: SimulationConfig | None = None,
    faults: Sequence[Fault] = (),
) -> Path:
    """Write one run's labels (and, for reproduction, its config and fault specs) as JSON."""
    if not labels:
        raise ValueError("a run has at least one label")
    out = Path(path)
    doc = LabelFile(
        cluster=labels[0].cluster,
        job_id=labels[0].job_id,
        config=config,
        faults=list(faults),
        labels=list(labels),
    )
    out.write_text(doc.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return out


def read_labels(path: str | Path) -> LabelFile:
    return LabelFile.model_validate_json(Path(path).read_text(encoding="utf-8"))


# ==================================================================================== injection


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


class FaultInjectingSimulator(TrainingJobSimulator):
    """The job simulator with faults applied; :attr:`labels` is known before :meth:`run`."""

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

        resolved = self._resolve()
        skew = next((r for r in resolved if r.spec.scenario == "clock_skew"), None)
        if skew is not None and skew.node is not None:
            self.clock_offsets[skew.node] = round(skew.magnitude * _NS)
        for res in resolved:
            self._apply(res)
        terminal = next((r for r in resolved if r.spec.scenario in TERMINAL_SCENARIOS), None)
        if terminal is not None:
            self.failure = self._plan_failure(terminal)
            self.stall_ns = self.failure.onset_ns
        self._pending.sort(key=lambda p: (p[0], p[1]))
        self.labels = self._labels(resolved, skew)

    # ----------------------------------------------------------------- resolution

    def _resolve(self) -> list[_Resolved]:
        cfg = self.config
        seen: dict[str, int] = {}
        out: list[_Resolved] = []
        for spec in self.faults:
            k = seen.get(spec.scenario, 0)
            seen[spec.scenario] = k + 1
            rng = random.Random(f"{cfg.seed}:fault:{spec.scenario}:{k}")
            res = _Resolved(spec, rng, self.start_ns)
            if isinstance(spec, _OnRank):
                r = spec.rank if spec.rank is not None else rng.randrange(cfg.ranks)
                res.rank = self.ranks[r]
                res.node = res.rank.node
            elif isinstance(spec, (_OnNode, ConfigDrift)):
                n = spec.node if spec.node is not None else rng.randrange(cfg.nodes)
                res.node = self.node_names[n]
            if isinstance(spec, _Timed):
                res.onset_ns = self._onset(spec, rng)
            if isinstance(spec, ThermalStraggler):
                res.magnitude = spec.slowdown or rng.uniform(1.2, 1.4)
            elif isinstance(spec, InputStraggler):
                res.magnitude = spec.factor or rng.uniform(3.0, 10.0)
            elif isinstance(spec, ConfigDrift):
                res.magnitude = spec.slowdown or rng.uniform(1.05, 1.10)
            elif isinstance(spec, IbLinkFlap):
                assert res.node is not None
                present = len(self._node_ranks(res.node))
                res.hca = (
                    spec.hca
                    if spec.hca is not None
                    else rng.randrange(min(cfg.hcas_per_node, present))
                )
                res.magnitude = spec.down_s or rng.uniform(0.5, 3.0)
            elif isinstance(spec, ClockSkew):
                res.magnitude = spec.offset_s
            out.append(res)
        for res in out:
            if isinstance(res.spec, ClockSkew):
                res.node = self._skew_node(res.spec, res.rng, out)
        return out

    def _onset(self, spec: Fault, rng: random.Random) -> int:
        """Terminal faults in 30-55 % of the run, stragglers in 15-35 % (enough windows after),
        never in the first two steps (the job needs a baseline)."""
        duration = self.config.duration_s
        if isinstance(spec, _Timed) and spec.onset_s is not None:
            return self.start_ns + round(spec.onset_s * _NS)
        lo, hi = (0.3, 0.55) if spec.scenario in TERMINAL_SCENARIOS else (0.15, 0.35)
        at = rng.uniform(lo, hi) * duration
        floor = 2 * self.config.step_time_s
        if at < floor < duration * 0.9:
            at = floor + rng.uniform(0.0, 0.5) * self.config.step_time_s
        return self.start_ns + round(at * _NS)

    def _skew_node(self, spec: ClockSkew, rng: random.Random, resolved: list[_Resolved]) -> str:
        if spec.node is not None:
            return self.node_names[spec.node]
        culprit = next(
            (
                r.node
                for r in sorted(resolved, key=lambda r: r.spec.scenario not in TERMINAL_SCENARIOS)
                if r.node is not None and not isinstance(r.spec, (ClockSkew, Noise))
            ),
            None,
        )
        if spec.target == "culprit" and culprit is not None:
            return culprit
        others = [n for n in self.node_names if n != culprit] or self.node_names
        return others[rng.randrange(len(others))]

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

    # ----------------------------------------------------------------- effects

    def _apply(self, res: _Resolved) -> None:
        """Set up what a fault changes before any step is planned (timings, samples, events)."""
        spec, rank, t0 = res.spec, res.rank, res.onset_ns
        if isinstance(spec, GpuFellOffBus):
            assert rank is not None
            self._add(t0, self.gpu_event(rank, t0, "xid", xid=79, message="XID 79"))
            lost = self._next_tick(t0, self.sample_ns)
            msg = f"GPU {rank.gpu} not answering NVML: GPU is lost"
            self._add(lost, self.gpu_event(rank, lost, "gpu_unresponsive", message=msg))
        elif isinstance(spec, EccDbe):
            assert rank is not None
            self._add(t0, self.gpu_event(rank, t0, "xid", xid=48, message="XID 48"))
            t1 = t0 + res.rng.randint(1 * _MS, 5 * _MS)
            msg = "nvml event: double-bit ECC error"
            self._add(t1, self.gpu_event(rank, t1, "ecc", message=msg))
            t2 = self._next_tick(t1, self.sample_ns)
            msg = "double-bit (uncorrected) ECC errors +1 (volatile total 1)"
            self._add(t2, self.gpu_event(rank, t2, "ecc", count=1, message=msg))
            self._sample_mods.setdefault(rank.rank, []).append(_SampleMod(t0, dbe=1))
        elif isinstance(spec, NvlinkError):
            assert rank is not None
            self._add(t0, self.gpu_event(rank, t0, "xid", xid=74, message="XID 74"))
            link = res.link = spec.link if spec.link is not None else res.rng.randrange(18)
            delta = res.rng.randint(20, 800)
            t1 = self._next_tick(t0, self.sample_ns)
            payload = FabricEvent(
                event_type="nvlink_error",
                device=rank.gpu_uuid,
                port=link,
                counter="dl_crc_flit",
                delta=delta,
                message=f"GPU {rank.gpu} NVLink {link} dl_crc_flit +{delta} (total {delta})",
            )
            self._add(t1, self.fabric_event(rank.node, t1, payload, rank))
        elif isinstance(spec, IbLinkFlap):
            self._apply_ib_flap(res)
        elif isinstance(spec, ThermalStraggler):
            assert rank is not None
            self._compute_mods.setdefault(rank.rank, []).append((t0, res.magnitude))
            reasons = _SW_THERMAL | _HW_THERMAL
            mod = _SampleMod(t0, throttle=reasons, clock_factor=1 / res.magnitude, hot=True)
            self._sample_mods.setdefault(rank.rank, []).append(mod)
            names = "sw_thermal_slowdown, hw_thermal_slowdown"
            msg = f"clocks throttled: {names} (active: {names})"
            self._add(t0, self.gpu_event(rank, t0, "throttle_start", message=msg))
        elif isinstance(spec, InputStraggler):
            assert rank is not None
            jitter = random.Random(f"{self.config.seed}:input:{rank.rank}")
            self._data_mods.setdefault(rank.rank, []).append((t0, res.magnitude, jitter))
        elif isinstance(spec, ConfigDrift):
            assert res.node is not None
            self.emit_inventory = True
            self._inventory[res.node] = {
                "driver_version": spec.driver_version,
                "nccl_version": spec.nccl_version,
                "cuda_version": spec.cuda_version,
            }
            for r in self._node_ranks(res.node):
                self._compute_mods.setdefault(r.rank, []).append((self.start_ns, res.magnitude))
        elif isinstance(spec, Preemption):
            assert res.node is not None
            reason = f"node {res.node} preempted: capacity reclaimed for a higher-priority job"
            self._add(
                t0, self.scheduler_event(res.node, t0, "preempted", "PREEMPTED", reason=reason)
            )
            self._left[res.node] = t0
        elif isinstance(spec, HostOom):
            assert rank is not None
            pid = self._pids[rank.rank]
            vm = res.rng.randint(900, 1400) * 1024 * 1024
            rss = res.rng.randint(400, 900) * 1024 * 1024
            reason = (
                f"Out of memory: Killed process {pid} (python3) total-vm:{vm}kB, "
                f"anon-rss:{rss}kB, file-rss:0kB, shmem-rss:0kB, UID:1000 oom_score_adj:0"
            )
            ev = self.scheduler_event(
                rank.node,
                t0,
                "oom_killed",
                "OUT_OF_MEMORY",
                exit_code=137,
                reason=reason,
                rank=rank,
            )
            self._add(t0, ev)
        elif isinstance(spec, NodeUnresponsive):
            assert res.node is not None
            self._silent[res.node] = t0
        elif isinstance(spec, Noise):
            self._apply_noise(res)
        # Hang, ClockSkew: nothing up front (hang is all in the failing step).

    def _apply_ib_flap(self, res: _Resolved) -> None:
        assert res.node is not None and res.hca is not None
        node, hca, port, t0 = res.node, res.hca, _IB_PORT, res.onset_ns
        device = f"mlx5_{hca}"
        up = t0 + round(res.magnitude * _NS)
        self._port_down[(node, hca)] = (t0, up)
        down = FabricEvent(
            event_type="link_down",
            device=device,
            port=port,
            old_state="4: ACTIVE",
            new_state="1: DOWN",
            message=f"{device} port {port}: 4: ACTIVE -> 1: DOWN",
        )
        self._add(t0, self.fabric_event(node, t0, down))
        back = FabricEvent(
            event_type="link_up",
            device=device,
            port=port,
            old_state="1: DOWN",
            new_state="4: ACTIVE",
            message=f"{device} port {port}: 1: DOWN -> 4: ACTIVE",
        )
        self._add(up, self.fabric_event(node, up, back))
        deltas = {
            "symbol_error": res.rng.randint(50, 5000),
            "link_downed": 1,
            "link_error_recovery": 1,
            "port_rcv_errors": res.rng.randint(5, 200),
        }
        self._port_errors.setdefault((node, hca), []).append((t0, deltas))
        poll = self._next_tick(t0, self.fabric_ns or _NS)  # the poll that sees it
        for counter, delta in deltas.items():
            ev = FabricEvent(
                event_type="error_counter_increase",
                device=device,
                port=port,
                counter=counter,
                delta=delta,
                message=f"{counter} +{delta}",
            )
            self._add(poll, self.fabric_event(node, poll, ev))

    def _apply_noise(self, res: _Resolved) -> None:
        """Transient slowdowns and benign events: each is real, none is a fault."""
        spec, rng, cfg = res.spec, res.rng, self.config
        assert isinstance(spec, Noise)
        est_steps = max(1, int(cfg.duration_s / cfg.step_time_s * 0.9))
        count = spec.slowdowns if spec.slowdowns is not None else rng.randint(3, 6)
        ranks = rng.sample(range(cfg.ranks), min(count, cfg.ranks))
        ranks += [rng.randrange(cfg.ranks) for _ in range(count - len(ranks))]
        for r in ranks:
            step = rng.randrange(min(2, est_steps - 1), max(3, est_steps - 2))
            what = "data" if rng.random() < 0.3 else "compute"
            factor = rng.uniform(3.0, 6.0) if what == "data" else rng.uniform(1.3, 2.0)
            for s in range(step, step + rng.randint(1, 2)):
                self._transient[(r, s)] = (what, factor)
        if not spec.benign_events:
            return
        span = self.end_limit_ns - self.start_ns

        def when() -> int:  # well inside the run: the last full step ends before end_limit
            return self.start_ns + round(rng.uniform(0.1, 0.75) * span)

        # one corrected (single-bit) ECC error: NVML event, then the poll's counter increase
        rank, t = self.ranks[rng.randrange(cfg.ranks)], when()
        self._add(t, self.gpu_event(rank, t, "ecc", message="nvml event: single-bit ECC error"))
        t2 = self._next_tick(t, self.sample_ns)
        msg = "single-bit (corrected) ECC errors +1 (volatile total 1)"
        self._add(t2, self.gpu_event(rank, t2, "ecc", count=1, message=msg))
        self._sample_mods.setdefault(rank.rank, []).append(_SampleMod(t, sbe=1))
        # a short power-cap throttle (no slowdown)
        rank, t = self.ranks[rng.randrange(cfg.ranks)], when()
        stop = t + round(rng.uniform(1.0, 2.0) * _NS)
        msg = "clocks throttled: sw_power_cap (active: sw_power_cap)"
        self._add(t, self.gpu_event(rank, t, "throttle_start", message=msg))
        msg = "throttle ended: sw_power_cap (active: none)"
        self._add(stop, self.gpu_event(rank, stop, "throttle_stop", message=msg))
        self._sample_mods.setdefault(rank.rank, []).append(
            _SampleMod(t, stop, throttle=_SW_POWER_CAP)
        )
        # one IB symbol error on some port
        node, hca, t = (
            self.node_names[rng.randrange(cfg.nodes)],
            rng.randrange(cfg.hcas_per_node),
            when(),
        )
        self._port_errors.setdefault((node, hca), []).append((t, {"symbol_error": 1}))
        poll = self._next_tick(t, self.fabric_ns or _NS)
        ev = FabricEvent(
            event_type="error_counter_increase",
            device=f"mlx5_{hca}",
            port=1,
            counter="symbol_error",
            delta=1,
            message="symbol_error +1",
        )
        self._add(poll, self.fabric_event(node, poll, ev))
        # NCCL INFO chatter
        for _ in range(2):
            rank, t = self.ranks[rng.randrange(cfg.ranks)], when()
            text = (
                f"NCCL INFO comm 0x{rng.getrandbits(44):x} rank {rank.rank} nranks {cfg.ranks} "
                f"cudaDev {rank.gpu} busId {0x1B + rank.gpu * 0x20:x}000 - Init COMPLETE"
            )
            payload = CommEvent(
                source="nccl", event_type="other", pid=self._pids[rank.rank], message=text
            )
            self._add(t, self.comm_event(rank, t, payload))

    # ----------------------------------------------------------------- the failure

    def _plan_failure(self, res: _Resolved) -> _Failure:
        """Fix every rank's fate in the step in flight at the onset (true times)."""
        spec, rng = res.spec, res.rng
        onset = res.onset_ns
        plan = self.plan_until(onset)
        if isinstance(spec, Hang):
            assert res.rank is not None
            if onset >= plan.arrival_ns(res.rank.rank):
                # The rank is already waiting in this collective; a hang "in" a collective that
                # the rank entered is not this scenario: it hangs in its next step's compute.
                plan = self.plan_step(plan.step + 1, plan.end_ns)
                onset = plan.start_ns + round(
                    rng.uniform(0.1, 0.9) * plan.phases[res.rank.rank].compute_ns
                )
        f = _Failure(spec.scenario, onset, plan, self.collective_seq(plan.step))
        arrival = [plan.arrival_ns(r.rank) for r in self.ranks]
        rank = res.rank
        if isinstance(spec, GpuFellOffBus):
            assert rank is not None
            f.stop[rank.rank] = f.gone[rank.rank] = onset
        elif isinstance(spec, EccDbe):
            assert rank is not None
            t = onset + rng.randint(20 * _MS, 300 * _MS)
            msg = "CUDA error: uncorrectable ECC error encountered" + _CUDA_HINT
            f.errors[rank.rank] = (t, "RuntimeError", msg)
            f.idle[rank.rank] = t
        elif isinstance(spec, NvlinkError):
            assert rank is not None
            t = onset + rng.randint(5 * _MS, 50 * _MS)
            self._log(f, rank, t, "nccl", "nccl_warn", _NVLINK_CUDA)
            err = (
                "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
                "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version "
                f"{_NCCL_VERSION}\nncclUnhandledCudaError: Call to CUDA function failed.\n"
                f"Last error:\n{_NVLINK_CUDA}"
            )
            e = t + rng.randint(5 * _MS, 50 * _MS)
            f.errors[rank.rank] = (e, "DistBackendError", f"{_pg(rank.rank)} {err}")
            f.idle[rank.rank] = e
            for local in self._node_ranks(rank.node):
                if local.rank == rank.rank:
                    continue
                t = max(onset, arrival[local.rank]) + rng.randint(100 * _MS, 800 * _MS)
                text = f"Process group watchdog thread terminated with exception: {_REMOTE}"
                self._log(f, local, t, "pytorch", "remote_process_exited", text, pg=True)
                e = t + rng.randint(1 * _MS, 20 * _MS)
                f.errors[local.rank] = (e, "DistBackendError", f"{_pg(local.rank)} {_REMOTE}")
                f.idle[local.rank] = e
        elif isinstance(spec, IbLinkFlap):
            self._plan_ib_flap(f, res, arrival)
        elif isinstance(spec, Hang):
            assert rank is not None
            f.stop[rank.rank] = f.idle[rank.rank] = onset
            f.watchdog = spec.hang_abort
            if not spec.hang_abort:
                f.job_failed = None
        elif isinstance(spec, NodeUnresponsive):
            assert res.node is not None
            for r in self._node_ranks(res.node):
                f.stop[r.rank] = f.gone[r.rank] = onset
        elif isinstance(spec, Preemption):
            assert res.node is not None
            kill = onset + rng.randint(200 * _MS, 1000 * _MS)
            for r in self._node_ranks(res.node):
                f.stop[r.rank] = f.gone[r.rank] = kill
            f.job_failed = ("PREEMPTED", "PREEMPTED", None)
        elif isinstance(spec, HostOom):
            assert rank is not None
            f.stop[rank.rank] = f.idle[rank.rank] = onset
            f.job_failed = ("OUT_OF_MEMORY", "OutOfMemory", 137)
        if f.watchdog:
            for r in self.ranks:
                if r.rank not in f.stop and r.rank not in f.errors:
                    self._watchdog(f, r, arrival[r.rank], rng)
        times = [t for t, _, _ in f.errors.values()] + list(f.stop.values())
        times += [t for _, t, _ in f.comm]
        if f.job_failed is None:
            f.end_ns = max(self.end_limit_ns, onset + self.timeout_ns)
        else:
            f.end_ns = max(times) + rng.randint(500 * _MS, 2000 * _MS)
        return f

    def _plan_ib_flap(self, f: _Failure, res: _Resolved, arrival: list[int]) -> None:
        """The flapping node's rail rank sees the port error; the ring neighbours' rail ranks get
        IB completion errors naming the node's address and abort; everyone else times out."""
        assert res.node is not None and res.hca is not None
        rng, node, hca, onset = res.rng, res.node, res.hca, f.onset_ns
        hcas = self.config.hcas_per_node
        device = f"mlx5_{hca}"
        rail = [r for r in self._node_ranks(node) if r.local_rank % hcas == hca]
        for r in rail:
            t = onset + rng.randint(5 * _MS, 100 * _MS)
            text = f"NET/IB : {device}:{_IB_PORT} Got non-fatal async event: port error(10)"
            self._log(f, r, t, "nccl", "net_ib_error", text)
        i, n = self.node_index[node], self.config.nodes
        neighbours = {self.node_names[(i - 1) % n], self.node_names[(i + 1) % n]} - {node}
        port = 43000 + rng.randrange(1000)
        peer = f"{self.node_address(node)}<{port}>"
        completion = (
            f"NET/IB : Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR(12) "
            f"opcode=RDMA_WRITE len=0 vendor_err=129 hca {device}"
        )
        for other in sorted(neighbours):
            local = self._node_ranks(other)
            peers = [r for r in local if r.local_rank % hcas == hca] or local[-1:]
            for r in peers:
                t = onset + rng.randint(300 * _MS, 1500 * _MS)
                self._log(f, r, t, "nccl", "net_ib_error", completion, peer=peer)
                e = max(t + rng.randint(20 * _MS, 200 * _MS), arrival[r.rank] + 5 * _MS)
                msg = f"{_pg(r.rank)} {_REMOTE}\nLast error:\n{completion}"
                f.errors[r.rank] = (e, "DistBackendError", msg)
                f.idle[r.rank] = e

    def _log(
        self,
        f: _Failure,
        rank: RankState,
        t_ns: int,
        source: Literal["nccl", "pytorch"],
        event_type: Literal["nccl_warn", "net_ib_error", "remote_process_exited"],
        text: str,
        *,
        peer: str = "",
        pg: bool = False,
    ) -> None:
        payload = CommEvent(
            source=source,
            event_type=event_type,
            peer=peer,
            process_group=_PG_DESC if pg else "",
            pid=self._pids[rank.rank],
            message=text,
        )
        f.comm.append((rank.rank, t_ns, payload))

    def _watchdog(self, f: _Failure, rank: RankState, arrival_ns: int, rng: random.Random) -> None:
        """PyTorch's watchdog fires ``timeout`` (+ its polling slack) after the rank entered the
        collective; the main thread then raises DistBackendError and the process exits."""
        t = arrival_ns + self.timeout_ns + rng.randint(5 * _MS, 150 * _MS)
        timeout_ms = self.timeout_ns // _MS
        elapsed_ms = (t - arrival_ns) // _MS
        text = (
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={f.seq}, "
            f"OpType={_OP}, NumelIn={_NUMEL}, NumelOut={_NUMEL}, Timeout(ms)={timeout_ms}) ran "
            f"for {elapsed_ms} milliseconds before timing out."
        )
        payload = CommEvent(
            source="pytorch",
            event_type="watchdog_timeout",
            op=_OP,
            seq=f.seq,
            timeout_ms=timeout_ms,
            elapsed_ms=elapsed_ms,
            process_group=_PG_DESC,
            pid=self._pids[rank.rank],
            message=text,
        )
        f.comm.append((rank.rank, t, payload))
        e = t + rng.randint(1 * _MS, 20 * _MS)
        f.errors[rank.rank] = (e, "DistBackendError", f"{_pg(rank.rank)} {text}")
        f.idle[rank.rank] = e

    def failing_step(self, plan: StepPlan) -> list[Event]:
        """Render the planned failure: the failing step's spans, the log lines, telemetry until
        the end (per-rank: frozen, idle, gone), the scheduled events, then ``job_failed``."""
        f = self.failure
        assert f is not None and plan.step == f.plan.step
        out: list[Event] = []
        trace_id = self.trace_id()
        attrs = self.collective_attributes(plan.step)
        for rank in self.ranks:
            self._failing_spans(f, rank, trace_id, attrs, out)
        for r, t, payload in f.comm:
            if t < f.end_ns:
                out.append(self.comm_event(self.ranks[r], t, payload))

        def phase_of(rank: RankState, t_ns: int) -> SpanPhase | None:
            gone = f.gone.get(rank.rank)
            if gone is not None and t_ns >= gone:
                return None
            idle = f.idle.get(rank.rank)
            if idle is not None and t_ns >= idle:
                return "other"
            return phase_at(plan, rank.rank, t_ns)

        self.periodic(f.end_ns, out, phase_of)
        out.extend(self.extra_events(plan.step, plan.start_ns, f.end_ns))
        if f.job_failed is not None:
            state, reason, code = f.job_failed
            # the job's batch host, unless that node is the one gone (the scheduler reports
            # the job, not a node it lost)
            gone = self._silent.keys() | self._left.keys()
            host = next((n for n in self.node_names if n not in gone), self.node_names[0])
            out.append(
                self.scheduler_event(
                    host, f.end_ns, "job_failed", state, exit_code=code, reason=reason
                )
            )
        return out

    def _failing_spans(
        self,
        f: _Failure,
        rank: RankState,
        trace_id: str,
        attrs: dict[str, str | int | float | bool],
        out: list[Event],
    ) -> None:
        """The spans of the failing step: phases done before the rank stops or fails; on an
        error, the phase it is in and its step span end in error at the error time."""
        plan, r = f.plan, rank.rank
        stop = f.stop.get(r)
        err = f.errors.get(r)
        step_id = self.span_id()
        t = plan.start_ns

        def failed(phase: SpanPhase, start: int, e: tuple[int, str, str], **kw: Any) -> None:
            out.append(
                self.span_event(
                    rank,
                    plan.step,
                    phase,
                    trace_id,
                    step_id,
                    start,
                    e[0],
                    status="error",
                    error_type=e[1],
                    error_message=e[2],
                    **kw,
                )
            )
            out.append(
                self.span_event(
                    rank,
                    plan.step,
                    "step",
                    trace_id,
                    None,
                    plan.start_ns,
                    e[0],
                    span_id=step_id,
                    status="error",
                    error_type=e[1],
                    error_message=e[2],
                )
            )

        for phase, dur in zip(COMPUTE_PHASES, plan.phases[r], strict=True):
            end = t + dur
            if stop is not None and end > stop:
                return
            if err is not None and err[0] < end:
                failed(phase, t, err)
                return
            out.append(self.span_event(rank, plan.step, phase, trace_id, step_id, t, end))
            t = end
        if err is not None:
            failed("collective", t, err, attrs=attrs)

    # ----------------------------------------------------------------- hooks

    def phase_durations(self, step: int, rank: RankState) -> PhaseDurations:
        d = super().phase_durations(step, rank)  # always: keeps the per-rank streams aligned
        start = self.step_start_ns
        cf = df = 1.0
        for from_ns, factor in self._compute_mods.get(rank.rank, ()):
            if start >= from_ns:
                cf *= factor
        for from_ns, factor, jitter in self._data_mods.get(rank.rank, ()):
            if start >= from_ns:
                df *= factor * jitter.uniform(0.85, 1.15)
        transient = self._transient.get((rank.rank, step))
        if transient is not None:
            if transient[0] == "data":
                df *= transient[1]
            else:
                cf *= transient[1]
        if cf == 1.0 and df == 1.0:
            return d
        return PhaseDurations(
            max(1, round(d.data_ns * df)),
            max(1, round(d.forward_ns * cf)),
            max(1, round(d.backward_ns * cf)),
            max(1, round(d.optimizer_ns * cf)),
        )

    def gpu_sample_payload(self, rank: RankState, phase: SpanPhase, t_ns: int) -> GpuSample:
        p = super().gpu_sample_payload(rank, phase, t_ns)
        mods = self._sample_mods.get(rank.rank)
        if not mods:
            return p
        update: dict[str, Any] = {}
        throttle, clock, sbe, dbe, hot = 0, 1.0, 0, 0, False
        for m in mods:
            if t_ns >= m.from_ns and (m.to_ns is None or t_ns < m.to_ns):
                throttle |= m.throttle
                clock *= m.clock_factor
                sbe, dbe, hot = sbe + m.sbe, dbe + m.dbe, hot or m.hot
        if throttle:
            update["throttle_reasons"] = throttle
        if clock != 1.0:
            update["sm_clock_mhz"] = float(round(self.gpu_profile.sm_clock_mhz * clock))
        if hot:
            update["temperature_c"] = round(87.0 + 0.05 * p.sm_util_pct, 1)
        if sbe:
            update["ecc_sbe_total"] = sbe
        if dbe:
            update["ecc_dbe_total"] = dbe
        return p.model_copy(update=update) if update else p

    def extra_events(self, step: int, start_ns: int, end_ns: int) -> list[Event]:
        out: list[Event] = []
        pending, i = self._pending, self._pending_pos
        while i < len(pending) and pending[i][0] < end_ns:
            t, _, ev = pending[i]
            silent = self._silent.get(ev.node)
            if silent is None or t < silent:
                out.append(ev)
            i += 1
        self._pending_pos = i
        return out

    def node_job(self, node: str, t_ns: int) -> str | None:
        silent = self._silent.get(node)
        if silent is not None and t_ns >= silent:
            return None
        left = self._left.get(node)
        if left is not None and t_ns >= left:
            return ""  # the agent keeps running but the node no longer belongs to the job
        return self.config.job_id

    def fabric_port_state(self, node: str, hca: int, t_ns: int) -> tuple[str, str]:
        down = self._port_down.get((node, hca))
        if down is not None and down[0] <= t_ns < down[1]:
            return "1: DOWN", "2: Polling"
        return super().fabric_port_state(node, hca, t_ns)

    def fabric_deltas(self, node: str, hca: int, t_ns: int, interval_ns: int) -> dict[str, int]:
        d = super().fabric_deltas(node, hca, t_ns, interval_ns)
        stall = self.stall_ns
        if stall is not None and t_ns > stall:
            # no collective completes after the stall: traffic drops to keep-alives
            moving = max(0, stall - (t_ns - interval_ns)) / interval_ns
            scale = moving + (1.0 - moving) * 0.01
            d = {k: round(v * scale) for k, v in d.items()}
        for at, deltas in self._port_errors.get((node, hca), ()):
            if t_ns - interval_ns < at <= t_ns:
                for k, v in deltas.items():
                    d[k] = d.get(k, 0) + v
        return d

    def inventory_fields(self, node: str) -> dict[str, Any]:
        fields = super().inventory_fields(node)
        fields.update(self._inventory.get(node, {}))
        return fields

    # ----------------------------------------------------------------- labels

    def _labels(self, resolved: list[_Resolved], skew: _Resolved | None) -> list[FaultLabel]:
        cfg = self.config
        common: dict[str, Any] = {"cluster": cfg.cluster, "job_id": cfg.job_id, "seed": cfg.seed}
        if skew is not None:
            common |= {
                "skewed_node": skew.node,
                "skew_offset_ns": round(skew.magnitude * _NS),
                "modifiers": ["clock_skew"],
            }
        every = [r.rank for r in self.ranks]
        out: list[FaultLabel] = []
        for res in resolved:
            spec = res.spec
            if isinstance(spec, ClockSkew):
                continue
            rank = res.rank
            label: dict[str, Any] = {**common, "scenario": spec.scenario, "node": res.node}
            if rank is not None:
                label |= {"rank": rank.rank, "gpu": rank.gpu, "fault_ranks": [rank.rank]}
            f = self.failure if spec.scenario in TERMINAL_SCENARIOS else None
            if f is not None:
                hit = set(label.get("fault_ranks", []))
                if spec.scenario in ("node_unresponsive", "preemption"):
                    hit = set(f.stop)
                    label["fault_ranks"] = sorted(hit)
                label |= {
                    "onset_ns": f.onset_ns,
                    "collective_op": _OP,
                    "collective_seq": f.seq,
                    "step": f.plan.step,
                    "failure_ns": f.end_ns if f.job_failed is not None else None,
                    "symptom_ranks": [r for r in every if r not in hit],
                }
            else:
                label["onset_ns"] = res.onset_ns
            label |= _ANSWER[spec.scenario]
            if isinstance(spec, IbLinkFlap):
                assert res.node is not None
                label |= {
                    "hca_device": f"mlx5_{res.hca}",
                    "hca_port": _IB_PORT,
                    "details": {
                        "peer_address": self.node_address(res.node),
                        "down_s": round(res.magnitude, 3),
                    },
                }
            elif isinstance(spec, NvlinkError):
                label["details"] = {"nvlink": res.link if res.link is not None else -1}
            elif isinstance(spec, (ThermalStraggler, InputStraggler)):
                label["symptom_ranks"] = [r for r in every if r != label["rank"]]
                label["details"] = {"magnitude": round(res.magnitude, 4)}
            elif isinstance(spec, ConfigDrift):
                assert res.node is not None
                node_ranks = [r.rank for r in self._node_ranks(res.node)]
                label |= {
                    "onset_ns": self.start_ns,
                    "fault_ranks": node_ranks,
                    "symptom_ranks": [r for r in every if r not in node_ranks],
                    "details": {
                        "magnitude": round(res.magnitude, 4),
                        "driver_version": spec.driver_version,
                        "nccl_version": spec.nccl_version,
                    },
                }
            elif isinstance(spec, Hang):
                label["details"] = {"hang_abort": spec.hang_abort}
            elif isinstance(spec, Noise):
                label |= {"onset_ns": None, "node": None}
                ranks = sorted({r for r, _ in self._transient})
                label["details"] = {"transient_ranks": ",".join(map(str, ranks))}
            out.append(FaultLabel(**label))
        if not out:  # clock skew alone: nothing to find, but the skew is recorded
            out.append(FaultLabel(**common, scenario="clock_skew", onset_ns=None, outcome="none"))
        return out


#: What the detectors should say per scenario (outcome, cause class, XID).
_ANSWER: dict[str, dict[str, Any]] = {
    "gpu_fell_off_bus": {"outcome": "root_cause", "cause_class": "gpu_xid", "xid": 79},
    "ecc_dbe": {"outcome": "root_cause", "cause_class": "gpu_ecc", "xid": 48},
    "nvlink_error": {"outcome": "root_cause", "cause_class": "nvlink", "xid": 74},
    "ib_link_flap": {"outcome": "root_cause", "cause_class": "ib_link"},
    "thermal_straggler": {"outcome": "straggler", "cause_class": "thermal"},
    "input_straggler": {"outcome": "straggler", "cause_class": "input_pipeline"},
    "hang": {"outcome": "hang", "cause_class": "hang"},
    "node_unresponsive": {"outcome": "unresponsive_node", "cause_class": "node_unresponsive"},
    "preemption": {"outcome": "root_cause", "cause_class": "scheduler_preemption"},
    "host_oom": {"outcome": "root_cause", "cause_class": "host_oom"},
    "config_drift": {"outcome": "straggler", "cause_class": "config_drift"},
    "noise": {"outcome": "none", "cause_class": None},
}


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


def simulate_with_faults(
    config: SimulationConfig, faults: Sequence[Fault], *, background: bool = True
) -> tuple[Iterator[Event], list[FaultLabel]]:
    """The events of a job with ``faults`` applied (a lazy iterator) and their labels.

    ``background``: also send what real agents send besides the job's own telemetry
    (``node_inventory`` at start, ``fabric_counters`` every ``fabric_interval_s``, 2 s if unset).
    """
    if background:
        config = config.model_copy(
            update={"inventory": True, "fabric_interval_s": config.fabric_interval_s or 2.0}
        )
    sim = FaultInjectingSimulator(config, faults)
    return sim.run(), list(sim.labels)


def parse_faults(data: Any) -> list[Fault]:
    """Fault specs from JSON-like data (a list of objects with a ``scenario`` key)."""
    return _FAULTS_ADAPTER.validate_python(data)


# ==================================================================================== the suite


class SuiteCase(NamedTuple):
    """One run of the evaluation suite."""

    config: SimulationConfig
    faults: list[Fault]
    name: str


#: variant name -> faults; every catalogue scenario plus clock-skew variants and a hang that the
#: watchdog aborts. ``+clock_skew`` skews the culprit's node by +5 s (less than the NCCL timeout);
#: ``+clock_skew_large`` by +15 s (more, so the raw order of precursor and timeouts is inverted);
#: ``+clock_skew_other`` skews another node by -15 s (its timeouts then appear before the onset).
_VARIANTS: tuple[tuple[str, tuple[Fault, ...]], ...] = (
    ("gpu_fell_off_bus", (GpuFellOffBus(),)),
    ("ecc_dbe", (EccDbe(),)),
    ("nvlink_error", (NvlinkError(),)),
    ("ib_link_flap", (IbLinkFlap(),)),
    ("thermal_straggler", (ThermalStraggler(),)),
    ("input_straggler", (InputStraggler(),)),
    ("hang", (Hang(),)),
    ("hang_abort", (Hang(hang_abort=True),)),
    ("node_unresponsive", (NodeUnresponsive(),)),
    ("preemption", (Preemption(),)),
    ("host_oom", (HostOom(),)),
    ("config_drift", (ConfigDrift(),)),
    ("gpu_fell_off_bus+clock_skew", (GpuFellOffBus(), ClockSkew())),
    ("gpu_fell_off_bus+clock_skew_large", (GpuFellOffBus(), ClockSkew(offset_s=15.0))),
    (
        "gpu_fell_off_bus+clock_skew_other",
        (GpuFellOffBus(), ClockSkew(offset_s=-15.0, target="other")),
    ),
    ("ib_link_flap+clock_skew", (IbLinkFlap(), ClockSkew())),
    ("thermal_straggler+clock_skew", (ThermalStraggler(), ClockSkew())),
    ("noise", (Noise(),)),
)
#: 2026-01-01T00:00:00Z: suite runs start at fixed times so they replay identically.
_SUITE_EPOCH_NS = 1_767_225_600 * _NS


def scenario_suite(
    ranks: int,
    seeds: Sequence[int] | int,
    *,
    duration_s: float = 60.0,
    gpus_per_node: int = 8,
    step_time_s: float = 1.0,
    nccl_timeout_s: float = 10.0,
    cluster: str = "sim",
) -> list[SuiteCase]:
    """Every scenario variant for every seed, as (config, faults, name) cases.

    Variants that need two nodes (IB, unresponsive node, config drift, an "other" skewed node)
    are left out of a single-node job. Each case has its own job id (``<variant>-s<seed>``) and
    start time (an hour per seed), with background telemetry on.
    """
    seed_list = range(seeds) if isinstance(seeds, int) else list(seeds)
    nodes = -(-ranks // gpus_per_node)
    out: list[SuiteCase] = []
    for seed in seed_list:
        for name, faults in _VARIANTS:
            if nodes < 2 and (
                any(f.scenario in _NEEDS_NODES for f in faults) or name.endswith("_other")
            ):
                continue
            job = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{name}-s{seed}")
            config = SimulationConfig(
                cluster=cluster,
                job_id=job,
                ranks=ranks,
                gpus_per_node=gpus_per_node,
                duration_s=duration_s,
                step_time_s=step_time_s,
                nccl_timeout_s=nccl_timeout_s,
                seed=seed,
                start_ns=_SUITE_EPOCH_NS + seed * 3600 * _NS,
                inventory=True,
                fabric_interval_s=2.0,
            )
            out.append(SuiteCase(config, list(faults), f"{name}/s{seed}"))
    return out
