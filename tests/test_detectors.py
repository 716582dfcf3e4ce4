"""Detectors on hand-built synchronous steps: the edge cases the issue names."""

from __future__ import annotations

from collections.abc import Callable

from rankscope.schemas.derived import Detection
from rankscope.schemas.events import Event, SpanEvent
from rankscope.streams.analysis.liveness import LivenessDetector
from rankscope.streams.analysis.steps import ClockOffsets, StepJoin
from rankscope.streams.analysis.stragglers import StragglerDetector
from tests.factories import NOW_NS, gpu_sample, heartbeat, span

S = 10**9
MS = 10**6
T0 = (NOW_NS // S) * S
RANKS = 16


def phase(rank: int, step: int, name: str, start: int, end: int, offset: int = 0) -> SpanEvent:
    ev = span(rank, end + offset, dur_s=(end - start) / S, phase=name, step=step)
    return ev


def synchronous_steps(
    steps: range,
    compute_ms: Callable[[int, int], float],
    data_share: Callable[[int, int], float] = lambda r, s: 0.2,
    skew: Callable[[int], int] = lambda r: 0,
    ranks: int = RANKS,
) -> list[Event]:
    """Each rank computes, then waits in the collective until the last rank arrives."""
    out: list[Event] = []
    t = T0
    for s in steps:
        arrive = {r: t + int(compute_ms(r, s) * MS) for r in range(ranks)}
        end = max(arrive.values()) + 50 * MS
        for r in range(ranks):
            c = arrive[r] - t
            d = int(c * data_share(r, s))
            marks = [t, t + d, t + d + (c - d) // 3, t + d + 2 * (c - d) // 3, arrive[r]]
            for i, name in enumerate(("data", "forward", "backward", "optimizer")):
                out.append(phase(r, s, name, marks[i], marks[i + 1], skew(r)))
            out.append(phase(r, s, "collective", arrive[r], end, skew(r)))
            out.append(phase(r, s, "step", t, end, skew(r)))
        t = end
    # Kafka delivers in arrival (true) order; a skewed clock only shifts the timestamps.
    return sorted(out, key=lambda e: e.ts - skew(e.rank or 0))


def run_stragglers(events: list[Event]) -> tuple[list[Detection], ClockOffsets]:
    join, clock = StepJoin(), ClockOffsets()
    det = StragglerDetector("c1", "job-1")
    found: list[Detection] = []
    for ev in events:
        join.observe(ev)
        det.observe(ev)
        for st in join.finalize_ready():
            clock.update(st)
            found += det.on_step(st, ev.ts, 0)
    for st in join.flush():
        found += det.on_step(st, events[-1].ts, 0)
    return found, clock


def test_straggler_hidden_by_equal_step_times_is_found_from_compute_and_arrival() -> None:
    events = synchronous_steps(range(30), lambda r, s: 1300 if r == 5 and s >= 5 else 1000)
    steps = [e for e in events if isinstance(e, SpanEvent) and e.payload.phase == "step"]
    assert len({e.payload.end_ns - e.payload.start_ns for e in steps if e.payload.step == 20}) == 1
    found, _ = run_stragglers(events)
    assert [(d.rank, d.straggler_class) for d in found] == [(5, "compute")]
    assert 1.25 < found[0].score < 1.35


def test_a_rank_that_recovers_after_one_slow_window_is_not_flagged() -> None:
    events = synchronous_steps(range(30), lambda r, s: 1500 if r == 3 and 10 <= s < 15 else 1000)
    found, _ = run_stragglers(events)
    assert found == []


def test_input_pipeline_class_from_the_data_phase() -> None:
    events = synchronous_steps(
        range(25),
        lambda r, s: 1400 if r == 7 else 1000,
        data_share=lambda r, s: (0.2 * 1000 + 400) / 1400 if r == 7 else 0.2,
    )
    found, _ = run_stragglers(events)
    assert [(d.rank, d.straggler_class) for d in found] == [(7, "input_pipeline")]


def test_thermal_class_from_throttle_reasons() -> None:
    events = synchronous_steps(range(25), lambda r, s: 1250 if r == 2 else 1000)
    sample = gpu_sample(2, T0 + S)
    throttled = sample.model_copy(
        update={"payload": sample.payload.model_copy(update={"throttle_reasons": 0x20})}
    )
    found, _ = run_stragglers([throttled, *events])
    assert [(d.rank, d.straggler_class) for d in found] == [(2, "thermal")]
    assert any("0x20" in e for e in found[0].evidence)


def test_two_stragglers_in_one_job_are_both_found() -> None:
    events = synchronous_steps(range(30), lambda r, s: {4: 1300, 12: 1250}.get(r, 1000))
    found, _ = run_stragglers(events)
    assert sorted(d.rank for d in found) == [4, 12]


def test_a_node_whose_clock_is_5s_ahead_is_measured_and_does_not_change_the_answer() -> None:
    ahead = synchronous_steps(
        range(30),
        lambda r, s: 1300 if r == 9 else 1000,
        skew=lambda r: 5 * S if r // 8 == 1 else 0,
        ranks=24,
    )
    found, clock = run_stragglers(ahead)
    assert [d.rank for d in found] == [9]
    assert abs(clock.offset("node001") - 5 * S) < MS
    assert abs(clock.offset("node000")) < MS and abs(clock.offset("node002")) < MS


def _feed(det: LivenessDetector, events: list[Event]) -> list[Detection]:
    found: list[Detection] = []
    now = -1
    for ev in sorted(events, key=lambda e: e.ts):
        now = max(now, ev.ts)
        det.observe(ev, ev.ts)
        found += det.advance(now, 0)
    return found


def test_hang_names_the_rank_that_never_entered_the_collective() -> None:
    events = synchronous_steps(range(10), lambda r, s: 1000)
    t = max(e.ts for e in events)
    # step 10: everyone but rank 6 finishes compute; nobody completes the step
    for r in range(RANKS):
        names = ("data", "forward") if r == 6 else ("data", "forward", "backward", "optimizer")
        for i, name in enumerate(names):
            events.append(phase(r, 10, name, t + i * 200 * MS, t + (i + 1) * 200 * MS))
    # time keeps going: GPU samples and heartbeats continue for 20 s
    for k in range(20):
        events += [gpu_sample(r, t + k * S, util=5.0) for r in range(0, RANKS, 8)]
        events += [heartbeat(f"node{n:03d}", t + k * S, seq=k) for n in range(2)]
    found = _feed(LivenessDetector("c1", "job-1"), events)
    hangs = [d for d in found if d.detection_type == "hang"]
    assert len(hangs) == 1
    assert (hangs[0].rank, hangs[0].node) == (6, "node000")
    assert "forward of step 10" in hangs[0].summary
    waited = (hangs[0].detected_ts - hangs[0].onset_ts) / S
    assert 5.0 <= waited <= 6.5  # adaptive timeout: 5 x the ~1.05 s median step, plus one tick


def test_silent_node_vs_silent_collector() -> None:
    t = T0
    events: list[Event] = []
    for k in range(30):
        for n in range(3):
            if n == 1 and k >= 10:
                continue  # node001: everything stops at 10 s
            if not (n == 2 and k >= 10):
                events.append(heartbeat(f"node{n:03d}", t + k * S, seq=k))  # node002: agent dies
            events.append(span(n * 8, t + k * S, phase="step", step=k))
    found = _feed(LivenessDetector("c1", "job-1"), events)
    kinds = sorted((d.detection_type, d.node) for d in found if d.detection_type != "hang")
    assert kinds == [("collector_silent", "node002"), ("node_unresponsive", "node001")]
    node = next(d for d in found if d.detection_type == "node_unresponsive")
    assert node.onset_ts == t + 9 * S


def test_silence_after_the_job_failed_is_a_consequence_not_a_finding() -> None:
    events: list[Event] = []
    for k in range(30):
        for n in range(2):
            if n == 1 and k >= 20:
                continue
            events.append(heartbeat(f"node{n:03d}", T0 + k * S, seq=k))
            ok = k < 15
            ev = span(n * 8, T0 + k * S, phase="step", step=k)
            if not ok:
                ev = ev.model_copy(
                    update={"payload": ev.payload.model_copy(update={"status": "error"})}
                )
            events.append(ev)
    found = _feed(LivenessDetector("c1", "job-1"), events)
    assert [d for d in found if d.detection_type == "node_unresponsive"] == []


def _silence_run(silent_nodes: set[int], nodes: int = 8) -> list[Detection]:
    """Heartbeats and steps from ``nodes`` nodes; ``silent_nodes`` stop at 10 s, one node keeps
    the job's clock going to 30 s."""
    events: list[Event] = []
    for k in range(30):
        for n in range(nodes):
            if n in silent_nodes and k >= 10:
                continue
            events.append(heartbeat(f"node{n:03d}", T0 + k * S, seq=k))
            events.append(span(n * 8, T0 + k * S, phase="step", step=k))
    det = LivenessDetector("c1", "job-1")
    found = _feed(det, events)
    return [d for d in found if d.detection_type == "node_unresponsive"]


def test_one_silent_node_among_many_is_named() -> None:
    assert [d.node for d in _silence_run({3})] == ["node003"]


def test_most_nodes_silent_at_once_is_not_a_per_node_finding() -> None:
    # 6 of 8 nodes stop together: the job or the pipeline, not six broken nodes
    assert _silence_run({0, 1, 2, 3, 4, 5}) == []
    # at the boundary (half of the nodes), each is still named
    assert sorted(d.node for d in _silence_run({0, 1, 2, 3})) == [f"node{n:03d}" for n in range(4)]


def test_a_hang_must_hold_while_the_jobs_other_telemetry_is_read() -> None:
    """Event time can jump past the hang timeout in one read (a burst of another topic read
    ahead of the spans). The hang is declared only once ~2 s worth of the job's other telemetry
    has been read without a span; a span arriving before that re-arms nothing and finds no hang."""
    events: list[Event] = list(synchronous_steps(range(10), lambda r, s: 1000))
    t = max(e.ts for e in events)
    per_second = [gpu_sample(r, 0, util=95.0) for r in range(RANKS)]  # 16 events per second
    events += [e.model_copy(update={"ts": T0 + k * S}) for k in range(11) for e in per_second]
    det = LivenessDetector("c1", "job-1")
    now = -1
    for ev in sorted(events, key=lambda e: e.ts):
        now = max(now, ev.ts)
        det.observe(ev, now)
        assert det.advance(now, 0) == []
    # a burst read ahead of the spans: 8 s of event time in 20 events (< 2 s x 16 events/s)
    ahead = t + 8 * S
    for k in range(20):
        ev = per_second[k % RANKS].model_copy(update={"ts": ahead})
        det.observe(ev, ahead)
        assert [d for d in det.advance(ahead, 0) if d.detection_type == "hang"] == []
    # the lagging spans arrive: progress, no hang
    for r in range(RANKS):
        det.observe(phase(r, 10, "step", t, t + S), ahead)
    assert [d for d in det.advance(ahead, 0) if d.detection_type == "hang"] == []
    # a real stall: samples keep coming for 10 s and no span; now it is a hang
    found = []
    for k in range(1, 11):
        for ev in per_second:
            ev2 = ev.model_copy(update={"ts": ahead + k * S})
            det.observe(ev2, ahead + k * S)
            found += det.advance(ahead + k * S, 0)
    assert [d.detection_type for d in found] == ["hang"]


def test_spans_read_in_late_bursts_are_not_a_hang() -> None:
    """A worker behind on the span topic reads spans in bursts, 8 s of event time behind the GPU
    samples: event time passes the hang timeout between bursts, but spans keep coming, so the
    job is not hung."""
    steps = synchronous_steps(range(40), lambda r, s: 1000)
    spans = sorted((e for e in steps if e.kind == "span"), key=lambda e: e.ts)
    t_end = max(e.ts for e in spans)
    samples = [gpu_sample(r, T0 + k * S, util=95.0) for k in range(41) for r in range(RANKS)]
    samples += [heartbeat(f"node{n:03d}", T0 + k * S, seq=k) for k in range(41) for n in range(2)]
    samples.sort(key=lambda e: e.ts)
    read: list[Event] = []
    lag = 8 * S
    si = 0
    for burst_end in range(T0 + 10 * S, t_end + lag + S, 2 * S):  # a span burst every 2 s
        read += [e for e in samples if burst_end - 2 * S < e.ts <= burst_end]
        while si < len(spans) and spans[si].ts <= burst_end - lag:
            read.append(spans[si])
            si += 1
    read += spans[si:]
    det = LivenessDetector("c1", "job-1")
    found: list[Detection] = []
    now = -1
    for ev in read:
        now = max(now, ev.ts)
        det.observe(ev, now)
        found += det.advance(now, 0)
    assert [d for d in found if d.detection_type == "hang"] == []
