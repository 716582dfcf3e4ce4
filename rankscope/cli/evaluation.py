"""``rankscope eval``: the labelled fault suite through the real pipeline, scored against truth
(the work is ``rankscope.evaluate``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_HOME,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    PrefixOpt,
    WorkersOpt,
    console,
    make_settings,
)


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
) -> None:
    """Run the labelled fault suite through the real pipeline and score it against truth."""
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
    totals = report.totals()
    raise typer.Exit(0 if totals["faulted_runs"] else 1)
