"""The labelled fault simulator: every scenario's ground truth is visible in its events.

Each scenario test reads the answer from the label (never from the spec) and checks that the
evidence a detector needs is in the stream, in the realistic order, and that nothing contradicts
it (e.g. no event at all from an unresponsive node after its onset).
"""

from __future__ import annotations

import functools
import itertools
import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

from rankscope.schemas import (
    EVENT_ADAPTER,
    CommEventEvent,
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
from rankscope.simulation.faults import (
    SCENARIOS,
    TERMINAL_SCENARIOS,
    ClockSkew,
    ConfigDrift,
    EccDbe,
    Fault,
    FaultInjectingSimulator,
    FaultLabel,
    GpuFellOffBus,
    Hang,
    HostOom,
    IbLinkFlap,
    NodeUnresponsive,
    Noise,
    Preemption,
    ThermalStraggler,
    parse_faults,
    read_labels,
    scenario_suite,
    simulate_with_faults,
    write_labels,
)
from rankscope.simulation.simulator import SimulationConfig

NS = 1_000_000_000
START_NS = 1_700_000_000 * NS
CONFIG = SimulationConfig(
    start_ns=START_NS, ranks=32, duration_s=40.0, seed=11, job_id="faulty-job"
)
TIMEOUT_MS = round(CONFIG.nccl_timeout_s * 1000)


class Run:
    """One simulated run, with the lookups the tests need."""

    def __init__(self, config: SimulationConfig, faults: Sequence[Fault]) -> None:
        self.config = config
        it, labels = simulate_with_faults(config, faults)
        self.events: list[Event] = list(it)
        self.labels = labels
        self.label = labels[0]

    @property
    def spans(self) -> list[SpanEvent]:
        return [e for e in self.events if isinstance(e, SpanEvent)]

    @property
    def comm(self) -> list[CommEventEvent]:
        return [e for e in self.events if isinstance(e, CommEventEvent)]

    @property
    def gpu_events(self) -> list[GpuEventEvent]:
        return [e for e in self.events if isinstance(e, GpuEventEvent)]

    @property
    def fabric_events(self) -> list[FabricEventEvent]:
        return [e for e in self.events if isinstance(e, FabricEventEvent)]

    @property
    def scheduler(self) -> list[SchedulerEventEvent]:
        return [e for e in self.events if isinstance(e, SchedulerEventEvent)]

    @property
    def samples(self) -> list[GpuSampleEvent]:
        return [e for e in self.events if isinstance(e, GpuSampleEvent)]

    def watchdogs(self) -> list[CommEventEvent]:
        return [e for e in self.comm if e.payload.event_type == "watchdog_timeout"]

    def steps(self) -> dict[int, dict[str, dict[int, SpanEvent]]]:
        """step -> phase -> rank -> span."""
        out: dict[int, dict[str, dict[int, SpanEvent]]] = defaultdict(lambda: defaultdict(dict))
        for s in self.spans:
            assert s.payload.step is not None and s.rank is not None
            out[s.payload.step][s.payload.phase][s.rank] = s
        return out


@functools.cache
def run_of(name: str) -> Run:
    """The default 32-rank run of a suite variant (cached: several tests read each)."""
    faults = dict(VARIANTS)[name]
    return Run(CONFIG.model_copy(update={"job_id": f"job-{name}"}), faults)


VARIANTS: list[tuple[str, list[Fault]]] = [
    (c.name.split("/")[0], c.faults) for c in scenario_suite(32, [0], duration_s=40.0)
]
VARIANT_NAMES = [n for n, _ in VARIANTS]


def by_node(events: Sequence[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        out[e.node].append(e)
    return out


def last_ts(run: Run, node: str) -> int:
    return max(e.ts for e in run.events if e.node == node)


# ---------------------------------------------------------------- contract, order, determinism


@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_every_event_of_every_scenario_validates(name: str) -> None:
    run = run_of(name)
    assert run.events
    for e in run.events:
        parsed = EVENT_ADAPTER.validate_python(e.model_dump(by_alias=True))
        assert parsed == e
        # fast-built events carry every field (a missing one would only show up downstream)
        assert set(e.__dict__) == set(type(e).model_fields)
        assert set(e.payload.__dict__) == set(type(e.payload).model_fields)
        assert e.clock_offset_ns is None, "the pipeline must estimate skew itself"
        assert e.observed_ts > e.ts
    assert len({e.event_id for e in run.events}) == len(run.events)


@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_source_ts_non_decreasing_per_node(name: str) -> None:
    run = run_of(name)
    for node, evs in by_node(run.events).items():
        ts = [e.ts for e in evs]
        assert ts == sorted(ts), node
    if run.label.skewed_node is None:
        ts = [e.ts for e in run.events]
        assert ts == sorted(ts)


@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_background_telemetry(name: str) -> None:
    run = run_of(name)
    kinds = Counter(e.kind for e in run.events)
    assert kinds["node_inventory"] == CONFIG.nodes
    assert kinds["fabric_counters"] >= CONFIG.nodes * CONFIG.hcas_per_node * 5
    assert kinds["heartbeat"] >= CONFIG.nodes * 3
    first = run.events[0]
    assert isinstance(first, SchedulerEventEvent) and first.payload.event_type == "job_started"


def test_same_seed_same_events_and_labels() -> None:
    faults: list[Fault] = [GpuFellOffBus(), Noise(), ClockSkew()]
    a, b = Run(CONFIG, faults), Run(CONFIG, faults)
    assert [e.model_dump(by_alias=True) for e in a.events] == [
        e.model_dump(by_alias=True) for e in b.events
    ]
    assert a.labels == b.labels


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        (GpuFellOffBus(), "rank"),
        (IbLinkFlap(), "node"),
        (ThermalStraggler(), "rank"),
        (Preemption(), "node"),
    ],
)
def test_other_seeds_vary_target_onset_and_magnitude(fault: Fault, field: str) -> None:
    labels = [
        FaultInjectingSimulator(CONFIG.model_copy(update={"seed": s}), [fault]).labels[0]
        for s in range(8)
    ]
    assert len({getattr(lb, field) for lb in labels}) > 1
    assert len({lb.onset_ns for lb in labels}) == 8
    if isinstance(fault, ThermalStraggler):
        mags = {lb.details["magnitude"] for lb in labels}
        assert len(mags) == 8 and all(1.2 <= float(m) <= 1.4 for m in mags)


def test_labels_known_before_iterating_and_explicit_specs_are_honoured() -> None:
    sim = FaultInjectingSimulator(CONFIG, [EccDbe(rank=9, onset_s=12.5)])
    (label,) = sim.labels
    assert (label.rank, label.node, label.gpu) == (9, "node001", 1)
    assert label.onset_ns == START_NS + 12_500_000_000
    assert label.failure_ns is not None
    events = list(sim.run())
    assert events[-1].ts == label.failure_ns


def test_label_file_round_trip(tmp_path: Path) -> None:
    faults: list[Fault] = [IbLinkFlap(), ClockSkew(offset_s=-3.0, target="other")]
    _, labels = simulate_with_faults(CONFIG, faults)
    path = write_labels(tmp_path / "run.labels.json", labels, config=CONFIG, faults=faults)
    doc = read_labels(path)
    assert doc.labels == labels and doc.faults == faults and doc.config == CONFIG
    raw = json.loads(path.read_text())
    assert raw["version"] == 1 and raw["job_id"] == CONFIG.job_id
    assert raw["labels"][0]["scenario"] == "ib_link_flap"
    assert parse_faults(raw["faults"]) == faults


# ---------------------------------------------------------------- the cascades


def check_cascade(run: Run, *, survivors_time_out: set[int]) -> None:
    """What every "one component dies, then everyone times out" run shares."""
    label = run.label
    assert label.onset_ns is not None and label.failure_ns is not None
    assert label.collective_seq is not None and label.step is not None
    # the collective of the failing step is the one named: the previous step completed with
    # seq - 1 on its collective spans
    prev = run.steps()[label.step - 1]["collective"]
    assert {s.payload.attributes["collective.seq"] for s in prev.values()} == {
        label.collective_seq - 1
    }
    watchdogs = run.watchdogs()
    assert {w.rank for w in watchdogs} == survivors_time_out
    for w in watchdogs:
        p = w.payload
        assert (p.source, p.op, p.seq, p.timeout_ms) == (
            "pytorch",
            "ALLREDUCE",
            label.collective_seq,
            TIMEOUT_MS,
        )
        assert p.elapsed_ms is not None and TIMEOUT_MS < p.elapsed_ms < TIMEOUT_MS + 200
        assert f"SeqNum={label.collective_seq}" in p.message
        assert w.ts > label.onset_ns
        # elapsed counts from when the rank entered the collective (its error span's start)
        coll = run.steps()[label.step]["collective"][w.rank]  # type: ignore[index]
        assert coll.payload.status == "error"
        assert abs(w.ts - p.elapsed_ms * 1_000_000 - coll.payload.start_ns) < 1_000_000
        assert coll.payload.error_type == "DistBackendError"
        assert "Watchdog caught collective operation timeout" in coll.payload.error_message
    # every survivor's step span ends in error; the job fails last
    failed = [s for s in run.steps()[label.step]["step"].values()]
    assert all(s.payload.status == "error" for s in failed)
    last = run.events[-1]
    assert isinstance(last, SchedulerEventEvent) and last.payload.event_type == "job_failed"
    assert last.ts == label.failure_ns
    assert last.ts > max(e.ts for e in run.events[:-1] if e.kind != "gpu_sample")
    assert not [e for e in run.events if isinstance(e, SpanEvent) and e.ts > last.ts]


def test_gpu_fell_off_bus() -> None:
    run = run_of("gpu_fell_off_bus")
    label = run.label
    assert (label.outcome, label.cause_class, label.xid) == ("root_cause", "gpu_xid", 79)
    assert label.rank is not None and label.onset_ns is not None
    (xid,) = [e for e in run.gpu_events if e.payload.event_type == "xid"]
    assert (xid.ts, xid.node, xid.gpu, xid.rank, xid.payload.xid) == (
        label.onset_ns,
        label.node,
        label.gpu,
        label.rank,
        79,
    )
    (lost,) = [e for e in run.gpu_events if e.payload.event_type == "gpu_unresponsive"]
    assert lost.rank == label.rank and label.onset_ns <= lost.ts < label.onset_ns + NS
    mine = [s for s in run.spans if s.rank == label.rank]
    assert max(s.ts for s in mine) <= label.onset_ns, "the rank's last span is before onset"
    assert max(s.ts for s in run.samples if s.rank == label.rank) < label.onset_ns
    # the node itself is alive: other GPUs and heartbeats continue
    hb = [e for e in run.events if isinstance(e, HeartbeatEvent) and e.node == label.node]
    assert max(h.ts for h in hb) > label.onset_ns + 5 * NS
    others = set(range(CONFIG.ranks)) - {label.rank}
    check_cascade(run, survivors_time_out=others)
    assert set(label.symptom_ranks) == others and label.fault_ranks == [label.rank]


def test_ecc_dbe() -> None:
    run = run_of("ecc_dbe")
    label = run.label
    assert (label.cause_class, label.xid) == ("gpu_ecc", 48)
    assert label.onset_ns is not None
    xid, *rest = [e for e in run.gpu_events if e.rank == label.rank]
    assert (xid.payload.event_type, xid.payload.xid, xid.ts) == ("xid", 48, label.onset_ns)
    assert [e.payload.event_type for e in rest] == ["ecc", "ecc"]
    assert "double-bit" in rest[0].payload.message
    # the crash: a CUDA error span on that rank, before anyone else's error
    errors = sorted(
        (s for s in run.spans if s.payload.status == "error"), key=lambda s: s.payload.end_ns
    )
    first_two = errors[:2]
    assert {s.rank for s in first_two} == {label.rank}
    assert {s.payload.error_type for s in first_two} == {"RuntimeError"}
    assert "CUDA error: uncorrectable ECC error encountered" in first_two[0].payload.error_message
    assert first_two[0].ts < label.onset_ns + NS // 2
    # NVML still answers: samples continue and count the DBE
    after = [s for s in run.samples if s.rank == label.rank and s.ts >= label.onset_ns]
    assert after and all(s.payload.ecc_dbe_total == 1 for s in after)
    assert max(s.payload.sm_util_pct for s in after[1:]) <= 3.0, "process gone: GPU idle"
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - {label.rank})


def test_nvlink_error_local_ranks_fail_first() -> None:
    run = run_of("nvlink_error")
    label = run.label
    assert (label.cause_class, label.xid) == ("nvlink", 74)
    assert label.onset_ns is not None and label.rank is not None
    (xid,) = [e for e in run.gpu_events if e.payload.event_type == "xid"]
    assert (xid.ts, xid.payload.xid, xid.rank) == (label.onset_ns, 74, label.rank)
    (nv,) = [e for e in run.fabric_events if e.payload.event_type == "nvlink_error"]
    assert nv.node == label.node and nv.rank == label.rank and nv.payload.delta
    local = {r for r in range(CONFIG.ranks) if CONFIG.node_name(r) == label.node}
    comm = run.comm
    (warn,) = [c for c in comm if c.payload.event_type == "nccl_warn"]
    assert warn.rank == label.rank and "NVLink" in warn.payload.message
    remote_exit = [c for c in comm if c.payload.event_type == "remote_process_exited"]
    assert {c.rank for c in remote_exit} == local - {label.rank}
    local_errors = [s for s in run.spans if s.payload.status == "error" and s.rank in local]
    watchdogs = run.watchdogs()
    assert max(s.ts for s in local_errors) < min(w.ts for w in watchdogs)
    assert {s.payload.error_type for s in local_errors} == {"DistBackendError"}
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - local)


def test_ib_link_flap() -> None:
    run = run_of("ib_link_flap")
    label = run.label
    assert label.cause_class == "ib_link" and label.hca_device and label.hca_port == 1
    assert label.onset_ns is not None and label.node is not None
    fe = [e for e in run.fabric_events if e.node == label.node]
    down = [e for e in fe if e.payload.event_type == "link_down"]
    up = [e for e in fe if e.payload.event_type == "link_up"]
    assert len(down) == len(up) == 1
    assert (down[0].ts, down[0].payload.device, down[0].payload.port) == (
        label.onset_ns,
        label.hca_device,
        label.hca_port,
    )
    assert down[0].rank is None, "an HCA event is node-level"
    assert label.onset_ns < up[0].ts < label.onset_ns + 3 * NS
    increases = {
        e.payload.counter: e.payload.delta
        for e in fe
        if e.payload.event_type == "error_counter_increase"
    }
    assert increases["link_downed"] == 1 and (increases["symbol_error"] or 0) >= 50
    # the port's counters show it too, and the port is reported down while it is
    polls = [
        e
        for e in run.events
        if isinstance(e, FabricCountersEvent)
        and e.node == label.node
        and e.payload.device == label.hca_device
    ]
    for p in polls:
        down_now = label.onset_ns <= p.ts < up[0].ts
        assert p.payload.state == ("1: DOWN" if down_now else "4: ACTIVE")
    before = [p for p in polls if p.ts < label.onset_ns][-1]
    after = next(p for p in polls if p.ts > label.onset_ns + 3 * NS)
    for counter in ("link_downed", "symbol_error"):
        assert (
            after.payload.counters[counter] - before.payload.counters[counter]
            == (increases[counter])
        )
    # peers name the node's address; the node's own rail rank sees the port error
    address = label.details["peer_address"]
    assert address == FaultInjectingSimulator(CONFIG, []).node_address(label.node)
    ib = [c for c in run.comm if c.payload.event_type == "net_ib_error"]
    peers = [c for c in ib if c.node != label.node]
    assert peers and all(c.payload.peer.startswith(f"{address}<") for c in peers)
    assert all(str(label.hca_device) in c.payload.message for c in ib)
    own = [c for c in ib if c.node == label.node]
    assert own and all("port error" in c.payload.message for c in own)
    assert min(c.ts for c in ib) > label.onset_ns
    assert max(c.ts for c in ib) < min(w.ts for w in run.watchdogs())
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - {c.rank for c in peers})


def test_preemption_is_the_scheduler() -> None:
    run = run_of("preemption")
    label = run.label
    assert (label.outcome, label.cause_class, label.xid) == (
        "root_cause",
        "scheduler_preemption",
        None,
    )
    (pre,) = [e for e in run.scheduler if e.payload.event_type == "preempted"]
    assert (pre.ts, pre.node) == (label.onset_ns, label.node)
    symptoms = [e for e in run.comm] + [s for s in run.spans if s.payload.status == "error"]
    assert min(e.ts for e in symptoms) > pre.ts
    assert not run.gpu_events, "no hardware event"
    failed = run.events[-1]
    assert isinstance(failed, SchedulerEventEvent) and failed.payload.reason == "PREEMPTED"
    assert failed.node != label.node
    # the node's ranks stop; its agent keeps beating, no longer for this job
    killed = set(label.fault_ranks)
    assert killed == {r for r in range(CONFIG.ranks) if CONFIG.node_name(r) == label.node}
    assert label.onset_ns is not None
    assert max(s.ts for s in run.spans if s.rank in killed) < label.onset_ns + NS
    beats = [e for e in run.events if isinstance(e, HeartbeatEvent) and e.node == label.node]
    assert {b.job_id for b in beats if b.ts >= label.onset_ns} == {""}
    assert {b.job_id for b in beats if b.ts < label.onset_ns} == {run.config.job_id}
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - killed)


def test_host_oom() -> None:
    run = run_of("host_oom")
    label = run.label
    assert label.cause_class == "host_oom"
    (oom,) = [e for e in run.scheduler if e.payload.event_type == "oom_killed"]
    assert (oom.ts, oom.rank, oom.node, oom.payload.exit_code) == (
        label.onset_ns,
        label.rank,
        label.node,
        137,
    )
    assert "Out of memory: Killed process" in oom.payload.reason
    failed = run.events[-1]
    assert isinstance(failed, SchedulerEventEvent)
    assert (failed.payload.state, failed.payload.exit_code) == ("OUT_OF_MEMORY", 137)
    assert label.onset_ns is not None
    assert max(s.ts for s in run.spans if s.rank == label.rank) <= label.onset_ns
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - {label.rank})


def test_node_unresponsive_goes_completely_silent() -> None:
    run = run_of("node_unresponsive")
    label = run.label
    assert (label.outcome, label.cause_class) == ("unresponsive_node", "node_unresponsive")
    assert label.onset_ns is not None and label.node is not None
    assert last_ts(run, label.node) < label.onset_ns
    kinds_before = {e.kind for e in run.events if e.node == label.node}
    assert {"heartbeat", "span", "gpu_sample", "fabric_counters"} <= kinds_before
    # everyone else is still there until the job fails
    for node in {e.node for e in run.events} - {label.node}:
        assert last_ts(run, node) > label.onset_ns + 5 * NS
    dead = {r for r in range(CONFIG.ranks) if CONFIG.node_name(r) == label.node}
    assert set(label.fault_ranks) == dead
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - dead)


def check_hang(run: Run) -> None:
    label = run.label
    assert (label.outcome, label.cause_class) == ("hang", "hang")
    assert label.onset_ns is not None and label.step is not None and label.rank is not None
    mine = [s for s in run.spans if s.rank == label.rank]
    assert max(s.ts for s in mine) <= label.onset_ns
    # no error anywhere on the hung rank; its GPU and node keep reporting
    assert not [c for c in run.comm if c.rank == label.rank]
    assert not run.gpu_events
    late = [s for s in run.samples if s.rank == label.rank and s.ts > label.onset_ns + NS]
    assert len(late) >= 5 and max(s.payload.sm_util_pct for s in late) <= 3.0
    beats = [
        e
        for e in run.events
        if isinstance(e, HeartbeatEvent) and e.node == label.node and e.ts > label.onset_ns
    ]
    assert len(beats) >= 2
    # everyone else entered collective N (their optimizer span of that step ended); the hung
    # rank never did
    step = run.steps()[label.step]
    assert label.rank not in step["optimizer"]
    assert set(step["optimizer"]) == set(range(CONFIG.ranks)) - {label.rank}


def test_hang_without_abort() -> None:
    run = run_of("hang")
    check_hang(run)
    label = run.label
    assert label.failure_ns is None and label.details == {"hang_abort": False}
    assert not run.comm and not [s for s in run.spans if s.payload.status == "error"]
    assert not [e for e in run.scheduler if e.payload.event_type != "job_started"]
    assert label.onset_ns is not None
    assert run.events[-1].ts >= label.onset_ns + CONFIG.nccl_timeout_s * NS - NS


def test_hang_with_abort_names_the_collective() -> None:
    run = run_of("hang_abort")
    check_hang(run)
    label = run.label
    check_cascade(run, survivors_time_out=set(range(CONFIG.ranks)) - {label.rank})


# ---------------------------------------------------------------- stragglers and drift


def arrivals(run: Run, step: int) -> dict[int, int]:
    """rank -> when it entered the collective of ``step``."""
    return {r: s.payload.start_ns for r, s in run.steps()[step]["collective"].items()}


def test_thermal_straggler_arrives_last() -> None:
    run = run_of("thermal_straggler")
    label = run.label
    assert (label.outcome, label.cause_class) == ("straggler", "thermal")
    assert label.onset_ns is not None and label.rank is not None
    (start,) = [e for e in run.gpu_events if e.payload.event_type == "throttle_start"]
    assert (start.ts, start.rank) == (label.onset_ns, label.rank)
    steps = run.steps()
    after = [
        n
        for n, phases in steps.items()
        if phases["step"][label.rank].payload.start_ns >= label.onset_ns
        and len(phases["collective"]) == CONFIG.ranks
    ]
    assert len(after) >= 10
    last = sum(1 for n in after if max(a := arrivals(run, n), key=a.__getitem__) == label.rank)
    assert last >= 0.9 * len(after)
    for n in after:
        waits = {
            r: s.payload.end_ns - s.payload.start_ns for r, s in steps[n]["collective"].items()
        }
        assert min(waits, key=waits.__getitem__) == label.rank
        # every rank's step time is still equal
        assert len({s.payload.end_ns for s in steps[n]["step"].values()}) == 1
    hot = [s for s in run.samples if s.rank == label.rank and s.ts >= label.onset_ns]
    assert all(s.payload.throttle_reasons == 0x60 for s in hot)
    clocks = {s.payload.sm_clock_mhz for s in hot}
    assert len(clocks) == 1 and clocks.pop() < 1980 / 1.19  # type: ignore[operator]
    assert all(s.payload.throttle_reasons == 0 for s in run.samples if s.rank != label.rank)
    assert run.events[-1].payload.event_type == "job_completed"  # type: ignore[union-attr]


def test_input_straggler_data_phase() -> None:
    run = run_of("input_straggler")
    label = run.label
    assert label.cause_class == "input_pipeline" and label.onset_ns is not None
    factor = float(label.details["magnitude"])
    assert 3.0 <= factor <= 10.0
    for n, phases in run.steps().items():
        data = {r: s.payload.end_ns - s.payload.start_ns for r, s in phases["data"].items()}
        mine = data.pop(label.rank)  # type: ignore[arg-type]
        ratio = mine / statistics.median(data.values())
        if phases["data"][label.rank].payload.start_ns >= label.onset_ns:  # type: ignore[index]
            assert ratio > 0.7 * factor, n  # per-step variation 0.85-1.15 x own jitter
        else:
            assert ratio < 1.5, n
        if ratio > 2.5 and len(phases["collective"]) == CONFIG.ranks:
            a = arrivals(run, n)
            assert max(a, key=a.__getitem__) == label.rank


def test_config_drift() -> None:
    run = run_of("config_drift")
    label = run.label
    assert (label.outcome, label.cause_class, label.onset_ns) == (
        "straggler",
        "config_drift",
        START_NS,
    )
    inv = {e.node: e.payload for e in run.events if isinstance(e, NodeInventoryEvent)}
    drifted = inv.pop(str(label.node))
    assert len({p.fingerprint for p in inv.values()}) == 1
    (normal,) = {(p.driver_version, p.nccl_version) for p in inv.values()}
    assert (drifted.driver_version, drifted.nccl_version) != normal
    assert drifted.fingerprint not in {p.fingerprint for p in inv.values()}
    fwd: dict[bool, list[int]] = defaultdict(list)
    for s in run.spans:
        if s.payload.phase == "forward":
            fwd[s.rank in label.fault_ranks].append(s.payload.end_ns - s.payload.start_ns)
    ratio = statistics.median(fwd[True]) / statistics.median(fwd[False])
    assert 1.03 < ratio < 1.12
    assert float(label.details["magnitude"]) == pytest.approx(ratio, abs=0.02)


# ---------------------------------------------------------------- modifiers and noise


@pytest.mark.parametrize("base", ["gpu_fell_off_bus", "ib_link_flap", "thermal_straggler"])
@pytest.mark.parametrize("offset_s", [5.0, -15.0])
def test_clock_skew_shifts_exactly_that_node(base: str, offset_s: float) -> None:
    faults = dict(VARIANTS)[base]
    plain = Run(CONFIG, faults)
    skewed = Run(CONFIG, [*faults, ClockSkew(offset_s=offset_s)])
    label = skewed.label
    offset = round(offset_s * NS)
    assert (label.skewed_node, label.skew_offset_ns) == (plain.label.node, offset)
    assert label.modifiers == ["clock_skew"]
    # the same attribution: the label is unchanged but for the skew
    assert (
        label.model_copy(update={"skewed_node": None, "skew_offset_ns": None, "modifiers": []})
        == plain.label
    )
    before = {e.event_id: e for e in plain.events}
    assert len(before) == len(skewed.events)
    for e in skewed.events:
        b = before[e.event_id]
        shift = offset if e.node == label.skewed_node else 0
        assert (e.ts - b.ts, e.observed_ts - b.observed_ts) == (shift, shift)
        if isinstance(e, SpanEvent):
            assert isinstance(b, SpanEvent)
            assert e.payload.start_ns - b.payload.start_ns == shift
            assert e.payload.end_ns - b.payload.end_ns == shift
        assert e.model_copy(update={"ts": b.ts, "observed_ts": b.observed_ts}).payload == (
            e.payload
        )


def test_clock_skew_can_target_another_node() -> None:
    run = run_of("gpu_fell_off_bus+clock_skew_other")
    label = run.label
    assert label.skewed_node is not None and label.skewed_node != label.node
    assert label.skew_offset_ns == -15 * NS
    # the raw order lies: the skewed victim's timeouts carry stamps before the XID's
    assert label.onset_ns is not None
    early = [w for w in run.watchdogs() if w.node == label.skewed_node]
    assert early and all(w.ts < label.onset_ns for w in early)


def test_clock_skew_alone_has_nothing_to_find() -> None:
    _, labels = simulate_with_faults(CONFIG, [ClockSkew(node=1)])
    (label,) = labels
    assert (label.scenario, label.outcome, label.skewed_node) == ("clock_skew", "none", "node001")


def test_noise_flags_nothing() -> None:
    run = run_of("noise")
    label = run.label
    assert (label.outcome, label.cause_class, label.onset_ns) == ("none", None, None)
    assert not [e for e in run.gpu_events if e.payload.event_type in ("xid", "gpu_unresponsive")]
    assert {c.payload.event_type for c in run.comm} == {"other"}
    assert all("NCCL INFO" in c.payload.message for c in run.comm)
    assert not [s for s in run.spans if s.payload.status == "error"]
    assert [e.payload.event_type for e in run.scheduler] == ["job_started", "job_completed"]
    # the benign events are there
    ecc = [e for e in run.gpu_events if e.payload.event_type == "ecc"]
    assert ecc and all("single-bit" in e.payload.message for e in ecc)
    throttle = [e.payload.event_type for e in run.gpu_events if "throttle" in e.payload.event_type]
    assert throttle == ["throttle_start", "throttle_stop"]
    fabric = [e.payload for e in run.fabric_events]
    assert [(p.event_type, p.counter, p.delta) for p in fabric] == [
        ("error_counter_increase", "symbol_error", 1)
    ]
    # transient slowdowns: the noisy ranks do come last, but only within one 5 s window
    noisy = {int(r) for r in str(label.details["transient_ranks"]).split(",")}
    assert len(noisy) >= 3
    lasts = []
    for n, phases in sorted(run.steps().items()):
        if len(phases["collective"]) == CONFIG.ranks:
            a = arrivals(run, n)
            lasts.append(max(a, key=a.__getitem__))
    assert noisy & set(lasts)
    for r, group in itertools.groupby(lasts):
        assert len(list(group)) <= 3, r
    assert max(Counter(lasts).values()) <= 0.2 * len(lasts)


# ---------------------------------------------------------------- composition and suite


def test_stragglers_compose_with_a_failure() -> None:
    run = Run(CONFIG, [ThermalStraggler(rank=3, onset_s=5.0), GpuFellOffBus(rank=20)])
    thermal, fell = run.labels
    assert (thermal.scenario, fell.scenario) == ("thermal_straggler", "gpu_fell_off_bus")
    assert [e.payload.xid for e in run.gpu_events if e.payload.event_type == "xid"] == [79]
    assert run.events[-1].payload.event_type == "job_failed"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("faults", "match"),
    [
        ([GpuFellOffBus(), Hang()], "at most one fault that ends the job"),
        ([ClockSkew(), ClockSkew()], "at most one clock_skew"),
        ([GpuFellOffBus(rank=32)], "rank 32"),
        ([Preemption(node=4)], "node 4"),
        ([IbLinkFlap(hca=8)], "hca 8"),
        ([HostOom(onset_s=40.0)], "onset_s"),
    ],
)
def test_bad_compositions_are_rejected(faults: list[Fault], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FaultInjectingSimulator(CONFIG, faults)


@pytest.mark.parametrize("fault", [IbLinkFlap(), NodeUnresponsive(), ConfigDrift()])
def test_single_node_rejects_multi_node_scenarios(fault: Fault) -> None:
    with pytest.raises(ValueError, match="at least 2 nodes"):
        FaultInjectingSimulator(CONFIG.model_copy(update={"ranks": 8}), [fault])


def test_timeout_must_exceed_steps() -> None:
    with pytest.raises(ValueError, match="nccl_timeout_s"):
        FaultInjectingSimulator(CONFIG.model_copy(update={"nccl_timeout_s": 2.0}), [Hang()])


def test_scenario_suite_covers_the_catalogue() -> None:
    cases = scenario_suite(64, [0, 1])
    names = [c.name for c in cases]
    assert len(set(names)) == len(names)
    assert len({c.config.job_id for c in cases}) == len(cases)
    covered = {f.scenario for c in cases for f in c.faults}
    assert covered == set(SCENARIOS)
    variants = {n.split("/")[0] for n in names}
    for base in ("gpu_fell_off_bus", "ib_link_flap", "thermal_straggler"):
        assert f"{base}+clock_skew" in variants
    assert {"noise", "hang", "hang_abort"} <= variants
    for c in cases:
        assert c.config.ranks == 64 and c.config.inventory and c.config.fabric_interval_s
    assert {c.config.seed for c in cases} == {0, 1}
    # a single-node job leaves out what needs two nodes, but keeps the rest
    small = {c.name.split("/")[0] for c in scenario_suite(8, 1)}
    assert "ib_link_flap" not in small and "node_unresponsive" not in small
    assert {"gpu_fell_off_bus", "nvlink_error", "hang", "noise"} <= small


@pytest.mark.parametrize("name", ["gpu_fell_off_bus", "nvlink_error", "preemption", "hang"])
def test_single_node_job(name: str) -> None:
    cfg = CONFIG.model_copy(update={"ranks": 8, "job_id": "one-node"})
    run = Run(cfg, dict(VARIANTS)[name])
    label = run.label
    assert label.node == "node000"
    for e in run.events:
        EVENT_ADAPTER.validate_python(e.model_dump(by_alias=True))
    if name != "hang":
        assert run.events[-1].payload.event_type == "job_failed"  # type: ignore[union-attr]


def test_terminal_labels_are_complete() -> None:
    for name in VARIANT_NAMES:
        for label in run_of(name).labels:
            assert isinstance(label, FaultLabel)
            if label.scenario in TERMINAL_SCENARIOS:
                assert label.collective_seq is not None and label.collective_op == "ALLREDUCE"
                assert label.symptom_ranks and label.onset_ns is not None
                if label.scenario != "hang" or label.details.get("hang_abort"):
                    assert label.failure_ns is not None
                    assert label.failure_ns > label.onset_ns + CONFIG.nccl_timeout_s * NS / 2


# ---------------------------------------------------------------- scale


@pytest.mark.parametrize("ranks", [512, 4096])
def test_generation_rate_at_scale(ranks: int) -> None:
    """4,096 ranks (512 nodes) for a few seconds of event time; prints the rate, no assertion
    on it (shared CI machines vary)."""
    cfg = SimulationConfig(start_ns=START_NS, ranks=ranks, duration_s=4.0, nccl_timeout_s=3.0)
    for faults in ([ThermalStraggler(onset_s=1.0)], [GpuFellOffBus(onset_s=2.0)]):
        t = time.perf_counter()
        events, labels = simulate_with_faults(cfg, faults)
        n = 0
        nodes: dict[str, int] = {}
        for e in events:
            n += 1
            assert nodes.get(e.node, 0) <= e.ts
            nodes[e.node] = e.ts
        dt = time.perf_counter() - t
        print(
            f"\n{ranks} ranks, {faults[0].scenario}: {n:,} events in {dt:.2f} s = {n / dt:,.0f}/s"
        )
        assert len(nodes) == ranks // 8
        assert n > ranks * 6 * 2
        assert labels[0].rank is not None
