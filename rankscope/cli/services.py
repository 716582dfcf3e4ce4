"""``rankscope services up|down|status``: the local Kafka broker and ClickHouse engine;
``rankscope services kafka-tls-config``: the compose TLS overlay's broker files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_DATABASE,
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
    database: DatabaseOpt = DEFAULT_DATABASE,
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


def _user_option(text: str) -> tuple[str, str]:
    name, sep, variable = text.partition("=")
    if not sep or not name or not variable:
        raise typer.BadParameter(f"{text!r}: expected NAME=ENV_VAR", param_hint="--user")
    password = os.environ.get(variable, "")
    if not password:
        raise typer.BadParameter(
            f"{variable} (the password of {name}) is not set", param_hint="--user"
        )
    return name, password


@services_app.command("kafka-tls-config")
def services_kafka_tls_config(
    out: Annotated[Path, typer.Option(help="Write the broker's files here.")],
    user: Annotated[
        list[str],
        typer.Option(
            help="A SCRAM user as NAME=ENV_VAR: the password is read from that variable "
            "(repeat; include the admin)."
        ),
    ],
    tls_dir: Annotated[
        Path, typer.Option(help="Holds ca.pem, server.pem and server.key (PEM, key unencrypted).")
    ] = Path("/tls"),
    admin_user: Annotated[str, typer.Option(help="Super user, and the broker's own login.")] = (
        "admin"
    ),
    advertised_host: Annotated[str, typer.Option(help="Host name clients use.")] = "kafka",
    port: Annotated[int, typer.Option(help="Client listener port.")] = 9092,
    bind_host: Annotated[str, typer.Option(help="Client listeners bind here.")] = "0.0.0.0",
    external: Annotated[
        str, typer.Option(help="A second listener as HOST:PORT (a published port); '' for none.")
    ] = "localhost:19092",
    controller_port: Annotated[int, typer.Option(help="Controller port (127.0.0.1 only).")] = 9093,
    log_dir: Annotated[str, typer.Option(help="The broker's data directory.")] = (
        "/var/lib/kafka/data"
    ),
    kafka_bin: Annotated[str, typer.Option(help="Where the broker's Kafka scripts are.")] = (
        "/opt/kafka/bin"
    ),
    group: Annotated[
        int | None, typer.Option(help="Let this group id read the files (the broker's).")
    ] = None,
) -> None:
    """Write a SASL_SSL-only broker's server.properties, start script (format with the SCRAM
    users, then run) and admin client.properties: what compose/compose.tls.yaml's kafka runs."""
    from rankscope.services.kafka_compose import ComposeBroker
    from rankscope.services.kafka_secure import SecureListener

    users = dict(_user_option(u) for u in user)
    ext: tuple[str, int] | None = None
    if external:
        host, _, ext_port = external.rpartition(":")
        if not host or not ext_port.isdigit():
            raise typer.BadParameter(f"{external!r}: expected HOST:PORT", param_hint="--external")
        ext = (host, int(ext_port))
    try:
        listener = SecureListener(
            ca_file=tls_dir / "ca.pem",
            server_cert_file=tls_dir / "server.pem",
            server_key_file=tls_dir / "server.key",
            users=users,
            admin_user=admin_user,
        )
        broker = ComposeBroker(
            listener=listener,
            advertised_host=advertised_host,
            port=port,
            bind_host=bind_host,
            external=ext,
            controller_port=controller_port,
            log_dir=log_dir,
            kafka_bin=kafka_bin,
        )
        written = broker.write(out, group)
    except (ValueError, OSError) as exc:  # a pydantic error is a ValueError; no password echoed
        err.print(f"kafka-tls-config: {exc}")
        raise typer.Exit(2) from None
    names = ", ".join(sorted(users))
    console.print(f"wrote {', '.join(p.name for p in written)} to {out} (SCRAM users: {names})")
