"""``rankscope``: the command line. Each command builds typed component configs and runs them."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rankscope.settings import Settings

app = typer.Typer(
    help="rankscope: why did my multi-node training job slow down or die?",
    no_args_is_help=True,
    add_completion=False,
)
services_app = typer.Typer(
    help="Start, stop and inspect the local Kafka broker and ClickHouse engine."
)
app.add_typer(services_app, name="services")
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
ClickHouseOpt = Annotated[
    str | None,
    typer.Option(
        "--clickhouse-url",
        envvar="RANKSCOPE_CLICKHOUSE_URL",
        help="ClickHouse URL (http://user:pass@host:8123 or chdb:///path); omit: local engine.",
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


def _settings(
    home: Path,
    bootstrap: str | None = None,
    clickhouse_url: str | None = None,
    prefix: str = "rankscope",
    database: str = "rankscope",
) -> Settings:
    return Settings(
        home=home,
        bootstrap=bootstrap,
        clickhouse_url=clickhouse_url,
        topic_prefix=prefix,
        database=database,
    )


# -- services ------------------------------------------------------------------------------
@services_app.command("up")
def services_up(
    home: HomeOpt = Path(".rankscope"),
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
) -> None:
    """Start the local broker and engine (left running; stop with `services down`)."""
    from rankscope.services import ServiceManager

    eps = ServiceManager(home).up(
        kafka_bootstrap=bootstrap, clickhouse_url=clickhouse_url, progress=err.print
    )
    console.print(f"kafka      {eps.kafka_bootstrap}\nclickhouse {eps.clickhouse_url}")


@services_app.command("down")
def services_down(home: HomeOpt = Path(".rankscope")) -> None:
    """Stop what `services up` started."""
    from rankscope.services import ServiceManager

    ServiceManager(home).down()
    console.print("stopped")


@services_app.command("status")
def services_status(home: HomeOpt = Path(".rankscope")) -> None:
    """Show what is running and whether it answers."""
    from rankscope.services import ServiceManager

    console.print_json(json.dumps(ServiceManager(home).status(), default=str))


# -- pipeline stages ---------------------------------------------------------------------
@app.command()
def worker(
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="RANKSCOPE_BOOTSTRAP")],
    home: HomeOpt = Path(".rankscope"),
    prefix: PrefixOpt = "rankscope",
    log_level: str = "warn",
) -> None:
    """Run a faust stream worker (validate, windows) in the foreground."""
    from rankscope.streams.app import run_worker

    cfg = _settings(home, bootstrap, prefix=prefix).streams(bootstrap)
    run_worker(cfg.model_copy(update={"log_level": log_level}))


@app.command()
def sink(
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="RANKSCOPE_BOOTSTRAP")],
    clickhouse_url: Annotated[
        str, typer.Option("--clickhouse-url", envvar="RANKSCOPE_CLICKHOUSE_URL")
    ],
    home: HomeOpt = Path(".rankscope"),
    prefix: PrefixOpt = "rankscope",
    database: DatabaseOpt = "rankscope",
    max_batch_rows: Annotated[
        int, typer.Option(help="Rows per ClickHouse insert, at most.")
    ] = 50_000,
) -> None:
    """Run the ClickHouse sink in the foreground (batched, idempotent, commit after write)."""
    from rankscope.sinks.kafka_sink import run_sink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = _settings(home, bootstrap, clickhouse_url, prefix, database).sink(
        bootstrap, clickhouse_url
    )
    stats = run_sink(cfg.model_copy(update={"max_batch_rows": max_batch_rows}))
    err.print(f"sink stopped: {stats}")


@app.command()
def migrate(
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = Path(".rankscope"),
    database: DatabaseOpt = "rankscope",
    ttl_days: Annotated[
        int | None,
        typer.Option(help="Retention for every table, in days (0: keep forever)."),
    ] = None,
    ttl: Annotated[
        list[str] | None,
        typer.Option(help="Retention of one table, as table=days (repeat); wins over --ttl-days."),
    ] = None,
) -> None:
    """Apply pending ClickHouse migrations (safe to run twice), and set retention if asked."""
    from rankscope.sinks.clickhouse import TIME_COLUMNS, apply_ttl, connect
    from rankscope.sinks.clickhouse import migrate as run_migrations

    url = clickhouse_url or local_clickhouse_url(home)
    client = connect(url)
    applied = run_migrations(client, database)
    console.print(f"applied {len(applied)} migration(s): {[m.name for m in applied]}")
    days: dict[str, int] = dict.fromkeys(TIME_COLUMNS, ttl_days) if ttl_days is not None else {}
    for table, n in _pairs(ttl, "table=days", "--ttl").items():
        if not n.isdigit():
            raise typer.BadParameter(f"'{table}={n}': use table=days", param_hint="--ttl")
        days[table] = int(n)
    if days:
        try:
            apply_ttl(client, database, days)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--ttl") from exc
        console.print(f"retention set on {len(days)} table(s)")


@app.command()
def query(
    sql: Annotated[
        str,
        typer.Argument(
            help='A named query (see `rankscope queries`) or SQL, e.g. "SELECT count() FROM '
            'rankscope.spans"'
        ),
    ],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="A named query's parameter, as key=value (repeat)."),
    ] = None,
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = Path(".rankscope"),
    database: DatabaseOpt = "rankscope",
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json")] = "table",
) -> None:
    """Run a named query of the SQL library, or any SQL, against the pipeline's ClickHouse."""
    from rankscope.sinks.clickhouse import connect
    from rankscope.sinks.named_queries import load_queries

    url = clickhouse_url or local_clickhouse_url(home)
    client = connect(url)
    queries = load_queries()
    if sql in queries:
        values = _pairs(param, "key=value", "--param")
        try:
            bound = queries[sql].bind(values, database)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--param") from exc
        result = client.query(queries[sql].sql, parameters=bound)
    elif param:
        raise typer.BadParameter(f"{sql!r} is not a named query; --param is for those")
    else:
        result = client.query(sql)
    _print_result(list(result.column_names), result.result_rows, fmt)


def _pairs(items: list[str] | None, form: str, option: str) -> dict[str, str]:
    """Repeated ``name=value`` options as a mapping (the last one of a name wins)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r}: use {form}", param_hint=option)
        out[key] = value
    return out


def _print_result(names: list[str], rows: Sequence[Sequence[Any]], fmt: str) -> None:
    if fmt == "json":
        console.print_json(
            json.dumps([dict(zip(names, r, strict=True)) for r in rows], default=str)
        )
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(names)
        w.writerows(rows)
    else:
        table = Table(*names)
        for r in rows:
            table.add_row(*("" if v is None else str(v) for v in r))
        console.print(table)


@app.command()
def queries() -> None:
    """List the named queries of the SQL library with their parameters."""
    from rankscope.sinks.named_queries import load_queries

    empty = "''"
    table = Table("name", "what it answers", "parameters")
    for q in load_queries().values():
        params = ", ".join(
            p.name if p.default is None else f"{p.name}={p.default or empty}" for p in q.params
        )
        table.add_row(q.name, q.summary, params)
    console.print(table)


def local_clickhouse_url(home: Path) -> str:
    """The running local engine's URL, or the embedded engine on its data directory."""
    from rankscope.services import ServiceManager

    status = ServiceManager(home).status()
    ch = status.get("clickhouse") or {}
    if ch.get("running") and ch.get("endpoint"):
        return str(ch["endpoint"])
    data = (home / "data" / "clickhouse").resolve()
    if not data.exists():
        raise typer.BadParameter(
            f"no ClickHouse data under {data}: run `rankscope demo` first or pass --clickhouse-url"
        )
    return f"chdb://{data}"


# -- demo ----------------------------------------------------------------------------------
@app.command()
def demo(
    ranks: Annotated[int, typer.Option(help="Simulated ranks (GPUs).")] = 16,
    duration: Annotated[
        float, typer.Option(help="Simulated job length, seconds of event time.")
    ] = 120.0,
    seed: int = 7,
    speed: Annotated[float, typer.Option(help="Playback speed; 0 = as fast as possible.")] = 0.0,
    home: HomeOpt = Path(".rankscope"),
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    prefix: PrefixOpt = "rankscope",
    database: DatabaseOpt = "rankscope",
    keep_services: Annotated[
        bool, typer.Option(help="Leave the local broker and engine running afterwards.")
    ] = False,
    fault: Annotated[
        str,
        typer.Option(
            help="Fault to inject: gpu_fell_off_bus, ecc_dbe, nvlink_error, ib_link_flap, "
            "thermal_straggler, input_straggler, hang, node_unresponsive, preemption, host_oom, "
            "config_drift, noise, or none."
        ),
    ] = "gpu_fell_off_bus",
) -> None:
    """Simulate a multi-rank job with an injected fault through the whole pipeline, then print
    what was stored, what was detected, and the incident report."""
    from rankscope.demo import DemoOptions, run_demo

    # librdkafka reports transient retries (e.g. "coordinator load in progress") as warnings;
    # the demo surfaces real failures through the publisher's delivery report instead.
    logging.getLogger("rankscope.collectors.publisher.librdkafka").setLevel(logging.ERROR)

    opts = DemoOptions(
        ranks=ranks,
        duration_s=duration,
        seed=seed,
        speed=speed,
        keep_services=keep_services,
        fault=fault,
    )
    code = run_demo(_settings(home, bootstrap, clickhouse_url, prefix, database), opts, console)
    raise typer.Exit(code)


@app.command()
def simulate(
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="RANKSCOPE_BOOTSTRAP")],
    ranks: Annotated[int, typer.Option(help="Simulated ranks (GPUs).")] = 16,
    duration: Annotated[float, typer.Option(help="Job length, seconds of event time.")] = 120.0,
    seed: int = 7,
    speed: Annotated[float, typer.Option(help="Playback speed; 1 = real time, 0 = max.")] = 1.0,
    job_id: Annotated[str, typer.Option(help="Job id of the simulated job.")] = "sim-job-1",
    prefix: PrefixOpt = "rankscope",
) -> None:
    """Publish a simulated synchronous training job to Kafka (no pipeline started)."""
    from rankscope.collectors.publisher import Publisher, PublisherConfig
    from rankscope.simulation.simulator import SimulationConfig, pace
    from rankscope.simulation.simulator import simulate as run_simulation

    sim = SimulationConfig(ranks=ranks, duration_s=duration, seed=seed, job_id=job_id)
    sent = 0
    with Publisher(PublisherConfig(bootstrap=bootstrap, topic_prefix=prefix)) as pub:
        pub.check_connection()
        batch = []
        for ev in pace(run_simulation(sim), speed):
            batch.append(ev)
            if len(batch) >= 500:
                pub.publish(batch)
                sent += len(batch)
                batch = []
                err.print(f"published {sent:,} events", end="\r")
        pub.publish(batch)
        sent += len(batch)
        stats = pub.flush(60)
    console.print(
        f"published {sent:,} events of job {job_id}; delivered {stats.events_delivered:,}"
    )


@app.command("eval")
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
    home: HomeOpt = Path(".rankscope"),
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    prefix: PrefixOpt = "rankscope-eval",
    database: DatabaseOpt = "rankscope_eval",
) -> None:
    """Run the labelled fault suite through the real pipeline and score it against truth."""
    from rankscope.evaluate import run_eval

    logging.getLogger("rankscope.collectors.publisher.librdkafka").setLevel(logging.ERROR)
    sizes = ranks or [64, 512]
    report = run_eval(
        _settings(home, bootstrap, clickhouse_url, prefix, database),
        sizes,
        seeds,
        duration,
        out,
        console,
        speed=speed,
        variants=scenario or (),
    )
    totals = report.totals()
    raise typer.Exit(0 if totals["faulted_runs"] else 1)


@app.command()
def incidents(
    job: Annotated[str | None, typer.Option(help="Only this job.")] = None,
    limit: int = 20,
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = Path(".rankscope"),
    database: DatabaseOpt = "rankscope",
    report_dir: Annotated[
        Path | None,
        typer.Option(help="Also write the job's report (HTML and Markdown) here; needs --job."),
    ] = None,
) -> None:
    """Print incidents as readable timelines: what failed first, and why the others failed."""
    from rankscope.incident_report import write_incident_report
    from rankscope.report import print_incidents
    from rankscope.sinks.clickhouse import connect

    url = clickhouse_url or local_clickhouse_url(home)
    client = connect(url)
    print_incidents(client, database, console, job_id=job, limit=limit)
    if report_dir is not None:
        if not job:
            raise typer.BadParameter("--report-dir needs --job", param_hint="--report-dir")
        path = write_incident_report(client, database, job, report_dir)
        console.print(f"report written to [bold]{path}[/] (and .md)")


@app.command("schemas-export")
def schemas_export() -> None:
    """Rewrite the committed JSON Schema files from the pydantic models."""
    from rankscope.schemas.export import main as export_main

    raise typer.Exit(export_main())


def _register_agent() -> None:
    """``rankscope agent``: the node agent (collectors -> on-disk spool -> Kafka)."""
    from rankscope.agent_cmd import agent

    app.command("agent")(agent)


_register_agent()


grafana_app = typer.Typer(help="Grafana dashboards as code.", no_args_is_help=True)
app.add_typer(grafana_app, name="grafana")


@grafana_app.command("build")
def grafana_build(
    out: Annotated[
        Path | None, typer.Option(help="Directory (default: compose/grafana/dashboards).")
    ] = None,
) -> None:
    """Write the dashboards (JSON for Grafana's file provisioning) from rankscope/grafana.py."""
    from rankscope.grafana import DASHBOARDS_DIR, write_dashboards

    for path in write_dashboards(out or DASHBOARDS_DIR):
        console.print(f"wrote {path}")


def _register_redaction() -> None:
    """``rankscope redaction review|audit|hash``."""
    from rankscope.redaction_cmd import redaction_app

    app.add_typer(redaction_app, name="redaction")


_register_redaction()


def _register_recovery() -> None:
    """``rankscope recovery history|status|pause|resume|run``."""
    from rankscope.recovery_cmd import recovery_app

    app.add_typer(recovery_app, name="recovery")


_register_recovery()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
