"""ClickHouse side on the real engine: migrations, every row mapping, dedup, both client paths."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.schemas.events import (
    AgentEventEvent,
    CommEventEvent,
    FabricCountersEvent,
    FabricEventEvent,
    GpuEventEvent,
    NodeInventoryEvent,
)
from rankscope.schemas.payloads import (
    AgentEvent,
    CommEvent,
    FabricCounters,
    FabricEvent,
    GpuEvent,
    NodeInventory,
)
from rankscope.sinks.clickhouse import applied_versions, available_migrations, connect, migrate
from rankscope.sinks.rows import ALL_TABLES, EVENT_TABLES, event_spec
from tests.conftest import Services
from tests.factories import NOW_NS, gpu_sample, heartbeat, scheduler, span

ROOT = Path(__file__).resolve().parents[1]


def every_kind() -> list:  # type: ignore[type-arg]
    """One event of every kind (also used by tests/test_schema_storage_bounds.py)."""
    jobs = JobRegistry()
    jobs.bind_gpu(2, JobBinding(job_id="job-1", rank=10, local_rank=2))
    f = EventFactory("c1", "node001", jobs)
    return [
        span(1, NOW_NS),
        gpu_sample(2, NOW_NS),
        heartbeat("node001", NOW_NS),
        scheduler("job_started", NOW_NS),
        f.make(
            GpuEventEvent, GpuEvent(event_type="xid", xid=79, message="fell off the bus"), gpu=2
        ),
        f.make(
            FabricCountersEvent,
            FabricCounters(
                device="mlx5_0",
                port=1,
                state="4: ACTIVE",
                counters={"symbol_error": 3},
                rates_per_s={"xmit_bytes": 1.5e9},
            ),
        ),
        f.make(FabricEventEvent, FabricEvent(event_type="link_down", device="mlx5_0", port=1)),
        f.make(
            CommEventEvent,
            CommEvent(source="pytorch", event_type="watchdog_timeout", op="ALLREDUCE", seq=42),
            rank=3,
        ),
        f.make(NodeInventoryEvent, NodeInventory(driver_version="560.35", fingerprint="ab" * 8)),
        f.make(AgentEventEvent, AgentEvent(event_type="spool_overflow", count=12)),
    ]


def test_every_kind_maps_to_a_row_and_dedups_on_event_id(services: Services) -> None:
    db = f"t{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    events = every_kind()
    assert {type(e) for e in events} == set(EVENT_TABLES), "a kind is missing from this test"
    for _ in range(2):  # the second insert is a replayed batch
        for ev in events:
            spec = event_spec(ev)
            client.insert(f"{db}.{spec.table}", [spec.to_row(ev)], column_names=spec.columns)
    for ev in events:
        table = event_spec(ev).table
        rows = client.query(
            f"SELECT job_id, rank, node FROM {db}.{table} FINAL WHERE event_id = %(e)s",
            parameters={"e": ev.event_id},
        ).result_rows
        assert rows == [(ev.job_id, -1 if ev.rank is None else ev.rank, ev.node)], table
    xid = client.query(f"SELECT xid, rank, job_id FROM {db}.gpu_events FINAL").result_rows
    assert xid == [(79, 10, "job-1")]  # job and rank stamped from the GPU's binding
    rates = client.query(f"SELECT rates_per_s['xmit_bytes'] FROM {db}.fabric_counters").result_rows
    assert rates[0][0] == 1.5e9


def test_fast_rows_equal_model_rows_for_every_kind() -> None:
    """The sink's no-revalidation path must write exactly what the model path writes."""
    import json

    from rankscope.schemas.events import dump_event
    from rankscope.sinks.rows import fast_row

    events = every_kind()
    span_ev = events[0]
    attrs = {"lr": 0.001, "ok": True, "n": 3, "tag": "x"}
    events[0] = span_ev.model_copy(
        update={"payload": span_ev.payload.model_copy(update={"attributes": attrs})}
    )
    for ev in events:
        spec, row = fast_row(json.loads(dump_event(ev)))
        assert spec is event_spec(ev)
        assert row == spec.to_row(ev), spec.table


def test_migrations_are_idempotent_over_http(services: Services) -> None:
    db = f"t{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    first = migrate(client, db)
    assert [m.version for m in first] == [m.version for m in available_migrations()]
    assert migrate(client, db) == []
    assert applied_versions(client, db) == {m.version for m in available_migrations()}
    tables = {r[0] for r in client.query(f"SHOW TABLES FROM {db}").result_rows}
    assert {t.table for t in ALL_TABLES} <= tables


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_embedded_chdb_path_migrate_and_query(tmp_path: Path) -> None:
    """``chdb://`` (the in-process engine) through the same clickhouse-connect code."""
    url = f"chdb://{tmp_path / 'ch'}"
    first = _cli("migrate", "--clickhouse-url", url, "--database", "emb")
    assert first.returncode == 0, first.stderr
    assert f"applied {len(available_migrations())} migration(s)" in first.stdout
    again = _cli("migrate", "--clickhouse-url", url, "--database", "emb")
    assert again.returncode == 0 and "applied 0 migration(s)" in again.stdout
    q = _cli(
        "query",
        "--clickhouse-url",
        url,
        "--format",
        "csv",
        "SELECT count() FROM system.tables WHERE database = 'emb'",
    )
    assert q.returncode == 0, q.stderr
    assert q.stdout.splitlines()[-1] == str(len(_created()) + 1)  # + schema_migrations
    assert {t.table for t in ALL_TABLES} <= _created()


def _created() -> set[str]:
    """Every table, materialized view and view the migrations create."""
    import re

    names: set[str] = set()
    for m in available_migrations():
        names |= set(
            re.findall(
                r"CREATE (?:OR REPLACE )?(?:TABLE|MATERIALIZED VIEW|VIEW) (?:IF NOT EXISTS )?"
                r"\{db\}\.(\w+)",
                m.path.read_text(),
            )
        )
    # tables a migration creates only to swap in and drop again (0006)
    return {n for n in names if "__" not in n}


def test_detections_and_incidents_round_trip(services: Services) -> None:
    from rankscope.schemas.derived import Detection, EvidenceItem, Incident
    from rankscope.sinks.rows import DETECTION_TABLE, INCIDENT_TABLE

    db = f"t{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    det = Detection(
        detection_id="job-1/straggler/5",
        detection_type="straggler",
        cluster="c1",
        job_id="job-1",
        node="node000",
        rank=5,
        straggler_class="thermal",
        score=1.31,
        onset_ts=NOW_NS,
        detected_ts=NOW_NS + 15 * 10**9,
        emitted_ts=NOW_NS,
        summary="rank 5 computes 31% slower than the job median and arrives last",
        evidence=["throttle_reasons HW_THERMAL_SLOWDOWN on GPU 5"],
        details={"windows": 3},
    )
    inc = Incident(
        incident_id="job-1/1",
        cluster="c1",
        job_id="job-1",
        cause_class="gpu_xid",
        node="node001",
        gpu=3,
        rank=11,
        xid=79,
        confidence=0.95,
        summary="GPU 3 on node001 fell off the bus (XID 79); 15 ranks then timed out in NCCL",
        first_cause_ts=NOW_NS,
        first_symptom_ts=NOW_NS + 10**10,
        attributed_ts=NOW_NS + 10**10,
        emitted_ts=NOW_NS,
        symptom_ranks=[0, 1, 2],
        evidence=[
            EvidenceItem(ts=NOW_NS, node="node001", rank=11, kind="gpu_event", what="XID 79")
        ],
        clock_offsets_ns={"node001": 5 * 10**9},
    )
    for _ in range(2):
        client.insert(f"{db}.detections", [DETECTION_TABLE.to_row(det)], DETECTION_TABLE.columns)
        client.insert(f"{db}.incidents", [INCIDENT_TABLE.to_row(inc)], INCIDENT_TABLE.columns)
    assert client.query(
        f"SELECT rank, straggler_class, details['windows'] FROM {db}.detections FINAL"
    ).result_rows == [(5, "thermal", "3")]
    rows = client.query(
        f"SELECT cause_class, xid, symptom_ranks, JSONExtractString(evidence_json, 1, 'what') "
        f"FROM {db}.incidents FINAL"
    ).result_rows
    assert rows == [("gpu_xid", 79, [0, 1, 2], "XID 79")]
