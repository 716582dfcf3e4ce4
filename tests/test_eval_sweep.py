"""``rankscope eval --sweep``: the plan, the scoring of several labels, the table's shape, and
that a run named in a miss replays to the same result on its own."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.evaluation_sweep import (
    AXES,
    SweepJob,
    make_run,
    plan_sweep,
    run_by_name,
    run_one,
    run_seed,
    run_sweep,
    score_job,
)
from rankscope.evaluation_sweep_pipeline import pipeline_sample
from rankscope.evaluation_sweep_report import (
    axis_table,
    miss_class,
    report_from_json,
    sweep_report,
    time_to_detect,
    unattributed,
    write_sweep,
)
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.faults import FaultLabel, GpuFellOffBus, scenario_suite

_TABLE_KEYS = {
    "axis",
    "value",
    "runs",
    "faulted_runs",
    "right",
    "right_pct",
    "fp_per_100_runs",
    "noise_runs",
    "noise_detections",
    "median_detect_s",
    "unattributed_findings",
}


def test_the_plan_covers_every_axis_value_with_noise_at_every_shape() -> None:
    runs = plan_sweep(1, large_seeds=1)
    values = {(r.axis, r.value) for r in runs}
    assert values == {(a, float(v)) for a, vs in AXES.items() for v in vs}
    for axis in ("nccl_timeout_s", "gpus_per_node", "step_time_s", "jitter", "ranks"):
        for v in AXES[axis]:
            assert any(r.scenario == "noise" and r.value == v for r in runs if r.axis == axis)
    names = [r.name for r in runs]
    assert len(names) == len(set(names))
    jitter15 = next(r for r in runs if r.name == "jitter=0.15/noise/0")
    assert jitter15.jobs[0].config.jitter == 0.15
    t600 = next(r for r in runs if r.name == "nccl_timeout_s=600/hang/0")
    assert t600.jobs[0].config.nccl_timeout_s == 600.0
    drift = next(r for r in runs if r.name == "drift_slowdown=1.03/config_drift/0")
    assert drift.jobs[0].faults[0].slowdown == 1.03  # type: ignore[union-attr]


def test_seeds_depend_only_on_the_run_coordinates() -> None:
    a = make_run("jitter", 0.08, "hang", 2)
    assert a.seed == run_seed("jitter", 0.08, "hang", 2) == make_run("jitter", 0.08, "hang", 2).seed
    assert len({make_run("jitter", 0.08, "hang", i).seed for i in range(5)}) == 5
    assert make_run("jitter", 0.15, "hang", 2).seed != a.seed


def test_two_jobs_share_the_failing_node() -> None:
    run = make_run("combination", 2, "node_unresponsive", 0)
    first, second = (j.config for j in run.jobs)
    shared = {first.node_name_at(i) for i in range(first.nodes)} & {
        second.node_name_at(i) for i in range(second.nodes)
    }
    assert shared == {first.node_name_at(first.nodes - 1)} == {second.node_name_at(0)}
    assert run.jobs[0].faults[0].node == first.nodes - 1  # type: ignore[union-attr]
    assert run.jobs[1].faults[0].node == 0  # type: ignore[union-attr]


def test_the_suite_keeps_its_node_names() -> None:
    """first_node_index defaults to 0: the existing suite's runs are unchanged."""
    assert SimulationConfig().node_name_at(3) == "node003"
    case = scenario_suite(64, [0])[0]
    assert case.config.first_node_index == 0 and case.config.node_name(63) == "node007"


def _label(**kw: object) -> FaultLabel:
    base: dict[str, object] = {"cluster": "sim", "job_id": "j", "seed": 0}
    return FaultLabel(**(base | kw))  # type: ignore[arg-type]


def _det(kind: str, cls: str, node: str, rank: int, ts: int) -> dict[str, object]:
    return {
        "detection_type": kind,
        "straggler_class": cls,
        "node": node,
        "rank": rank,
        "onset_ts_ns": ts,
        "detected_ts_ns": ts,
    }


def test_a_finding_about_either_fault_of_a_combination_is_no_false_positive() -> None:
    s = 10**9
    straggler = _label(
        scenario="thermal_straggler", outcome="straggler", cause_class="thermal",
        node="node001", rank=9, fault_ranks=[9], onset_ns=5 * s,
    )  # fmt: skip
    hang = _label(
        scenario="hang", outcome="hang", cause_class="hang",
        node="node004", rank=33, fault_ranks=[33], onset_ns=30 * s,
    )  # fmt: skip
    dets = [
        _det("straggler", "thermal", "node001", 9, 12 * s),
        _det("hang", "", "node004", 33, 34 * s),
    ]
    correct, fps, detect, _, _ = score_job([straggler, hang], dets, [])
    assert correct and fps == 0
    assert detect == {"straggler": 7.0, "hang": 4.0}
    correct, fps, _, _, _ = score_job(
        [straggler, hang], [*dets, _det("straggler", "compute", "node006", 50, 40 * s)], []
    )
    assert correct and fps == 1
    correct, fps, _, _, _ = score_job([straggler, hang], dets[:1], [])
    assert not correct and fps == 0


def test_a_tiny_sweep_gives_a_row_per_axis_value_and_replays_a_run_from_its_name(
    tmp_path: Path,
) -> None:
    runs = plan_sweep(1, quick=True)
    outcomes = run_sweep(runs, processes=1)
    assert [o.name for o in outcomes] == [r.name for r in runs]
    rows = axis_table(outcomes)
    assert {(r["axis"], r["value"]) for r in rows} == {(r.axis, r.value) for r in runs}
    assert all(set(r) == _TABLE_KEYS for r in rows)
    assert sum(r["runs"] for r in rows) == len(runs)
    assert sum(r["noise_runs"] for r in rows) == sum(r.scenario == "noise" for r in runs) > 0
    # a run rebuilt from its printed name and seed gives the same verdict and findings
    one = outcomes[0]
    again = run_one(run_by_name(one.name))
    assert again.seed == one.seed
    assert again.model_dump(exclude={"wall_s"}) == one.model_dump(exclude={"wall_s"})
    report = sweep_report(outcomes, {"quick": True}, 1.0)
    written = write_sweep(report, tmp_path / "sweep.json")
    assert json.loads(written[0].read_text())["totals"]["runs"] == len(runs)
    assert {p.name for p in written[1:]} == {f"sweep-{r['axis']}.png" for r in rows}
    assert report_from_json([written[0]], tmp_path / "again.json")["axes"] == report["axes"]


def test_time_to_detect_per_outcome() -> None:
    runs = [make_run("nccl_timeout_s", 600.0, "thermal_straggler", 0)]
    outcomes = run_sweep(runs, processes=1)
    assert outcomes[0].correct, outcomes[0].found
    ttd = time_to_detect(outcomes)
    assert set(ttd) == {"straggler"} and ttd["straggler"]["n"] == 1
    assert ttd["straggler"]["median_s"] == ttd["straggler"]["max_s"] > 0
    assert time_to_detect(outcomes, "nccl_timeout_s", 10.0) == {}


def test_findings_about_nothing_are_counted() -> None:
    assert unattributed("hang:@/-1; incident:gpu_xid@node002/17") == 1
    assert unattributed("hang:@node002/-1; straggler:thermal@node001/9") == 0


def test_misses_fall_in_the_issue_classes() -> None:
    def miss(scenario: str, expected: str, found: str, wrong: bool = True) -> str:
        return miss_class(
            {"scenario": scenario, "expected": expected, "found": found, "wrong": wrong}
        )

    assert miss("hang", "hang:hang@node001/9", "hang:@node001/-1") == "hang_without_rank"
    assert (
        miss("config_drift", "straggler:config_drift@node002/None", "straggler:compute@node002/17")
        == "drift_as_compute_straggler"
    )
    assert miss("config_drift", "straggler:config_drift@node002/None", "") == "drift_missed"
    assert miss("noise", "none:@/None", "collector_silent:@node003/-1") == "collector_silent"
    assert miss("noise", "none:@/None", "straggler:compute@node003/27") == "straggler_on_noise"
    assert (
        miss(
            "ecc_dbe",
            "root_cause:gpu_ecc@node1/3",
            "hang:@/-1; incident:gpu_ecc@node1/3",
            False,
        )
        == "free_floating_hang"
    )


def test_the_cli_replays_a_named_run_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    out = tmp_path / "one.json"
    name = "combination=1/ecc_dbe/0"
    result = CliRunner().invoke(
        app, ["eval", "--sweep", "--sweep-run", name, "--out", str(out), "--min-accuracy", "0"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [r["name"] for r in data["runs"]] == [name]
    assert data["runs"][0]["seed"] == run_seed("combination", 1, "ecc_dbe", 0)
    bad = CliRunner().invoke(app, ["eval", "--sweep", "--sweep-run", "jitter=0.15/nope/0"])
    assert bad.exit_code == 2
    assert "not a sweep run name" in bad.output


def test_the_pipeline_sample_spreads_over_axis_values_and_keeps_to_single_small_jobs() -> None:
    runs = plan_sweep(1, large_seeds=1)
    sample = pipeline_sample(runs, 40)
    assert len(sample) == 40 and len({r.name for r in sample}) == 40
    assert all(len(r.jobs) == 1 and r.jobs[0].config.ranks <= 256 for r in sample)
    assert all(r.axis != "combination" for r in sample)
    values = {(r.axis, r.value) for r in runs if r.axis != "combination"}
    values -= {("ranks", 1024.0), ("ranks", 2048.0)}
    assert {(r.axis, r.value) for r in sample} == values  # each value before any gets two


def test_a_run_that_cannot_be_simulated_is_a_named_miss_not_a_stopped_sweep() -> None:
    good = make_run("jitter", 0.03, "noise", 0)
    bad_job = SweepJob(
        config=good.jobs[0].config.model_copy(update={"nccl_timeout_s": 1.0}),
        faults=[GpuFellOffBus()],
    )
    bad = good.model_copy(update={"name": "broken", "jobs": [bad_job]})
    outcome = run_one(bad)
    assert not outcome.correct and not outcome.noise
    assert outcome.found.startswith("error: ValueError: nccl_timeout_s must be >= 3 steps")
