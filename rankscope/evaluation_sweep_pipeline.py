"""``rankscope eval --sweep --through-pipeline N``: a sample of the sweep through the real
pipeline, paced and as a bulk replay, compared run by run with the in-process verdict.

Why: the sweep's breadth runs through one in-process :class:`JobAnalyzer` per job because issue
12 made that equal to the pipeline (0 differing runs paced vs bulk); this keeps the claim
measured on the sweep's own shapes instead of assuming it. The sample is single-job runs of at
most 256 ranks, spread over every axis value (round robin), each moved to start near now (the
validate stage refuses week-old events) and run in process on that same config, so the three
verdicts are about identical event streams.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rankscope.evaluate import rebase, run_eval
from rankscope.evaluation_sweep import SweepJob, SweepRun, analyse_job, det_row, inc_row, score_job
from rankscope.simulation.fault_suite import SuiteCase

if TYPE_CHECKING:
    from rich.console import Console

    from rankscope.settings import Settings

__all__ = ["compare_with_pipeline", "pipeline_sample"]

_MAX_RANKS = 256


def pipeline_sample(runs: Sequence[SweepRun], n: int) -> list[SweepRun]:
    """Up to ``n`` single-job, single-label runs of at most 256 ranks, one per axis value in
    turn (so every axis is represented before any gets a second run)."""
    groups: dict[tuple[str, float], list[SweepRun]] = {}
    for r in runs:
        if len(r.jobs) == 1 and r.jobs[0].config.ranks <= _MAX_RANKS and r.axis != "combination":
            groups.setdefault((r.axis, r.value), []).append(r)
    out: list[SweepRun] = []
    queues = list(groups.values())
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out


def compare_with_pipeline(
    runs: Sequence[SweepRun],
    n: int,
    settings: Settings,
    speed: float,
    workers: int,
    console: Console,
) -> dict[str, Any]:
    """Verdicts (right, false positives) per run in process, paced and bulk; the runs whose
    verdicts differ."""
    sample = pipeline_sample(runs, n)
    cases = rebase(
        [SuiteCase(r.jobs[0].config, list(r.jobs[0].faults), r.name) for r in sample],
        time.time_ns(),
    )
    verdicts: dict[str, dict[str, tuple[bool, int]]] = {c.name: {} for c in cases}
    for case in cases:
        labels, dets, incs, _ = analyse_job(SweepJob(config=case.config, faults=case.faults))
        ok, fps, _, _, _ = score_job(
            labels[:1], [det_row(x) for x in dets], [inc_row(x) for x in incs]
        )
        verdicts[case.name]["in_process"] = (ok, fps)
    wall: dict[str, float] = {}
    for mode, mode_speed in (("paced", speed), ("bulk", 0.0)):
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rankscope-sweep-") as tmp:
            mode_settings = settings.model_copy(
                update={
                    "home": Path(tmp),
                    "topic_prefix": f"{settings.topic_prefix}-sweep-{mode}",
                    "database": f"{settings.database}_sweep_{mode}",
                }
            )
            report = run_eval(
                mode_settings,
                [],
                0,
                0.0,
                Path(tmp) / "eval.json",
                console,
                speed=mode_speed,
                workers=workers,
                cases=cases,
            )
        wall[mode] = round(time.monotonic() - t0, 1)
        for r in report.runs:
            verdicts[r.name][mode] = (r.correct, r.false_positives)
    differing = {
        name: {m: list(v) for m, v in per.items()}
        for name, per in verdicts.items()
        if len(set(per.values())) > 1
    }
    console.print(
        f"through the pipeline: {len(cases)} runs, paced (speed {speed:g}) and bulk; "
        f"verdicts differing from in process: {len(differing)}"
    )
    return {
        "runs": len(cases),
        "speed": speed,
        "wall_s": wall,
        "differing_runs": differing,
        "verdicts": {k: {m: list(v) for m, v in per.items()} for k, per in verdicts.items()},
    }
