"""``rankscope replay``: rebuild the derived tables from the raw topics (the work is
``rankscope.replay``)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_HOME,
    DEFAULT_PREFIX,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    PrefixOpt,
    ValidatorsOpt,
    WorkersOpt,
    console,
    err,
    local_bootstrap,
    local_clickhouse_url,
    make_settings,
)


def replay(
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    database: DatabaseOpt = "rankscope_replay",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
    workers: WorkersOpt = 1,
    validators: ValidatorsOpt = 0,
    drop: Annotated[
        bool, typer.Option(help="Empty the target database first if it holds rows.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 3600.0,
) -> None:
    """Rebuild every derived table (windows, detections, incidents, event tables) from the raw
    topics into an empty database, with progress; no recovery action is decided or taken."""
    from rankscope.replay import ReplayError, run_replay

    logging.getLogger("rankscope.collectors.publisher.librdkafka").setLevel(logging.ERROR)
    broker = bootstrap or local_bootstrap(home)
    url = clickhouse_url or local_clickhouse_url(home)
    settings = make_settings(home, broker, url, prefix, database)
    try:
        report = run_replay(
            settings, console, workers=workers, validators=validators, drop=drop, timeout_s=timeout
        )
    except ReplayError as exc:
        err.print(f"replay: {exc}")
        raise typer.Exit(1) from None
    console.print(
        f"replayed {report.raw_records:,} raw records into {database} in {report.wall_s:.1f} s"
    )
    for table, n in sorted(report.rows.items()):
        console.print(f"  {table:28s} {n:>12,}")
