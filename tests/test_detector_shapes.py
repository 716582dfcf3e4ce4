"""Detectors across job shapes (issue 20): each test is a hand-built sequence that failed before
the detector's thresholds scaled with the job (production watchdog timeout, 4 GPUs per node and
long steps, 15% jitter, small config drift, terminal cascades)."""

from __future__ import annotations

from typing import Any

import pytest

from rankscope.evaluation_sweep import analyse_job, make_run
from rankscope.schemas.derived import Detection, Incident
from rankscope.schemas.events import CommEventEvent, Event, SpanEvent
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.faults import (
    ConfigDrift,
    Fault,
    FaultLabel,
    InputStraggler,
    Noise,
    ThermalStraggler,
    scenario_suite,
    simulate_with_faults,
)
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.analysis.liveness import LivenessDetector
from tests.factories import comm, gpu_sample, heartbeat, scheduler, span
from tests.test_detectors import MS, RANKS, T0, S, phase, synchronous_steps


def _with_seq(events: list[Event]) -> list[Event]:
    """Collective spans carry PyTorch's sequence number (``collective.seq``), as exported."""
    out: list[Event] = []
    for ev in events:
        if isinstance(ev, SpanEvent) and ev.payload.phase == "collective":
            p = ev.payload
            attrs = {"collective.op": "all_reduce", "collective.seq": p.step or 0}
            payload = p.model_copy(update={"attributes": attrs})
            out.append(ev.model_copy(update={"payload": payload}))
        else:
            out.append(ev)
    return out


def _analyse(events: list[Event]) -> tuple[dict[str, Detection], dict[str, Incident]]:
    return _analyse_all("job-1", events)


def _analyse_all(job: str, events: list[Event]) -> tuple[dict[str, Detection], dict[str, Incident]]:
    """One JobAnalyzer over the events in order; the latest version of each finding by id."""
    analyzer = JobAnalyzer("c1" if job == "job-1" else "sim", job, clock_ns=lambda: 0)
    dets: dict[str, Detection] = {}
    incs: dict[str, Incident] = {}
    for n, ev in enumerate(events, 1):
        analyzer.observe(ev)
        if n % 64 == 0:
            d, i = analyzer.take()
            dets.update((x.detection_id, x) for x in d)
            incs.update((x.incident_id, x) for x in i)
    d, i = analyzer.flush()
    dets.update((x.detection_id, x) for x in d)
    incs.update((x.incident_id, x) for x in i)
    return dets, incs


def _watchdog(rank: int, ts: int, seq: int, timeout_s: int) -> CommEventEvent:
    ev = comm(
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_s * 1000}) ran for "
        f"{timeout_s * 1000 + 7} milliseconds before timing out.",
        ts=ts,
        node=f"node{rank // 8:03d}",
        rank=rank,
        event_type="watchdog_timeout",
    )
    p = ev.payload.model_copy(
        update={"source": "pytorch", "op": "ALLREDUCE", "seq": seq, "timeout_ms": timeout_s * 1000}
    )
    return ev.model_copy(update={"payload": p})


def hang_at_watchdog(timeout_s: int, hung: int = 6) -> list[Event]:
    """Steps 0-9 complete; in step 10 every rank, ``hung`` too, finishes its compute, but
    ``hung`` never starts collective seq 10 (a desync: it waits elsewhere). The others' watchdog
    fires ``timeout_s`` later naming SeqNum=10; the job fails."""
    events = _with_seq(synchronous_steps(range(10), lambda r, s: 1000))
    t = max(e.ts for e in events)
    for r in range(RANKS):
        for i, name in enumerate(("data", "forward", "backward", "optimizer")):
            events.append(phase(r, 10, name, t + i * 200 * MS, t + (i + 1) * 200 * MS))
    entered = t + 800 * MS
    for k in range(timeout_s + 2):
        events += [gpu_sample(r, t + k * S, util=5.0) for r in range(RANKS)]
        events += [heartbeat(f"node{n:03d}", t + k * S, seq=100 + k) for n in range(2)]
    fire = entered + timeout_s * S
    events += [_watchdog(r, fire + r * MS, 10, timeout_s) for r in range(RANKS) if r != hung]
    events.append(scheduler("job_failed", fire + 2 * S))
    return sorted(events, key=lambda e: e.ts)


def _hang_names(timeout_s: int) -> None:
    dets, incs = _analyse(hang_at_watchdog(timeout_s))
    hangs = [d for d in dets.values() if d.detection_type == "hang"]
    assert [(d.node, d.rank) for d in hangs] == [("node000", 6)], [d.summary for d in hangs]
    assert [(i.cause_class, i.node, i.rank) for i in incs.values()] == [("hang", "node000", 6)]
    assert "seq 10" in hangs[0].summary


def test_a_hang_at_the_suites_10s_watchdog_names_the_rank_that_never_entered_seq_n() -> None:
    _hang_names(10)


def test_a_hang_at_the_production_600s_watchdog_names_the_rank_that_never_entered_seq_n() -> None:
    _hang_names(600)


def _liveness(events: list[Event]) -> list[Detection]:
    det = LivenessDetector("c1", "job-1")
    found: list[Detection] = []
    now = -1
    for ev in sorted(events, key=lambda e: e.ts):
        now = max(now, ev.ts)
        det.observe(ev, now)
        found += det.advance(now, 0)
    return found


def _slow_steps(
    step_s: float, until_s: int, hb_every_s: float = 5.0, hb_stop: dict[int, int] | None = None
) -> list[Event]:
    """Three nodes, one rank each reporting a step span every ``step_s`` (no GPU samples: a
    job that exports spans and heartbeats only); node ``n``'s agent stops at ``hb_stop[n]``."""
    events: list[Event] = []
    stop = hb_stop or {}
    for n in range(3):
        k, t = 0, 0.0
        while t < until_s:
            if t < stop.get(n, until_s):
                events.append(heartbeat(f"node{n:03d}", T0 + int(t * S), seq=k))
            k, t = k + 1, t + hb_every_s
        for k in range(int(until_s / step_s)):
            end = T0 + int((k + 1) * step_s * S)
            events.append(span(n * 8, end, dur_s=step_s, phase="step", step=k))
    return events


def test_a_dead_collector_in_a_job_with_10s_steps_is_collector_silent_not_unresponsive() -> None:
    """The node's ranks report once per 10 s step: after its agent dies, the gaps between its
    spans are the job's cadence, not an unresponsive node."""
    found = _liveness(_slow_steps(10.0, 120, hb_stop={2: 40}))
    assert [(d.detection_type, d.node) for d in found] == [("collector_silent", "node002")]


def test_heartbeats_slower_than_declared_are_judged_by_the_nodes_own_cadence() -> None:
    """An agent that declares 5 s but delivers a heartbeat every 15 s (its poll loop runs late)
    is healthy by its own cadence: neither its node nor its collector is silent."""
    found = _liveness(_slow_steps(2.5, 150, hb_every_s=15.0))
    assert found == []


def _simulated(
    faults: list[Fault],
    *,
    ranks: int = 64,
    jitter: float = 0.15,
    seed: int = 0,
    drop_inventory: bool = False,
    **kw: Any,
) -> tuple[FaultLabel, dict[str, Detection], dict[str, Incident]]:
    config = SimulationConfig(
        job_id=f"shape-{seed}",
        ranks=ranks,
        jitter=jitter,
        seed=seed,
        duration_s=kw.pop("duration_s", 60.0),
        start_ns=1_767_225_600 * S,
        inventory=True,
        fabric_interval_s=2.0,
        **kw,
    )
    events, labels = simulate_with_faults(config, faults)
    if drop_inventory:  # a deployment without the inventory collector
        events = [e for e in events if e.kind != "node_inventory"]
    analyzer = JobAnalyzer(config.cluster, config.job_id, clock_ns=lambda: 0)
    dets: dict[str, Detection] = {}
    incs: dict[str, Incident] = {}
    for n, ev in enumerate(events, 1):
        analyzer.observe(ev)
        if n % 256 == 0:
            d, i = analyzer.take()
            dets.update((x.detection_id, x) for x in d)
            incs.update((x.incident_id, x) for x in i)
    d, i = analyzer.flush()
    dets.update((x.detection_id, x) for x in d)
    incs.update((x.incident_id, x) for x in i)
    return labels[0], dets, incs


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_a_healthy_job_with_15pct_phase_jitter_flags_nothing(seed: int) -> None:
    """Seed 2 flagged a compute straggler on main: with 15% per-phase jitter a healthy rank is
    now and then slow and late in 8 of 10 steps by chance. Thresholds scale with the job's own
    spread (the median over recent steps of 1.4826 x MAD of the ranks' compute ratios)."""
    _, dets, incs = _simulated([Noise()], seed=seed, duration_s=120.0)
    assert [(d.detection_type, d.node, d.rank) for d in dets.values()] == []
    assert list(incs) == []


@pytest.mark.parametrize(
    ("fault", "ranks", "want"),
    [
        (ThermalStraggler(slowdown=1.2), 64, "thermal"),
        (ThermalStraggler(slowdown=1.2), 256, "thermal"),
        (InputStraggler(factor=3.0), 64, "input_pipeline"),
        (InputStraggler(factor=3.0), 256, "input_pipeline"),
    ],
    ids=["thermal-64", "thermal-256", "input-64", "input-256"],
)
def test_the_catalogues_stragglers_at_their_smallest_magnitude_are_found_at_15pct_jitter(
    fault: Fault, ranks: int, want: str
) -> None:
    label, dets, _ = _simulated([fault], ranks=ranks, seed=1)
    found = [(d.straggler_class, d.rank) for d in dets.values()]
    assert found == [(want, label.rank)]


@pytest.mark.parametrize(
    ("slowdown", "jitter", "inventory"),
    [(1.05, 0.03, False), (1.08, 0.03, False), (1.03, 0.03, True), (1.05, 0.08, True)],
    ids=["5pct-no-inventory", "8pct-no-inventory", "3pct", "5pct-8pct-jitter"],
)
def test_config_drift_is_classified_from_the_node_pattern(
    slowdown: float, jitter: float, inventory: bool
) -> None:
    """Every rank of one node a few percent slower, steadily, without a thermal or clock signal:
    one config_drift finding on that node, whether or not its inventory was read (the inventory
    collector may be off), and no per-rank compute stragglers. On main, without inventory it was
    8 per-rank compute stragglers; at 3% (or 5% under 8% jitter) nothing at all."""
    label, dets, _ = _simulated(
        [ConfigDrift(slowdown=slowdown)], jitter=jitter, seed=3, drop_inventory=not inventory
    )
    found = [(d.straggler_class, d.node, d.rank) for d in dets.values()]
    assert found == [("config_drift", label.node, None)]
    (det,) = dets.values()
    assert abs(det.score - slowdown) < 0.02


def test_no_free_floating_hang_row_next_to_an_incident_that_names_the_cause() -> None:
    """The suite's gpu_fell_off_bus/s0: on main the detections held a hang with no node and no
    rank beside the XID incident on node000/7. The hang is a symptom of that cascade: folded."""
    case = next(c for c in scenario_suite(64, [0]) if c.name == "gpu_fell_off_bus/s0")
    events, labels = simulate_with_faults(case.config, case.faults)
    dets, incs = _analyse_all(case.config.job_id, events)
    assert [(i.cause_class, i.node, i.rank) for i in incs.values()] == [
        ("gpu_xid", labels[0].node, labels[0].rank)
    ]
    assert [d for d in dets.values() if not d.node and d.rank is None] == []


def test_a_hang_nothing_explains_keeps_its_job_level_row() -> None:
    """A desync whose watchdog never fires within the log (600 s timeout, 30 s of telemetry):
    no incident names a rank, so the job-level hang stays a row of its own."""
    events = [e for e in hang_at_watchdog(600) if e.kind not in {"comm_event", "scheduler_event"}]
    events = [e for e in events if e.ts < min(x.ts for x in events) + 40 * S]
    dets, incs = _analyse(events)
    assert [(d.detection_type, d.node, d.rank) for d in dets.values()] == [("hang", "", None)]
    assert [(i.cause_class, i.node, i.rank) for i in incs.values()] == [("hang", "", None)]


def test_a_node_whose_clock_runs_ahead_does_not_push_the_jobs_event_time() -> None:
    """Four nodes have spoken, one with its clock 30 s ahead (offset not yet learnt): their 75th
    percentile was their maximum, and event time (which never goes back) jumped 30 s forward."""
    analyzer = JobAnalyzer("c1", "job-1", clock_ns=lambda: 0)
    for k in range(3):
        for n in range(4):
            analyzer.observe(heartbeat(f"node{n}", T0 + k * S + (30 * S if n == 3 else 0)))
    analyzer.flush()
    assert T0 <= analyzer.event_time <= T0 + 3 * S


@pytest.mark.parametrize("skew_s", [-30.0, -15.0, 15.0, 30.0])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_silent_node_under_clock_skew_is_named_unresponsive_not_a_hang(
    skew_s: float, index: int
) -> None:
    """The sweep's one miss on main, clock_skew_s=30/node_unresponsive/0: the silent node's
    clock ran 30 s ahead, the job's event time was pushed to +30 s in the first second, every
    node's last telemetry was stamped there, and the job failed before node003 looked silent:
    the watchdog's hang on one of its ranks was all that was left. Whatever the skew's sign."""
    run = make_run("clock_skew_s", skew_s, "node_unresponsive", index)
    labels, _, incs, _ = analyse_job(run.jobs[0])
    assert [(i.cause_class, i.node, i.rank) for i in incs] == [
        ("node_unresponsive", labels[0].node, None)
    ]
