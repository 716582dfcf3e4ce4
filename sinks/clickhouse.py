"""ClickHouse access through clickhouse-connect: one code path for a server and for chDB.

``http://host:8123`` (a ClickHouse server, or the chDB engine serving the HTTP interface that
``rankscope services`` starts) and ``chdb:///path`` (the embedded engine, one process per data
directory) both give the same ``Client`` API.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client

if TYPE_CHECKING:
    from rankscope.sinks.cluster_ddl import ClusterSpec

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_NAMED = re.compile(r"\{named:(\w+)\}")


#: set to 1 to send credentials over plain HTTP to a host that is not loopback (a private
#: network you trust, e.g. compose's internal one); never the default
ALLOW_INSECURE_ENV = "RANKSCOPE_CLICKHOUSE_ALLOW_INSECURE"
#: a CA bundle to verify the server with when the URL is https (else the system's)
CA_FILE_ENV = "RANKSCOPE_CLICKHOUSE_CA_FILE"


class InsecureClickHouseURL(ValueError):
    """Credentials would travel in clear: the URL is http:// to a host that is not loopback."""


def _is_loopback(host: str | None) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect(url: str, *, allow_insecure: bool | None = None, **kwargs: Any) -> Client:
    """A client for ``url``; credentials may be in the URL (``https://user:pass@host:8443``).

    The scheme decides TLS: clickhouse-connect would otherwise choose it by port, so
    ``https://host:8123`` or ``https://host`` went over plain HTTP with the password in clear.
    ``https``/``clickhouses`` verify the server (system CAs, or ``RANKSCOPE_CLICKHOUSE_CA_FILE``,
    or ``?ca_cert=`` in the URL). Plain ``http`` with a password is refused unless the host is
    loopback or ``allow_insecure`` (``RANKSCOPE_CLICKHOUSE_ALLOW_INSECURE=1``) says so."""
    parsed = urlparse(url)
    if parsed.scheme == "chdb":
        return clickhouse_connect.get_client(dsn=url, **kwargs)
    if parsed.scheme in ("https", "clickhouses"):
        kwargs.setdefault("interface", "https")
        kwargs.setdefault("secure", True)
        kwargs.setdefault("verify", True)
        ca_file = os.environ.get(CA_FILE_ENV)
        if ca_file and "ca_cert=" not in parsed.query:
            kwargs.setdefault("ca_cert", ca_file)
        return clickhouse_connect.get_client(dsn=url, **kwargs)
    if parsed.scheme not in ("http", "clickhouse"):
        raise ValueError(f"unsupported ClickHouse URL scheme {parsed.scheme!r}")
    if allow_insecure is None:
        allow_insecure = os.environ.get(ALLOW_INSECURE_ENV, "").lower() in ("1", "true", "yes")
    if (parsed.password or kwargs.get("password")) and not (
        allow_insecure or _is_loopback(parsed.hostname)
    ):
        raise InsecureClickHouseURL(
            f"refusing to send ClickHouse credentials over plain HTTP to {parsed.hostname}: "
            f"use https://, or set {ALLOW_INSECURE_ENV}=1 on a network you trust"
        )
    kwargs.setdefault("interface", "http")
    return clickhouse_connect.get_client(dsn=url, **kwargs)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def statements(self, database: str) -> list[str]:
        """The file's statements for ``database``; ``{named:NAME}`` becomes that named query's
        SQL, so views and the library cannot drift apart."""
        text = self.path.read_text()
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
        body = "\n".join(lines).replace("{db}", database)
        out = [s.strip() for s in body.split(";") if s.strip()]
        if "{named:" in body:
            from rankscope.sinks.named_queries import load_queries

            queries = load_queries()
            out = [
                _NAMED.sub(
                    lambda m: queries[m.group(1)].sql.replace("{db:Identifier}.", f"{database}."),
                    stmt,
                )
                for stmt in out
            ]
        return out


def available_migrations() -> list[Migration]:
    out = []
    for p in sorted(MIGRATIONS_DIR.glob("*.sql")):
        m = _MIGRATION_NAME.match(p.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), p))
    return out


def check_database_name(database: str) -> str:
    if not _DB_NAME.match(database):
        raise ValueError(f"invalid database name {database!r}")
    return database


def applied_versions(client: Client, database: str) -> set[int]:
    rows = client.query(f"SELECT version FROM {database}.schema_migrations FINAL").result_rows
    return {int(r[0]) for r in rows}


def pending_migrations(client: Client, database: str) -> list[Migration]:
    """Migrations not applied yet (all of them when the database has none); needs SELECT only,
    so the sink's writer can check what it may not run."""
    check_database_name(database)
    exists = client.query(
        "SELECT count() FROM system.tables WHERE database = %(d)s AND name = 'schema_migrations'",
        parameters={"d": database},
    ).result_rows[0][0]
    done = applied_versions(client, database) if exists else set()
    return [m for m in available_migrations() if m.version not in done]


def bootstrap_statements(database: str) -> list[str]:
    """The database and the table that records applied migrations (before any migration)."""
    check_database_name(database)
    return [
        f"CREATE DATABASE IF NOT EXISTS {database}",
        f"CREATE TABLE IF NOT EXISTS {database}.schema_migrations "
        "(version UInt32, name String, applied_at DateTime DEFAULT now()) "
        "ENGINE = ReplacingMergeTree ORDER BY version",
    ]


def cluster_plan(database: str, spec: ClusterSpec) -> list[tuple[Migration | None, list[str]]]:
    """Every migration's statements rendered for ``spec``'s cluster, bootstrap first (None).

    All migrations are rendered, applied or not: the renderer learns the storage tables from
    the earlier ones (rankscope.sinks.cluster_ddl)."""
    from rankscope.sinks.cluster_ddl import ClusterRenderer

    renderer = ClusterRenderer(spec, check_database_name(database))
    plan: list[tuple[Migration | None, list[str]]] = [
        (None, [o for s in bootstrap_statements(database) for o in renderer.render(s)])
    ]
    for mig in available_migrations():
        plan.append((mig, [o for s in mig.statements(database) for o in renderer.render(s)]))
    return plan


def migrate(client: Client, database: str, cluster: ClusterSpec | None = None) -> list[Migration]:
    """Apply pending migrations in order; safe to run twice. Returns what it applied.

    With ``cluster``, the statements are the cluster's (``ON CLUSTER``, Replicated local tables,
    Distributed tables with the plain names), sent to the one server ``client`` talks to."""
    check_database_name(database)
    if cluster is not None:
        plan = cluster_plan(database, cluster)
    else:
        plan = [(None, bootstrap_statements(database))]
        plan += [(m, m.statements(database)) for m in available_migrations()]
    for stmt in plan[0][1]:
        client.command(stmt)
    done = applied_versions(client, database)
    applied = []
    for mig, statements in plan[1:]:
        if mig is None or mig.version in done:
            continue
        for stmt in statements:
            client.command(stmt)
        client.insert(
            f"{database}.schema_migrations",
            [[mig.version, mig.name]],
            column_names=["version", "name"],
            # through a Distributed table: written before the call returns
            settings={"insert_distributed_sync": 1} if cluster is not None else None,
        )
        applied.append(mig)
    return applied


#: table -> its time column, for retention (TTL)
TIME_COLUMNS: dict[str, str] = {
    "spans": "ts",
    "gpu_samples": "ts",
    "gpu_events": "ts",
    "heartbeats": "ts",
    "scheduler_events": "ts",
    "fabric_counters": "ts",
    "fabric_events": "ts",
    "comm_events": "ts",
    "node_inventory": "ts",
    "agent_events": "ts",
    "rank_windows": "window_start",
    "late_events": "ts",
    "deadletter": "received_at",
    "detections": "onset_ts",
    "incidents": "first_cause_ts",
    "redaction_audit": "window_start",
    "redaction_quarantine": "ts",
    "gpu_minute": "minute",
    "node_hour": "hour",
    "job_hour_steps": "hour",
}


def apply_ttl(
    client: Client, database: str, days: dict[str, int], cluster: ClusterSpec | None = None
) -> dict[str, int]:
    """Keep each table's rows this many days (0: forever); ClickHouse drops older parts/rows
    in the background. Safe to run again with other values. Returns what was set.

    With ``cluster``, on every server's local table (a Distributed table has no TTL)."""
    check_database_name(database)
    suffix, on = (cluster.local_suffix, cluster.clause) if cluster is not None else ("", "")
    unknown = sorted(set(days) - set(TIME_COLUMNS))
    if unknown:
        raise ValueError(f"no retention for {unknown}; tables: {sorted(TIME_COLUMNS)}")
    for table, n in days.items():
        if n < 0:
            raise ValueError(f"{table}: retention must be >= 0 days")
        if n == 0:
            client.command(f"ALTER TABLE {database}.{table}{suffix}{on} REMOVE TTL")
        else:
            col = TIME_COLUMNS[table]
            client.command(
                f"ALTER TABLE {database}.{table}{suffix}{on} "
                f"MODIFY TTL toDateTime({col}) + toIntervalDay({n})"
            )
    return days


def storage_tables(client: Client, database: str) -> list[str]:
    """The tables that hold rows (not views: a parameterized view cannot be read bare)."""
    rows = client.query(
        "SELECT name FROM system.tables WHERE database = %(d)s "
        "AND engine NOT IN ('View', 'MaterializedView') ORDER BY name",
        parameters={"d": check_database_name(database)},
    ).result_rows
    return [str(r[0]) for r in rows]
