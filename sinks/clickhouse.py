"""ClickHouse access through clickhouse-connect: one code path for a server and for chDB.

``http://host:8123`` (a ClickHouse server, or the chDB engine serving the HTTP interface that
``rankscope services`` starts) and ``chdb:///path`` (the embedded engine, one process per data
directory) both give the same ``Client`` API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_NAMED = re.compile(r"\{named:(\w+)\}")


def connect(url: str, **kwargs: Any) -> Client:
    """A client for ``url``; credentials may be in the URL (``http://user:pass@host:8123``)."""
    parsed = urlparse(url)
    if parsed.scheme == "chdb":
        return clickhouse_connect.get_client(dsn=url, **kwargs)
    if parsed.scheme not in ("http", "https", "clickhouse", "clickhouses"):
        raise ValueError(f"unsupported ClickHouse URL scheme {parsed.scheme!r} in {url!r}")
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


def migrate(client: Client, database: str) -> list[Migration]:
    """Apply pending migrations in order; safe to run twice. Returns what it applied."""
    check_database_name(database)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    client.command(
        f"CREATE TABLE IF NOT EXISTS {database}.schema_migrations "
        "(version UInt32, name String, applied_at DateTime DEFAULT now()) "
        "ENGINE = ReplacingMergeTree ORDER BY version"
    )
    done = applied_versions(client, database)
    applied = []
    for mig in available_migrations():
        if mig.version in done:
            continue
        for stmt in mig.statements(database):
            client.command(stmt)
        client.insert(
            f"{database}.schema_migrations",
            [[mig.version, mig.name]],
            column_names=["version", "name"],
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
}


def apply_ttl(client: Client, database: str, days: dict[str, int]) -> dict[str, int]:
    """Keep each table's rows this many days (0: forever); ClickHouse drops older parts/rows
    in the background. Safe to run again with other values. Returns what was set."""
    check_database_name(database)
    unknown = sorted(set(days) - set(TIME_COLUMNS))
    if unknown:
        raise ValueError(f"no retention for {unknown}; tables: {sorted(TIME_COLUMNS)}")
    for table, n in days.items():
        if n < 0:
            raise ValueError(f"{table}: retention must be >= 0 days")
        if n == 0:
            client.command(f"ALTER TABLE {database}.{table} REMOVE TTL")
        else:
            col = TIME_COLUMNS[table]
            client.command(
                f"ALTER TABLE {database}.{table} MODIFY TTL toDateTime({col}) + toIntervalDay({n})"
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
