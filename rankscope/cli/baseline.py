"""``rankscope baseline``: record a job's throughput profile as a reference baseline, list and
show the baselines (issue 19). Recording reads ClickHouse and publishes to Kafka; listing reads
the compacted baselines topic, the source of truth the worker compares against."""

from __future__ import annotations

import getpass
import time
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_DATABASE,
    DEFAULT_HOME,
    DEFAULT_PREFIX,
    EXIT_INPUT,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    FormatOpt,
    HomeOpt,
    OutputFormat,
    PrefixOpt,
    console,
    local_bootstrap,
    local_clickhouse_url,
    render,
)

baseline_app = typer.Typer(
    help="Reference baselines: record a job's throughput profile; later jobs with the same "
    "model/config key get a throughput_gap finding when they run more than the margin below.",
    no_args_is_help=True,
)

_COLUMNS = ["name", "key", "job_id", "step_s", "comm_share", "steps", "nccl_version", "recorded"]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"rankscope: error: {message}", err=True)
    return typer.Exit(EXIT_INPUT)


@baseline_app.command()
def record(
    job: Annotated[str, typer.Option("--job", help="The job whose profile becomes the baseline.")],
    name: Annotated[str, typer.Option("--name", help="The baseline's name.")],
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = DEFAULT_DATABASE,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Profile --job from ClickHouse (per-phase step times, comm share, power, configuration)
    and publish it as baseline --name on <prefix>.baselines, keyed by its model/config key."""
    from rankscope.baselines import BaselineError, record_baseline
    from rankscope.schemas.topics import Topics
    from rankscope.sinks.clickhouse import connect

    if not name.strip():
        raise _fail("--name must not be empty")
    client = connect(clickhouse_url or local_clickhouse_url(home))
    try:
        baseline = record_baseline(
            client,
            database,
            bootstrap or local_bootstrap(home),
            Topics(prefix),
            job,
            name,
            recorded_ts=time.time_ns(),
            recorded_by=getpass.getuser(),
        )
    except BaselineError as exc:
        raise _fail(str(exc)) from None
    if fmt is OutputFormat.table:
        console.print(
            f"baseline [bold]{baseline.name}[/] recorded for key {baseline.key} "
            f"(step {baseline.profile.step.median_s:.4f} s over {baseline.profile.steps} steps)"
        )
    else:
        render(_COLUMNS, [_row(baseline)], fmt)


def _row(b: object) -> list[object]:
    from rankscope.schemas.baselines import Baseline

    assert isinstance(b, Baseline)
    p = b.profile
    return [
        b.name,
        b.key,
        p.job_id,
        round(p.step.median_s, 6),
        round(p.comm_share, 4),
        p.steps,
        p.config.nccl_version,
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(b.recorded_ts / 1e9)),
    ]


@baseline_app.command("list")
def list_baselines(
    bootstrap: BootstrapOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """The baseline in force per model/config key (the latest recorded for it)."""
    from rankscope.baselines import current_baselines
    from rankscope.schemas.topics import Topics

    rows = [_row(b) for b in current_baselines(bootstrap or local_bootstrap(home), Topics(prefix))]
    render(_COLUMNS, rows, fmt, title="baselines")


@baseline_app.command()
def show(
    name: Annotated[str, typer.Argument(help="The baseline's name.")],
    bootstrap: BootstrapOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """One baseline in force: its per-phase profile and configuration fingerprint (--format
    json: the whole record as published)."""
    from rankscope.baselines import current_baselines
    from rankscope.schemas.topics import Topics

    found = [
        b
        for b in current_baselines(bootstrap or local_bootstrap(home), Topics(prefix))
        if b.name == name
    ]
    if not found:
        raise _fail(f"no baseline named {name!r} is in force (see `rankscope baseline list`)")
    b = found[-1]
    if fmt is OutputFormat.json:
        typer.echo(b.model_dump_json(indent=2))
        return
    p = b.profile
    rows: list[list[object]] = [
        [phase, round(s.median_s, 6), round(s.spread_s, 6)] for phase, s in p.phases.items()
    ]
    rows.append(["step", round(p.step.median_s, 6), round(p.step.spread_s, 6)])
    render(["phase", "median_s", "spread_s"], rows, fmt, title=f"baseline {b.name} ({b.key})")
    if fmt is OutputFormat.table:
        config = p.config.model_dump()
        env = config.pop("nccl_env")
        settings = {**config, **env, "comm_share": round(p.comm_share, 4)}
        settings["power_w_per_gpu"] = p.power_w_per_gpu
        render(["setting", "value"], [[k, v] for k, v in settings.items()], fmt, title="config")
