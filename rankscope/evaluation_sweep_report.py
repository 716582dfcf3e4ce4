"""The sweep's report: the per-axis table on the console, the JSON file, a plot per axis, and
every miss named with its run and put in a class.

Why a module of its own: :mod:`rankscope.evaluation_sweep` plans and scores runs; this turns
the outcomes into what a reader (and the engineer fixing a detector class) looks at.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rankscope.evaluation_sweep import (
    SweepOutcome,
    SweepRun,
    plan_sweep,
    run_by_name,
    run_sweep,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "axis_table",
    "miss_class",
    "misses",
    "run_and_report",
    "select_runs",
    "sweep_report",
    "time_to_detect",
    "unattributed",
    "write_sweep",
]


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def axis_table(outcomes: Sequence[SweepOutcome]) -> list[dict[str, Any]]:
    """One row per (axis, value): runs, right %, false positives per 100 runs, detections on
    noise runs, median seconds to detect (event time, every outcome class together), findings
    attributed to no node or rank."""
    groups: dict[tuple[str, float], list[SweepOutcome]] = {}
    for o in outcomes:
        groups.setdefault((o.axis, o.value), []).append(o)
    rows = []
    for (axis, value), group in groups.items():
        faulted = [o for o in group if not o.noise]
        noise = [o for o in group if o.noise]
        lat = [s for o in faulted for s in o.detect_s.values()]
        rows.append(
            {
                "axis": axis,
                "value": value,
                "runs": len(group),
                "faulted_runs": len(faulted),
                "right": sum(o.correct for o in faulted),
                "right_pct": round(100 * sum(o.correct for o in faulted) / len(faulted), 1)
                if faulted
                else None,
                "fp_per_100_runs": round(
                    100 * sum(o.false_positives for o in group) / len(group), 1
                ),
                "noise_runs": len(noise),
                "noise_detections": sum(o.detections for o in noise),
                "median_detect_s": round(statistics.median(lat), 2) if lat else None,
                "unattributed_findings": sum(unattributed(o.found) for o in group),
            }
        )
    return rows


def unattributed(found: str) -> int:
    """Findings about no node and no rank in a run's ``found`` (``kind:@/-1``): the
    free-floating rows issue 20 wants folded into the incident that explains them. Scoring
    cannot count them as false positives (they are about nothing, so about no other node)."""
    return found.count("@/-1")


def time_to_detect(
    outcomes: Sequence[SweepOutcome], axis: str = "nccl_timeout_s", value: float = 600.0
) -> dict[str, dict[str, Any]]:
    """Seconds of event time to detect per outcome class at one axis value (default: the
    production 600 s NCCL timeout): n, median, p90, max, and the shares within 15, 20 and 30 s
    (Mycroft: anomalies within 15 s in 90 % of cases, root cause within 20 s in 60 %; Holmes:
    localisation within 30.3 s)."""
    by: dict[str, list[float]] = {}
    for o in outcomes:
        if o.axis == axis and o.value == value:
            for k, s in o.detect_s.items():
                by.setdefault(k, []).append(s)
    return {
        k: {
            "n": len(xs),
            "median_s": round(statistics.median(xs), 2),
            "p90_s": round(_pct(xs, 0.9), 2),
            "max_s": round(max(xs), 2),
            "within_15s": round(sum(x <= 15 for x in xs) / len(xs), 3),
            "within_20s": round(sum(x <= 20 for x in xs) / len(xs), 3),
            "within_30s": round(sum(x <= 30 for x in xs) / len(xs), 3),
        }
        for k, xs in sorted(by.items())
    }


def misses(outcomes: Sequence[SweepOutcome]) -> list[dict[str, Any]]:
    """Every run that is wrong or has a false positive, with what to replay it by."""
    return [
        {
            "run": o.name,
            "axis": o.axis,
            "value": o.value,
            "scenario": o.scenario,
            "seed": o.seed,
            "wrong": not o.correct,
            "false_positives": o.false_positives,
            "expected": o.expected,
            "found": o.found,
            "replay": f"rankscope eval --sweep --sweep-run '{o.name}'",
        }
        for o in outcomes
        if not o.correct or o.false_positives
    ]


#: the classes of misses issue 20 names (the detectors fix them), then everything else
MISS_CLASSES = (
    "hang_without_rank",
    "drift_as_compute_straggler",
    "drift_missed",
    "collector_silent",
    "straggler_on_noise",
    "free_floating_hang",
    "other",
)


def miss_class(miss: dict[str, Any]) -> str:
    """Which class of issue 20 a miss falls in (by what was expected and what was found)."""
    found, expected, wrong = str(miss["found"]), str(miss["expected"]), bool(miss["wrong"])
    drift = "config_drift" in expected
    rules = (
        ("collector_silent", "collector_silent" in found),
        (
            "hang_without_rank",
            miss["scenario"] in ("hang", "hang_abort") and expected.startswith("hang") and wrong,
        ),
        ("drift_as_compute_straggler", drift and "straggler:compute" in found),
        ("drift_missed", drift and wrong and "config_drift" not in found),
        ("straggler_on_noise", expected.startswith("none") and "straggler:" in found),
        ("free_floating_hang", "hang:@/-1" in found),
    )
    return next((name for name, hit in rules if hit), "other")


def select_runs(
    seeds: int,
    quick: bool,
    axes: Sequence[str] = (),
    only: Sequence[str] = (),
    large_seeds: int | None = None,
) -> list[SweepRun]:
    """The planned runs, or only those named (``--sweep-run``); unknown names are an error."""
    if only:
        return [run_by_name(n) for n in only]
    return plan_sweep(seeds, quick=quick, axes=axes, large_seeds=large_seeds)


def sweep_report(
    outcomes: Sequence[SweepOutcome], params: dict[str, Any], wall_s: float
) -> dict[str, Any]:
    """Everything the JSON file holds."""
    rows = axis_table(outcomes)
    miss = misses(outcomes)
    for m in miss:
        m["class"] = miss_class(m)
    faulted = [o for o in outcomes if not o.noise]
    noise = [o for o in outcomes if o.noise]
    return {
        "what": "rankscope eval --sweep: the fault catalogue across job shapes, each run through "
        "the worker's in-process analysis (one JobAnalyzer per job), scored by score_findings; "
        "detect_s in event time from the fault's onset (root cause: first right attribution)",
        "params": params,
        "totals": {
            "runs": len(outcomes),
            "faulted_runs": len(faulted),
            "right": sum(o.correct for o in faulted),
            "right_pct": round(100 * sum(o.correct for o in faulted) / len(faulted), 2)
            if faulted
            else None,
            "noise_runs": len(noise),
            "noise_detections": sum(o.detections for o in noise),
            "false_positives": sum(o.false_positives for o in outcomes),
            "fp_per_100_runs": round(
                100 * sum(o.false_positives for o in outcomes) / max(1, len(outcomes)), 2
            ),
            "unattributed_findings": sum(unattributed(o.found) for o in outcomes),
            "events": sum(o.events for o in outcomes),
            "wall_s": round(wall_s, 1),
        },
        "axes": rows,
        "time_to_detect_600s_timeout": time_to_detect(outcomes),
        # combination 4: the 600 s timeout with 4 GPUs per node, 2.5 s steps and 15 % jitter
        "time_to_detect_production_shape": time_to_detect(outcomes, "combination", 4.0),
        "time_to_detect_by_timeout": {
            f"{v:g}": time_to_detect(outcomes, "nccl_timeout_s", v)
            for v in sorted({o.value for o in outcomes if o.axis == "nccl_timeout_s"})
        },
        "misses_by_class": dict(Counter(m["class"] for m in miss)),
        "misses": miss,
        "runs": [o.model_dump() for o in outcomes],
    }


def write_sweep(report: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """The JSON file, and a PNG per axis next to it (``<stem>-<axis>.png``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if not plots:
        return [out]
    from rankscope.plots import draw_sweep_axis

    axes = sorted({r["axis"] for r in report["axes"]})
    return [out] + [
        draw_sweep_axis(report["axes"], a, out.with_name(f"{out.stem}-{a}.png")) for a in axes
    ]


def run_and_report(
    runs: Sequence[SweepRun],
    params: dict[str, Any],
    out: Path,
    console: Console,
    processes: int = 2,
    plots: bool = True,
) -> dict[str, Any]:
    """Run, print the per-axis table and every miss (with its replay command), write the files."""
    from rich.markup import escape
    from rich.table import Table

    t0 = time.monotonic()
    with console.status(f"sweep: {len(runs)} runs on {processes} processes") as st:

        def progress(n: int, o: SweepOutcome) -> None:
            st.update(f"sweep: {n}/{len(runs)} runs done ({time.monotonic() - t0:.0f} s)")
            if n % 50 == 0 or not o.correct or o.false_positives:
                console.print(
                    f"{n}/{len(runs)} {time.monotonic() - t0:.0f}s {o.name} "
                    f"right={o.correct} fp={o.false_positives} {o.wall_s}s"
                )

        outcomes = run_sweep(runs, processes, progress)
    report = sweep_report(outcomes, params, time.monotonic() - t0)
    table = Table(title=f"rankscope eval --sweep: {len(outcomes)} runs")
    cols = (
        "axis",
        "value",
        "runs",
        "right %",
        "FP/100",
        "noise dets",
        "median detect s",
        "unattr.",
    )
    for col in cols:
        table.add_column(col)
    for r in report["axes"]:
        table.add_row(
            r["axis"],
            f"{r['value']:g}",
            str(r["runs"]),
            ""
            if r["right_pct"] is None
            else f"{r['right_pct']:.1f} ({r['right']}/{r['faulted_runs']})",
            f"{r['fp_per_100_runs']:.1f}",
            str(r["noise_detections"]),
            "" if r["median_detect_s"] is None else f"{r['median_detect_s']:.1f}",
            str(r["unattributed_findings"]),
        )
    console.print(table)
    by_name = {r.name: r for r in runs}
    for m in report["misses"]:
        line = (
            f"[{m['class']}] {m['run']} (seed {m['seed']}): expected {m['expected']}; "
            f"found {m['found'] or 'nothing'}; FP {m['false_positives']}\n"
            f"  replay: {m['replay']}"
        )
        console.print(f"[red]miss[/] {escape(line)}")
        if len(runs) <= 8:  # a replay of named runs: show what was simulated
            for job in by_name[m["run"]].jobs:
                console.print_json(job.model_dump_json())
    console.print_json(json.dumps(report["totals"]))
    written = write_sweep(report, out, plots)
    console.print(f"written: {', '.join(map(str, written))}")
    return report


def report_from_json(paths: Sequence[Path], out: Path) -> dict[str, Any]:
    """One report from the runs of one or more sweep JSON files (parts run one axis at a time,
    or an old file after a change to the report, e.g. a new miss class), written to ``out``."""
    outcomes: list[SweepOutcome] = []
    params: list[Any] = []
    wall = 0.0
    for path in paths:
        data = json.loads(path.read_text())
        outcomes += [SweepOutcome.model_validate(r) for r in data["runs"]]
        params.append(data["params"])
        wall += data["totals"]["wall_s"]
    report = sweep_report(outcomes, params[0] if len(params) == 1 else {"parts": params}, wall)
    write_sweep(report, out)
    return report
