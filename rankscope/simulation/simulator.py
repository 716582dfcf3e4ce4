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
re-validation (:func:`fast_model`): every value comes from this package's own arithmetic, and the
tests validate every event of every fault scenario against ``schemas.EVENT_ADAPTER``.

Layout: the config (:mod:`~rankscope.simulation.config`), the timing model
(:mod:`~rankscope.simulation.timing`), the hooks with their healthy defaults
(:mod:`~rankscope.simulation.hooks`) and the per-kind event builders
(:mod:`~rankscope.simulation.builders`) are modules of their own; this module holds the
simulator itself (state, planning, generation) and re-exports the names its importers use, with
:func:`summarize` and :func:`pace` (:mod:`~rankscope.simulation.pacing`).
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any

from rankscope.schemas import Event
from rankscope.schemas.payloads import SpanPhase
from rankscope.simulation.builders import AGENT_NAME, AGENT_VERSION, EventBuilders
from rankscope.simulation.config import H100_SXM, GpuProfile, SimulationConfig
from rankscope.simulation.fastmodel import fast_model
from rankscope.simulation.hooks import ERROR_COUNTERS, _PortState
from rankscope.simulation.pacing import SimulationSummary, pace, summarize
from rankscope.simulation.timing import (
    COMPUTE_PHASES,
    INIT_COLLECTIVES,
    NOMINAL_SHARE,
    SPAN_NAME,
    PhaseDurations,
    PhaseOf,
    RankState,
    StepPlan,
    phase_at,
)

__all__ = [
    "AGENT_NAME",
    "AGENT_VERSION",
    "COMPUTE_PHASES",
    "ERROR_COUNTERS",
    "H100_SXM",
    "INIT_COLLECTIVES",
    "NOMINAL_SHARE",
    "SPAN_NAME",
    "GpuProfile",
    "PhaseDurations",
    "PhaseOf",
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

_NS = 1_000_000_000


class TrainingJobSimulator(EventBuilders):
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


_BY_TS = attrgetter("ts")


def create_simulator(config: SimulationConfig | None = None) -> TrainingJobSimulator:
    """Factory (OpenTelemetry Collector style): typed config in, component out."""
    return TrainingJobSimulator(config or SimulationConfig())


def simulate(config: SimulationConfig | None = None) -> Iterator[Event]:
    """The events of one healthy synchronous training job, in event-time order."""
    return create_simulator(config).run()
