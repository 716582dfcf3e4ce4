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
from tests.test_run_queries import _events, _incident

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
