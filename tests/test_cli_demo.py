"""The user-facing commands, run as a user would (subprocesses), against the real services."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import Services

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "160", "HOME": str(Path.home())},
    )


def test_help_lists_the_commands() -> None:
    r = _cli("--help")
    assert r.returncode == 0
    for cmd in ("demo", "query", "services", "worker", "sink", "migrate"):
        assert cmd in r.stdout


def test_demo_runs_the_whole_path_and_leaves_queryable_rows(
    services: Services, tmp_path: Path
) -> None:
    tag = f"t{uuid.uuid4().hex[:10]}"
    r = _cli(
        "demo",
        "--ranks",
        "16",
        "--duration",
        "40",
        "--home",
        str(tmp_path / "home"),
        "--bootstrap",
        services.bootstrap,
        "--clickhouse-url",
        services.clickhouse_url,
        "--topic-prefix",
        tag,
        "--database",
        tag,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "events of job" in out and "dead letters (3 malformed records injected)" in out
    for code in ("not_json", "unknown_schema", "invalid_event"):
        assert code in out
    assert "Look further with SQL" in out
    # the incident leads to a recovery decision, run once by the dry-run actuator
    assert "automated recovery (policy mode: dry run)" in out
    recovery = out.split("automated recovery (policy mode: dry run)", 1)[1].split(
        "incident report"
    )[0]
    assert "exclude_node_and_restart" in recovery
    assert "decided" in recovery and "succeeded" in recovery and "would run" in recovery
    # the planted secrets were found, counted, and are nowhere in ClickHouse
    assert "redaction (counts from redaction_audit" in out
    for entity in ("API_TOKEN", "PASSWORD", "HOME_DIR_USER", "CLOUD_ACCESS_KEY"):
        assert entity in out
    assert re.search(r"planted secrets readable in any of \d+ tables: 0", out), out[-2000:]
    # the injected fault (default: a GPU falls off the bus) ends in one incident naming it
    assert "incident report" in out
    assert "primary cause: gpu_xid" in out and "XID 79" in out
    truth = next(ln for ln in out.splitlines() if ln.startswith("injected: gpu_fell_off_bus"))
    assert "(1 incident(s)" in out, truth
    reports = sorted((tmp_path / "home" / "reports").glob("*.md"))
    summary = [p for p in reports if not p.name.endswith(".incidents.md")]
    assert len(summary) == 1 and "## Windows per rank" in summary[0].read_text()
    # the reviewer's page, rebuilt from ClickHouse: the cause and the mechanism behind the cascade
    # the pictures, from the same named queries as the Grafana panels
    for suffix in (".heatmap.png", ".timeline.png"):
        (png,) = (tmp_path / "home" / "reports").glob(f"*{suffix}")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    pages = list((tmp_path / "home" / "reports").glob("*.incidents.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    assert "gpu_xid on node" in page and "Why the other ranks failed" in page and "<svg" in page

    q = _cli(
        "query",
        "--clickhouse-url",
        services.clickhouse_url,
        "--format",
        "json",
        f"SELECT rank, sum(step_count) AS steps FROM {tag}.rank_windows FINAL "
        "GROUP BY rank ORDER BY rank",
    )
    assert q.returncode == 0, q.stderr
    rows = json.loads(q.stdout)
    assert [row["rank"] for row in rows] == list(range(16))
    # synchronous training: every rank completes the same steps, except the one whose GPU died
    steps = sorted(row["steps"] for row in rows)
    assert steps[1] == steps[-1] >= 5 and steps[0] < steps[-1]
    tables = ["spans", "gpu_samples", "gpu_events", "heartbeats", "scheduler_events"]
    tables += ["fabric_counters", "fabric_events", "comm_events", "node_inventory", "agent_events"]
    total = _cli(
        "query",
        "--clickhouse-url",
        services.clickhouse_url,
        "--format",
        "csv",
        "SELECT " + " + ".join(f"(SELECT count() FROM {tag}.{t} FINAL)" for t in tables),
    )
    produced = next(ln for ln in out.splitlines() if "total" in ln)
    cells = [c.strip() for c in produced.replace(",", "").split("│") if c.strip()]
    assert cells[1] == cells[2] == total.stdout.splitlines()[-1]  # produced == stored == SQL
