"""Issue 18: the per-rank panels stay readable at 4,096 ranks.

A job of 4,096 ranks on 512 nodes (8 GPUs each) is written straight into the engine, two ranks
made slow (and their GPUs idle); every panel of the job, node and stragglers dashboards runs on
it as the plugin would run it, with every node and rank selected. A time series may draw at most
``TOP_K`` lines and must draw the slow ranks; the heatmap at most 64 rows, the slow ranks' runs
showing their step time; tables stay short.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.grafana import DASHBOARDS, TOP_K, build_dashboard
from rankscope.grafana_expand import expand
from rankscope.sinks.clickhouse import connect, migrate
from tests.conftest import Services

RANKS, GPUS, STEPS = 4096, 8, 12
SLOW = (17, 4000)
JOB = "big-job"
NODE = "concat('node', leftPad(toString(intDiv(number % 4096, 8)), 4, '0'))"
RANK = "toInt32(number % 4096)"
STEP = "intDiv(number, 4096)"
IS_SLOW = f"{RANK} IN {SLOW}"


@pytest.fixture(scope="module")
def big(services: Services) -> tuple[Client, dt.datetime]:
    db = f"gs{uuid.uuid4().hex[:10]}"
    admin = connect(services.clickhouse_url)
    migrate(admin, db)
    t0 = (int(dt.datetime.now(dt.UTC).timestamp()) // 10 - 180) * 10
    n = RANKS * STEPS
    step_ns = f"({t0} + {STEP} * 5) * 1000000000"
    admin.command(
        f"INSERT INTO {db}.spans (event_id, schema, cluster, job_id, node, rank, local_rank, gpu, "
        "ts_ns, observed_ts_ns, name, phase, trace_id, span_id, parent_span_id, start_ns, end_ns, "
        "step, status) "
        "SELECT concat(toString(number), phase), 'span/1', 'sim', "
        f"'{JOB}', {NODE}, {RANK}, {RANK} % 8, {RANK} % 8, {step_ns}, {step_ns}, phase, phase, "
        f"'', '', '', {step_ns}, {step_ns} + toInt64((1 + if({IS_SLOW}, 0.5, 0)) * 1e9), "
        f"{STEP}, 'ok' FROM numbers({n}) ARRAY JOIN ['step', 'forward', 'backward'] AS phase"
    )
    admin.command(
        f"INSERT INTO {db}.gpu_samples (event_id, schema, cluster, job_id, node, rank, local_rank, "
        "gpu, ts_ns, observed_ts_ns, gpu_uuid, sm_util_pct, power_w) "
        f"SELECT toString(number), 'gpu_sample/1', 'sim', '{JOB}', {NODE}, {RANK}, {RANK} % 8, "
        f"{RANK} % 8, {step_ns}, {step_ns}, '', if({IS_SLOW}, 20, 90), 400 FROM numbers({n})"
    )
    admin.command(
        f"INSERT INTO {db}.rank_windows (window_id, cluster, job_id, rank, node, window_start_ns, "
        "window_end_ns, step_count, step_time_mean_s, step_time_max_s, gpu_util_mean_pct, "
        "gpu_sample_count, event_count, emitted_ts_ns) "
        f"SELECT toString(number), 'sim', '{JOB}', {RANK}, {NODE}, {step_ns}, "
        f"{step_ns} + 5000000000, 1, if({IS_SLOW}, 1.5, 1.0), if({IS_SLOW}, 1.5, 1.0), "
        f"if({IS_SLOW}, 20, 90), 1, 3, 0 FROM numbers({n})"
    )
    return connect(services.clickhouse_url, database=db), dt.datetime.fromtimestamp(t0, tz=dt.UTC)


def _variables(db: str) -> dict[str, str | list[str]]:
    nodes = [f"node{i:04d}" for i in range(RANKS // GPUS)]
    return {
        "database": db,
        "cluster": "sim",
        "job": JOB,
        "node": nodes,
        "rank": [str(r) for r in range(RANKS)],
    }


def _panels(uid: str) -> list[dict[str, Any]]:
    spec = next(d for d in DASHBOARDS if d.uid == uid)
    panels: list[dict[str, Any]] = build_dashboard(spec)["panels"]
    return panels


@pytest.mark.parametrize("uid", ["rankscope-job", "rankscope-node", "rankscope-stragglers"])
def test_every_panel_stays_readable_at_4096_ranks(
    big: tuple[Client, dt.datetime], uid: str
) -> None:
    client, t0 = big
    start, end = t0 - dt.timedelta(minutes=5), t0 + dt.timedelta(minutes=10)
    checked = 0
    for panel in _panels(uid):
        (target,) = panel["targets"]
        sql = expand(target["rawSql"], start, end, 10, _variables(client.database or ""))
        result = client.query(sql)
        rows = [dict(zip(result.column_names, r, strict=True)) for r in result.result_rows]
        title, kind = panel["title"], panel["type"]
        if kind == "table":
            assert len(rows) <= 64, (title, len(rows))
        elif kind == "heatmap":
            runs = {r["ranks"] for r in rows}
            assert len(runs) == 64, (title, len(runs))  # 4,096 ranks in 64 runs of 64
            worst = {r["ranks"]: r["value"] for r in rows}
            assert worst["ranks 0000-0063"] == 1.5 and worst["ranks 3968-4031"] == 1.5
            assert worst["ranks 0064-0127"] == 1.0
        else:  # a time series: one line per value of its label column
            labels = [c for c in result.column_names if c not in ("time",)][:1]
            series = {r[labels[0]] for r in rows} if rows else set()
            numeric = all(isinstance(v, int | float) for v in series)
            if not numeric:
                assert len(series) <= TOP_K, (title, len(series))
            if "rank" in result.column_names:
                assert {str(r) for r in SLOW} <= series, (title, sorted(series))
        if "rank" in title.lower() or "GPU" in title or kind == "heatmap":
            assert rows, (uid, title)  # the per-rank panels; incidents and errors have none
        checked += 1
    assert checked >= 2


def test_the_slowest_ranks_table_finds_the_slow_ranks(big: tuple[Client, dt.datetime]) -> None:
    client, t0 = big
    (panel,) = [p for p in _panels("rankscope-job") if p["title"] == f"Slowest {TOP_K} ranks"]
    sql = expand(
        panel["targets"][0]["rawSql"],
        t0 - dt.timedelta(minutes=5),
        t0 + dt.timedelta(minutes=10),
        10,
        _variables(client.database or ""),
    )
    rows = client.query(sql).named_results()
    got = [(r["rank"], r["node"], r["vs_median"]) for r in rows]
    assert got[:2] == [(17, "node0002", 1.5), (4000, "node0500", 1.5)], json.dumps(got[:3])
    assert len(got) == TOP_K
