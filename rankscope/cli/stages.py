"""``rankscope worker`` and ``rankscope sink``: the pipeline's long-running stages, in the
foreground (what the compose services and ``rankscope.pipeline`` run)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_HOME,
    METRICS_PORTS,
    DatabaseOpt,
    HomeOpt,
    MetricsPortOpt,
    PrefixOpt,
    RequiredBootstrapOpt,
    RequiredClickHouseOpt,
    err,
    make_settings,
    port_or_off,
)


def worker(
    bootstrap: RequiredBootstrapOpt,
    home: HomeOpt = DEFAULT_HOME,
    prefix: PrefixOpt = "rankscope",
    log_level: str = "warn",
    metrics_port: MetricsPortOpt = METRICS_PORTS["worker"],
) -> None:
    """Run a faust stream worker (validate, windows) in the foreground."""
    from rankscope.streams.app import run_worker

    cfg = make_settings(home, bootstrap, prefix=prefix).streams(bootstrap)
    run_worker(cfg.model_copy(update={"log_level": log_level}), port_or_off(metrics_port))


def sink(
    bootstrap: RequiredBootstrapOpt,
    clickhouse_url: RequiredClickHouseOpt,
    home: HomeOpt = DEFAULT_HOME,
    prefix: PrefixOpt = "rankscope",
    database: DatabaseOpt = "rankscope",
    max_batch_rows: Annotated[
        int, typer.Option(help="Rows per ClickHouse insert, at most.")
    ] = 50_000,
    metrics_port: MetricsPortOpt = METRICS_PORTS["sink"],
) -> None:
    """Run the ClickHouse sink in the foreground (batched, idempotent, commit after write)."""
    from rankscope.sinks.kafka_sink import run_sink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = make_settings(home, bootstrap, clickhouse_url, prefix, database).sink(
        bootstrap, clickhouse_url
    )
    stats = run_sink(
        cfg.model_copy(update={"max_batch_rows": max_batch_rows}), port_or_off(metrics_port)
    )
    err.print(f"sink stopped: {stats}")
