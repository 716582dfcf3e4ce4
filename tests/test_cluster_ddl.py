"""Cluster DDL (issue 18 point 6): every migration rendered for a cluster, parsed by ClickHouse's
own parser (the chDB engine), its structure asserted, and the sharded (unreplicated) layout run on
a one-server cluster.

ClickHouse facts the assertions rest on (ClickHouse docs): ``ON CLUSTER`` needs Keeper (chDB
answers "Replicated DDL queries are disabled", checked below), Replicated engines take
``'/clickhouse/tables/{uuid}/{shard}', '{replica}'`` (also the servers' default_replica_path) and
``Distributed(cluster, database, table[, sharding_key])``
(clickhouse.com/docs/engines/database-engines/replicated, .../table-engines/special/distributed).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.sinks.access import READER, WRITER, User, sql_statements
from rankscope.sinks.clickhouse import available_migrations, cluster_plan
from rankscope.sinks.cluster_ddl import (
    DEFAULT_SHARDING_KEY,
    ClusterDDLError,
    ClusterRenderer,
    ClusterSpec,
    ReplicaPath,
    access_on_cluster,
    terminated,
)

DB = "rankscope"
SPEC = ClusterSpec(name="rs")

#: formats each statement of a JSON list on stdin with ClickHouse's parser; [ok, text] per item
_FORMAT = textwrap.dedent(
    """
    import json, sys
    from chdb import session
    s = session.Session()
    out = []
    for stmt in json.load(sys.stdin):
        lit = "'" + stmt.replace("\\\\", "\\\\\\\\").replace("'", "\\\\'") + "'"
        try:
            res = s.query("SELECT formatQuery(" + lit + ")", "TSVRaw")
            out.append([True, res.bytes().decode()])
        except Exception as exc:
            out.append([False, str(exc).splitlines()[0]])
    print(json.dumps(out))
    """
)


def clickhouse_format(statements: list[str]) -> list[tuple[bool, str]]:
    """ClickHouse's own parser on each statement (a fresh process: one chDB engine each)."""
    done = subprocess.run(
        [sys.executable, "-c", _FORMAT],
        input=json.dumps(statements),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [(bool(ok), str(text)) for ok, text in json.loads(done.stdout)]


def rendered(spec: ClusterSpec = SPEC) -> list[str]:
    return [s for _, stmts in cluster_plan(DB, spec) for s in stmts]


@pytest.fixture(scope="module")
def formatted() -> list[str]:
    results = clickhouse_format(rendered())
    bad = [text for ok, text in results if not ok]
    assert not bad, bad[:3]
    return [text for _, text in results]


def test_every_rendered_statement_parses(formatted: list[str]) -> None:
    n_source = sum(len(m.statements(DB)) for m in available_migrations())
    assert len(formatted) > n_source  # a Distributed twin per table, two ALTERs per column


@pytest.mark.parametrize("path", [ReplicaPath.TABLE, ReplicaPath.SERVER])
def test_other_replica_paths_parse(path: ReplicaPath) -> None:
    results = clickhouse_format(rendered(ClusterSpec(name="rs", replica_path=path)))
    assert all(ok for ok, _ in results), [t for ok, t in results if not ok][:3]


def test_the_parser_check_can_fail() -> None:
    """A broken statement is refused, so the check above is not vacuous."""
    ok, text = clickhouse_format(["CREATE TABLE d.t ON CLUSTER ENGINE = Distributed("])[0]
    assert not ok and "Syntax error" in text


def test_every_create_alter_drop_runs_on_the_cluster(formatted: list[str]) -> None:
    ddl = [f for f in formatted if re.match(r"(CREATE|ALTER|DROP|EXCHANGE|TRUNCATE)\b", f)]
    assert ddl and all(" ON CLUSTER rs" in f for f in ddl), [
        f for f in ddl if "ON CLUSTER" not in f
    ]
    inserts = [f for f in formatted if f.startswith("INSERT")]
    assert inserts and all("insert_distributed_sync = 1" in f for f in inserts)


def _creates(formatted: list[str]) -> dict[str, str]:
    out = {}
    for f in formatted:
        m = re.match(r"CREATE TABLE (?:IF NOT EXISTS )?rankscope\.(\w+) ON CLUSTER", f)
        if m:
            out[m.group(1)] = f
    return out


def test_merge_tree_engines_are_replicated_and_keep_their_arguments(formatted: list[str]) -> None:
    engines = re.findall(r"ENGINE = (\w+)\(([^)]*)\)", "\n".join(formatted))
    merge_tree = [(e, a) for e, a in engines if e.endswith("MergeTree")]
    assert merge_tree and all(e.startswith("Replicated") for e, _ in merge_tree)
    assert all(
        a.startswith("'/clickhouse/tables/{uuid}/{shard}', '{replica}'") for _, a in merge_tree
    )
    incidents = _creates(formatted)["incidents_local"]
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', revision)"
        in incidents
    )
    assert "ReplicatedAggregatingMergeTree" in _creates(formatted)["gpu_minute_local"]


def test_every_storage_table_has_a_distributed_twin_with_the_plain_name(
    formatted: list[str],
) -> None:
    creates = _creates(formatted)
    local = sorted(n[: -len("_local")] for n in creates if n.endswith("_local"))
    assert {"spans", "gpu_samples", "incidents", "gpu_minute", "schema_migrations"} <= set(local)
    for name in local:
        twin = creates[name]
        assert f"AS rankscope.{name}_local" in twin
        assert f"ENGINE = Distributed('rs', 'rankscope', '{name}_local', " in twin
    # the plain names are what the named queries, views and dashboards read
    assert "Distributed('rs', 'rankscope', 'spans_local', cityHash64(job_id))" in creates["spans"]


def test_materialized_views_read_and_write_local_tables(formatted: list[str]) -> None:
    views = [f for f in formatted if f.startswith("CREATE MATERIALIZED VIEW")]
    assert len(views) >= 4  # 0007 has four; later migrations may add more
    for v in views:
        assert re.search(r" TO rankscope\.\w+_local\b", v), v
        assert re.search(r"FROM rankscope\.\w+_local\b", v), v
    plain = [f for f in formatted if f.startswith("CREATE OR REPLACE VIEW")]
    assert plain and all("_local" not in v for v in plain)  # views read the Distributed tables


def test_a_view_fires_on_its_outer_from_table_only() -> None:
    r = ClusterRenderer(SPEC, DB)
    for t in ("a", "b", "c"):
        r.render(f"CREATE TABLE rankscope.{t} (job_id String) ENGINE = MergeTree ORDER BY job_id")
    mv = r.render(
        "CREATE MATERIALIZED VIEW rankscope.mv TO rankscope.c AS SELECT job_id, "
        "(SELECT count() FROM rankscope.b) AS n FROM rankscope.a"
    )[0]
    assert "TO rankscope.c_local" in mv and "FROM rankscope.a_local" in mv
    assert "FROM rankscope.b)" in mv  # a lookup reads the whole cluster


def test_column_changes_reach_both_tables_indexes_only_the_local_one() -> None:
    r = ClusterRenderer(SPEC, DB)
    r.render("CREATE TABLE rankscope.t (job_id String, a Int32) ENGINE = MergeTree ORDER BY a")
    add = r.render("ALTER TABLE rankscope.t ADD COLUMN IF NOT EXISTS b String AFTER a")
    assert [s.split(" ON")[0] for s in add] == [
        "ALTER TABLE rankscope.t_local",
        "ALTER TABLE rankscope.t",
    ]
    assert r.tables["t"].columns == ["job_id", "a", "b"]
    index = r.render("ALTER TABLE rankscope.t ADD INDEX i a TYPE minmax GRANULARITY 1")
    assert index == [
        "ALTER TABLE rankscope.t_local ON CLUSTER 'rs' ADD INDEX i a TYPE minmax GRANULARITY 1"
    ]
    with pytest.raises(ClusterDDLError, match="split column changes"):
        r.render("ALTER TABLE rankscope.t ADD COLUMN c Int8, ADD INDEX j a TYPE minmax")


def test_sharding_keys() -> None:
    assert SPEC.sharding_key("spans", ["job_id", "rank"], "(job_id, ts)") == DEFAULT_SHARDING_KEY
    assert SPEC.sharding_key("node_hour", ["node", "hour"], "(cluster, node, hour)") == (
        "cityHash64(cluster, node, hour)"
    )
    custom = ClusterSpec(name="rs", sharding_keys={"spans": "cityHash64(job_id, rank)"})
    r = ClusterRenderer(custom, DB)
    out = r.render(
        "CREATE TABLE rankscope.spans (job_id String) ENGINE = MergeTree ORDER BY job_id"
    )
    assert out[1].endswith("'spans_local', cityHash64(job_id, rank))")


def test_exchange_swaps_the_local_tables_only() -> None:
    r = ClusterRenderer(SPEC, DB)
    r.render("CREATE TABLE rankscope.a (job_id String) ENGINE = MergeTree ORDER BY job_id")
    r.render("CREATE TABLE rankscope.b AS rankscope.a ENGINE = MergeTree ORDER BY job_id")
    assert r.render("EXCHANGE TABLES rankscope.a AND rankscope.b") == [
        "EXCHANGE TABLES rankscope.a_local AND rankscope.b_local ON CLUSTER 'rs'"
    ]
    assert r.render("DROP TABLE rankscope.b") == [
        "DROP TABLE rankscope.b ON CLUSTER 'rs'",
        "DROP TABLE rankscope.b_local ON CLUSTER 'rs'",
    ]
    assert "b" not in r.tables


def test_unrenderable_statements_are_refused_with_a_reason() -> None:
    r = ClusterRenderer(SPEC, DB)
    r.render("CREATE TABLE rankscope.a (job_id String) ENGINE = MergeTree ORDER BY job_id")
    with pytest.raises(ClusterDDLError, match="TO table"):
        r.render(
            "CREATE MATERIALIZED VIEW rankscope.mv ENGINE = MergeTree ORDER BY x AS SELECT 1 AS x"
        )
    with pytest.raises(ClusterDDLError, match="no cluster form"):
        r.render("RENAME TABLE rankscope.a TO rankscope.z")
    with pytest.raises(ClusterDDLError, match="own ENGINE"):
        r.render("CREATE TABLE rankscope.c AS rankscope.a")


def test_a_future_migration_is_rendered_without_special_cases() -> None:
    """What a new migration file may add (a table with an engine argument, a column, a TTL)."""
    r = ClusterRenderer(SPEC, DB)
    out = [
        s
        for stmt in (
            "CREATE TABLE IF NOT EXISTS rankscope.power_events (job_id LowCardinality(String), "
            "ts DateTime, v UInt32) ENGINE = VersionedCollapsingMergeTree(sign, v) "
            "PARTITION BY toDate(ts) ORDER BY (job_id, ts)",
            "ALTER TABLE rankscope.power_events MODIFY TTL ts + toIntervalDay(30)",
            "ALTER TABLE rankscope.power_events DROP COLUMN IF EXISTS v",
        )
        for s in r.render(stmt)
    ]
    assert (
        "ReplicatedVersionedCollapsingMergeTree("
        "'/clickhouse/tables/{uuid}/{shard}', '{replica}', sign, v)" in out[0]
    )
    assert len(out) == 5  # local + Distributed, TTL on local, DROP COLUMN on both
    assert all(ok for ok, _ in clickhouse_format(out))


def test_users_ddl_runs_on_the_cluster() -> None:
    users = [
        User(role=WRITER, name="rs_writer", password="s3cret-pass"),  # type: ignore[arg-type]
        User(role=READER, name="rs_reader", password="s3cret-pass"),  # type: ignore[arg-type]
    ]
    statements = [access_on_cluster(s, "rs") for s in sql_statements(DB, users)]
    assert all("ON CLUSTER 'rs'" in s for s in statements)
    results = clickhouse_format(statements)
    assert all(ok for ok, _ in results), results
    assert all(" ON CLUSTER rs" in text for _, text in results)


def test_cli_prints_the_cluster_ddl_without_a_server() -> None:
    result = CliRunner().invoke(app, ["migrate", "--cluster", "rs", "--print"])
    assert result.exit_code == 0, result.output
    assert result.output.count("ON CLUSTER 'rs'") == len(
        [s for s in rendered() if not s.startswith("INSERT")]
    )
    assert "-- rankscope 0001_initial (cluster rs)" in result.output
    bad = CliRunner().invoke(app, ["migrate", "--cluster", "rs", "--print", "--replica-path", "x"])
    assert bad.exit_code != 0 and "replica_path" in bad.output


def test_statement_terminator_survives_a_trailing_comment() -> None:
    assert terminated("SELECT 1 -- why") == "SELECT 1 -- why\n;"
    assert terminated("SELECT 1") == "SELECT 1;"


#: runs the sharded layout (no Keeper: unreplicated, no ON CLUSTER) on a one-server cluster
_ONE_SERVER = textwrap.dedent(
    """
    import json, sys
    from rankscope.sinks.clickhouse import apply_ttl, connect, migrate
    from rankscope.sinks.cluster_ddl import ClusterSpec
    from rankscope.sinks.named_queries import run_query

    c = connect("chdb://" + sys.argv[1])
    spec = ClusterSpec(name="rs", replicated=False, on_cluster=False)
    applied = migrate(c, "cl", spec)
    again = migrate(c, "cl", spec)
    sync = {"insert_distributed_sync": 1}
    c.command(
        "INSERT INTO cl.gpu_samples (event_id, job_id, node, rank, gpu, ts_ns, sm_util_pct, "
        "power_w, energy_mj) SETTINGS insert_distributed_sync = 1 VALUES "
        "('e1', 'j1', 'n1', 0, 0, 1700000000000000000, 50, 300, 1000), "
        "('e2', 'j1', 'n1', 0, 0, 1700000060000000000, 70, 300, 19000)"
    )
    c.command(
        "INSERT INTO cl.spans (event_id, job_id, rank, phase, status, step, start_ns, end_ns, "
        "ts_ns) SETTINGS insert_distributed_sync = 1 VALUES "
        "('s1', 'j1', 0, 'step', 'ok', 3, 1700000000000000000, 1700000060000000000, "
        "1700000000000000000)"
    )
    energy = run_query(c, "energy_per_step", "cl", {"job_id": "j1"})
    apply_ttl(c, "cl", {"spans": 7}, spec)
    ttl = c.query("SELECT engine_full FROM system.tables WHERE database = 'cl' "
        "AND name = 'spans_local'").result_rows[0][0]
    engines = dict(c.query(
        "SELECT name, engine FROM system.tables WHERE database = 'cl'").result_rows)
    print(json.dumps({
        "applied": len(applied), "again": len(again),
        "energy": dict(zip(energy.column_names, energy.result_rows[0])),
        "minute_rows": c.query("SELECT count() FROM cl.gpu_minute").result_rows[0][0],
        "engines": engines, "ttl": ttl,
        "on_cluster": c.query("SELECT count() FROM system.clusters WHERE cluster = 'rs'"
            ).result_rows[0][0],
    }, default=str))
    """
)

_CONFIG = """<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers><rs><shard><replica><host>localhost</host><port>9000</port></replica></shard></rs>
  </remote_servers>
</clickhouse>
"""


def test_sharded_layout_runs_on_a_one_server_cluster(tmp_path: Path) -> None:
    """chDB reads config.xml from its working directory; a cluster whose one replica is this
    server is queried in-process (is_local), so Distributed tables work without a network."""
    (tmp_path / "config.xml").write_text(_CONFIG)
    done = subprocess.run(
        [sys.executable, "-c", _ONE_SERVER, str(tmp_path / "data")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["on_cluster"] == 1
    assert out["applied"] == len(available_migrations()) and out["again"] == 0
    engines = out["engines"]
    assert engines["spans"] == "Distributed" and engines["spans_local"] == "ReplacingMergeTree"
    assert engines["gpu_minute_local"] == "AggregatingMergeTree"
    assert not any(n.endswith("__0006") or n.endswith("__0006_local") for n in engines)
    # the named query read the Distributed tables: 18 J over 3 steps
    assert float(out["energy"]["job_energy_j"]) == 18.0
    assert int(out["energy"]["steps"]) == 3
    assert out["minute_rows"] == 2  # the view fired on the local table behind the Distributed one
    assert "TTL toDateTime(ts) + toIntervalDay(7)" in out["ttl"]  # retention on the local table


def test_on_cluster_needs_keeper_so_it_is_not_run_here(tmp_path: Path) -> None:
    """Why the test above runs without ON CLUSTER: chDB has no distributed DDL queue."""
    (tmp_path / "config.xml").write_text(_CONFIG)
    script = (
        "from chdb import session\n"
        "try:\n"
        "    session.Session().query(\"CREATE DATABASE x ON CLUSTER 'rs'\")\n"
        "except Exception as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert "Replicated DDL queries are disabled" in out.stdout
