"""The user-facing commands, run as a user would (subprocesses), against the real services."""

from __future__ import annotations

import json
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
        "8",
        "--duration",
        "20",
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
    reports = list((tmp_path / "home" / "reports").glob("*.md"))
    assert len(reports) == 1 and "## Windows per rank" in reports[0].read_text()

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
    assert [row["rank"] for row in rows] == list(range(8))
    steps = {row["steps"] for row in rows}
    assert len(steps) == 1 and steps.pop() >= 15  # every rank ran the same synchronous steps
    total = _cli(
        "query",
        "--clickhouse-url",
        services.clickhouse_url,
        "--format",
        "csv",
        f"SELECT (SELECT count() FROM {tag}.spans FINAL) + (SELECT count() FROM "
        f"{tag}.gpu_samples FINAL) + (SELECT count() FROM {tag}.heartbeats FINAL) + "
        f"(SELECT count() FROM {tag}.scheduler_events FINAL)",
    )
    produced = next(ln for ln in out.splitlines() if "total" in ln)
    assert total.stdout.splitlines()[-1] in produced.replace(",", "")
