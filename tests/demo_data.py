"""The demo's job, processed in this process and loaded straight into ClickHouse.

The same stages as the worker (validate, redact, windows, analysis) without Kafka, so tests of
SQL and dashboards get realistic tables in seconds: a 16-rank job whose GPU falls off the bus,
the demo's planted secrets, its malformed records, an IB link flap on a second job and a
thermal straggler on a third.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from clickhouse_connect.driver.client import Client

from rankscope.demo import BAD_RECORDS, _leaky_events
from rankscope.redaction.rules import load_rules
from rankscope.redaction.stage import RedactionStage
from rankscope.schemas.derived import Detection, Incident, RankWindow
from rankscope.schemas.events import Event, NodeInventoryEvent
from rankscope.simulation.faults import parse_faults, simulate_with_faults
from rankscope.simulation.fleet import DriftedNode, FleetScenario, fleet_inventories, fleet_jobs
from rankscope.simulation.runs import AttemptSpec, RunScenario, simulate_run
from rankscope.simulation.simulator import SimulationConfig
from rankscope.sinks.clickhouse import migrate
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
from rankscope.streams.analysis.fleet import FleetView
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.config import ValidationLimits, WindowConfig
from rankscope.streams.recovery.engine import RecoveryEngine
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.validate import RecordRef, validate_message
from rankscope.streams.windows import WindowAggregator

#: three attempts of 3-second steps: the run fits in the demo's minute
DEMO_RUN = RunScenario(
    run_id="demo-run",
    cluster="sim-runs",  # its own cluster: the demo's "sim" keeps its three jobs
    node_prefix="demo-run-node",
    step_time_s=3,
    startup_s=1,
    checkpoint_every=2,
    tail_s=2,
    gap_s=1,
    sample_interval_s=5,
    attempts=[
        AttemptSpec(job_id="demo-run-job", steps=5, outcome="job_failed"),
        AttemptSpec(job_id="demo-run-job", steps=3, outcome="preempted"),
        AttemptSpec(job_id="demo-run-job-2", steps=4, outcome="job_completed"),
    ],
)


@dataclass(frozen=True)
class DemoData:
    job_id: str
    cluster: str
    start_ns: int
    end_ns: int


def load_demo(client: Client, database: str) -> DemoData:
    migrate(client, database)
    start = (time.time_ns() // 10**9 - 1800) * 10**9
    rows: dict[str, tuple[TableSpec, list[Any]]] = {}

    def add(spec: TableSpec, record: Any) -> None:
        rows.setdefault(spec.table, (spec, []))[1].append(spec.to_row(record))

    stage = RedactionStage(load_rules(), b"demo-data-key-0123456789abcdef")
    recovery = RecoveryEngine(load_policy())
    end = start
    first_job = ""

    def findings(detections: list[Detection], incidents: list[Incident]) -> None:
        for x in detections:
            add(DETECTION_TABLE, x)
            for r in recovery.on_detection(x):
                add(RECOVERY_TABLE, r)
        for y in incidents:
            add(INCIDENT_TABLE, y)
            for r in recovery.on_incident(y):
                add(RECOVERY_TABLE, r)

    jobs = (
        ("gpu_fell_off_bus", "demo-job"),
        ("ib_link_flap", "ib-job"),
        ("thermal_straggler", "slow-job"),
    )
    for n, (scenario, job) in enumerate(jobs):
        cfg = SimulationConfig(
            ranks=16,
            duration_s=60,
            seed=7,
            job_id=job,
            start_ns=start + n * 10**9,
            inventory=True,
            fabric_interval_s=2.0,
        )
        events: list[Event] = list(
            simulate_with_faults(cfg, parse_faults([{"scenario": scenario}]))[0]
        )
        events += _leaky_events(events)
        first_job = first_job or job
        out = stage.process(events, f"demo.raw:0:{n}")
        for a in out.audit:
            add(AUDIT_TABLE, a)
        aggregator = WindowAggregator(WindowConfig())
        analyzer = JobAnalyzer(cfg.cluster, job, clock_ns=lambda: 0)
        wall = time.time()
        windows: list[RankWindow] = []
        for i, ev in enumerate(out.events, 1):
            spec = event_spec(ev)
            add(spec, ev)
            aggregator.add(ev, wall)
            analyzer.observe(ev)
            end = max(end, ev.ts)
            if i % 256 == 0:
                findings(*analyzer.take())
        windows += aggregator.close_ready(wall + 3600)
        findings(*analyzer.flush())
        for w in windows:
            add(WINDOW_TABLE, w)
    for spec, record in fleet_drift_rows(start, recovery):
        add(spec, record)
    # issue 19: a run of three attempts inside the demo's minute (the runs and efficiency
    # dashboards), and findings of the throughput-gap and fleet-drift detectors
    for ev in simulate_run(DEMO_RUN.model_copy(update={"start_ns": start})):
        add(event_spec(ev), ev)
    for n, det_type in enumerate(("throughput_gap", "node_drift")):
        at = start + (30 + n) * 10**9
        add(
            DETECTION_TABLE,
            Detection(
                detection_id=f"demo-{det_type}",
                detection_type=det_type,  # type: ignore[arg-type]
                cluster="sim",
                job_id=DEMO_RUN.attempts[0].job_id,
                node=f"{DEMO_RUN.node_prefix}000",
                score=1.1,
                onset_ts=at,
                detected_ts=at,
                emitted_ts=at,
                summary=f"demo {det_type}",
            ),
        )
    for i, (_, value) in enumerate(BAD_RECORDS):
        ref = RecordRef("demo.raw.gpu_sample", 0, i, start)
        for dead in validate_message(value, ref, ValidationLimits(), now_ns=start).dead:
            add(DEADLETTER_TABLE, dead)
    for spec, values in rows.values():
        client.insert(f"{database}.{spec.table}", values, column_names=spec.columns)
    return DemoData(first_job, "sim", start, end)


def fleet_drift_rows(start: int, recovery: RecoveryEngine) -> list[tuple[TableSpec, Any]]:
    """A 16-node fleet with one drifted node (issue 19): its node_drift finding, the policy's
    decision, and the rank windows of its two jobs (no spans: the job list stays the demo's)."""
    s = FleetScenario(
        nodes=16, start_ns=start, duration_s=20, drift_age_s=60, image_age_s=120,
        drifted=[DriftedNode(index=3, changes={"driver_version": "550.54.15"}, slowdown=1.08)],
    )  # fmt: skip
    view = FleetView()
    for ev in fleet_inventories(s):
        assert isinstance(ev, NodeInventoryEvent)
        view.observe(ev.cluster, ev.node, ev.ts, ev.payload)
    out: list[tuple[TableSpec, Any]] = []
    for d in view.settle(start)[0]:
        out.append((DETECTION_TABLE, d))
        out += [(RECOVERY_TABLE, r) for r in recovery.on_detection(d)]
    wall = time.time()
    for _, events in fleet_jobs(s):
        aggregator = WindowAggregator(WindowConfig())
        for ev in events:
            aggregator.add(ev, wall)
        out += [(WINDOW_TABLE, w) for w in aggregator.close_ready(wall + 3600)]
    return out
