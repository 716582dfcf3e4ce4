"""``rankscope replay`` (issue 13): the derived tables rebuilt from the raw topics alone.

The live pipeline (one worker) processes a suite of faulted jobs; then the command replays the
same raw topics with three workers and a validator, started after everything was published,
into an empty database. Detections and incidents must be the live ones, ids included, and the
event tables must hold the same rows.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from rankscope.evaluate import publish_suite
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.sinks.clickhouse import connect
from tests.test_findings_determinism import CASES, in_process, stored
from tests.test_worker_state import case_windows, stored_windows

EVENT_TABLES = ("spans", "gpu_samples", "gpu_events", "heartbeats", "scheduler_events")


def _replay(cfg: PipelineConfig, database: str, *extra: str) -> subprocess.CompletedProcess[str]:
    endpoints = ["--bootstrap", cfg.bootstrap, "--clickhouse-url", cfg.clickhouse_url]
    names = ["--topic-prefix", cfg.topic_prefix, "--database", database, "--home", str(cfg.home)]
    return subprocess.run(
        [sys.executable, "-m", "rankscope", "replay", *endpoints, *names, *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _event_rows(cfg: PipelineConfig) -> dict[str, int]:
    client = connect(cfg.clickhouse_url)
    return {
        t: int(client.query(f"SELECT count() FROM {cfg.database}.{t} FINAL").result_rows[0][0])
        for t in EVENT_TABLES
    }


def test_replay_rebuilds_the_live_tables_with_three_workers_and_a_validator(
    pipeline_config: PipelineConfig,
) -> None:
    live = pipeline_config
    publish_suite(live.bootstrap, live.topic_prefix, CASES, speed=0)
    with Pipeline(live) as pipeline:
        pipeline.wait_drained(timeout_s=300)
    replayed = replace(live, database=f"{live.database}_replay")

    # the live pipeline's workers validated; the replay's validator does (the split topology)
    r = _replay(live, replayed.database, "--workers", "3", "--validators", "1")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "replayed" in r.stdout and "incidents" in r.stdout

    assert stored(replayed) == stored(live) == in_process(CASES)
    # every window with the log's events, never written twice with different contents
    for case in CASES:
        windows, conflicting = stored_windows(replayed, case.config.job_id)
        assert windows == case_windows(case) == stored_windows(live, case.config.job_id)[0]
        assert conflicting == 0, case.name
    rows = _event_rows(replayed)
    assert rows == _event_rows(live) and rows["spans"] > 0

    again = _replay(live, replayed.database)
    assert again.returncode == 1
    assert "already holds rows" in again.stderr and "--drop" in again.stderr


def test_progress_counts_from_the_low_watermark() -> None:
    """A partition emptied by deletion or retention has no commit and nothing to read: the
    replay must not wait for it (it hung when OTLP topics shared by every deployment had been
    emptied by another user)."""
    from rankscope.replay import records_read

    marks = {("raw", 0): (0, 10), ("otlp_spans", 0): (7, 7), ("otlp_logs", 0): (3, 5)}
    # nothing committed yet: nothing read, and the emptied partition counts as nothing to read
    assert records_read(marks, {}) == 0
    assert records_read(marks, {("raw", 0): -1001}) == 0
    # all of raw and of otlp_logs read; the emptied otlp_spans was never consumed
    total = sum(high - low for low, high in marks.values())
    assert records_read(marks, {("raw", 0): 10, ("otlp_logs", 0): 5}) == total == 12
    # a commit below the low watermark (records expired after they were read) counts nothing twice
    assert records_read(marks, {("raw", 0): 4, ("otlp_logs", 0): 1}) == 4
