"""The dashboards as code: generated files in sync, every panel's SQL runs and returns rows,
and time filters use the primary key."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.grafana import (
    DASHBOARDS,
    DASHBOARDS_DIR,
    DB,
    _variables,
    build_dashboard,
    panels,
    variable_queries,
)
from rankscope.grafana_expand import expand
from rankscope.grafana_query import PLUGIN_ID, PLUGIN_VERSION, ClickHouseSqlQuery
from rankscope.sinks.clickhouse import connect
from tests.conftest import Services
from tests.demo_data import DemoData, load_demo


@pytest.fixture(scope="module")
def demo(services: Services) -> Iterator[tuple[Client, DemoData]]:
    db = f"gf{uuid.uuid4().hex[:10]}"
    data = load_demo(connect(services.clickhouse_url), db)
    yield connect(services.clickhouse_url, database=db), data


#: the job each dashboard is looked at with (one that has something to show)
JOB_FOR = {
    "rankscope-stragglers": "slow-job",
    "rankscope-fabric": "ib-job",
    "rankscope-node": "ib-job",
}


def _variables_for(client: Client, job: str) -> dict[str, str | list[str]]:
    db = client.database or ""
    nodes = [
        r[0]
        for r in client.query(f"SELECT DISTINCT node FROM spans WHERE job_id = '{job}'").result_rows
    ]
    ranks = [
        str(r[0])
        for r in client.query(f"SELECT DISTINCT rank FROM spans WHERE job_id = '{job}'").result_rows
    ]
    return {"database": db, "cluster": "sim", "job": job, "node": nodes, "rank": ranks}


def _window(data: DemoData) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.fromtimestamp(data.start_ns / 1e9 - 300, tz=dt.UTC)
    end = dt.datetime.fromtimestamp(data.end_ns / 1e9 + 300, tz=dt.UTC)
    return start, end


def test_the_committed_dashboards_are_what_the_code_builds() -> None:
    for spec in DASHBOARDS:
        committed = json.loads((DASHBOARDS_DIR / f"{spec.uid}.json").read_text())
        assert committed == build_dashboard(spec), (
            f"{spec.uid}: run `rankscope grafana build --out rankscope/dashboards`"
        )
    assert {p.name for p in DASHBOARDS_DIR.glob("*.json")} == {f"{d.uid}.json" for d in DASHBOARDS}


def test_the_sdk_is_the_pinned_build_for_a_current_grafana() -> None:
    """An unpinned or ranged requirement resolves to the SDK's Grafana 10.1 build (highest epoch),
    whose dashboards carry schemaVersion 36; the pin names the 11.6 build, schemaVersion 41."""
    from importlib.metadata import version

    assert version("grafana-foundation-sdk").endswith("!11.6.0")
    for spec in DASHBOARDS:
        assert build_dashboard(spec)["schemaVersion"] == 41, spec.uid


def test_every_dashboard_reads_back_through_the_sdk_models_unchanged() -> None:
    """Grafana's dashboard schema as the SDK ships it: each committed file parses into the SDK's
    typed models (panel options through the panel plugin's own model) and encodes back with
    every key and value kept, so no key is unknown to the schema and no value has the wrong
    shape (a dropped key would be missing, a mistyped one changed)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    for path in DASHBOARDS_DIR.glob("*.json"):
        doc = json.loads(path.read_text())
        model = Dashboard.from_json(doc)
        back = json.loads(json.dumps(model, cls=JSONEncoder))
        assert not _lost(doc, back), (path.name, _lost(doc, back))


def _lost(doc: Any, back: Any, where: str = "") -> list[str]:
    """Where ``back`` (the SDK's re-encoding) lacks or changed something of ``doc``; the SDK
    may add its defaults (``custom: {align: auto}``), it must not drop or alter a key."""
    if isinstance(doc, dict):
        if not isinstance(back, dict):
            return [where]
        return [w for k, v in doc.items() for w in _lost(v, back.get(k), f"{where}.{k}")]
    if isinstance(doc, list):
        if not isinstance(back, list) or len(back) != len(doc):
            return [where]
        return [
            w
            for i, (a, b) in enumerate(zip(doc, back, strict=True))
            for w in _lost(a, b, f"{where}[{i}]")
        ]
    return [] if doc == back else [where]


def test_every_panel_and_variable_returns_rows_on_demo_data(demo: tuple[Client, DemoData]) -> None:
    client, data = demo
    start, end = _window(data)
    checked = 0
    for spec in DASHBOARDS:
        variables = _variables_for(client, JOB_FOR.get(spec.uid, data.job_id))
        doc = build_dashboard(spec)
        for title, sql in panels(doc) + variable_queries(doc):
            expanded = expand(sql, start, end, 10, variables)
            assert not re.search(r"\$\{|\$\w|\[\[", expanded), (spec.uid, title, expanded)
            rows = client.query(expanded).result_rows
            assert rows, f"{spec.uid} / {title} returned no rows:\n{expanded}"
            checked += 1
    assert checked >= 20


def test_variables_chain_from_cluster_to_rank(demo: tuple[Client, DemoData]) -> None:
    client, data = demo
    start, end = _window(data)
    queries = _variables()
    db = client.database or ""
    sel: dict[str, str | list[str]] = {"database": db, "cluster": "sim"}
    jobs = client.query(expand(queries["job"], start, end, 10, sel)).result_rows
    assert {r[0] for r in jobs} == {"demo-job", "ib-job", "slow-job"}
    ranks = client.query(
        expand(queries["rank"], start, end, 10, {**sel, "job": "demo-job"})
    ).result_rows
    assert [r[0] for r in ranks] == list(range(16))


def _targets() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name} / {panel['title']}", target)
        for path in sorted(DASHBOARDS_DIR.glob("*.json"))
        for panel in json.loads(path.read_text())["panels"]
        for target in panel["targets"]
    ]


def test_every_target_is_the_plugins_current_query_model() -> None:
    """Each committed target validates (strictly, as JSON) against the model written from the
    plugin's TypeScript types, names the plugin release compose installs, and queries the
    datasource the dashboard's ``datasource`` variable selects."""
    targets = _targets()
    assert len(targets) >= 15
    for where, target in targets:
        q = ClickHouseSqlQuery.model_validate_json(json.dumps(target), strict=True)
        assert q.plugin_version == PLUGIN_VERSION, where
        assert q.query_type is not None and q.format is not None, where
        assert target["datasource"] == {"type": PLUGIN_ID, "uid": "${datasource}"}, where


@pytest.mark.parametrize(
    "change",
    [
        {"pluginVersion": None},  # v3 targets carry none
        {"queryType": "timeSeries"},  # v3's spelling
        {"queryType": "sql"},  # v2's
        {"format": 1},  # a table format on a time series query
        {"format": "time_series"},  # sqlds wants the number
        {"editorType": "builder"},  # a builder query needs builderOptions
        {"rawSql": ""},
        {"rawQuery": "SELECT 1"},  # not a field of the plugin's model
    ],
)
def test_the_query_model_refuses_what_the_plugin_would_not_read(change: dict[str, Any]) -> None:
    from pydantic import ValidationError

    _, target = next(t for t in _targets() if t[1]["queryType"] == "timeseries")
    bad = {k: v for k, v in {**target, **change}.items() if v is not None}
    with pytest.raises(ValidationError):
        ClickHouseSqlQuery.model_validate_json(json.dumps(bad), strict=True)


def test_compose_installs_the_plugin_release_the_targets_name() -> None:
    import yaml

    compose = yaml.safe_load(
        (Path(__file__).parents[1] / "compose" / "docker-compose.yml").read_text()
    )
    preinstall = compose["services"]["grafana"]["environment"]["GF_PLUGINS_PREINSTALL_SYNC"]
    assert f"{PLUGIN_ID}@{PLUGIN_VERSION}" in preinstall.split(",")


def test_every_table_is_qualified_with_the_database_variable() -> None:
    """Nothing relies on the datasource's default database: every ``FROM``/``JOIN`` of a table
    names the ``database`` variable (subqueries and table functions aside)."""
    checked = 0
    for spec in DASHBOARDS:
        doc = build_dashboard(spec)
        for title, sql in panels(doc) + variable_queries(doc):
            ctes = set(re.findall(r"\b(\w+) AS \(", sql))
            for m in re.finditer(r"\b(?:FROM|(?<!ARRAY )JOIN)\s+([^\s(),]+)(?![(\w])", sql):
                if m.group(1) in ctes:
                    continue
                assert m.group(1).startswith(f"{DB}."), (spec.uid, title, m.group(0))
                checked += 1
        names = [v["name"] for v in doc["templating"]["list"]]
        assert names[:2] == ["datasource", "database"], spec.uid
    assert checked >= 25


def test_the_plugin_macros_expand_as_the_plugin_does() -> None:
    start = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=1)
    sql = (
        "SELECT $__timeInterval(ts) t FROM x WHERE $__timeFilter(ts) AND a IN "
        "(${node:singlequote}) AND r IN (${rank}) AND b = '${job}' AND f > $__fromTime "
        "AND c = '${job:percentencode}' AND d = '${node:percentencode}'"
    )
    variables: dict[str, str | list[str]] = {"node": ["n1", "n2"], "rank": ["1", "2"], "job": "j k"}
    got = expand(sql, start, end, 30.7, variables)
    assert got == (
        "SELECT toStartOfInterval(toDateTime(ts), INTERVAL 30 second) t FROM x WHERE "
        "ts >= toDateTime(1796292000) AND ts <= toDateTime(1796295600) AND a IN ('n1','n2') "
        "AND r IN ('1','2') AND b = 'j k' AND f > toDateTime(1796292000) "
        "AND c = 'j%20k' AND d = '%7Bn1%2Cn2%7D'"
    )


def _granules(client: Client, sql: str) -> list[tuple[int, int]]:
    plan = "\n".join(r[0] for r in client.query(f"EXPLAIN indexes = 1 {sql}").result_rows)
    return [(int(a), int(b)) for a, b in re.findall(r"Granules: (\d+)/(\d+)", plan)]


def test_a_one_job_one_hour_panel_reads_a_small_share_of_the_table(services: Services) -> None:
    """4 jobs x 64 ranks x 1 sample / 10 s over 2 days (~3.7M rows): the GPU utilisation panel
    for one job and one hour must skip most granules by partition and primary key."""
    db = f"pk{uuid.uuid4().hex[:10]}"
    admin = connect(services.clickhouse_url)
    from rankscope.sinks.clickhouse import migrate

    migrate(admin, db)
    t0 = (int(dt.datetime.now(dt.UTC).timestamp()) // 3600 - 48) * 3600
    admin.command(
        f"INSERT INTO {db}.gpu_samples (event_id, schema, cluster, job_id, node, rank, local_rank, "
        "gpu, ts_ns, observed_ts_ns, gpu_uuid, sm_util_pct) "
        "SELECT toString(number), 'gpu_sample/1', 'sim', concat('job-', toString(number % 4)), "
        "concat('node', toString(intDiv(number % 256, 8))), intDiv(number % 256, 4), 0, 0, "
        f"({t0} + intDiv(number, 256) * 10) * 1000000000, 0, '', 90 FROM numbers(256 * 17280)"
    )
    client = connect(services.clickhouse_url, database=db)
    spec = next(d for d in DASHBOARDS if d.uid == "rankscope-job")
    sql = next(
        s for t, s in panels(build_dashboard(spec)) if t.startswith("GPU utilisation of the")
    )
    start = dt.datetime.fromtimestamp(t0 + 24 * 3600, tz=dt.UTC)
    variables: dict[str, str | list[str]] = {
        "database": db,
        "cluster": "sim",
        "job": "job-1",
        "node": [f"node{i}" for i in range(32)],
        "rank": [],
    }
    expanded = expand(sql, start, start + dt.timedelta(hours=1), 60, variables)
    assert client.query(expanded).result_rows  # the hour has data
    total = int(client.query("SELECT count() FROM gpu_samples").result_rows[0][0])
    assert total == 256 * 17280
    granules = _granules(client, expanded)
    assert granules, "EXPLAIN shows no index use"
    read, of = granules[-1]  # after partition pruning (MinMax/Partition) and the primary key
    assert of > 0 and read / of < 0.05, granules
    rows_read = client.query(expanded).summary.get("read_rows")
    assert rows_read is not None and int(rows_read) < total * 0.05


def test_the_demo_pictures_come_from_the_named_queries(
    demo: tuple[Client, DemoData], tmp_path: Path
) -> None:
    from rankscope.plots import heatmap_png, timeline_png

    client, data = demo
    db = client.database or ""
    heat = heatmap_png(client, db, data.job_id, tmp_path / "h.png")
    line = timeline_png(client, db, data.job_id, tmp_path / "t.png")
    for png in (heat, line):
        assert png is not None and png.read_bytes()[:4] == b"\x89PNG"
        assert png.stat().st_size > 10_000
    assert heatmap_png(client, db, "no-such-job", tmp_path / "x.png") is None
    assert not (tmp_path / "x.png").exists()


def _links(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    """(panel title, column, link) of every data link of a built dashboard."""
    return [
        (p["title"], o["matcher"]["options"], link)
        for p in doc["panels"]
        for o in p.get("fieldConfig", {}).get("overrides", [])
        for prop in o["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]


def test_drill_down_links_go_fleet_to_job_to_node() -> None:
    """Each data link opens a dashboard that exists, sets a variable it declares from the clicked
    value (percent-encoded: a job id may hold ``&``), and keeps the time range, the datasource
    and the database; the fleet's job ids open the job, the job's slowest ranks their nodes."""
    docs = {spec.uid: build_dashboard(spec) for spec in DASHBOARDS}
    hops = set()
    for uid, doc in docs.items():
        declared_here = {v["name"] for v in doc["templating"]["list"]}
        for title, column, link in _links(doc):
            m = re.fullmatch(r"/d/([\w-]+)/[\w-]+\?(.*)", link["url"])
            assert m, (uid, title, link)
            target, query = m.group(1), m.group(2).split("&")
            assert target in docs, (uid, title, target)
            declared_there = {v["name"] for v in docs[target]["templating"]["list"]}
            assert query[:3] == [
                "${__url_time_range}",
                "${datasource:queryparam}",
                "${database:queryparam}",
            ]
            *carried, clicked = query[3:]
            for c in carried:
                name = re.fullmatch(r"\$\{(\w+):queryparam\}", c)
                assert name and name.group(1) in declared_here & declared_there, (uid, c)
            var = re.fullmatch(r"var-(\w+)=\$\{__value\.raw:percentencode\}", clicked)
            assert var and var.group(1) in declared_there, (uid, title, clicked)
            hops.add((uid, column, target, var.group(1)))
    assert ("rankscope-fleet", "job_id", "rankscope-job", "job") in hops
    assert ("rankscope-job", "node", "rankscope-node", "node") in hops


def test_the_linked_columns_are_in_the_panels_results(demo: tuple[Client, DemoData]) -> None:
    """A link on a column the query does not return would never show: run the linked panels."""
    client, data = demo
    start, end = _window(data)
    for spec in DASHBOARDS:
        doc = build_dashboard(spec)
        sql_of = dict(panels(doc))
        for title, column, _ in _links(doc):
            variables = _variables_for(client, JOB_FOR.get(spec.uid, data.job_id))
            result = client.query(expand(sql_of[title], start, end, 10, variables))
            assert column in result.column_names, (spec.uid, title, result.column_names)
            assert result.result_rows, (spec.uid, title)
