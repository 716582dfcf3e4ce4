"""``rankscope services up|down|status``: the local Kafka broker and ClickHouse engine."""

from __future__ import annotations

import json

import typer

from rankscope.cli.options import (
    DEFAULT_HOME,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    console,
    err,
)

services_app = typer.Typer(
    help="Start, stop and inspect the local Kafka broker and ClickHouse engine."
)


@services_app.command("up")
def services_up(
    home: HomeOpt = DEFAULT_HOME,
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    database: DatabaseOpt = "rankscope",
) -> None:
    """Start the local broker and engine (left running; stop with `services down`); the
    engine's writer and reader users are granted on --database."""
    from rankscope.services import ServiceManager

    eps = ServiceManager(home, database=database).up(
        kafka_bootstrap=bootstrap, clickhouse_url=clickhouse_url, progress=err.print
    )
    console.print(f"kafka      {eps.kafka_bootstrap}\nclickhouse {eps.clickhouse_url}")


@services_app.command("down")
def services_down(home: HomeOpt = DEFAULT_HOME) -> None:
    """Stop what `services up` started."""
    from rankscope.services import ServiceManager

    ServiceManager(home).down()
    console.print("stopped")


@services_app.command("status")
def services_status(home: HomeOpt = DEFAULT_HOME) -> None:
    """Show what is running and whether it answers."""
    from rankscope.services import ServiceManager

    console.print_json(json.dumps(ServiceManager(home).status(), default=str))
