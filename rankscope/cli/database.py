"""``rankscope migrate``, ``query`` and ``queries``: the pipeline's ClickHouse database, its
migrations and retention, and the named queries of the SQL library."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rankscope.sinks.cluster_ddl import ClusterSpec

from rankscope.cli.options import (
    DEFAULT_DATABASE,
    DEFAULT_HOME,
    ClickHouseOpt,
    DatabaseOpt,
    FormatOpt,
    HomeOpt,
    OutputFormat,
    console,
    local_clickhouse_url,
    pairs,
    render,
)


def migrate(
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = DEFAULT_DATABASE,
    ttl_days: Annotated[
        int | None,
        typer.Option(help="Retention for every table, in days (0: keep forever)."),
    ] = None,
    ttl: Annotated[
        list[str] | None,
        typer.Option(help="Retention of one table, as table=days (repeat); wins over --ttl-days."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="A cluster of the servers' remote_servers: ON CLUSTER DDL, Replicated "
            "<table>_local tables and Distributed tables with the plain names."
        ),
    ] = None,
    print_only: Annotated[
        bool,
        typer.Option("--print", help="With --cluster: print the DDL, connect to nothing."),
    ] = False,
    replica_path: Annotated[
        str,
        typer.Option(
            help="With --cluster: Keeper path of the Replicated engines: uuid, table, "
            "server (the servers' default_replica_path)."
        ),
    ] = "uuid",
    no_replication: Annotated[
        bool,
        typer.Option("--no-replication", help="With --cluster: shards without replicas."),
    ] = False,
    shard_key: Annotated[
        list[str] | None,
        typer.Option(
            help="With --cluster: a table's sharding key, as table=expression (repeat; "
            "default cityHash64(job_id))."
        ),
    ] = None,
) -> None:
    """Apply pending ClickHouse migrations (safe to run twice), set retention if asked, and
    create or update the pipeline's writer and reader users (as admin: the URL's login)."""
    from rankscope.sinks.access import NoAccessStorage, ensure_users
    from rankscope.sinks.clickhouse import TIME_COLUMNS, apply_ttl, connect
    from rankscope.sinks.clickhouse import migrate as run_migrations

    spec = _cluster_spec(cluster, replica_path, no_replication, shard_key, print_only)
    if print_only and spec is not None:
        _print_cluster_ddl(database, spec)
        return
    url = clickhouse_url or local_clickhouse_url(home)
    client = connect(url)
    from rankscope.sinks.cluster_ddl import ClusterDDLError

    try:
        applied = run_migrations(client, database, spec)
    except ClusterDDLError as exc:
        raise typer.BadParameter(str(exc), param_hint="--cluster") from None
    console.print(f"applied {len(applied)} migration(s): {[m.name for m in applied]}")
    if clickhouse_url is None:
        console.print("users: the local engine's come from its users.xml (passwords in --home)")
    else:
        try:
            console.print(f"users: {ensure_users(client, database, cluster=cluster)}")
        except NoAccessStorage as exc:
            console.print(f"users: not created: {exc}")
    days: dict[str, int] = dict.fromkeys(TIME_COLUMNS, ttl_days) if ttl_days is not None else {}
    for table, n in pairs(ttl, "table=days", "--ttl").items():
        if not n.isdigit():
            raise typer.BadParameter(f"'{table}={n}': use table=days", param_hint="--ttl")
        days[table] = int(n)
    if days:
        try:
            apply_ttl(client, database, days, spec)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--ttl") from exc
        console.print(f"retention set on {len(days)} table(s)")


def _cluster_spec(
    cluster: str | None,
    replica_path: str,
    no_replication: bool,
    shard_key: list[str] | None,
    print_only: bool,
) -> ClusterSpec | None:
    from pydantic import ValidationError

    from rankscope.sinks.cluster_ddl import ClusterSpec

    if cluster is None:
        if print_only:
            raise typer.BadParameter("--print needs --cluster", param_hint="--print")
        return None
    try:
        return ClusterSpec(
            name=cluster,
            replica_path=replica_path,
            replicated=not no_replication,
            sharding_keys=pairs(shard_key, "table=expression", "--shard-key"),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise typer.BadParameter(f"{where}: {first['msg']}", param_hint="--cluster") from None


def _print_cluster_ddl(database: str, spec: ClusterSpec) -> None:
    """Print (no markup, so it pipes into clickhouse-client --multiquery) every statement."""
    from rankscope.sinks.clickhouse import cluster_plan
    from rankscope.sinks.cluster_ddl import ClusterDDLError, terminated

    try:
        plan = cluster_plan(database, spec)
    except (ClusterDDLError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--cluster") from None
    for mig, statements in plan:
        label = "bootstrap" if mig is None else f"{mig.version:04d}_{mig.name}"
        print(f"-- rankscope {label} (cluster {spec.name})")
        for stmt in statements:
            print(terminated(stmt) + "\n")


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
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = DEFAULT_DATABASE,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Run a named query of the SQL library, or any SQL, against the pipeline's ClickHouse, as
    the read-only user when one is configured (a login in --clickhouse-url wins)."""
    from rankscope.settings import Settings
    from rankscope.sinks.access import url_for
    from rankscope.sinks.clickhouse import connect
    from rankscope.sinks.named_queries import PRICE_PARAM, default_price_per_gpu_hour, load_queries

    if clickhouse_url is None:
        url = local_clickhouse_url(home, role="reader")
    else:
        url = url_for(clickhouse_url, "reader")
    client = connect(url)
    named = load_queries()
    if sql in named:
        values = pairs(param, "key=value", "--param")
        takes = {p.name: p for p in named[sql].params}
        if PRICE_PARAM in takes and PRICE_PARAM not in values:
            price = Settings().price_per_gpu_hour
            if price is not None or takes[PRICE_PARAM].default is None:
                values[PRICE_PARAM] = str(price or default_price_per_gpu_hour())
        try:
            bound = named[sql].bind(values, database)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--param") from exc
        result = client.query(named[sql].sql, parameters=bound)
    elif param:
        raise typer.BadParameter(f"{sql!r} is not a named query; --param is for those")
    else:
        result = client.query(sql)
    render(list(result.column_names), result.result_rows, fmt)


def queries(fmt: FormatOpt = OutputFormat.table) -> None:
    """List the named queries of the SQL library with their parameters."""
    from rankscope.sinks.named_queries import load_queries

    empty = "''"
    rows = [
        (
            q.name,
            q.summary,
            ", ".join(
                p.name if p.default is None else f"{p.name}={p.default or empty}" for p in q.params
            ),
        )
        for q in load_queries().values()
    ]
    render(("name", "what it answers", "parameters"), rows, fmt)
