"""Reference baselines end to end (issue 19) on a real broker and a real ClickHouse engine: the
reference job is stored, ``rankscope baseline record`` publishes its profile to the baselines
topic, the worker reads it and the sink stores it; a job 10% slower in the collective with one
NCCL setting changed gets one ``throughput_gap`` row naming both, the job within the margin none.
Paced (as live agents deliver) and in bulk (``--speed 0``): the same rows."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.simulation.baseline_gap import baseline_gap_jobs, publish_jobs
from rankscope.sinks.clickhouse import connect
from tests.factories import NOW_NS

S = 10**9


def _cli(cfg: PipelineConfig, *args: str) -> str:
    conn = [
        "--bootstrap",
        cfg.bootstrap,
        "--topic-prefix",
        cfg.topic_prefix,
        "--home",
        str(cfg.home),
    ]
    result = CliRunner().invoke(app, ["baseline", *args, *conn])
    assert result.exit_code == 0, result.output
    return result.output


def _gap_rows(cfg: PipelineConfig) -> list[dict[str, object]]:
    client = connect(cfg.clickhouse_url)
    return list(
        client.query(
            f"SELECT job_id, detection_id, score, summary, details FROM {cfg.database}.detections "
            "FINAL WHERE detection_type = 'throughput_gap' ORDER BY job_id"
        ).named_results()
    )


@pytest.mark.parametrize("speed", [0.0, 8.0], ids=["bulk", "paced"])
def test_gap_finding_through_kafka_worker_and_sink(
    pipeline_config: PipelineConfig, speed: float
) -> None:
    cfg = pipeline_config
    start = (NOW_NS // S) * S - 600 * S
    jobs = {j.role: j for j in baseline_gap_jobs(start, ranks=16, duration_s=35.0)}
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(120)
        publish_jobs(cfg.bootstrap, cfg.topic_prefix, [jobs["reference"]], speed)
        pipeline.wait_drained(240)
        out = _cli(
            cfg,
            "record",
            "--job",
            "gap-reference",
            "--name",
            "llama-ref",
            "--clickhouse-url",
            cfg.clickhouse_url,
            "--database",
            cfg.database,
            "--format",
            "json",
        )
        (recorded,) = json.loads(out)
        assert recorded["name"] == "llama-ref" and recorded["job_id"] == "gap-reference"
        publish_jobs(cfg.bootstrap, cfg.topic_prefix, [jobs["slow"], jobs["within_margin"]], speed)
        pipeline.wait_drained(240)
        deadline = time.monotonic() + 60
        while not _gap_rows(cfg):  # drained means published; the sink's write is polled
            assert time.monotonic() < deadline, "no throughput_gap row"
            time.sleep(0.2)
        pipeline.wait_drained(120)

    rows = _gap_rows(cfg)
    assert [r["job_id"] for r in rows] == ["gap-slow"], rows
    (row,) = rows
    details = row["details"]
    assert isinstance(details, dict)
    assert details["phases"] == "collective"
    assert details["settings"] == "NCCL_ALGO"
    assert details["diff.NCCL_ALGO"] == "Ring -> Tree"
    assert 8.0 <= float(details["gap_pct"]) <= 12.0
    assert details["baseline"] == "llama-ref"

    client = connect(cfg.clickhouse_url)
    stored = client.query(
        f"SELECT name, job_id, nccl_env FROM {cfg.database}.baselines FINAL"
    ).result_rows
    assert [(n, j) for n, j, _ in stored] == [("llama-ref", "gap-reference")]
    assert stored[0][2]["NCCL_ALGO"] == "Ring"

    (listed,) = json.loads(_cli(cfg, "list", "--format", "json"))
    assert listed["name"] == "llama-ref"
    shown = json.loads(_cli(cfg, "show", "llama-ref", "--format", "json"))
    assert shown["profile"]["config"]["nccl_env"]["NCCL_ALGO"] == "Ring"
    assert set(shown["profile"]["phases"]) == {
        "data",
        "forward",
        "backward",
        "optimizer",
        "collective",
    }

    # bad input: one line and exit code 2, no traceback
    conn = ["--bootstrap", cfg.bootstrap, "--topic-prefix", cfg.topic_prefix]
    ch = ["--clickhouse-url", cfg.clickhouse_url, "--database", cfg.database]
    runner = CliRunner()
    missing = runner.invoke(app, ["baseline", "record", "--job", "nope", "--name", "x", *conn, *ch])
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines() == [
        "rankscope: error: job 'nope' has no complete steps in "
        f"{cfg.database} (phase spans with a collective)"
    ]
    unknown = runner.invoke(app, ["baseline", "show", "nope", *conn])
    assert unknown.exit_code == 2 and "no baseline named 'nope'" in unknown.output
