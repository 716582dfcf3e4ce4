"""``rankscope worker`` and ``rankscope sink``: the pipeline's long-running stages, in the
foreground (what the compose services and ``rankscope.pipeline`` run)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_DATABASE,
    DEFAULT_HOME,
    DEFAULT_PREFIX,
    METRICS_PORTS,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    MetricsPortOpt,
    PrefixOpt,
    err,
    local_bootstrap,
    local_clickhouse_url,
    make_settings,
    port_or_off,
)


def worker(
    bootstrap: BootstrapOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    log_level: Annotated[
        str, typer.Option(help="faust's log level: debug, info, warn or error.")
    ] = "warn",
    metrics_port: MetricsPortOpt = METRICS_PORTS["worker"],
) -> None:
    """Run a stream worker (faust) in the foreground: validate and redact the raw topics
    (agents' events, OpenTelemetry Collector spans and logs; bad records to dead letters),
    build the per-rank windows, detect and attribute incidents, and decide recovery actions
    (signed, for `rankscope recovery run`). Workers sharing --topic-prefix split the partitions."""
    from rankscope.streams.app import run_worker

    broker = bootstrap or local_bootstrap(home)
    cfg = make_settings(home, broker, prefix=prefix).streams(broker)
    run_worker(cfg.model_copy(update={"log_level": log_level}), port_or_off(metrics_port))


def validator(
    bootstrap: BootstrapOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    metrics_port: MetricsPortOpt = METRICS_PORTS["validator"],
) -> None:
    """Run a validator in the foreground: the worker's validate stage (validation, redaction,
    dead letters) on a confluent-kafka loop, in a process of its own, so rows are stored sooner
    (the same CPU per event in total). Use it with workers started with
    RANKSCOPE_WORKER_VALIDATE=false; validators sharing --topic-prefix split the raw partitions
    in a group of their own."""
    from rankscope.streams.validate_loop import run_validator

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    broker = bootstrap or local_bootstrap(home)
    cfg = make_settings(home, broker, prefix=prefix).streams(broker)
    run_validator(cfg.model_copy(update={"validate_in_worker": False}), port_or_off(metrics_port))


def sink(
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    database: DatabaseOpt = DEFAULT_DATABASE,
    max_batch_rows: Annotated[
        int, typer.Option(help="Rows per ClickHouse insert, at most.")
    ] = 50_000,
    metrics_port: MetricsPortOpt = METRICS_PORTS["sink"],
) -> None:
    """Run the ClickHouse sink in the foreground (batched, idempotent, commit after write)."""
    from rankscope.sinks.kafka_sink import run_sink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    broker = bootstrap or local_bootstrap(home)
    url = clickhouse_url or local_clickhouse_url(home, role="writer")
    cfg = make_settings(home, broker, url, prefix, database).sink(broker, url)
    stats = run_sink(
        cfg.model_copy(update={"max_batch_rows": max_batch_rows}), port_or_off(metrics_port)
    )
    err.print(f"sink stopped: {stats}")
