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
    seeds: Annotated[int, typer.Option(help="Seeds per scenario.")] = 3,
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
) -> None:
    """Run the labelled fault suite through the real pipeline and score it against truth;
    exit 1 below --min-accuracy (or with no faulted run to score), so CI can gate on it."""
    from rankscope.evaluate import run_eval

    logging.getLogger("rankscope.collectors.publisher.librdkafka").setLevel(logging.ERROR)
    sizes = ranks or [64, 512]
    report = run_eval(
        make_settings(home, bootstrap, clickhouse_url, prefix, database),
        sizes,
        seeds,
        duration,
        out,
        console,
        speed=speed,
        variants=scenario or (),
        workers=workers,
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
