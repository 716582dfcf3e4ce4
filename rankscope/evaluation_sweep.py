"""``rankscope eval --sweep``: the fault catalogue across job shapes, scored as the suite is.

Why: the suite runs one shape (10 s NCCL timeout, 8 GPUs per node, 1 s steps, 3 % jitter, fixed
magnitudes, one fault at a time) and detectors tuned on it fail elsewhere (issue 20). The sweep
varies one axis at a time around that default shape (NCCL timeout, GPUs per node, step time,
jitter, fault magnitude, job size, clock skew) plus two combinations (a straggler plus a terminal
fault on another node; two jobs sharing a failing node), with noise runs at every shape.

Each run is named ``<axis>=<value>/<scenario>/<index>`` and its seed is derived from that name
alone, so any run can be replayed by itself (``--sweep-run NAME``). The breadth runs through the
worker's in-process analysis (one :class:`JobAnalyzer` per job fed the job's events in order,
which issue 12 made equal to the pipeline); ``--through-pipeline`` sends a sample of the same
runs through the real broker, workers and ClickHouse (:mod:`rankscope.evaluation_sweep_pipeline`).
Scoring is :func:`rankscope.evaluate.score_findings`, per label.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from rankscope.evaluate import score_findings
from rankscope.schemas.derived import Detection, Incident
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.fault_specs import (
    ClockSkew,
    ConfigDrift,
    EccDbe,
    Fault,
    GpuFellOffBus,
    Hang,
    HostOom,
    IbLinkFlap,
    InputStraggler,
    NodeUnresponsive,
    Noise,
    NvlinkError,
    Preemption,
    ThermalStraggler,
)
from rankscope.simulation.faults import FaultLabel, simulate_with_faults

__all__ = [
    "AXES",
    "SweepJob",
    "SweepOutcome",
    "SweepRun",
    "analyse_job",
    "make_run",
    "plan_sweep",
    "run_by_name",
    "run_one",
    "run_seed",
    "run_sweep",
]

_NS = 1_000_000_000
#: 2026-01-01T00:00:00Z, as the suite: runs start at a fixed time so they replay identically
_EPOCH_NS = 1_767_225_600 * _NS

#: the suite's shape: every axis varies one field around it
DEFAULT_SHAPE: dict[str, Any] = {
    "ranks": 64,
    "gpus_per_node": 8,
    "step_time_s": 1.0,
    "jitter": 0.03,
    "nccl_timeout_s": 10.0,
}
DEFAULT_DURATION_S = 60.0
LARGE_RANKS = 1024
LARGE_DURATION_S = 30.0

#: the catalogue's single-fault scenarios (the suite's order), as fresh specs
_CATALOGUE: tuple[tuple[str, Fault], ...] = (
    ("gpu_fell_off_bus", GpuFellOffBus()),
    ("ecc_dbe", EccDbe()),
    ("nvlink_error", NvlinkError()),
    ("ib_link_flap", IbLinkFlap()),
    ("thermal_straggler", ThermalStraggler()),
    ("input_straggler", InputStraggler()),
    ("hang", Hang()),
    ("hang_abort", Hang(hang_abort=True)),
    ("node_unresponsive", NodeUnresponsive()),
    ("preemption", Preemption()),
    ("host_oom", HostOom()),
    ("config_drift", ConfigDrift()),
    ("noise", Noise()),
)
_TERMINAL: tuple[str, ...] = (
    "gpu_fell_off_bus",
    "ecc_dbe",
    "nvlink_error",
    "ib_link_flap",
    "hang_abort",
    "node_unresponsive",
    "preemption",
    "host_oom",
)

#: axis -> values; shape axes run the whole catalogue (noise included) at each value
AXES: dict[str, tuple[float, ...]] = {
    "nccl_timeout_s": (10.0, 120.0, 600.0),
    "gpus_per_node": (4, 8),
    "step_time_s": (0.5, 1.0, 2.5, 5.0),
    "jitter": (0.03, 0.08, 0.15),
    "ranks": (64, 256, 1024, 2048),
    "clock_skew_s": (-30.0, -15.0, 5.0, 15.0, 30.0),
    "thermal_slowdown": (1.1, 1.2, 1.4, 2.0),
    "input_factor": (2.0, 3.0, 10.0, 20.0),
    "drift_slowdown": (1.03, 1.05, 1.08, 1.12),
    # 1: straggler + terminal on another node; 2: two jobs, shared node; 3 and 4: shapes that
    # move several axes at once (_SHAPE_COMBINATIONS), the whole catalogue at each
    "combination": (1, 2, 3, 4),
}
_SHAPE_AXES = ("nccl_timeout_s", "gpus_per_node", "step_time_s", "jitter", "ranks")
_COMBINATIONS = {1: "straggler+terminal", 2: "shared_node", 3: "4gpn+2.5s", 4: "production"}
#: the shape issue 20 saw collector_silent on (4 GPUs per node, 2.5 s steps), and that shape with
#: the production watchdog timeout and 15 % jitter: one axis at a time cannot show what two do
_SHAPE_COMBINATIONS: dict[int, dict[str, Any]] = {
    3: {"gpus_per_node": 4, "step_time_s": 2.5},
    4: {"gpus_per_node": 4, "step_time_s": 2.5, "jitter": 0.15, "nccl_timeout_s": 600.0},
}
#: --quick: a handful of values, few scenarios, small jobs
_QUICK_AXES: dict[str, tuple[float, ...]] = {
    "nccl_timeout_s": (10.0,),
    "jitter": (0.15,),
    "drift_slowdown": (1.08,),
    "combination": (1, 2),
}
#: runs per seed of a magnitude value or a combination (one scenario each, not the catalogue)
_REPEAT = 4
_QUICK_SCENARIOS = ("gpu_fell_off_bus", "thermal_straggler", "noise")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SweepJob(_Frozen):
    """One job of a run: what to simulate (a run has one, or two jobs sharing a node)."""

    config: SimulationConfig
    faults: list[Fault]


class SweepRun(_Frozen):
    """One run of the sweep, reproducible from its name alone (the seed is derived from it)."""

    name: str
    axis: str
    value: float
    scenario: str
    index: int
    seed: int
    jobs: list[SweepJob]

    def command(self) -> str:
        """The command line that replays this run by itself."""
        return f"rankscope eval --sweep --sweep-run '{self.name}'"


class SweepOutcome(_Frozen):
    """How the analysis did on one run (every label of every job must be found)."""

    name: str
    axis: str
    value: float
    scenario: str
    seed: int
    ranks: int
    correct: bool
    noise: bool
    false_positives: int
    detections: int
    #: outcome class of each label found (root_cause, straggler, hang...) -> seconds to detect
    detect_s: dict[str, float]
    expected: str
    found: str
    events: int
    wall_s: float


def run_seed(axis: str, value: float, scenario: str, index: int) -> int:
    """A seed that depends only on the run's coordinates (stable across Python processes)."""
    digest = hashlib.sha256(f"{axis}|{value:g}|{scenario}|{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _run_name(axis: str, value: float, scenario: str, index: int) -> str:
    return f"{axis}={value:g}/{scenario}/{index}"


def _config(name: str, seed: int, **shape: Any) -> SimulationConfig:
    fields = {**DEFAULT_SHAPE, **shape}
    step = float(fields["step_time_s"])
    # the same number of steps at every step time (a straggler needs windows), >= 60 s; jobs of
    # 1,024 ranks and more run 30 s (they cost 16-32x a 64-rank run; 30 s is still 6 windows)
    duration = max(DEFAULT_DURATION_S, 60.0 * step)
    if int(fields["ranks"]) >= LARGE_RANKS:
        duration = LARGE_DURATION_S
    # a watchdog timeout of fewer than 3 steps would fire on a healthy step (the simulator
    # refuses it): at 5 s steps the 10 s default becomes 15 s
    fields["nccl_timeout_s"] = max(float(fields["nccl_timeout_s"]), 3 * step)
    return SimulationConfig(
        job_id=re.sub(r"[^A-Za-z0-9_.-]", "-", name),
        duration_s=duration,
        seed=seed,
        start_ns=_EPOCH_NS,
        inventory=True,
        fabric_interval_s=2.0,
        **fields,
    )


def _single(axis: str, value: float, scenario: str, index: int, **shape: Any) -> SweepRun:
    name = _run_name(axis, value, scenario, index)
    seed = run_seed(axis, value, scenario, index)
    fault = dict(_CATALOGUE)[scenario]
    faults: list[Fault] = [fault]
    if axis == "clock_skew_s":
        target = "other" if scenario == "noise" else "culprit"
        faults.append(ClockSkew(offset_s=value, target=target))
    elif axis == "thermal_slowdown" and scenario != "noise":
        faults = [ThermalStraggler(slowdown=value)]
    elif axis == "input_factor" and scenario != "noise":
        faults = [InputStraggler(factor=value)]
    elif axis == "drift_slowdown" and scenario != "noise":
        faults = [ConfigDrift(slowdown=value)]
    job = SweepJob(config=_config(name, seed, **shape), faults=faults)
    return SweepRun(
        name=name, axis=axis, value=value, scenario=scenario, index=index, seed=seed, jobs=[job]
    )


def _terminal_spec(scenario: str, rank: int, node: int, onset_s: float) -> Fault:
    on_rank: dict[str, type[GpuFellOffBus | EccDbe | NvlinkError | HostOom]] = {
        "gpu_fell_off_bus": GpuFellOffBus,
        "ecc_dbe": EccDbe,
        "nvlink_error": NvlinkError,
        "host_oom": HostOom,
    }
    if scenario in on_rank:
        return on_rank[scenario](rank=rank, onset_s=onset_s)
    if scenario == "hang_abort":
        return Hang(rank=rank, onset_s=onset_s, hang_abort=True)
    if scenario == "ib_link_flap":
        return IbLinkFlap(node=node, onset_s=onset_s)
    if scenario == "node_unresponsive":
        return NodeUnresponsive(node=node, onset_s=onset_s)
    return Preemption(node=node, onset_s=onset_s)


def _combination(kind: int, scenario: str, index: int) -> SweepRun:
    """1: a thermal straggler, then a terminal fault on another node; 2: two jobs of 64 ranks
    sharing one node (the last of the first, the first of the second) that fails in both."""
    axis = "combination"
    name = _run_name(axis, kind, scenario, index)
    seed = run_seed(axis, kind, scenario, index)
    rng = random.Random(seed)
    gpn = DEFAULT_SHAPE["gpus_per_node"]
    nodes = DEFAULT_SHAPE["ranks"] // gpn
    dur = DEFAULT_DURATION_S
    jobs: list[SweepJob]
    if kind == 1:
        a, b = rng.sample(range(nodes), 2)
        straggler = ThermalStraggler(
            rank=a * gpn + rng.randrange(gpn), onset_s=round(rng.uniform(0.1, 0.2) * dur, 2)
        )
        terminal = _terminal_spec(
            scenario, b * gpn + rng.randrange(gpn), b, round(rng.uniform(0.45, 0.6) * dur, 2)
        )
        jobs = [SweepJob(config=_config(name, seed), faults=[straggler, terminal])]
    else:
        onset = round(rng.uniform(0.3, 0.55) * dur, 2)
        local = rng.randrange(gpn)
        jobs = []
        for j, first in enumerate((0, nodes - 1)):
            node = nodes - 1 if j == 0 else 0  # the shared node, as each job numbers it
            cfg = _config(f"{name}/job{j}", seed + j, first_node_index=first)
            fault = _terminal_spec(scenario, node * gpn + local, node, onset)
            jobs.append(SweepJob(config=cfg, faults=[fault]))
    return SweepRun(
        name=name, axis=axis, value=kind, scenario=scenario, index=index, seed=seed, jobs=jobs
    )


def plan_sweep(
    seeds: int = 1,
    quick: bool = False,
    axes: Iterable[str] = (),
    large_seeds: int | None = None,
) -> list[SweepRun]:
    """Every run of the sweep: axis value x scenario x seed index.

    ``large_seeds``: seeds per scenario for jobs of 1,024 ranks and more (they cost 16-32x a
    64-rank run); default ``seeds``.
    """
    table = _QUICK_AXES if quick else AXES
    keep = set(axes)
    runs: list[SweepRun] = []
    for axis, values in table.items():
        if keep and axis not in keep:
            continue
        for value in values:
            runs.extend(_axis_runs(axis, value, seeds, quick, large_seeds))
    return runs


_MAGNITUDE_SCENARIO = {
    "thermal_slowdown": "thermal_straggler",
    "input_factor": "input_straggler",
    "drift_slowdown": "config_drift",
}


def _axis_runs(
    axis: str, value: float, seeds: int, quick: bool, large_seeds: int | None
) -> list[SweepRun]:
    reps = seeds if quick else seeds * _REPEAT
    if axis == "combination" and int(value) in _SHAPE_COMBINATIONS:
        return (
            []
            if quick
            else [make_run(axis, value, s, i) for s, _ in _CATALOGUE for i in range(seeds)]
        )
    if axis == "combination":
        scenarios = list(_TERMINAL) if int(value) == 1 else ["node_unresponsive", "ib_link_flap"]
        scenarios = scenarios[:1] if quick else scenarios
        return [make_run(axis, value, s, i) for s in scenarios for i in range(reps)]
    if axis in _MAGNITUDE_SCENARIO:
        return [make_run(axis, value, _MAGNITUDE_SCENARIO[axis], i) for i in range(reps)]
    catalogue = [s for s, _ in _CATALOGUE if not quick or s in _QUICK_SCENARIOS]
    n = seeds
    if axis == "ranks" and value >= LARGE_RANKS and large_seeds is not None:
        n = large_seeds
    return [make_run(axis, value, s, i) for s in catalogue for i in range(n)]


def make_run(axis: str, value: float, scenario: str, index: int) -> SweepRun:
    """The run at these coordinates (a pure function of them)."""
    shape: dict[str, Any] = {}
    if axis == "combination" and int(value) in _SHAPE_COMBINATIONS:
        shape = _SHAPE_COMBINATIONS[int(value)]
        return _single(axis, value, scenario, index, **shape)
    if axis == "combination":
        return _combination(int(value), scenario, index)
    if axis in _SHAPE_AXES:
        shape[axis] = int(value) if axis in ("ranks", "gpus_per_node") else value
    return _single(axis, value, scenario, index, **shape)


_NAME = re.compile(r"^(?P<axis>[a-z_]+)=(?P<value>[-0-9.e+]+)/(?P<scenario>[a-z_]+)/(?P<i>\d+)$")


def run_by_name(name: str) -> SweepRun:
    """The run a miss names (``<axis>=<value>/<scenario>/<index>``), rebuilt from the name."""
    m = _NAME.match(name)
    if m is None or m["axis"] not in AXES or m["scenario"] not in dict(_CATALOGUE):
        raise ValueError(f"not a sweep run name: {name!r} (<axis>=<value>/<scenario>/<index>)")
    run = make_run(m["axis"], float(m["value"]), m["scenario"], int(m["i"]))
    if run.name != name:
        raise ValueError(f"not a sweep run name: {name!r} (did you mean {run.name!r}?)")
    return run


# ===================================================================== in-process analysis


def analyse_job(job: SweepJob) -> tuple[list[FaultLabel], list[Detection], list[Incident], int]:
    """The worker's analysis of one job, in process (as tests/test_analysis_suite.py does): the
    labels, the latest version of each detection and incident, and the number of events."""
    from rankscope.streams.analysis.job import JobAnalyzer

    events, labels = simulate_with_faults(job.config, job.faults)
    analyzer = JobAnalyzer(job.config.cluster, job.config.job_id, clock_ns=lambda: 0)
    dets: dict[str, Detection] = {}
    incs: dict[str, Incident] = {}
    n = 0
    for n, ev in enumerate(events, 1):
        analyzer.observe(ev)
        if n % 256 == 0:
            d, i = analyzer.take()
            dets.update((x.detection_id, x) for x in d)
            incs.update((x.incident_id, x) for x in i)  # revisions replace, as in ClickHouse
    d, i = analyzer.flush()
    dets.update((x.detection_id, x) for x in d)
    incs.update((x.incident_id, x) for x in i)
    return labels, list(dets.values()), list(incs.values()), n


def det_row(d: Detection) -> dict[str, Any]:
    """A detection as a row of the ``detections`` table (what score_findings reads)."""
    return {
        "detection_type": d.detection_type,
        "straggler_class": d.straggler_class or "",
        "node": d.node,
        "rank": -1 if d.rank is None else d.rank,
        "onset_ts_ns": d.onset_ts,
        "detected_ts_ns": d.detected_ts,
    }


def inc_row(i: Incident) -> dict[str, Any]:
    """An incident as a row of the ``incidents`` table."""
    return {
        "cause_class": i.cause_class,
        "node": i.node,
        "gpu": -1 if i.gpu is None else i.gpu,
        "rank": -1 if i.rank is None else i.rank,
        "device": i.device,
        "first_symptom_ts_ns": i.first_symptom_ts,
        "attributed_ts_ns": i.attributed_ts,
    }


def score_job(
    labels: Sequence[FaultLabel], dets: list[dict[str, Any]], incs: list[dict[str, Any]]
) -> tuple[bool, int, dict[str, float], str, str]:
    """(every label found, false positives, seconds to detect per outcome, expected, found).

    Each label is scored by :func:`score_findings`; with several labels a finding is a false
    positive only when it is about none of them (a straggler's detection is not a false positive
    of the terminal fault that follows it).
    """
    correct = True
    detect: dict[str, float] = {}
    fp_rows: list[set[int]] = []
    found = ""
    for label in labels:
        ok, _, s, found = score_findings(label, dets, incs)
        correct &= ok
        if ok and label.outcome == "root_cause":
            s = _attributed_after_onset(label, incs)
        if ok and s is not None and label.outcome != "none":
            detect.setdefault(label.outcome, round(s, 2))
        # which findings are false positives for this label alone
        wrong: set[int] = set()
        for k, row in enumerate(dets + incs):
            _, fp, _, _ = score_findings(label, *_split(row, k < len(dets)))
            if fp:
                wrong.add(k)
        fp_rows.append(wrong)
    fps = len(set.intersection(*fp_rows)) if fp_rows else 0
    expected = "; ".join(
        f"{lb.outcome}:{lb.cause_class or ''}@{lb.node or ''}/{lb.rank}" for lb in labels
    )
    return correct, fps, detect, expected, found


def _attributed_after_onset(label: FaultLabel, incs: list[dict[str, Any]]) -> float | None:
    """Seconds of event time from the fault's onset to the first attribution of the right
    cause: score_findings measures from the first symptom, which at a 600 s timeout comes ten
    minutes after the precursor that the attribution already used (so it goes negative)."""
    at: list[int] = [
        i["attributed_ts_ns"]
        for i in incs
        if i["cause_class"] == label.cause_class and (not label.node or i["node"] == label.node)
    ]
    if not at or label.onset_ns is None:
        return None
    return (min(at) - label.onset_ns) / _NS


def _split(row: dict[str, Any], is_det: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return ([row], []) if is_det else ([], [row])


def run_one(run: SweepRun) -> SweepOutcome:
    """Simulate, analyse in process and score every job of the run."""
    t0 = time.monotonic()
    correct, noise, fps, n_found, events = True, True, 0, 0, 0
    detect: dict[str, float] = {}
    expected: list[str] = []
    found: list[str] = []
    for job in run.jobs:
        try:
            labels, dets, incs, n = analyse_job(job)
        except Exception as e:  # a run that cannot be simulated is a miss, not a stopped sweep
            correct, noise = False, False
            expected.append("a run")
            found.append(f"error: {type(e).__name__}: {e}")
            continue
        ok, fp, d, exp, fnd = score_job(
            labels, [det_row(x) for x in dets], [inc_row(x) for x in incs]
        )
        correct &= ok
        noise &= all(lb.outcome == "none" for lb in labels)
        fps += fp
        n_found += len(dets) + len(incs)
        events += n
        for k, v in d.items():
            detect[k] = max(detect.get(k, v), v)
        expected.append(exp)
        found.append(fnd)
    return SweepOutcome(
        name=run.name,
        axis=run.axis,
        value=run.value,
        scenario=run.scenario,
        seed=run.seed,
        ranks=run.jobs[0].config.ranks,
        correct=correct,
        noise=noise,
        false_positives=fps,
        detections=n_found if noise else 0,
        detect_s=detect,
        expected=" | ".join(expected),
        found=" | ".join(found)[:600],
        events=events,
        wall_s=round(time.monotonic() - t0, 2),
    )


def run_sweep(
    runs: Sequence[SweepRun],
    processes: int = 2,
    on_done: Callable[[int, SweepOutcome], None] | None = None,
) -> list[SweepOutcome]:
    """Every run, the costliest first, over ``processes`` worker processes (results in plan
    order); ``on_done(count, outcome)`` after each."""
    order = sorted(range(len(runs)), key=lambda k: -_cost(runs[k]))
    done: dict[int, SweepOutcome] = {}

    def record(k: int, o: SweepOutcome) -> None:
        done[k] = o
        if on_done is not None:
            on_done(len(done), o)

    if processes <= 1 or len(runs) <= 1:
        for k in order:
            record(k, run_one(runs[k]))
    else:
        with mp.get_context("spawn").Pool(processes) as pool:
            results = pool.imap(run_one, [runs[k] for k in order], chunksize=1)
            for k, o in zip(order, results, strict=True):
                record(k, o)
    return [done[k] for k in range(len(runs))]


def _cost(run: SweepRun) -> float:
    """Rough events of a run: ranks x event-time length."""
    return sum(j.config.ranks * (j.config.duration_s + j.config.nccl_timeout_s) for j in run.jobs)
