"""``rankscope eval``: the labelled fault suite through the real pipeline, scored against truth
(the work is ``rankscope.evaluate``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from rankscope.cli.options import (
    DEFAULT_HOME,
    EXIT_CHECK_FAILED,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    PrefixOpt,
    ValidatorsOpt,
    WorkersOpt,
    console,
    err,
    make_settings,
)

#: the accuracy gate of `rankscope eval` (a share of the faulted runs)
DEFAULT_MIN_ACCURACY = 0.95


def eval_command(
    ranks: Annotated[
        list[int] | None, typer.Option("--ranks", help="Job sizes (repeatable; default 64, 512).")
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(help="Seeds per scenario (default 3; with --sweep 1).")
    ] = None,
    speed: Annotated[
        float,
        typer.Option(
            help="Play each run at this multiple of real time, as live collectors deliver it; "
            "0 = as fast as possible (a bulk replay)."
        ),
    ] = 20.0,
    duration: Annotated[float, typer.Option(help="Seconds of event time per run.")] = 60.0,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario",
            help="Only this suite variant (repeatable), e.g. hang or gpu_fell_off_bus+clock_skew.",
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="JSON results file.")] = Path(
        ".rankscope/eval/results.json"
    ),
    home: HomeOpt = DEFAULT_HOME,
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    prefix: PrefixOpt = "rankscope-eval",
    database: DatabaseOpt = "rankscope_eval",
    workers: WorkersOpt = 1,
    validators: ValidatorsOpt = 0,
    min_accuracy: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Exit 1 when fewer faulted runs than this share find the true root cause "
            "(the suite scores 51/51 at 64 and 512 ranks, so the default allows one miss in "
            "twenty).",
        ),
    ] = DEFAULT_MIN_ACCURACY,
    sweep: Annotated[
        bool,
        typer.Option(
            "--sweep",
            help="Sweep job shapes instead (NCCL timeout, GPUs per node, step time, jitter, "
            "fault magnitudes, job size, clock skew, combinations) through the worker's "
            "in-process analysis; --seeds is seeds per scenario and axis value.",
        ),
    ] = False,
    quick: Annotated[bool, typer.Option(help="--sweep: a few values and scenarios.")] = False,
    sweep_axis: Annotated[
        list[str] | None,
        typer.Option("--sweep-axis", help="--sweep: only this axis (repeatable)."),
    ] = None,
    sweep_run: Annotated[
        list[str] | None,
        typer.Option(
            "--sweep-run", help="--sweep: replay only this run, as a miss names it (repeatable)."
        ),
    ] = None,
    large_seeds: Annotated[
        int | None,
        typer.Option(help="--sweep: seeds per scenario for jobs of 1,024 ranks and more."),
    ] = None,
    processes: Annotated[int, typer.Option(min=1, help="--sweep: worker processes.")] = 2,
    through_pipeline: Annotated[
        int,
        typer.Option(
            help="--sweep: also send this many of the runs (single-job ones of at most 256 "
            "ranks, spread over the axes) through the real pipeline, paced (--speed) and "
            "--speed 0, and count the runs whose verdict differs from the in-process one.",
        ),
    ] = 0,
) -> None:
    """Run the labelled fault suite through the real pipeline and score it against truth;
    exit 1 below --min-accuracy (or with no faulted run to score), so CI can gate on it."""
    from rankscope.evaluate import run_eval

    if sweep:
        _sweep(
            seeds or 1,
            quick,
            sweep_axis or [],
            sweep_run or [],
            large_seeds,
            processes,
            out,
            min_accuracy,
            through_pipeline,
            (home, bootstrap, clickhouse_url, prefix, database, speed, workers),
        )
        return

    logging.getLogger("rankscope.collectors.publisher.librdkafka").setLevel(logging.ERROR)
    sizes = ranks or [64, 512]
    report = run_eval(
        make_settings(home, bootstrap, clickhouse_url, prefix, database),
        sizes,
        seeds or 3,
        duration,
        out,
        console,
        speed=speed,
        variants=scenario or (),
        workers=workers,
        validators=validators,
    )
    failure = accuracy_failure(report.totals(), min_accuracy)
    if failure:
        err.print(f"rankscope: eval: {failure}")
        raise typer.Exit(EXIT_CHECK_FAILED)


def accuracy_failure(totals: dict[str, Any], min_accuracy: float) -> str | None:
    """Why the scored suite fails its gate, or None when it passes."""
    accuracy = totals.get("accuracy")
    if accuracy is None:
        return "no faulted run to score (only noise runs were selected)"
    if accuracy < min_accuracy:
        return (
            f"accuracy {accuracy:.1%} ({totals['correct']}/{totals['faulted_runs']} faulted "
            f"runs) is below --min-accuracy {min_accuracy:.1%}"
        )
    return None


def _sweep(
    seeds: int,
    quick: bool,
    axes: list[str],
    only: list[str],
    large_seeds: int | None,
    processes: int,
    out: Path,
    min_accuracy: float,
    through_pipeline: int,
    stack: tuple[Any, ...],
) -> None:
    from rankscope.evaluation_sweep_report import run_and_report, select_runs

    try:
        runs = select_runs(seeds, quick, axes, only, large_seeds)
    except ValueError as e:
        err.print(f"rankscope: eval: {e}")
        raise typer.Exit(2) from None
    if out == Path(".rankscope/eval/results.json"):
        out = out.with_name("sweep.json")
    params = {
        "seeds": seeds,
        "quick": quick,
        "axes": axes,
        "runs_named": only,
        "large_seeds": large_seeds,
        "processes": processes,
    }
    report = run_and_report(runs, params, out, console, processes)
    if through_pipeline:
        from rankscope.evaluation_sweep_pipeline import compare_with_pipeline

        home, bootstrap, clickhouse_url, prefix, database, speed, workers = stack
        settings = make_settings(home, bootstrap, clickhouse_url, prefix, database)
        cmp = compare_with_pipeline(runs, through_pipeline, settings, speed, workers, console)
        report["through_pipeline"] = cmp
        from rankscope.evaluation_sweep_report import write_sweep

        write_sweep(report, out, plots=False)
    totals = report["totals"]
    failure = accuracy_failure(
        {
            "accuracy": None if totals["right_pct"] is None else totals["right_pct"] / 100,
            "correct": totals["right"],
            "faulted_runs": totals["faulted_runs"],
        },
        min_accuracy,
    )
    if failure:
        err.print(f"rankscope: eval --sweep: {failure}")
        raise typer.Exit(EXIT_CHECK_FAILED)
