"""Runs across attempts (issue 19): the run queries on a known three-attempt run, exact results
against real chDB.

Run ``run-a`` on 2 ranks (node n1, GPUs 0-1), steps of 10 s, relative to T:

* attempt 1, Slurm job 1001: starts T+0, steps 1-120 ok (step k ends T+10k), a checkpoint of
  step 100 ends at T+1005, step 121 fails (an XID incident at T+1202), job_failed at T+1260.
  400 W per GPU. 2 x 1260 s = 0.7 GPU-h; lost 2 x (1260 - 1005) s; 20 steps recomputed.
* attempt 2, the same job requeued (same job id: time tells the attempts apart): starts T+1500,
  steps 101-180, a checkpoint of step 150 ends T+2010, preempted at T+2400. 300 W per GPU.
  2 x 900 s = 0.5 GPU-h; lost 2 x 390 s; 30 steps recomputed.
* attempt 3, Slurm job 1002 (a dependency chain): starts T+3000, steps 151-300, checkpoints of
  200 and 300, job_completed at T+4560. 400 W per GPU. 2 x 1560 s; nothing lost.

Between attempts 1 and 2 job 1001 has a GPU sample (T+1400) and a span that belong to no
attempt. Run ``run-b`` (job 2001, one rank, steps 1-10, no checkpoint) is OOM-killed at T+120 and
never completes; job ``lone`` has scheduler events without a run id.

Hand-computed totals of run-a: GPU-hours (2520 + 1800 + 3120) / 3600 = 2.0667; energy
(1 008 000 + 540 000 + 1 248 000) J = 0.7767 kWh; lost GPU-hours 1290 / 3600 = 0.3583; lost energy
(204 000 + 234 000) J = 0.1217 kWh; 50 recomputed steps; at 2.4 per GPU-hour: cost 4.96, lost 0.86.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.schemas.derived import Incident
from rankscope.schemas.envelope import Envelope
from rankscope.schemas.events import GpuSampleEvent, SchedulerEventEvent, SpanEvent
from rankscope.schemas.payloads import GpuSample, SchedulerEvent, SchedulerEventType, Span
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.named_queries import run_query
from rankscope.sinks.rows import INCIDENT_TABLE, TableSpec, event_spec
from tests.conftest import Services

S = 1_000_000_000
T = (time.time_ns() // S - 3 * 3600) * S
_n = iter(range(1, 10**7))


def _env(kind: str, ts: int, job: str, rank: int | None, gpu: int | None = None) -> dict[str, Any]:
    return {
        "event_id": f"r{next(_n):010d}",
        "schema": f"{kind}/1",
        "kind": kind,
        "cluster": "c1",
        "job_id": job,
        "node": "n1",
        "rank": rank,
        "gpu": gpu,
        "ts": ts,
        "observed_ts": ts,
    }


def _span(
    job: str, rank: int, phase: str, step: int, start_s: float, end_s: float, status: str = "ok"
) -> SpanEvent:
    return SpanEvent(
        **_env("span", T + int(end_s * S), job, rank),
        payload=Span(
            name=phase,
            phase=phase,  # type: ignore[arg-type]
            trace_id=f"{step:032x}",
            span_id=f"{next(_n):016x}",
            start_ns=T + int(start_s * S),
            end_ns=T + int(end_s * S),
            step=step,
            status=status,  # type: ignore[arg-type]
        ),
    )


def _sched(
    job: str, etype: SchedulerEventType, at_s: int, run_id: str, attempt: int
) -> SchedulerEventEvent:
    return SchedulerEventEvent(
        **_env("scheduler_event", T + at_s * S, job, None),
        payload=SchedulerEvent(source="slurm", event_type=etype, run_id=run_id, attempt=attempt),
    )


def _sample(job: str, gpu: int, at_s: int, energy_mj: int, watts: float) -> GpuSampleEvent:
    return GpuSampleEvent(
        **_env("gpu_sample", T + at_s * S, job, gpu, gpu=gpu),
        payload=GpuSample(
            gpu_uuid=f"GPU-{gpu}", sm_util_pct=90, power_w=watts, energy_mj=energy_mj
        ),
    )


def _attempt(
    job: str,
    ranks: int,
    first: int,
    last: int,
    start_s: int,
    ckpts: dict[int, tuple[int, int]],
    failed: bool = False,
) -> list[Envelope]:
    """Steps ``first..last`` of 10 s from ``start_s``; ``ckpts``: step -> (start, end) s."""
    out: list[Envelope] = []
    for rank in range(ranks):
        for k in range(first, last + 1):
            t0 = start_s + 10 * (k - first)
            out.append(_span(job, rank, "step", k, t0, t0 + 10))
        for step, (c0, c1) in ckpts.items():
            out.append(_span(job, rank, "checkpoint", step, c0, c1))
        if failed:
            t0 = start_s + 10 * (last + 1 - first)
            out.append(_span(job, rank, "step", last + 1, t0, t0 + 3, status="error"))
    return out


def _events() -> list[Envelope]:
    ev: list[Envelope] = []
    # run-a attempt 1: job 1001
    ev += [
        _sched("1001", "job_started", 0, "run-a", 1),
        _sched("1001", "job_failed", 1260, "run-a", 1),
    ]
    ev += _attempt("1001", 2, 1, 120, 0, {100: (1000, 1005)}, failed=True)
    # run-a attempt 2: job 1001 requeued
    ev += [
        _sched("1001", "job_started", 1500, "run-a", 2),
        _sched("1001", "preempted", 2400, "run-a", 2),
        _sched("1001", "job_requeued", 2400, "run-a", 2),  # Slurm: requeued at the preemption
    ]
    ev += _attempt("1001", 2, 101, 180, 1500, {150: (2000, 2010)})
    # run-a attempt 3: job 1002
    ev += [
        _sched("1002", "job_started", 3000, "run-a", 3),
        _sched("1002", "job_completed", 4560, "run-a", 3),
    ]
    ev += _attempt("1002", 2, 151, 300, 3000, {200: (3500, 3505), 300: (4500, 4510)})
    for gpu in (0, 1):
        for at, mj, w in (
            (0, 0, 400),
            (500, 200_000_000, 400),
            (1005, 402_000_000, 400),
            (1260, 504_000_000, 400),
            (1400, 514_000_000, 0),
            (1500, 600_000_000, 300),
            (2010, 753_000_000, 300),
            (2400, 870_000_000, 300),
        ):
            ev.append(_sample("1001", gpu, at, mj, w))
        for at, mj in ((3000, 1_000_000_000), (3780, 1_312_000_000), (4560, 1_624_000_000)):
            ev.append(_sample("1002", gpu, at, mj, 400))
    # between attempts 1 and 2: a span of job 1001 that is no attempt's
    ev.append(_span("1001", 0, "step", 999, 1300, 1310))
    # run-b: OOM-killed, never completed
    ev += [
        _sched("2001", "job_started", 0, "run-b", 1),
        _sched("2001", "oom_killed", 120, "run-b", 1),
    ]
    ev += _attempt("2001", 1, 1, 10, 0, {})
    # no run id: not a run
    ev += [_sched("lone", "job_started", 0, "", 0), _sched("lone", "job_completed", 60, "", 0)]
    ev += _attempt("lone", 1, 1, 5, 0, {})
    return ev


def _incident() -> Incident:
    return Incident(
        incident_id="inc-a1",
        revision=0,
        cluster="c1",
        job_id="1001",
        cause_class="gpu_xid",
        node="n1",
        gpu=1,
        rank=1,
        xid=79,
        confidence=0.9,
        summary="GPU fell off the bus",
        first_cause_ts=T + 1202 * S,
        first_symptom_ts=T + 1203 * S,
        attributed_ts=T + 1210 * S,
        emitted_ts=T + 1210 * S,
        symptom_ranks=[0],
        evidence=[],
    )


@pytest.fixture(scope="module")
def runs(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"runs{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for e in _events():
        spec = event_spec(e)  # type: ignore[arg-type]
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(e))
    by_table["incidents"] = (INCIDENT_TABLE, [INCIDENT_TABLE.to_row(_incident())])
    for spec, rows in by_table.values():
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    yield client, db
    client.command(f"DROP DATABASE IF EXISTS {db}")


def _rows(runs: tuple[Client, str], name: str, **params: str) -> list[dict[str, Any]]:
    client, db = runs
    return list(run_query(client, name, db, params).named_results())


def test_run_attempts(runs: tuple[Client, str]) -> None:
    rows = _rows(runs, "run_attempts", run_id="run-a")
    got = [
        (
            r["job_id"],
            r["attempt"],
            r["outcome"],
            r["ranks"],
            round(r["gpu_hours"] * 3600),
            round(r["energy_j"]),
            r["first_step"],
            r["last_step"],
            r["saved_step"],
            r["recomputed_steps"],
            round(r["lost_gpu_hours"] * 3600),
            round(r["lost_energy_j"]),
            r["cause_class"],
        )
        for r in rows
    ]
    assert got == [
        ("1001", 1, "job_failed", 2, 2520, 1_008_000, 1, 120, 100, 20, 510, 204_000, "gpu_xid"),
        (
            "1001",
            2,
            "preempted",
            2,
            1800,
            540_000,
            101,
            180,
            150,
            30,
            780,
            234_000,
            "scheduler_preemption",
        ),
        ("1002", 3, "job_completed", 2, 3120, 1_248_000, 151, 300, 300, 0, 0, 0, ""),
    ]
    (b,) = _rows(runs, "run_attempts", run_id="run-b")
    # no checkpoint: saved is the step it resumed after (0), all 10 steps and 120 s lost
    assert (b["saved_step"], b["recomputed_steps"], round(b["lost_gpu_hours"] * 3600)) == (
        0,
        10,
        120,
    )
    assert b["cause_class"] == "host_oom"
    assert {r["run_id"] for r in _rows(runs, "run_attempts")} == {"run-a", "run-b"}


def test_run_cost(runs: tuple[Client, str]) -> None:
    rows = _rows(runs, "run_cost", price_per_gpu_hour="2.4")
    assert rows == [
        {
            "cluster": "c1",
            "run_id": "run-a",
            "attempts": 3,
            "failed_attempts": 2,
            "completed_job_id": "1002",
            "gpu_hours": 2.0667,
            "energy_kwh": 0.7767,
            "recomputed_steps": 50,
            "lost_gpu_hours": 0.3583,
            "lost_energy_kwh": 0.1217,
            "cost": 4.96,
            "cost_lost": 0.86,
        }
    ]  # run-b never completed: not a completed run's cost
    assert _rows(runs, "run_cost", run_id="run-b", price_per_gpu_hour="2.4") == []


def test_run_losses(runs: tuple[Client, str]) -> None:
    rows = _rows(runs, "run_losses", price_per_gpu_hour="2.4")
    assert rows == [
        {
            "cause_class": "scheduler_preemption",
            "attempts": 1,
            "runs": 1,
            "recomputed_steps": 30,
            "lost_gpu_hours": 0.2167,
            "lost_energy_kwh": 0.065,
            "cost_lost": 0.52,
        },
        {
            "cause_class": "gpu_xid",
            "attempts": 1,
            "runs": 1,
            "recomputed_steps": 20,
            "lost_gpu_hours": 0.1417,
            "lost_energy_kwh": 0.0567,
            "cost_lost": 0.34,
        },
        {
            "cause_class": "host_oom",
            "attempts": 1,
            "runs": 1,
            "recomputed_steps": 10,
            "lost_gpu_hours": 0.0333,
            "lost_energy_kwh": 0.0,
            "cost_lost": 0.08,
        },
    ]


def test_run_goodput(runs: tuple[Client, str]) -> None:
    rows = {r["run_id"]: r for r in _rows(runs, "run_goodput")}
    a, b = rows["run-a"], rows["run-b"]
    assert (a["attempts"], a["completed"], a["first_step"], a["last_step"]) == (3, 1, 1, 300)
    assert (a["gpu_hours"], a["useful_gpu_hours"], a["goodput_pct"]) == (2.0667, 1.7083, 82.66)
    assert (a["recomputed_steps"], a["step_efficiency_pct"]) == (50, 85.71)
    assert (b["completed"], b["goodput_pct"], b["step_efficiency_pct"]) == (0, 0.0, 50.0)


def test_attempts_are_a_view_rebuilt_from_scheduler_events(runs: tuple[Client, str]) -> None:
    client, db = runs
    rows = client.query(
        f"SELECT run_id, job_id, attempt, outcome FROM {db}.job_attempts ORDER BY run_id, attempt"
    ).result_rows
    assert rows == [
        ("run-a", "1001", 1, "job_failed"),
        ("run-a", "1001", 2, "preempted"),
        ("run-a", "1002", 3, "job_completed"),
        ("run-b", "2001", 1, "oom_killed"),
    ]
