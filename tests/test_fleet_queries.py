"""The fleet drift queries (sinks/sql/fleet_drift.sql, drift_slowdown.sql) on a small known
dataset in a real ClickHouse engine, with exact expected results.

Relative to T (the start of the hour before last), windows of 100 s with 10 steps each:
- gpu-a07 drifted (driver) since T+100, still drifted; job J1 has ranks 0-1 on it (1.1 s a step
  from T+100, 1.0 s before) and ranks 2-3 on gpu-a01 (1.06 s from T+100): the job 1.08 s;
- gpu-a21 drifted (NCCL) from T+100 and back with its pool at T+400; job J2 has ranks 0-1 on it
  and ranks 2-3 on gpu-a02, all 1.05 s a step until T+400 (a data-parallel job waits for its
  slowest rank), 1.0 s after;
- J3 runs on undrifted nodes only and J4 on gpu-a07 only before its drift (1.0 s a step): neither
  is listed, both are clean jobs of the hour (the baseline is read from the hourly rollup).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.schemas.derived import Detection, RankWindow
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.named_queries import run_query
from rankscope.sinks.rows import DETECTION_TABLE, WINDOW_TABLE
from rankscope.streams.analysis.fleet import Difference, DriftFinding
from tests.conftest import Services

S = 1_000_000_000
T = (time.time_ns() // S // 3600 - 2) * 3600 * S  # whole hours: the baseline is hourly
POOL = "gpu_model=NVIDIA H100 80GB HBM3|gpu_count=8"


def _finding(node: str, attribute: str, value: str, majority: str) -> DriftFinding:
    diff = Difference(attribute, value, majority, T + 100 * S)
    return DriftFinding("c1", node, POOL, 64, f"fp-{node}", (diff,))


def _detections() -> list[Detection]:
    a07 = _finding("gpu-a07", "driver_version", "550.54.15", "535.161.08")
    a21 = _finding("gpu-a21", "nccl_version", "2.19.3", "2.21.5")
    straggler = Detection(
        detection_id="d-straggler", detection_type="straggler", cluster="c1", job_id="J1",
        node="gpu-a07", rank=0, score=1.1, onset_ts=T + 150 * S, detected_ts=T + 160 * S,
        emitted_ts=T, summary="rank 0 straggles",
    )  # fmt: skip
    return [
        a07.detection(T + 1 * S),
        a21.detection(T + 1 * S),
        a21.detection(T + 401 * S, cleared_ns=T + 400 * S),  # the same row, cleared
        straggler,
    ]


def _windows() -> list[RankWindow]:
    def step_s(job: str, node: str, start: int) -> float:
        if job == "J1" and start >= 100:
            return 1.1 if node == "gpu-a07" else 1.06
        if job == "J2" and 100 <= start < 400:
            return 1.05
        return 1.0

    layout = {
        "J1": ["gpu-a07", "gpu-a07", "gpu-a01", "gpu-a01"],
        "J2": ["gpu-a21", "gpu-a21", "gpu-a02", "gpu-a02"],
        "J3": ["gpu-a03", "gpu-a03", "gpu-a04", "gpu-a04"],
    }
    rows = []
    for job, nodes in layout.items():
        for rank, node in enumerate(nodes):
            for start in range(0, 600, 100):
                rows.append(_window(job, rank, node, start, step_s(job, node, start)))
    rows += [_window("J4", r, "gpu-a07", 0, 1.0) for r in range(2)]
    return rows


def _window(job: str, rank: int, node: str, start: int, step_s: float) -> RankWindow:
    return RankWindow(
        window_id=RankWindow.make_id(job, rank, T + start * S), cluster="c1", job_id=job,
        rank=rank, node=node, window_start_ns=T + start * S, window_end_ns=T + (start + 100) * S,
        step_count=10, step_time_mean_s=step_s, step_time_max_s=step_s, event_count=10,
        emitted_ts=T,
    )  # fmt: skip


@pytest.fixture(scope="module")
def drift_db(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"fd{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    for spec, records in ((DETECTION_TABLE, _detections()), (WINDOW_TABLE, _windows())):
        rows = [spec.to_row(r) for r in records]
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    yield client, db


def _rows(drift_db: tuple[Client, str], name: str, **params: str) -> list[dict[str, Any]]:
    client, db = drift_db
    return list(run_query(client, name, db, params).named_results())


def _t(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T / S + seconds, tz=dt.UTC).replace(tzinfo=None)


def _naive(v: Any) -> Any:
    return v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v


def test_fleet_drift(drift_db: tuple[Client, str]) -> None:
    (row,) = _rows(drift_db, "fleet_drift")
    assert {k: _naive(v) for k, v in row.items() if k != "detection_id"} == {
        "cluster": "c1",
        "pool": POOL,
        "pool_size": 64,
        "node": "gpu-a07",
        "differs": "driver_version",
        "what": f"driver_version: 550.54.15 vs majority 535.161.08 since {T + 100 * S}",
        "since": _t(100),
        "cleared": None,
    }
    both = _rows(drift_db, "fleet_drift", include_cleared="1")
    assert [(r["node"], _naive(r["cleared"])) for r in both] == [
        ("gpu-a07", None),
        ("gpu-a21", _t(400)),
    ]
    assert _rows(drift_db, "fleet_drift", cluster="other") == []


def test_drift_slowdown(drift_db: tuple[Client, str]) -> None:
    rows = _rows(drift_db, "drift_slowdown")
    assert rows == [
        {
            "job_id": "J1",
            "drifted_node": "gpu-a07",
            "differs": "driver_version",
            "drifted_ranks": 2,
            "job_step_s": 1.08,
            "clean_jobs": 2,
            "clean_step_s": 1.0,
            "slowdown_pct": 8.0,
            "drifted_step_s": 1.1,
            "other_step_s": 1.06,
            "vs_same_job_pct": 3.77,
        },
        {
            "job_id": "J2",
            "drifted_node": "gpu-a21",
            "differs": "nccl_version",
            "drifted_ranks": 2,
            "job_step_s": 1.05,
            "clean_jobs": 2,
            "clean_step_s": 1.0,
            "slowdown_pct": 5.0,
            "drifted_step_s": 1.05,
            "other_step_s": 1.05,
            "vs_same_job_pct": 0.0,
        },
    ]
    assert _rows(drift_db, "drift_slowdown", cluster="other") == []
