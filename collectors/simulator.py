"""A seeded, synchronous data-parallel training job that emits the same events real collectors do.

Why a simulator: every downstream stage (alignment, straggler and hang detection, root cause) is
tested against ground truth, and the only way to have ground truth for a 16-rank job on a laptop
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

Fault injection (thermal/input stragglers, hangs, XIDs, ...; see the fault catalogue) is not built
here. It plugs into :class:`TrainingJobSimulator` by overriding its hooks:
:meth:`~TrainingJobSimulator.phase_durations` (per-rank compute and data-loading time),
:meth:`~TrainingJobSimulator.collective_duration` (communication time once all ranks arrived),
:meth:`~TrainingJobSimulator.gpu_sample_payload` (clocks, temperature, error counters) and
:meth:`~TrainingJobSimulator.extra_events` (discrete events such as XIDs or scheduler events).
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from schemas import (
    Envelope,
    Event,
    GpuSampleEvent,
    HeartbeatEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from schemas.payloads import (
    GpuSample,
    Heartbeat,
    SchedulerEvent,
    SchedulerEventType,
    Span,
    SpanPhase,
)

__all__ = [
    "AGENT_NAME",
    "COMPUTE_PHASES",
    "GpuProfile",
    "PhaseDurations",
    "RankState",
    "SimulationConfig",
    "SimulationSummary",
    "TrainingJobSimulator",
    "create_simulator",
    "pace",
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
_NS = 1_000_000_000
_GIB = 1 << 30
# Collector delay between the event time and when the agent publishes it (observed_ts - ts).
_MIN_DELAY_NS = 1_000_000
_MAX_DELAY_NS = 40_000_000


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

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.gpus_per_node)

    def node_name(self, rank: int) -> str:
        return f"{self.node_prefix}{rank // self.gpus_per_node:03d}"


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
        "rank",
        "rng",
        "temperature_c",
        "timing_rng",
    )

    def __init__(self, config: SimulationConfig, rank: int, gpu: GpuProfile = H100_SXM) -> None:
        self.rank = rank
        self.local_rank = rank % config.gpus_per_node
        self.gpu = self.local_rank
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


class _StepTimeline(NamedTuple):
    start_ns: int
    phases: list[PhaseDurations]  # by rank
    end_ns: int


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
        self.ranks = [RankState(config, r, gpu) for r in range(config.ranks)]
        self.node_names = sorted({r.node for r in self.ranks})
        self._id_rng = random.Random(
            f"{config.seed}:{config.cluster}:{config.job_id}:{self.start_ns}:ids"
        )
        self._delay_rng = random.Random(f"{config.seed}:delay")
        self._collective_rng = random.Random(f"{config.seed}:collective")
        self._heartbeat_seq = dict.fromkeys(self.node_names, 0)
        self._nominal = {p: round(share * self.step_ns) for p, share in NOMINAL_SHARE.items()}

    # ----------------------------------------------------------------- hooks (fault injection)

    def phase_durations(self, step: int, rank: RankState) -> PhaseDurations:
        """How long ``rank`` spends in each compute phase of ``step``.

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

        Hook for thermal faults (clocks, throttle_reasons) and ECC/XID counters. Advances the
        rank's energy counter and temperature by one sample interval.
        """
        rng, gpu = rank.rng, self.gpu_profile
        if phase in ("forward", "backward"):
            util, mem_util, mem_extra = rng.uniform(90.0, 99.0), rng.uniform(35.0, 55.0), 14
        elif phase == "optimizer":
            util, mem_util, mem_extra = rng.uniform(60.0, 85.0), rng.uniform(25.0, 40.0), 10
        elif phase == "data":
            util, mem_util, mem_extra = rng.uniform(5.0, 25.0), rng.uniform(2.0, 10.0), 6
        else:  # waiting in / running the collective
            util, mem_util, mem_extra = rng.uniform(20.0, 40.0), rng.uniform(8.0, 20.0), 8
        interval_s = self.sample_ns / _NS
        power = gpu.idle_power_w + (gpu.max_power_w - gpu.idle_power_w) * util / 100.0
        power = min(gpu.max_power_w, power * rng.uniform(0.96, 1.02))
        rank.energy_mj += max(1, round(power * interval_s * 1000.0))
        target = gpu.ambient_c + gpu.load_rise_c * util / 100.0
        rank.temperature_c += (target - rank.temperature_c) * (
            1.0 - math.exp(-interval_s / gpu.thermal_tau_s)
        )
        return GpuSample(
            gpu_uuid=rank.gpu_uuid,
            sm_util_pct=round(util, 1),
            mem_util_pct=round(mem_util, 1),
            mem_used_bytes=rank.mem_base_bytes + mem_extra * _GIB,
            mem_total_bytes=gpu.mem_total_bytes,
            sm_clock_mhz=gpu.sm_clock_mhz,
            mem_clock_mhz=gpu.mem_clock_mhz,
            power_w=round(power, 1),
            energy_mj=rank.energy_mj,
            temperature_c=round(rank.temperature_c, 1),
            throttle_reasons=0,
            ecc_sbe_total=0,
            ecc_dbe_total=0,
        )

    def extra_events(self, step: int, start_ns: int, end_ns: int) -> list[Event]:
        """Discrete events (XIDs, link flaps, scheduler actions) with ts in [start_ns, end_ns].

        Build them with :meth:`next_event_id` and :meth:`observed_ts`. The default job is
        healthy: none.
        """
        return []

    # ----------------------------------------------------------------- generation

    def run(self) -> Iterator[Event]:
        """Yield the job's events in non-decreasing ``ts`` order."""
        first_node = self.node_names[0]
        yield self._scheduler_event(first_node, self.start_ns, "job_started", "RUNNING")
        next_sample, next_heartbeat = self.start_ns, self.start_ns
        t, step = self.start_ns, 0
        while True:
            phases = [self.phase_durations(step, r) for r in self.ranks]
            end = t + max(p.compute_ns for p in phases) + self.collective_duration(step)
            if end > self.end_limit_ns:
                break
            timeline = _StepTimeline(t, phases, end)
            chunk: list[Event] = []
            self._step_spans(step, timeline, chunk)
            while next_sample < end:
                for r in self.ranks:
                    chunk.append(self._gpu_sample(r, timeline, next_sample))
                next_sample += self.sample_ns
            while next_heartbeat < end:
                for node in self.node_names:
                    chunk.append(self._heartbeat(node, next_heartbeat))
                next_heartbeat += self.heartbeat_ns
            chunk.extend(self.extra_events(step, t, end))
            # Chunks never overlap in time (a step ends where the next starts), so sorting each
            # chunk is enough for a globally ordered stream.
            chunk.sort(key=_BY_TS)
            yield from chunk
            t, step = end, step + 1
        yield self._scheduler_event(first_node, t, "job_completed", "COMPLETED", exit_code=0)

    def next_event_id(self) -> str:
        """A deterministic event id (for hooks that add events, too)."""
        return f"{self._id_rng.getrandbits(128):032x}"

    def _span_id(self) -> str:
        return f"{self._id_rng.getrandbits(64) or 1:016x}"

    def observed_ts(self, ts: int) -> int:
        """``ts`` plus a small, seeded collector delay: when the agent publishes the event."""
        return ts + _MIN_DELAY_NS + int(self._delay_rng.random() * (_MAX_DELAY_NS - _MIN_DELAY_NS))

    def _step_spans(self, step: int, tl: _StepTimeline, out: list[Event]) -> None:
        """Per rank: data/forward/backward/optimizer, collective until ``tl.end_ns``, the step.

        All ranks share the step's trace id; the phase spans are children of the rank's step span.
        """
        trace_id = f"{self._id_rng.getrandbits(128) or 1:032x}"
        for rank, durations in zip(self.ranks, tl.phases, strict=True):
            step_id = self._span_id()
            t = tl.start_ns
            for phase, dur in zip(COMPUTE_PHASES, durations, strict=True):
                out.append(self._span(rank, step, phase, trace_id, step_id, t, t + dur))
                t += dur
            out.append(self._span(rank, step, "collective", trace_id, step_id, t, tl.end_ns))
            out.append(
                self._span(rank, step, "step", trace_id, None, tl.start_ns, tl.end_ns, step_id)
            )

    def _span(
        self,
        rank: RankState,
        step: int,
        phase: SpanPhase,
        trace_id: str,
        parent_span_id: str | None,
        start_ns: int,
        end_ns: int,
        span_id: str | None = None,
    ) -> SpanEvent:
        """One span; ``parent_span_id=None`` makes a root span."""
        return SpanEvent(
            event_id=self.next_event_id(),
            schema_id="span/1",
            kind="span",
            cluster=self.config.cluster,
            job_id=self.config.job_id,
            node=rank.node,
            rank=rank.rank,
            local_rank=rank.local_rank,
            gpu=rank.gpu,
            ts=end_ns,
            observed_ts=self.observed_ts(end_ns),
            payload=Span(
                name=SPAN_NAME[phase],
                phase=phase,
                trace_id=trace_id,
                span_id=span_id or self._span_id(),
                parent_span_id=parent_span_id or "",
                start_ns=start_ns,
                end_ns=end_ns,
                step=step,
                status="ok",
                attributes={"collective.op": "all_reduce"} if phase == "collective" else {},
            ),
        )

    def _gpu_sample(self, rank: RankState, tl: _StepTimeline, t_ns: int) -> GpuSampleEvent:
        return GpuSampleEvent(
            event_id=self.next_event_id(),
            schema_id="gpu_sample/1",
            kind="gpu_sample",
            cluster=self.config.cluster,
            job_id=self.config.job_id,
            node=rank.node,
            rank=rank.rank,
            local_rank=rank.local_rank,
            gpu=rank.gpu,
            ts=t_ns,
            observed_ts=self.observed_ts(t_ns),
            payload=self.gpu_sample_payload(rank, _phase_at(tl, rank.rank, t_ns), t_ns),
        )

    def _heartbeat(self, node: str, t_ns: int) -> HeartbeatEvent:
        seq = self._heartbeat_seq[node]
        self._heartbeat_seq[node] = seq + 1
        # The agent tags its heartbeats with the job that owns the node, so they share the job's
        # partition and a per-job detector sees a silent node.
        return HeartbeatEvent(
            event_id=self.next_event_id(),
            schema_id="heartbeat/1",
            kind="heartbeat",
            cluster=self.config.cluster,
            job_id=self.config.job_id,
            node=node,
            ts=t_ns,
            observed_ts=self.observed_ts(t_ns),
            payload=Heartbeat(
                agent=AGENT_NAME,
                agent_version=AGENT_VERSION,
                seq=seq,
                interval_s=self.config.heartbeat_interval_s,
            ),
        )

    def _scheduler_event(
        self,
        node: str,
        t_ns: int,
        event_type: SchedulerEventType,
        state: str,
        exit_code: int | None = None,
    ) -> SchedulerEventEvent:
        return SchedulerEventEvent(
            event_id=self.next_event_id(),
            schema_id="scheduler_event/1",
            kind="scheduler_event",
            cluster=self.config.cluster,
            job_id=self.config.job_id,
            node=node,
            ts=t_ns,
            observed_ts=self.observed_ts(t_ns),
            payload=SchedulerEvent(
                source="simulator", event_type=event_type, state=state, exit_code=exit_code
            ),
        )


def _phase_at(tl: _StepTimeline, rank: int, t_ns: int) -> SpanPhase:
    """Which phase ``rank`` is in at ``t_ns`` (inside the step ``tl``)."""
    offset = t_ns - tl.start_ns
    for phase, dur in zip(COMPUTE_PHASES, tl.phases[rank], strict=True):
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
