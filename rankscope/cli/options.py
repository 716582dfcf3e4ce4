"""What every command module of the CLI shares: the option definitions (one place for each flag,
its environment variable and its help), the consoles, and the helpers that turn those options
into settings or a ClickHouse URL. It imports none of the command modules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from rankscope.observability.metrics import DEFAULT_PORTS
from rankscope.settings import Settings
from rankscope.sinks.access import RoleName

console = Console()
err = Console(stderr=True)

BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        envvar="RANKSCOPE_BOOTSTRAP",
        help="Kafka bootstrap servers. Omit to use (and start) the local broker.",
    ),
]
#: for the commands that join a running pipeline rather than start a local one
RequiredBootstrapOpt = Annotated[
    str, typer.Option("--bootstrap", envvar="RANKSCOPE_BOOTSTRAP", help="Kafka bootstrap servers.")
]
ClickHouseOpt = Annotated[
    str | None,
    typer.Option(
        "--clickhouse-url",
        envvar="RANKSCOPE_CLICKHOUSE_URL",
        help="ClickHouse URL (http://user:pass@host:8123 or chdb:///path); omit: local engine.",
    ),
]
RequiredClickHouseOpt = Annotated[
    str,
    typer.Option(
        "--clickhouse-url",
        envvar="RANKSCOPE_CLICKHOUSE_URL",
        help="ClickHouse URL (http://user:pass@host:8123 or chdb:///path).",
    ),
]
HomeOpt = Annotated[
    Path,
    typer.Option("--home", envvar="RANKSCOPE_HOME", help="State directory (data, logs, pids)."),
]
PrefixOpt = Annotated[
    str, typer.Option("--topic-prefix", envvar="RANKSCOPE_TOPIC_PREFIX", help="Topic namespace.")
]
DatabaseOpt = Annotated[
    str, typer.Option("--database", envvar="RANKSCOPE_DATABASE", help="ClickHouse database.")
]
RulesOpt = Annotated[
    Path | None,
    typer.Option(
        "--rules", envvar="RANKSCOPE_REDACTION_RULES", help="Rules file (default: packaged)."
    ),
]

DEFAULT_HOME = Path(".rankscope")


def make_settings(
    home: Path,
    bootstrap: str | None = None,
    clickhouse_url: str | None = None,
    prefix: str = "rankscope",
    database: str = "rankscope",
) -> Settings:
    """The operator's settings from a command's options."""
    return Settings(
        home=home,
        bootstrap=bootstrap,
        clickhouse_url=clickhouse_url,
        topic_prefix=prefix,
        database=database,
    )


def local_clickhouse_url(home: Path, role: RoleName | None = None) -> str:
    """The running local engine's URL, or the embedded engine on its data directory.

    ``role``: log in as that user of the local engine (its password from the state dir) when
    the engine serves users; else, and for the embedded engine (no users), as its admin."""
    from rankscope.services import ServiceManager
    from rankscope.sinks.access import local_users, with_login

    manager = ServiceManager(home)
    status = manager.status()
    ch = status.get("clickhouse") or {}
    if ch.get("running") and ch.get("endpoint"):
        url = str(ch["endpoint"])
        if role is not None and ch.get("managed") and ch.get("users"):
            url = with_login(url, local_users(manager.state_dir, create=False).get(role))
        return url
    data = (home / "data" / "clickhouse").resolve()
    if not data.exists():
        raise typer.BadParameter(
            f"no ClickHouse data under {data}: run `rankscope demo` first or pass --clickhouse-url"
        )
    return f"chdb://{data}"


def pairs(items: list[str] | None, form: str, option: str) -> dict[str, str]:
    """Repeated ``name=value`` options as a mapping (the last one of a name wins)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r}: use {form}", param_hint=option)
        out[key] = value
    return out


WorkersOpt = Annotated[
    int,
    typer.Option(
        min=1,
        help="Stream worker processes in one consumer group (they share the partitions; "
        "findings do not depend on how many).",
    ),
]


#: ``--metrics-port`` of the long-running commands: ``/metrics``, ``/healthz`` and ``/readyz``
#: (README "Monitoring"); the default port of each role is ``METRICS_PORTS[role]``
METRICS_PORTS = DEFAULT_PORTS
MetricsPortOpt = Annotated[
    int,
    typer.Option(
        help="Port of /metrics, /healthz and /readyz (0: any free port, logged; -1: off).",
        envvar="RANKSCOPE_METRICS_PORT",
    ),
]


def port_or_off(port: int) -> int | None:
    """-1 (any negative port) turns the endpoint off."""
    return None if port < 0 else port
