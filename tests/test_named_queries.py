"""Every named query on a small known dataset, with exact expected results.

The dataset, relative to T (an hour ago, whole seconds): job ``gp-job`` on 4 ranks (node000:
ranks 0-1, node001: ranks 2-3). Each rank runs ok steps 1-5 starting at T+0, 10, 20, 30, 45 s
lasting 8, 8, 8, 12, 8 s, then step 6 fails (T+55..58). A GPU on node000 starts throttling at
T+20 (a node event, no job id), node001's HCA link goes down at T+40, node001 GPU 1 (rank 3)
reports XID 79 at T+54; NCCL errors follow on node000 at T+45, 56, 57 (the last a watchdog
timeout). Every GPU's energy counter rises by 20 kJ over 50 s at 400 W. A second job
(``other-job``, one rank, one step) checks that filters hold.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.schemas.derived import (
    DeadLetter,
    Detection,
    EvidenceItem,
    Incident,
    RankWindow,
    RecoveryEvent,
    RedactionAudit,
)
from rankscope.schemas.envelope import Envelope
from rankscope.schemas.events import (
    CommEventEvent,
    FabricEventEvent,
    GpuEventEvent,
    GpuSampleEvent,
    NodeInventoryEvent,
    SpanEvent,
)
from rankscope.schemas.payloads import (
    CommEvent,
    FabricEvent,
    GpuEvent,
    GpuSample,
    NodeInventory,
    Span,
    inventory_fingerprint,
)
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.named_queries import load_queries, run_query
from rankscope.sinks.rows import (
    AUDIT_TABLE,
    DEADLETTER_TABLE,
    DETECTION_TABLE,
    INCIDENT_TABLE,
    RECOVERY_TABLE,
    WINDOW_TABLE,
    TableSpec,
    event_spec,
)
from tests.conftest import Services
from tests.test_fleet_queries import (  # noqa: F401  (issue 19: the fleet drift queries' tests)
    drift_db,
    test_drift_slowdown,
    test_fleet_drift,
)

S = 1_000_000_000
T = (time.time_ns() // S - 3600) * S
JOB = "gp-job"
NODE = {0: "node000", 1: "node000", 2: "node001", 3: "node001"}
_n = iter(range(1, 10**6))


def _env(
    kind: str, ts: int, node: str, rank: int | None, job: str = JOB, gpu: int | None = None
) -> dict[str, Any]:
    return {
        "event_id": f"e{next(_n):010d}",
        "schema": f"{kind}/1",
        "kind": kind,
        "cluster": "c1",
        "job_id": job,
        "node": node,
        "rank": rank,
        "gpu": gpu,
        "ts": ts,
        "observed_ts": ts,
    }


def _step(
    rank: int, step: int, start_s: float, dur_s: float, status: str = "ok", job: str = JOB
) -> SpanEvent:
    start, end = T + int(start_s * S), T + int((start_s + dur_s) * S)
    return SpanEvent(
        **_env("span", end, NODE.get(rank, "node009"), rank, job),
        payload=Span(
            name="step",
            phase="step",
            trace_id=f"{step:032x}",
            span_id=f"{next(_n):016x}",
            start_ns=start,
            end_ns=end,
            step=step,
            status=status,  # type: ignore[arg-type]
        ),
    )


def _events() -> list[Envelope]:
    events: list[Envelope] = []
    for rank in range(4):
        for step, (start, dur) in enumerate([(0, 8), (10, 8), (20, 8), (30, 12), (45, 8)], 1):
            events.append(_step(rank, step, start, dur))
        events.append(_step(rank, 6, 55, 3, status="error"))
    events.append(_step(0, 1, 0, 5, job="other-job"))
    for node in ("node000", "node001"):
        for gpu in (0, 1):
            for at, energy in ((0, 1_000_000), (50, 21_000_000)):
                events.append(
                    GpuSampleEvent(
                        **_env("gpu_sample", T + at * S, node, None, gpu=gpu),
                        payload=GpuSample(
                            gpu_uuid=f"GPU-{node}-{gpu}",
                            sm_util_pct=90,
                            power_w=400,
                            energy_mj=energy,
                        ),
                    )
                )
    events.append(
        GpuEventEvent(
            **_env("gpu_event", T + 20 * S, "node000", None, job="", gpu=0),
            payload=GpuEvent(event_type="throttle_start", message="clocks throttled"),
        )
    )
    events.append(
        GpuEventEvent(
            **_env("gpu_event", T + 54 * S, "node001", 3, gpu=1),
            payload=GpuEvent(event_type="xid", xid=79, message="GPU has fallen off the bus"),
        )
    )
    for at, event_type in ((40, "link_down"), (41, "link_up")):
        events.append(
            FabricEventEvent(
                **_env("fabric_event", T + at * S, "node001", None),
                payload=FabricEvent(event_type=event_type, device="mlx5_0", port=1),  # type: ignore[arg-type]
            )
        )
    for at, rank, event_type in (
        (45, 1, "net_ib_error"),
        (56, 1, "nccl_error"),
        (57, 0, "watchdog_timeout"),
    ):
        events.append(
            CommEventEvent(
                **_env("comm_event", T + at * S, "node000", rank),
                payload=CommEvent(source="nccl", event_type=event_type, message=event_type),  # type: ignore[arg-type]
            )
        )
    return events


def _derived() -> list[tuple[TableSpec, Any]]:
    rows: list[tuple[TableSpec, Any]] = []
    for det_type, rank, onset, cls in (("straggler", 2, 30, "thermal"), ("hang", 3, 54, None)):
        rows.append(
            (
                DETECTION_TABLE,
                Detection(
                    detection_id=f"d-{det_type}",
                    detection_type=det_type,
                    cluster="c1",  # type: ignore[arg-type]
                    job_id=JOB,
                    node=NODE[rank],
                    rank=rank,
                    straggler_class=cls,
                    score=1.5,
                    onset_ts=T + onset * S,
                    detected_ts=T + (onset + 15) * S,
                    emitted_ts=T,
                    summary=f"rank {rank} {det_type}",
                ),
            )
        )
    evidence = [
        EvidenceItem(
            ts=T + 54 * S, node="node001", rank=3, kind="gpu_event", what="XID 79", role="cause"
        ),
        EvidenceItem(
            ts=T + 56 * S,
            node="node000",
            rank=1,
            kind="comm_event",
            what="NCCL error",
            role="symptom",
        ),
        EvidenceItem(
            ts=T + 57 * S,
            node="node000",
            rank=0,
            kind="comm_event",
            what="watchdog",
            role="symptom",
        ),
    ]
    for revision, confidence in ((0, 0.8), (1, 0.95)):
        rows.append(
            (
                INCIDENT_TABLE,
                Incident(
                    incident_id="inc-1",
                    revision=revision,
                    cluster="c1",
                    job_id=JOB,
                    cause_class="gpu_xid",
                    node="node001",
                    gpu=1,
                    rank=3,
                    xid=79,
                    confidence=confidence,
                    summary="GPU fell off the bus",
                    first_cause_ts=T + 54 * S,
                    first_symptom_ts=T + 56 * S,
                    attributed_ts=T + 60 * S,
                    emitted_ts=T,
                    symptom_ranks=[0, 1],
                    evidence=evidence[: 2 + revision],
                ),
            )
        )
    for w, start in enumerate((0, 5)):
        for rank in range(4):
            rows.append(
                (
                    WINDOW_TABLE,
                    RankWindow(
                        window_id=RankWindow.make_id(JOB, rank, T + start * S),
                        cluster="c1",
                        job_id=JOB,
                        rank=rank,
                        node=NODE[rank],
                        window_start_ns=T + start * S,
                        window_end_ns=T + (start + 5) * S,
                        step_count=1,
                        step_time_mean_s=8.0 + w + rank / 10,
                        gpu_util_mean_pct=90.0 - rank,
                        event_count=10,
                        emitted_ts=T,
                    ),
                )
            )
    minute = T - T % (60 * S)
    for job, entity, count in (
        (JOB, "API_TOKEN", 2),
        (JOB, "EMAIL_ADDRESS", 1),
        ("other-job", "API_TOKEN", 5),
    ):
        audit = RedactionAudit(
            audit_id=f"a-{job}-{entity}",
            window_start_ns=minute,
            cluster="c1",
            job_id=job,
            kind="span",
            field="error_message",
            entity=entity,
            rule="r",
            action="mask",
            count=count,
            rules_version="v1",
        )
        rows += [(AUDIT_TABLE, audit), (AUDIT_TABLE, audit)]  # written twice: FINAL counts once
    for i, (code, topic) in enumerate(
        (
            ("not_json", "p.raw.gpu_sample"),
            ("not_json", "p.raw.gpu_sample"),
            ("invalid_event", "p.raw.span"),
        )
    ):
        dead = DeadLetter(
            dead_letter_id=DeadLetter.make_id(topic, 0, i, -1),
            reason_code=code,  # type: ignore[arg-type]
            reason=f"{code} #{i}",
            source_topic=topic,
            partition=0,
            offset=i,
            size_bytes=10,
            sha256="0" * 64,
            received_ts=T + i * S,
        )
        rows += [(DEADLETTER_TABLE, dead), (DEADLETTER_TABLE, dead)]
    for job, stage, at, action in (
        (JOB, "decided", 60, "exclude_node_and_restart"),
        (JOB, "succeeded", 61, "exclude_node_and_restart"),
        (JOB, "progress_resumed", 300, "exclude_node_and_restart"),
        ("other-job", "suppressed", 70, "restart_from_checkpoint"),
    ):
        event = RecoveryEvent(
            key=f"k-{job}",
            stage=stage,
            action=action,
            cluster="c1",
            job_id=job,  # type: ignore[arg-type]
            node="node001",
            rank=3,
            rule="r",
            reason=f"{stage} reason",
            trigger_id="inc-1",
            attempt=1,
            ts=T + at * S,
        )
        rows += [(RECOVERY_TABLE, event), (RECOVERY_TABLE, event)]
    return rows


@pytest.fixture(scope="module")
def known(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"nq{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for ev in _events():
        spec = event_spec(ev)  # type: ignore[arg-type]
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(ev))
    for spec, rec in _derived():
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(rec))
    for spec, rows in by_table.values():
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    yield client, db


def _rows(known: tuple[Client, str], name: str, **params: str) -> list[dict[str, Any]]:
    client, db = known
    return list(run_query(client, name, db, params).named_results())


def _t(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T / S + seconds, tz=dt.UTC).replace(tzinfo=None)


def _naive(v: Any) -> Any:
    return v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v


def test_every_named_query_is_tested_here() -> None:
    tested = {
        n[len("test_") :] for n in globals() if n.startswith("test_") and n[5:] in load_queries()
    }
    # queries that need a dataset of their own are tested in their own module, by the same name
    for module in Path(__file__).parent.glob("test_*.py"):
        text = module.read_text(encoding="utf-8")
        tested |= {name for name in load_queries() if f"def test_{name}(" in text}
    assert tested == set(load_queries())


def test_goodput(known: tuple[Client, str]) -> None:
    (row,) = _rows(known, "goodput", job_id=JOB, price_per_gpu_hour="3")
    assert row == {
        "job_id": JOB,
        "ranks": 4,
        "wall_s": 58.0,
        "gpu_hours": 0.0644,  # 4 x 58 s
        "productive_gpu_hours": 0.0444,  # 4 x 5 steps x 8 s (the median)
        "slow_step_gpu_hours": 0.0044,  # 4 x 4 s: step 4 took 12 s
        "failed_gpu_hours": 0.0056,  # 4 x 5 s after the last good step (T+53 .. T+58)
        "stalled_gpu_hours": 0.01,  # 4 x 9 s of gaps between good steps
        "goodput_pct": 68.97,  # 160 / 232
        "cost": 0.19,
        "cost_lost": 0.06,
    }


def test_energy_per_step(known: tuple[Client, str]) -> None:
    (row,) = _rows(known, "energy_per_step", job_id=JOB)
    assert row == {
        "job_id": JOB,
        "gpus": 4,
        "job_energy_j": 80000.0,
        "job_energy_kwh": 0.0222,
        "steps": 5,
        "joules_per_step": 16000.0,
        "job_power_w": 1600.0,
        "steps_per_s_per_kw": 0.0539,  # 5 steps / 58 s / 1.6 kW
    }


def test_first_anomaly_before_failure(known: tuple[Client, str]) -> None:
    rows = _rows(known, "first_anomaly_before_failure", job_id=JOB)
    assert [{k: _naive(v) for k, v in r.items()} for r in rows] == [
        {
            "failure_ts": _t(56),  # the NCCL error, before the watchdog and the error spans
            "anomaly_ts": _t(20),  # the node's throttling, a node event without a job id
            "lead_s": 36.0,
            "source": "gpu_event",
            "node": "node000",
            "rank": -1,
            "what": "throttle_start",
        }
    ]
    assert _rows(known, "first_anomaly_before_failure", job_id=JOB, lookback_s="10") == [
        {
            **rows[0],
            "anomaly_ts": rows[0]["anomaly_ts"] + dt.timedelta(seconds=34),
            "lead_s": 2.0,
            "node": "node001",
            "rank": 3,
            "what": "xid XID 79",
        }
    ]
    assert _rows(known, "first_anomaly_before_failure", job_id="other-job") == []


def test_incident_timeline(known: tuple[Client, str]) -> None:
    rows = _rows(known, "incident_timeline", job_id=JOB)
    got = [
        (r["confidence"], r["offset_s"], r["role"], r["node"], r["rank"], r["what"]) for r in rows
    ]
    assert got == [  # revision 1 (confidence 0.95, three items) replaced revision 0
        (0.95, 0.0, "cause", "node001", 3, "XID 79"),
        (0.95, 2.0, "symptom", "node000", 1, "NCCL error"),
        (0.95, 3.0, "symptom", "node000", 0, "watchdog"),
    ]
    assert _naive(rows[0]["ts"]) == _t(54)


def test_straggler_history(known: tuple[Client, str]) -> None:
    rows = _rows(known, "straggler_history", job_id=JOB)
    assert [{k: _naive(v) for k, v in r.items()} for r in rows] == [
        {
            "onset": _t(30),
            "detected": _t(45),
            "rank": 2,
            "node": "node001",
            "straggler_class": "thermal",
            "score": 1.5,
            "summary": "rank 2 straggler",
        }
    ]


def test_rank_heatmap(known: tuple[Client, str]) -> None:
    rows = _rows(known, "rank_heatmap", job_id=JOB)
    assert [(_naive(r["window_start"]), r["rank"], r["value"]) for r in rows] == [
        (_t(start), rank, 8.0 + w + rank / 10)
        for w, start in enumerate((0, 5))
        for rank in range(4)
    ]
    util = _rows(known, "rank_heatmap", job_id=JOB, metric="gpu_util_mean_pct")
    assert [r["value"] for r in util[:4]] == [90.0, 89.0, 88.0, 87.0]


def test_rank_heatmap_buckets(known: tuple[Client, str]) -> None:
    # at most 64 rows: 4 ranks stay one row each, labelled by rank (1 s: the windows' own times)
    rows = _rows(known, "rank_heatmap_buckets", job_id=JOB, interval_s="1")
    assert [(_naive(r["time"]), r["ranks"], r["value"]) for r in rows] == [
        (_t(start), f"rank {rank}", 8.0 + w + rank / 10)
        for w, start in enumerate((0, 5))
        for rank in range(4)
    ]
    # 2 rows: runs of 2 ranks, each cell the worst of its ranks
    two = _rows(known, "rank_heatmap_buckets", job_id=JOB, buckets="2")
    assert [(r["ranks"], r["value"]) for r in two] == [
        ("ranks 0-1", 8.1),
        ("ranks 2-3", 8.3),
        ("ranks 0-1", 9.1),
        ("ranks 2-3", 9.3),
    ]
    # 3 rows asked of 4 ranks: width 2, the last run cut at the last rank
    assert {r["ranks"] for r in _rows(known, "rank_heatmap_buckets", job_id=JOB, buckets="3")} == {
        "ranks 0-1",
        "ranks 2-3",
    }
    assert _rows(known, "rank_heatmap_buckets", job_id="no-such-job") == []


def test_slowest_ranks(known: tuple[Client, str]) -> None:
    rows = _rows(known, "slowest_ranks", job_id=JOB, k="2")
    # means over both windows: rank r -> 8.5 + r / 10; the median of the four is 8.65
    assert [(r["rank"], r["node"], r["windows"]) for r in rows] == [
        (3, "node001", 2),
        (2, "node001", 2),
    ]
    assert [round(r["mean_step_s"], 6) for r in rows] == [8.8, 8.7]
    assert [r["vs_median"] for r in rows] == [round(8.8 / 8.65, 3), round(8.7 / 8.65, 3)]
    assert len(_rows(known, "slowest_ranks", job_id=JOB)) == 4
    assert _rows(known, "slowest_ranks", job_id="no-such-job") == []


def test_xid_link_vs_nccl(known: tuple[Client, str]) -> None:
    assert _rows(known, "xid_link_vs_nccl") == [
        {
            "node": "node001",
            "xids": 1,
            "link_errors": 1,
            "nccl_errors_after": 3,  # T+45 after the link (5 s), T+56 and T+57 after the XID
            "nodes_with_nccl_errors": 1,
            "first_lag_s": 2.0,
        }
    ]
    narrow = _rows(known, "xid_link_vs_nccl", follow_s="2")
    assert [(r["nccl_errors_after"], r["first_lag_s"]) for r in narrow] == [(1, 2.0)]
    assert _rows(known, "xid_link_vs_nccl", cluster="elsewhere") == []


def test_redaction_audit(known: tuple[Client, str]) -> None:
    rows = _rows(known, "redaction_audit", job_id=JOB)
    assert [(r["entity"], r["findings"]) for r in rows] == [("API_TOKEN", 2), ("EMAIL_ADDRESS", 1)]
    everything = _rows(known, "redaction_audit")
    assert [(r["entity"], r["findings"]) for r in everything] == [
        ("API_TOKEN", 7),
        ("EMAIL_ADDRESS", 1),
    ]


def test_dead_letters(known: tuple[Client, str]) -> None:
    rows = _rows(known, "dead_letters")
    assert [(r["reason_code"], r["source_topic"], r["records"]) for r in rows] == [
        ("not_json", "p.raw.gpu_sample", 2),
        ("invalid_event", "p.raw.span", 1),
    ]
    assert _naive(rows[0]["last_seen"]) == _t(1)


def test_jobs_overview(known: tuple[Client, str]) -> None:
    rows = _rows(known, "jobs_overview")
    got = [{k: _naive(v) for k, v in r.items()} for r in rows]
    assert got == [
        {
            "cluster": "c1",
            "job_id": JOB,
            "ranks": 4,
            "nodes": 2,
            "first_ts": _t(8),
            "last_ts": _t(58),
            "steps": 5,
            "error_spans": 4,
            "incidents": 1,
            "stragglers": 1,
            "hangs": 1,
        },
        {
            "cluster": "c1",
            "job_id": "other-job",
            "ranks": 1,
            "nodes": 1,
            "first_ts": _t(5),
            "last_ts": _t(5),
            "steps": 1,
            "error_spans": 0,
            "incidents": 0,
            "stragglers": 0,
            "hangs": 0,
        },
    ]


def test_incidents(known: tuple[Client, str]) -> None:
    rows = _rows(known, "incidents", job_id=JOB)
    assert [(r["incident_id"], r["revision"], r["confidence"]) for r in rows] == [
        ("inc-1", 1, 0.95)
    ]
    assert len(json.loads(rows[0]["evidence_json"])) == 3
    assert _rows(known, "incidents", job_id="other-job") == []
    assert len(_rows(known, "incidents", limit="0")) == 0


def test_goodput_and_energy_are_also_views(known: tuple[Client, str]) -> None:
    client, db = known
    view = client.query(
        f"SELECT * FROM {db}.job_goodput(job_id = '{JOB}', price_per_gpu_hour = 3)"
    ).named_results()
    assert list(view) == _rows(known, "goodput", job_id=JOB, price_per_gpu_hour="3")
    energy = client.query(f"SELECT * FROM {db}.job_energy(job_id = '{JOB}')").named_results()
    assert list(energy) == _rows(known, "energy_per_step", job_id=JOB)


def test_rollups_follow_the_inserts(known: tuple[Client, str]) -> None:
    client, db = known
    minutes = client.query(
        f"SELECT sum(samples), round(avgMerge(util_avg), 1), round(avgMerge(power_avg), 1), "
        f"min(energy_min), max(energy_max) FROM {db}.gpu_minute WHERE job_id = '{JOB}'"
    ).result_rows
    assert minutes == [(8, 90.0, 400.0, 1_000_000, 21_000_000)]
    hours = client.query(
        f"SELECT node, sum(xids), sum(gpu_events), sum(link_errors), sum(nccl_errors) "
        f"FROM {db}.node_hour GROUP BY node ORDER BY node"
    ).result_rows
    assert hours == [("node000", 0, 1, 0, 3), ("node001", 1, 1, 1, 0)]


def test_retention_is_set_per_table(known: tuple[Client, str]) -> None:
    from rankscope.sinks.clickhouse import apply_ttl

    client, db = known
    apply_ttl(client, db, {"heartbeats": 30, "late_events": 7})
    ddl = dict(
        client.query(
            f"SELECT name, create_table_query FROM system.tables WHERE database = '{db}' "
            "AND name IN ('heartbeats', 'late_events', 'spans')"
        ).result_rows
    )
    assert "TTL toDateTime(ts) + toIntervalDay(30)" in ddl["heartbeats"]
    assert "toIntervalDay(7)" in ddl["late_events"]
    assert "TTL" not in ddl["spans"]
    apply_ttl(client, db, {"heartbeats": 0})
    ddl_after = client.query(
        "SELECT create_table_query FROM system.tables "
        f"WHERE database = '{db}' AND name = 'heartbeats'"
    ).result_rows[0][0]
    assert "TTL" not in ddl_after
    with pytest.raises(ValueError, match="no retention"):
        apply_ttl(client, db, {"nope": 1})


def test_recovery_history(known: tuple[Client, str]) -> None:
    rows = _rows(known, "recovery_history", job_id=JOB)
    assert [(r["stage"], _naive(r["ts"]), r["rank"]) for r in rows] == [
        ("progress_resumed", _t(300), 3),
        ("succeeded", _t(61), 3),
        ("decided", _t(60), 3),
    ]
    everything = _rows(known, "recovery_history")
    assert [(r["job_id"], r["stage"]) for r in everything] == [
        (JOB, "progress_resumed"),
        ("other-job", "suppressed"),
        (JOB, "succeeded"),
        (JOB, "decided"),
    ]


def test_parameters_are_checked_before_the_server_sees_them() -> None:
    q = load_queries()["goodput"]
    with pytest.raises(ValueError, match=r"job_id .* is required"):
        q.bind({}, "db")
    with pytest.raises(ValueError, match="unknown parameter"):
        q.bind({"job_id": "j", "jobid": "x"}, "db")
    assert q.bind({"job_id": "j"}, "db") == {"db": "db", "job_id": "j", "price_per_gpu_hour": "2.0"}
    assert json.dumps(
        sorted(load_queries())
    )  # every file parses (names match, placeholders declared)


# -- reference baselines (issue 19): job_profile and job_config on a job of their own ---------

BL_JOB = "bl-job"


def _bl_span(rank: int, step: int, phase: str, start_s: float, dur_s: float, **attrs: Any) -> Any:
    start, end = T + int(start_s * S), T + int((start_s + dur_s) * S)
    return SpanEvent(
        **_env("span", end, NODE[rank], rank, BL_JOB),
        payload=Span(
            name=phase,
            phase=phase,  # type: ignore[arg-type]
            trace_id=f"{step:032x}",
            span_id=f"{next(_n):016x}",
            start_ns=start,
            end_ns=end,
            step=step,
            status="ok",
            attributes=attrs,
        ),
    )


def _bl_events() -> list[Envelope]:
    """Two ranks, steps 0-3: backward is 3+k s on rank 0 and 5+k s on rank 1 (per-step median
    4+k), collective 2 and 1 s; rank 2 has a step 0 without a collective (left out)."""
    out: list[Envelope] = []
    env = {"rankscope.model": "m1", "rankscope.global_batch": 64, "rankscope.samples": 32}
    for k in range(4):
        t = 20.0 * k
        for rank, backward, collective in ((0, 3 + k, 2.0), (1, 5 + k, 1.0)):
            mark = t
            for phase, dur in (("data", 1.0), ("forward", 2.0), ("backward", backward)):
                out.append(_bl_span(rank, k, phase, mark, dur))
                mark += dur
            out.append(_bl_span(rank, k, "optimizer", mark, 1.0))
            out.append(
                _bl_span(
                    rank,
                    k,
                    "collective",
                    mark + 1,
                    collective,
                    **env,
                    **{"rankscope.env.NCCL_ALGO": "Ring"},
                )
            )
    out.append(_bl_span(2, 0, "data", 0, 30.0))
    for node, at, driver in (("node000", 0, "530.30.02"), ("node000", 5, "535.161.08"),
                             ("node001", 0, "535.161.08")):  # fmt: skip
        fields = {"driver_version": driver, "nccl_version": "2.21.5", "gpu_model": "H100",
                  "gpu_count": 8, "hca_firmware": {"mlx5_0": "28", "mlx5_1": "28"}}  # fmt: skip
        out.append(
            NodeInventoryEvent(
                **_env("node_inventory", T + at * S, node, None, BL_JOB),
                payload=NodeInventory(**fields, fingerprint=inventory_fingerprint(fields)),
            )
        )
    for i, (clock, power) in enumerate(((1980.0, 400.0), (1980.0, 500.0), (1700.0, 600.0))):
        out.append(
            GpuSampleEvent(
                **_env("gpu_sample", T + i * S, "node000", 0, BL_JOB, gpu=0),
                payload=GpuSample(
                    gpu_uuid="GPU-0", sm_util_pct=90, sm_clock_mhz=clock, power_w=power
                ),
            )
        )
    return out


@pytest.fixture(scope="module")
def profiled(known: tuple[Client, str]) -> tuple[Client, str]:
    client, db = known
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for ev in _bl_events():
        spec = event_spec(ev)  # type: ignore[arg-type]
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(ev))
    for spec, rows in by_table.values():
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    return known


def test_job_profile(profiled: tuple[Client, str]) -> None:
    rows = _rows(profiled, "job_profile", job_id=BL_JOB, skip_steps="0")
    got = {r["phase"]: (r["steps"], r["ranks"], r["median_s"], r["spread_s"]) for r in rows}
    assert list(got) == ["data", "forward", "backward", "optimizer", "collective", "step"]
    assert got["data"] == (4, 2, 1.0, 0.0)
    assert got["backward"] == (4, 2, 5.5, 1.5)  # per-step medians 4, 5, 6, 7
    assert got["collective"] == (4, 2, 1.5, 0.0)
    assert got["step"] == (4, 2, 11.0, 1.5)  # per rank 9+k and 10+k
    warm = {r["phase"]: r["median_s"] for r in _rows(profiled, "job_profile", job_id=BL_JOB)}
    assert warm["backward"] == 6.5  # steps 2 and 3 only
    assert _rows(profiled, "job_profile", job_id="nope") == []


def test_job_config(profiled: tuple[Client, str]) -> None:
    (row,) = _rows(profiled, "job_config", job_id=BL_JOB)
    assert row["model"] == "m1" and row["global_batch"] == 64
    assert row["env"] == {"rankscope.env.NCCL_ALGO": "Ring"}
    assert row["ranks"] == 3
    assert row["driver_version"] == ["535.161.08"]  # each node's latest inventory
    assert row["nccl_version"] == ["2.21.5"] and row["gpu_model"] == ["H100"]
    assert (row["gpus_per_node"], row["nodes"], row["hcas_per_node"]) == (8, 2, 2)
    assert (row["sm_clock_mhz"], row["power_w"]) == (1980.0, 500.0)
    assert row["samples_per_step"] == 64.0
