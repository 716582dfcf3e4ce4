"""The simulated job: deterministic, ordered, schema-valid, and visibly synchronous."""

from __future__ import annotations

import itertools
import math
import re
import time
from collections import defaultdict

import pytest
from pydantic import ValidationError

from rankscope.schemas import (
    EVENT_ADAPTER,
    Event,
    FabricCountersEvent,
    GpuSampleEvent,
    HeartbeatEvent,
    NodeInventoryEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from rankscope.schemas.payloads import GpuSample, inventory_fingerprint
from rankscope.simulation import (
    PhaseDurations,
    RankState,
    SimulationConfig,
    TrainingJobSimulator,
    pace,
    simulate,
    summarize,
)
from rankscope.simulation.simulator import INIT_COLLECTIVES, fast_model

START_NS = 1_700_000_000_000_000_000
CONFIG = SimulationConfig(start_ns=START_NS)
NS = 1_000_000_000


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return list(simulate(CONFIG))


def spans(events: list[Event]) -> list[SpanEvent]:
    return [e for e in events if isinstance(e, SpanEvent)]


def samples(events: list[Event]) -> list[GpuSampleEvent]:
    return [e for e in events if isinstance(e, GpuSampleEvent)]


def by_step(events: list[Event]) -> dict[int, dict[str, list[SpanEvent]]]:
    """step -> phase -> spans (one per rank)."""
    out: dict[int, dict[str, list[SpanEvent]]] = defaultdict(lambda: defaultdict(list))
    for s in spans(events):
        assert s.payload.step is not None
        out[s.payload.step][s.payload.phase].append(s)
    return out


# ---------------------------------------------------------------- determinism


def test_same_seed_same_stream(events: list[Event]) -> None:
    again = list(simulate(CONFIG))
    assert [e.model_dump(by_alias=True) for e in again] == [
        e.model_dump(by_alias=True) for e in events
    ]


def test_other_seed_other_stream(events: list[Event]) -> None:
    other = list(simulate(CONFIG.model_copy(update={"seed": 8})))
    assert {e.event_id for e in other}.isdisjoint({e.event_id for e in events})
    durations = [s.payload.end_ns - s.payload.start_ns for s in spans(events)[:200]]
    other_durations = [s.payload.end_ns - s.payload.start_ns for s in spans(other)[:200]]
    assert durations != other_durations


@pytest.mark.parametrize("update", [{"job_id": "sim-job-2"}, {"start_ns": START_NS + 3600 * NS}])
def test_other_job_or_start_never_reuses_event_ids(
    events: list[Event], update: dict[str, object]
) -> None:
    """ClickHouse dedups on event_id: a second demo run must not be swallowed as duplicates."""
    other = list(simulate(CONFIG.model_copy(update=update)))
    assert {e.event_id for e in other}.isdisjoint({e.event_id for e in events})


def test_event_ids_unique(events: list[Event]) -> None:
    assert len({e.event_id for e in events}) == len(events)


# ---------------------------------------------------------------- contract


def test_sorted_by_event_time(events: list[Event]) -> None:
    ts = [e.ts for e in events]
    assert ts == sorted(ts)


def test_every_event_validates(events: list[Event]) -> None:
    for e in events:
        parsed = EVENT_ADAPTER.validate_python(e.model_dump(by_alias=True))
        assert parsed == e


def test_envelope_fields(events: list[Event]) -> None:
    for e in events:
        assert e.cluster == "sim"
        assert e.job_id == "sim-job-1"
        assert 0 < e.observed_ts - e.ts < NS // 10
        if e.rank is not None:
            assert e.node == f"node{e.rank // 8:03d}"
            assert e.local_rank == e.gpu == e.rank % 8
    assert {e.node for e in events} == {"node000", "node001"}


def test_scheduler_events_frame_the_job(events: list[Event]) -> None:
    first, last = events[0], events[-1]
    assert isinstance(first, SchedulerEventEvent) and isinstance(last, SchedulerEventEvent)
    assert first.payload.event_type == "job_started"
    assert last.payload.event_type == "job_completed"
    assert last.payload.exit_code == 0
    assert first.payload.source == last.payload.source == "simulator"
    assert first.ts == START_NS
    assert last.ts <= START_NS + round(CONFIG.duration_s * NS)
    assert last.ts == max(s.payload.end_ns for s in spans(events))


# ---------------------------------------------------------------- the synchronous property


def test_all_ranks_finish_each_step_together(events: list[Event]) -> None:
    steps = by_step(events)
    for phases in steps.values():
        step_spans = phases["step"]
        assert len(step_spans) == CONFIG.ranks
        assert len({s.payload.start_ns for s in step_spans}) == 1
        assert len({s.payload.end_ns for s in step_spans}) == 1
        assert {s.payload.end_ns for s in phases["collective"]} == {step_spans[0].payload.end_ns}


def test_slowest_compute_rank_has_shortest_collective(events: list[Event]) -> None:
    for phases in by_step(events).values():
        step_start = phases["step"][0].payload.start_ns
        collectives = phases["collective"]
        # Arrival at the collective = end of compute; the last to arrive waits least.
        compute = {c.rank: c.payload.start_ns - step_start for c in collectives}
        wait = {c.rank: c.payload.end_ns - c.payload.start_ns for c in collectives}
        slowest = max(compute, key=lambda r: compute[r])
        assert wait[slowest] == min(wait.values())
        assert min(wait.values()) > 0
        # step time = compute + collective is the same for every rank
        assert len({compute[r] + wait[r] for r in compute}) == 1


def test_phase_spans_are_contiguous_children_of_the_step(events: list[Event]) -> None:
    order = ["data", "forward", "backward", "optimizer", "collective"]
    trace_ids = set()
    span_ids = set()
    for phases in by_step(events).values():
        step_trace = {s.payload.trace_id for s in phases["step"]}
        assert len(step_trace) == 1, "one trace per step shared by all ranks"
        trace_ids |= step_trace
        for step_span in phases["step"]:
            assert step_span.payload.parent_span_id == ""
            children = {p: next(s for s in phases[p] if s.rank == step_span.rank) for p in order}
            t = step_span.payload.start_ns
            for p in order:
                child = children[p].payload
                assert child.parent_span_id == step_span.payload.span_id
                assert child.trace_id == step_span.payload.trace_id
                assert child.start_ns == t
                assert children[p].ts == child.end_ns > child.start_ns
                t = child.end_ns
            assert t == step_span.payload.end_ns
        span_ids |= {s.payload.span_id for p in phases.values() for s in p}
    assert len(trace_ids) == len(by_step(events))
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in trace_ids)
    assert len(span_ids) == len(spans(events)), "span ids unique"


def test_jitter_makes_ranks_differ(events: list[Event]) -> None:
    phases = by_step(events)[10]
    assert len({s.payload.end_ns - s.payload.start_ns for s in phases["forward"]}) > 1


# ---------------------------------------------------------------- counts and samples


def test_counts_match_config(events: list[Event]) -> None:
    summary = summarize(events)
    n_steps = len(by_step(events))
    nominal_steps = CONFIG.duration_s / CONFIG.step_time_s
    assert 0.85 * nominal_steps <= n_steps <= nominal_steps
    end = events[-1].ts
    samples_per_rank = math.ceil((end - START_NS) / (CONFIG.sample_interval_s * NS))
    heartbeats_per_node = math.ceil((end - START_NS) / (CONFIG.heartbeat_interval_s * NS))
    assert summary.counts == {
        "scheduler_event": 2,
        "span": 6 * CONFIG.ranks * n_steps,
        "gpu_sample": CONFIG.ranks * samples_per_rank,
        "heartbeat": CONFIG.nodes * heartbeats_per_node,
    }
    assert summary.total == len(events)
    assert summary.first_ts == START_NS
    assert summary.last_ts == end
    assert 0.85 * CONFIG.duration_s <= summary.duration_s <= CONFIG.duration_s


def test_gpu_samples_per_gpu(events: list[Event]) -> None:
    per_gpu: dict[tuple[str, int | None], list[GpuSampleEvent]] = defaultdict(list)
    for s in samples(events):
        per_gpu[(s.node, s.gpu)].append(s)
    assert len(per_gpu) == CONFIG.ranks
    uuids = set()
    for series in per_gpu.values():
        assert len({s.payload.gpu_uuid for s in series}) == 1, "uuid stable per (node, gpu)"
        uuid = series[0].payload.gpu_uuid
        assert re.fullmatch(
            r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid
        )
        uuids.add(uuid)
        energy = [s.payload.energy_mj for s in series if s.payload.energy_mj is not None]
        assert len(energy) == len(series)
        assert all(b > a for a, b in itertools.pairwise(energy)), "energy monotonic"
        assert [s.ts for s in series] == [
            START_NS + i * round(CONFIG.sample_interval_s * NS) for i in range(len(series))
        ]
    assert len(uuids) == CONFIG.ranks


def test_gpu_busy_in_compute_and_idler_while_waiting(events: list[Event]) -> None:
    """Samples agree with the spans: high SM utilisation in forward/backward, low in the wait."""
    windows: dict[int | None, list[tuple[int, int, str]]] = defaultdict(list)
    for s in spans(events):
        if s.payload.phase != "step":
            windows[s.rank].append((s.payload.start_ns, s.payload.end_ns, s.payload.phase))
    busy, waiting = [], []
    for sample in samples(events):
        for start, end, phase in windows[sample.rank]:
            if start <= sample.ts < end:
                if phase in ("forward", "backward"):
                    busy.append(sample.payload.sm_util_pct)
                elif phase == "collective":
                    waiting.append(sample.payload.sm_util_pct)
                break
    assert busy and waiting
    assert min(busy) >= 90 and max(waiting) <= 40


def test_heartbeats_per_node(events: list[Event]) -> None:
    per_node: dict[str, list[HeartbeatEvent]] = defaultdict(list)
    for e in events:
        if isinstance(e, HeartbeatEvent):
            per_node[e.node].append(e)
    assert set(per_node) == {"node000", "node001"}
    for beats in per_node.values():
        assert [b.payload.seq for b in beats] == list(range(len(beats)))
        assert {b.payload.agent for b in beats} == {"rankscope-sim"}
        assert {b.payload.interval_s for b in beats} == {CONFIG.heartbeat_interval_s}


def test_uneven_ranks_and_small_jobs() -> None:
    cfg = SimulationConfig(start_ns=START_NS, ranks=3, gpus_per_node=2, duration_s=5.0)
    evs = list(simulate(cfg))
    assert {e.node for e in evs} == {"node000", "node001"}
    assert cfg.nodes == 2
    for e in evs:
        EVENT_ADAPTER.validate_python(e.model_dump(by_alias=True))
    # shorter than one step: the job starts and completes without steps
    tiny = list(simulate(SimulationConfig(start_ns=START_NS, duration_s=0.5)))
    assert [e.kind for e in tiny] == ["scheduler_event", "scheduler_event"]


def test_default_start_is_now_whole_second() -> None:
    before = time.time_ns() // NS * NS
    first = next(iter(simulate(SimulationConfig(duration_s=2.0))))
    assert before <= first.ts <= time.time_ns()
    assert first.ts % NS == 0


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        SimulationConfig(ranks=0)
    with pytest.raises(ValueError):
        SimulationConfig(step_time_s=0)
    with pytest.raises(ValueError):
        SimulationConfig(unknown_field=1)  # type: ignore[call-arg]


# ---------------------------------------------------------------- hooks for fault injection


def test_phase_duration_hook_makes_a_straggler() -> None:
    """A later fault injector overrides a hook; the synchronous property then exposes it."""

    class SlowRank5(TrainingJobSimulator):
        def phase_durations(self, step: int, rank: RankState) -> PhaseDurations:
            d = super().phase_durations(step, rank)
            if rank.rank == 5:
                return d._replace(backward_ns=int(d.backward_ns * 1.3))
            return d

    evs = list(SlowRank5(SimulationConfig(start_ns=START_NS, duration_s=20.0)).run())
    for phases in by_step(evs).values():
        waits = {c.rank: c.payload.end_ns - c.payload.start_ns for c in phases["collective"]}
        assert min(waits, key=lambda r: waits[r]) == 5


# ---------------------------------------------------------------- speed, summary, pacing


def test_generation_is_fast() -> None:
    t = time.perf_counter()
    n = sum(1 for _ in simulate(CONFIG))
    rate = n / (time.perf_counter() - t)
    assert n > 13_000
    assert rate > 20_000, f"{rate:.0f} events/s"  # ~100k/s measured; loose for shared CI


def test_summarize_empty() -> None:
    s = summarize([])
    assert s.total == 0 and s.counts == {} and s.duration_s == 0.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_pace_releases_events_at_scaled_event_time() -> None:
    evs = list(simulate(SimulationConfig(start_ns=START_NS, duration_s=10.0)))
    clock = FakeClock()
    released = []
    for e in pace(evs, 60.0, clock=clock, sleep=clock.sleep):
        released.append((e, clock.now))
    assert [e for e, _ in released] == evs
    for e, at in released:
        assert at >= 100.0 + (e.ts - START_NS) / NS / 60.0 - 1e-9
    assert clock.now - 100.0 == pytest.approx((evs[-1].ts - START_NS) / NS / 60.0)


@pytest.mark.parametrize("speed", [0.0, math.inf])
def test_pace_unpaced(speed: float) -> None:
    evs = list(simulate(SimulationConfig(start_ns=START_NS, duration_s=5.0)))
    clock = FakeClock()
    assert list(pace(evs, speed, clock=clock, sleep=clock.sleep)) == evs
    assert clock.sleeps == []


def test_pace_real_clock_is_quick() -> None:
    evs = list(simulate(SimulationConfig(start_ns=START_NS, duration_s=3.0, ranks=2)))
    t = time.monotonic()
    assert len(list(pace(evs, 30.0))) == len(evs)
    elapsed = time.monotonic() - t
    expected = (evs[-1].ts - evs[0].ts) / NS / 30.0
    assert expected - 0.01 <= elapsed < expected + 1.0


def test_pace_rejects_negative_speed() -> None:
    with pytest.raises(ValueError):
        list(pace([], -1.0))


# ---------------------------------------------------------------- background, seq, skew, planning


def test_collective_spans_carry_the_pytorch_sequence_number(events: list[Event]) -> None:
    for step, phases in by_step(events).items():
        for c in phases["collective"]:
            assert c.payload.attributes == {
                "collective.op": "all_reduce",
                "collective.seq": step + INIT_COLLECTIVES + 1,
            }
        assert all(not s.payload.attributes for s in phases["forward"])


def test_background_telemetry_when_enabled() -> None:
    cfg = SimulationConfig(
        start_ns=START_NS, duration_s=12.0, inventory=True, fabric_interval_s=2.0, hcas_per_node=4
    )
    evs = list(simulate(cfg))
    for e in evs:
        assert EVENT_ADAPTER.validate_python(e.model_dump(by_alias=True)) == e
    inv = [e for e in evs if isinstance(e, NodeInventoryEvent)]
    assert [(e.node, e.ts) for e in inv] == [("node000", START_NS), ("node001", START_NS)]
    assert len({e.payload.fingerprint for e in inv}) == 1, "identical nodes, one fingerprint"
    p = inv[0].payload
    fields = p.model_dump(exclude={"fingerprint"})
    assert p.fingerprint == inventory_fingerprint(fields)
    assert (p.gpu_count, len(p.hca_firmware)) == (8, 4)
    polls: dict[tuple[str, str], list[FabricCountersEvent]] = defaultdict(list)
    for e in evs:
        if isinstance(e, FabricCountersEvent):
            polls[(e.node, e.payload.device)].append(e)
            assert e.rank is None and e.job_id == cfg.job_id
    assert len(polls) == 2 * 4
    for series in polls.values():
        assert [e.ts for e in series] == [START_NS + i * 2 * NS for i in range(len(series))]
        first, *rest = series
        assert first.payload.rates_per_s == {} and first.payload.interval_s is None
        for a, b in itertools.pairwise(series):
            for name, value in b.payload.counters.items():
                assert value >= a.payload.counters[name]
            words = b.payload.counters["port_xmit_data"] - a.payload.counters["port_xmit_data"]
            assert b.payload.rates_per_s["xmit_bytes"] == pytest.approx(words * 4 / 2, rel=1e-6)
            assert b.payload.rates_per_s["symbol_error"] == 0.0
            assert b.payload.state == "4: ACTIVE" and b.payload.interval_s == 2.0
        assert rest


def test_clock_offset_shifts_one_node_and_keeps_its_order() -> None:
    cfg = SimulationConfig(start_ns=START_NS, duration_s=10.0)
    plain = list(simulate(cfg))
    sim = TrainingJobSimulator(cfg)
    sim.clock_offsets["node001"] = -3 * NS
    skewed = list(sim.run())
    assert [e.event_id for e in skewed] == [e.event_id for e in plain], "true-time order"
    for a, b in zip(plain, skewed, strict=True):
        shift = -3 * NS if a.node == "node001" else 0
        assert (b.ts - a.ts, b.observed_ts - a.observed_ts) == (shift, shift)
        if isinstance(a, SpanEvent):
            assert isinstance(b, SpanEvent)
            assert b.payload.start_ns - a.payload.start_ns == shift
    node1 = [e.ts for e in skewed if e.node == "node001"]
    assert node1 == sorted(node1)


def test_look_ahead_planning_does_not_change_the_stream(events: list[Event]) -> None:
    sim = TrainingJobSimulator(CONFIG)
    plan = sim.plan_until(START_NS + 30 * NS)
    assert plan.start_ns <= START_NS + 30 * NS < plan.end_ns
    assert plan.end_ns == plan.start_ns + max(p.compute_ns for p in plan.phases) + (
        plan.collective_ns
    )
    assert plan.arrival_ns(3) == plan.start_ns + plan.phases[3].compute_ns
    assert [e.model_dump() for e in sim.run()] == [e.model_dump() for e in events]


def test_stall_needs_a_failing_step() -> None:
    sim = TrainingJobSimulator(SimulationConfig(start_ns=START_NS, duration_s=10.0))
    sim.stall_ns = START_NS + 3 * NS
    with pytest.raises(NotImplementedError):
        list(sim.run())


def test_idle_phase_samples() -> None:
    sim = TrainingJobSimulator(SimulationConfig(start_ns=START_NS))
    idle = [sim.gpu_sample_payload(sim.ranks[0], "other", START_NS) for _ in range(20)]
    assert max(p.sm_util_pct for p in idle) <= 3.0


def test_fast_model_behaves_like_a_validated_model(events: list[Event]) -> None:
    sample = next(e for e in events if isinstance(e, GpuSampleEvent))
    other = next(e for e in events if isinstance(e, GpuSampleEvent) and e is not sample)
    changed = sample.payload.model_copy(update={"throttle_reasons": 4})
    assert changed.throttle_reasons == 4 and sample.payload.throttle_reasons == 0
    assert (
        sample.payload.model_fields_set
        == other.payload.model_fields_set
        == set(GpuSample.model_fields)
    )
    with pytest.raises(ValidationError):
        sample.payload.throttle_reasons = 1  # type: ignore[misc]
    built = fast_model(GpuSample, sample.payload.model_dump())
    assert built == sample.payload == GpuSample.model_validate(sample.payload.model_dump())
