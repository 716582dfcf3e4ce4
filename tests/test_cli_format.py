"""``--format table|json|csv`` on every listing command (issue 18 point 8), on the demo's job
loaded into the real engine (``tests.demo_data``): json and csv carry exactly the rows the
database holds, and a format typer does not know is a usage error."""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.sinks.clickhouse import connect
from rankscope.sinks.named_queries import load_queries
from tests.conftest import Services
from tests.demo_data import DemoData, load_demo


@pytest.fixture(scope="module")
def demo(services: Services) -> Iterator[tuple[Client, str, DemoData]]:
    db = f"fmt{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    data = load_demo(client, db)
    yield client, db, data


def _run(services: Services, db: str, *args: str) -> str:
    result = CliRunner().invoke(
        app, [*args, "--clickhouse-url", services.clickhouse_url, "--database", db]
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_query_json_and_csv_are_the_rows_of_the_database(
    services: Services, demo: tuple[Client, str, DemoData]
) -> None:
    client, db, _ = demo
    sql = f"SELECT job_id, count() AS n FROM {db}.incidents GROUP BY job_id ORDER BY job_id"
    expected = [(str(j), int(n)) for j, n in client.query(sql).result_rows]
    assert expected  # the demo data has incidents

    as_json: list[dict[str, Any]] = json.loads(_run(services, db, "query", sql, "--format", "json"))
    assert [(r["job_id"], int(r["n"])) for r in as_json] == expected
    as_csv = _csv(_run(services, db, "query", sql, "--format", "csv"))
    assert [(r["job_id"], int(r["n"])) for r in as_csv] == expected
    table = _run(services, db, "query", sql)
    assert all(job in table for job, _ in expected)


def test_incidents_json_and_csv(services: Services, demo: tuple[Client, str, DemoData]) -> None:
    client, db, data = demo
    count = client.query(f"SELECT count() FROM {db}.incidents FINAL").result_rows[0][0]
    rows = json.loads(_run(services, db, "incidents", "--limit", "100", "--format", "json"))
    assert len(rows) == min(count, 100) > 0
    assert data.job_id in {r["job_id"] for r in rows}
    assert all("evidence_json" in r and "ts" in str(r) for r in rows)
    as_csv = _csv(_run(services, db, "incidents", "--limit", "100", "--format", "csv"))
    assert [r["job_id"] for r in as_csv] == [r["job_id"] for r in rows]


def test_recovery_history_json_and_csv(
    services: Services, demo: tuple[Client, str, DemoData]
) -> None:
    client, db, _ = demo
    n = client.query(f"SELECT count() FROM {db}.recovery_actions FINAL").result_rows[0][0]
    rows = json.loads(_run(services, db, "recovery", "history", "--format", "json"))
    assert rows and len(rows) <= n
    assert {"job_id", "action", "stage", "reason"} <= set(rows[0])
    as_csv = _csv(_run(services, db, "recovery", "history", "--format", "csv"))
    assert [(r["action"], r["stage"]) for r in as_csv] == [(r["action"], r["stage"]) for r in rows]


def test_redaction_audit_json_and_csv(
    services: Services, demo: tuple[Client, str, DemoData]
) -> None:
    client, db, _ = demo
    total = client.query(f"SELECT sum(count) FROM {db}.redaction_audit FINAL").result_rows[0][0]
    rows = json.loads(_run(services, db, "redaction", "audit", "--hours", "24", "--format", "json"))
    assert sum(int(r["findings"]) for r in rows) == total > 0
    as_csv = _csv(_run(services, db, "redaction", "audit", "--hours", "24", "--format", "csv"))
    assert sum(int(r["findings"]) for r in as_csv) == total


def test_queries_lists_the_library_in_every_format() -> None:
    names = list(load_queries())
    runner = CliRunner()
    as_json = json.loads(runner.invoke(app, ["queries", "--format", "json"]).stdout)
    assert [r["name"] for r in as_json] == names
    as_csv = _csv(runner.invoke(app, ["queries", "--format", "csv"]).stdout)
    assert [r["name"] for r in as_csv] == names


@pytest.mark.parametrize(
    "command",
    [["queries"], ["query", "SELECT 1"], ["incidents"], ["recovery", "history"],
     ["recovery", "status"], ["redaction", "audit"]],
    ids=" ".join,
)  # fmt: skip
def test_an_unknown_format_is_a_usage_error(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--format", "yaml"])
    assert result.exit_code == 2
    assert "Invalid value for '--format'" in " ".join(result.output.replace("│", " ").split())


def test_recovery_status_json_and_csv(services: Services, tmp_path: Path) -> None:
    """On a real broker: a fresh namespace has no action yet, and says it is active."""
    from rankscope.kafka_admin import create_pipeline_topics
    from rankscope.schemas.topics import Topics

    tag = f"t{uuid.uuid4().hex[:10]}"
    create_pipeline_topics(services.bootstrap, Topics(tag), 1)
    args = ["recovery", "status", "--bootstrap", services.bootstrap, "--topic-prefix", tag]
    args += ["--home", str(tmp_path)]
    as_json = CliRunner().invoke(app, [*args, "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == [{"state": "active", "latest_stage": "", "actions": 0}]
    as_csv = CliRunner().invoke(app, [*args, "--format", "csv"])
    assert as_csv.stdout.splitlines() == ["state,latest_stage,actions", "active,,0"]
