"""Migration 0017's per-minute aggregates (issue 19): the run queries read them and stay exact.

The dataset is test_run_queries.py's three-attempt run, whose attempt boundaries and checkpoints
fall inside minutes (both the aggregate and the raw-minute path are taken). Delivering every span
and GPU sample a second time (the sink is at-least-once; the raw tables dedupe only under FINAL,
the aggregates see both copies) must not move a digit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.named_queries import run_query
from rankscope.sinks.rows import INCIDENT_TABLE, TableSpec, event_spec
from tests.conftest import Services
from tests.test_run_queries import S, T, _attempt, _events, _incident, _sample, _sched

QUERIES = ("run_attempts", "run_cost", "run_losses", "run_goodput")


def _insert(client: Client, db: str, tables: tuple[str, ...] | None = None) -> None:
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for e in _events():
        spec = event_spec(e)  # type: ignore[arg-type]
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(e))
    by_table["incidents"] = (INCIDENT_TABLE, [INCIDENT_TABLE.to_row(_incident())])
    for name, (spec, rows) in by_table.items():
        if tables is None or name in tables:
            client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)


@pytest.fixture(scope="module")
def agg(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"runagg{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    _insert(client, db)
    yield client, db
    client.command(f"DROP DATABASE IF EXISTS {db}")


def _results(client: Client, db: str) -> dict[str, list[tuple[Any, ...]]]:
    priced = {"run_cost", "run_losses"}
    return {
        name: run_query(
            client, name, db, {"price_per_gpu_hour": "2.4"} if name in priced else {}
        ).result_rows
        for name in QUERIES
    }


def test_aggregates_are_small_and_filled(agg: tuple[Client, str]) -> None:
    client, db = agg
    spans = client.command(f"SELECT count() FROM {db}.spans WHERE phase IN ('step', 'checkpoint')")
    minutes = client.command(f"SELECT count() FROM (SELECT 1 FROM {db}.run_span_minute FINAL)")
    assert isinstance(spans, int) and isinstance(minutes, int)
    assert 0 < minutes < spans / 5
    ranks = client.command(
        f"SELECT length(groupUniqArrayArray(step_ranks)) FROM {db}.run_span_minute"
        " WHERE job_id = '1001'"
    )
    assert ranks == 2


def test_redelivered_spans_and_samples_change_nothing(agg: tuple[Client, str]) -> None:
    client, db = agg
    before = _results(client, db)
    cost = dict(zip(["cluster", "run_id"], before["run_cost"][0][:2], strict=True))
    assert cost == {"cluster": "c1", "run_id": "run-a"}
    _insert(client, db, tables=("spans", "gpu_samples"))
    rows = client.command(f"SELECT count() FROM {db}.run_energy_minute")
    assert isinstance(rows, int) and rows > 0
    assert _results(client, db) == before


# The training code's run id. Job 5001 fails and job 5002 completes; the Slurm collector knows no
# link between them (run id = job id, its fallback) but the training code set rankscope.run_id
# run-t with attempts 1 and 2: one run of two attempts. Job 6001's scheduler events carry
# run-s (an operator's rule) while its spans say run-x: the rule wins.
def _tagged(job: str, run: str, attempt: int, first: int, last: int, start_s: int) -> list[Any]:
    out = []
    for e in _attempt(job, 1, first, last, start_s, {}):
        payload = e.payload.model_copy(  # type: ignore[attr-defined]
            update={"attributes": {"rankscope.run_id": run, "rankscope.attempt": str(attempt)}}
        )
        out.append(e.model_copy(update={"payload": payload}))
    return out


def _training_code_events() -> list[Any]:
    ev: list[Any] = [
        _sched("5001", "job_started", 0, "5001", 1),
        _sched("5001", "job_failed", 200, "5001", 1),
        _sched("5002", "job_started", 300, "5002", 1),
        _sched("5002", "job_completed", 500, "5002", 1),
        _sched("6001", "job_started", 0, "run-s", 1),
        _sched("6001", "job_completed", 100, "run-s", 1),
    ]
    ev += _tagged("5001", "run-t", 1, 1, 15, 0)  # steps end at 150 s
    ev += _tagged("5002", "run-t", 2, 11, 30, 300)  # steps 11-30, 300-500 s
    ev += _tagged("6001", "run-x", 1, 1, 10, 0)
    return ev


@pytest.fixture(scope="module")
def tagged(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"runtag{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for e in _training_code_events():
        spec = event_spec(e)
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(e))
    for spec, rows in by_table.values():
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    yield client, db
    client.command(f"DROP DATABASE IF EXISTS {db}")


def test_training_code_run_id_links_attempts(tagged: tuple[Client, str]) -> None:
    client, db = tagged
    attempts = client.query(
        f"SELECT run_id, job_id, attempt, outcome, intDiv(start_ns - {T}, {S}),"
        f" intDiv(end_ns - {T}, {S}) FROM {db}.job_attempts ORDER BY run_id, attempt"
    ).result_rows
    assert attempts == [
        ("run-s", "6001", 1, "job_completed", 0, 100),
        ("run-t", "5001", 1, "job_failed", 0, 200),
        ("run-t", "5002", 2, "job_completed", 300, 500),
    ]
    cost = run_query(client, "run_cost", db, {"price_per_gpu_hour": "3.6"}).named_results()
    by_run = {r["run_id"]: r for r in cost}
    assert sorted(by_run) == ["run-s", "run-t"]
    t = by_run["run-t"]
    # 1 GPU x (200 + 200) s; attempt 1 saved nothing: lost 200 s, steps 1-15 recomputed
    assert (t["attempts"], t["failed_attempts"], t["completed_job_id"]) == (2, 1, "5002")
    assert (t["gpu_hours"], t["lost_gpu_hours"], t["recomputed_steps"]) == (0.1111, 0.0556, 15)
    assert (t["cost"], t["cost_lost"]) == (0.4, 0.2)


def test_the_run_attempts_view_is_the_named_query(agg: tuple[Client, str]) -> None:
    client, db = agg
    view = client.query(f"SELECT * FROM {db}.run_attempts(run_id = 'run-a', hours = 0)").result_rows
    named = run_query(client, "run_attempts", db, {"run_id": "run-a"}).result_rows
    assert len(view) == 3 and view == named


# Dense GPU samples (every 10 s) so the attempt's start, last checkpoint and end fall inside
# minutes that also hold samples outside them: the raw-minute path of the energy, exactly.
# Job 7001 (run-e) starts at T+0, a checkpoint ends at T+50, it fails at T+95; the counter reads
# (t + 100) x 1e6 mJ at T+t for t = -20, -10, ..., 120. Energy: e(90) - e(0) = 90 000 J; lost:
# e(90) - e(50) = 40 000 J.
def _dense_events() -> list[Any]:
    ev: list[Any] = [
        _sched("7001", "job_started", 0, "run-e", 1),
        _sched("7001", "job_failed", 95, "run-e", 1),
    ]
    ev += _attempt("7001", 1, 1, 4, 0, {4: (45, 50)})
    ev += [_sample("7001", 0, t, (t + 100) * 1_000_000, 400) for t in range(-20, 121, 10)]
    return ev


@pytest.fixture(scope="module")
def dense(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"rundense{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for e in _dense_events():
        spec = event_spec(e)
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(e))
    for spec, rows in by_table.values():
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    yield client, db
    client.command(f"DROP DATABASE IF EXISTS {db}")


def test_energy_of_minutes_cut_by_start_checkpoint_and_end(dense: tuple[Client, str]) -> None:
    client, db = dense
    (a,) = run_query(client, "run_attempts", db, {"run_id": "run-e"}).named_results()
    assert (a["energy_j"], a["lost_energy_j"]) == (90_000, 40_000)
    assert (a["saved_step"], a["recomputed_steps"], round(a["lost_gpu_hours"] * 3600)) == (4, 0, 45)
