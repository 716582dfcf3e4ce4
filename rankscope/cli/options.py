"""What every command module of the CLI shares: the option definitions (one place for each flag,
its environment variable and its help), the consoles, and the helpers that turn those options
into settings or a ClickHouse URL. It imports none of the command modules."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rankscope.observability.metrics import DEFAULT_PORTS
from rankscope.settings import Settings

if TYPE_CHECKING:
    from rankscope.sinks.access import RoleName

EXIT_CHECK_FAILED = 1
EXIT_INPUT = 2
EXIT_UNREACHABLE = 3

#: the exit codes every command shares (the README's CLI section lists them)
EXIT_CODES: dict[int, str] = {
    0: "done; every check passed",
    EXIT_CHECK_FAILED: "a check failed: eval below --min-accuracy, a redaction review gate, "
    "the demo's checks",
    EXIT_INPUT: "bad usage or input: an unknown option or value, invalid settings or config, a "
    "missing file",
    EXIT_UNREACHABLE: "a service could not be reached or refused the login (Kafka, ClickHouse)",
}

console = Console()
err = Console(stderr=True)


def env_name(field: str) -> str:
    """The one environment variable of a common setting: ``RANKSCOPE_<FIELD>`` of
    :class:`~rankscope.settings.Settings`, so a flag and the settings model cannot disagree."""
    if field not in Settings.model_fields:
        raise KeyError(f"{field!r} is not a field of rankscope.settings.Settings")
    return f"{Settings.model_config.get('env_prefix', '')}{field}".upper()


def _default(field: str) -> object:
    return Settings.model_fields[field].default


#: the defaults every command shares (the settings model's)
DEFAULT_PREFIX = str(_default("topic_prefix"))
DEFAULT_DATABASE = str(_default("database"))

BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        envvar=env_name("bootstrap"),
        help="Kafka bootstrap servers (host:port,...). Omit: the local broker of --home "
        "(`rankscope services up`; demo and eval start one).",
        show_default=False,
    ),
]
ClickHouseOpt = Annotated[
    str | None,
    typer.Option(
        "--clickhouse-url",
        envvar=env_name("clickhouse_url"),
        help="ClickHouse URL (http://user:pass@host:8123 or chdb:///path). Omit: the local "
        "engine of --home.",
        show_default=False,
    ),
]
HomeOpt = Annotated[
    Path,
    typer.Option("--home", envvar=env_name("home"), help="State directory (data, logs, pids)."),
]
PrefixOpt = Annotated[
    str, typer.Option("--topic-prefix", envvar=env_name("topic_prefix"), help="Topic namespace.")
]
DatabaseOpt = Annotated[
    str, typer.Option("--database", envvar=env_name("database"), help="ClickHouse database.")
]
RulesOpt = Annotated[
    Path | None,
    typer.Option(
        "--rules", envvar=env_name("redaction_rules"), help="Rules file (default: packaged)."
    ),
]

DEFAULT_HOME = Path(str(_default("home")))


def make_settings(
    home: Path,
    bootstrap: str | None = None,
    clickhouse_url: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    database: str = DEFAULT_DATABASE,
) -> Settings:
    """The operator's settings from a command's options."""
    return Settings(
        home=home,
        bootstrap=bootstrap,
        clickhouse_url=clickhouse_url,
        topic_prefix=prefix,
        database=database,
    )


def local_bootstrap(home: Path) -> str:
    """The local broker of ``home`` (``rankscope services up``) for a command given no
    --bootstrap; a clear usage error when none runs."""
    from rankscope.services import ServiceManager

    kafka = ServiceManager(home).status().get("kafka") or {}
    if kafka.get("running") and kafka.get("endpoint"):
        return str(kafka["endpoint"])
    raise typer.BadParameter(
        f"no local broker runs under {home}: pass --bootstrap (or set {env_name('bootstrap')}) "
        "or start one with `rankscope services up`",
        param_hint="--bootstrap",
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

ValidatorsOpt = Annotated[
    int,
    typer.Option(
        min=0,
        help="`rankscope validator` processes beside the workers, which then read only the "
        "events topic (0: the workers validate the raw topics; findings do not depend on it).",
    ),
]


class OutputFormat(StrEnum):
    """How a listing command prints its rows: for people, or for jq and spreadsheets."""

    table = "table"
    json = "json"
    csv = "csv"


FormatOpt = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        case_sensitive=False,
        help="table (for people), json (a list of objects) or csv (a header row, then rows).",
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


def _plain(value: Any) -> Any:
    """A cell as JSON and CSV carry it: times in ISO 8601, the rest as the database gave it."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def render(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    fmt: OutputFormat,
    title: str | None = None,
) -> None:
    """Every listing command's rows, in ``fmt``, on stdout (json and csv: nothing else)."""
    if fmt is OutputFormat.json:
        out = [dict(zip(columns, map(_plain, r), strict=True)) for r in rows]
        typer.echo(json.dumps(out, indent=2, default=str))
    elif fmt is OutputFormat.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_plain(v) for v in r] for r in rows)
    else:
        table = Table(*columns, title=title)
        for r in rows:
            table.add_row(*("" if v is None else str(v) for v in r))
        console.print(table)


def port_or_off(port: int) -> int | None:
    """-1 (any negative port) turns the endpoint off."""
    return None if port < 0 else port
