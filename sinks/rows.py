"""Typed records -> ClickHouse rows, one table per event family.

Column lists here must match ``migrations``; a test inserts one row of every kind through
these mappings into a freshly migrated engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rankscope.schemas.derived import (
    DeadLetter,
    Detection,
    Incident,
    LateEvent,
    RankWindow,
    RecoveryEvent,
)
from rankscope.schemas.envelope import Envelope, schema_id_of
from rankscope.schemas.events import (
    AgentEventEvent,
    CommEventEvent,
    Event,
    FabricCountersEvent,
    FabricEventEvent,
    GpuEventEvent,
    GpuSampleEvent,
    HeartbeatEvent,
    NodeInventoryEvent,
    SchedulerEventEvent,
    SpanEvent,
)

Row = list[Any]

ENVELOPE_COLUMNS = [
    "event_id",
    "schema",
    "cluster",
    "job_id",
    "node",
    "rank",
    "local_rank",
    "gpu",
    "ts_ns",
    "observed_ts_ns",
    "clock_offset_ns",
]


def _envelope(ev: Envelope) -> Row:
    return [
        ev.event_id,
        ev.schema_id,
        ev.cluster,
        ev.job_id,
        ev.node,
        -1 if ev.rank is None else ev.rank,
        -1 if ev.local_rank is None else ev.local_rank,
        -1 if ev.gpu is None else ev.gpu,
        ev.ts,
        ev.observed_ts,
        ev.clock_offset_ns,
    ]


GPU_SAMPLE_FIELDS = [
    "gpu_uuid",
    "sm_util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "energy_mj",
    "temperature_c",
    "throttle_reasons",
    "pcie_replay_count",
    "ecc_sbe_total",
    "ecc_dbe_total",
    "remapped_rows",
    "nvlink_errors_total",
]


SPAN_FIELDS = [
    "name",
    "phase",
    "trace_id",
    "span_id",
    "parent_span_id",
    "start_ns",
    "end_ns",
    "step",
    "status",
    "error_type",
    "error_message",
    "attributes",
]
GPU_EVENT_FIELDS = ["gpu_uuid", "event_type", "xid", "count", "message"]
HEARTBEAT_FIELDS = ["agent", "agent_version", "seq", "interval_s"]
SCHEDULER_FIELDS = ["source", "event_type", "state", "reason", "exit_code"]

#: payload values that need a column-friendly form (no NULL in sort keys, string maps)
_NORMALISE: dict[str, Callable[[Any], Any]] = {
    "step": lambda v: -1 if v is None else v,
    "attributes": lambda a: {k: str(v) for k, v in (a or {}).items()},
}


FABRIC_COUNTER_FIELDS = [
    "device",
    "port",
    "link_layer",
    "state",
    "phys_state",
    "rate",
    "counters",
    "rates_per_s",
    "interval_s",
]
FABRIC_EVENT_FIELDS = [
    "event_type",
    "device",
    "port",
    "counter",
    "delta",
    "old_state",
    "new_state",
    "message",
]
COMM_EVENT_FIELDS = [
    "source",
    "event_type",
    "op",
    "seq",
    "peer_rank",
    "peer",
    "timeout_ms",
    "elapsed_ms",
    "process_group",
    "pid",
    "log_file",
    "message",
    "host",
    "hca",
    "cuda_dev",
    "ib_status",
    "vendor_err",
    "pg_rank",
]
INVENTORY_FIELDS = [
    "driver_version",
    "cuda_version",
    "nccl_version",
    "kernel",
    "os",
    "gpu_model",
    "gpu_count",
    "gpu_vbios",
    "hca_firmware",
    "extra",
    "fingerprint",
]
AGENT_EVENT_FIELDS = ["event_type", "agent", "collector", "count", "message"]


class TableSpec:
    def __init__(
        self,
        table: str,
        columns: list[str],
        to_row: Callable[[Any], Row],
        payload_fields: list[str] | None = None,
    ) -> None:
        self.table = table
        self.columns = columns
        self.to_row = to_row
        self.payload_fields = payload_fields or []


def _event_spec(table: str, fields: list[str]) -> TableSpec:
    """Envelope columns followed by the named payload fields, in order."""
    special = [(i, _NORMALISE[f]) for i, f in enumerate(fields) if f in _NORMALISE]

    def to_row(ev: Any) -> Row:
        p = ev.payload
        values = [getattr(p, f) for f in fields]
        for i, fix in special:
            values[i] = fix(values[i])
        return _envelope(ev) + values

    return TableSpec(table, ENVELOPE_COLUMNS + fields, to_row, fields)


EVENT_TABLES: dict[type[Envelope], TableSpec] = {
    SpanEvent: _event_spec("spans", SPAN_FIELDS),
    GpuSampleEvent: _event_spec("gpu_samples", GPU_SAMPLE_FIELDS),
    GpuEventEvent: _event_spec("gpu_events", GPU_EVENT_FIELDS),
    HeartbeatEvent: _event_spec("heartbeats", HEARTBEAT_FIELDS),
    SchedulerEventEvent: _event_spec("scheduler_events", SCHEDULER_FIELDS),
    FabricCountersEvent: _event_spec("fabric_counters", FABRIC_COUNTER_FIELDS),
    FabricEventEvent: _event_spec("fabric_events", FABRIC_EVENT_FIELDS),
    CommEventEvent: _event_spec("comm_events", COMM_EVENT_FIELDS),
    NodeInventoryEvent: _event_spec("node_inventory", INVENTORY_FIELDS),
    AgentEventEvent: _event_spec("agent_events", AGENT_EVENT_FIELDS),
}

WINDOW_TABLE = TableSpec(
    "rank_windows",
    [
        "window_id",
        "cluster",
        "job_id",
        "rank",
        "node",
        "window_start_ns",
        "window_end_ns",
        "step_count",
        "step_time_mean_s",
        "step_time_max_s",
        "gpu_util_mean_pct",
        "gpu_sample_count",
        "event_count",
        "emitted_ts_ns",
    ],
    lambda w: [
        w.window_id,
        w.cluster,
        w.job_id,
        w.rank,
        w.node,
        w.window_start_ns,
        w.window_end_ns,
        w.step_count,
        w.step_time_mean_s,
        w.step_time_max_s,
        w.gpu_util_mean_pct,
        w.gpu_sample_count,
        w.event_count,
        w.emitted_ts,
    ],
)

LATE_TABLE = TableSpec(
    "late_events",
    [
        "event_id",
        "kind",
        "cluster",
        "job_id",
        "rank",
        "node",
        "ts_ns",
        "window_start_ns",
        "watermark_ns",
        "lateness_ns",
        "received_ts_ns",
    ],
    lambda e: [
        e.event_id,
        e.kind,
        e.cluster,
        e.job_id,
        -1 if e.rank is None else e.rank,
        e.node,
        e.ts,
        e.window_start_ns,
        e.watermark_ns,
        e.lateness_ns,
        e.received_ts,
    ],
)

DEADLETTER_TABLE = TableSpec(
    "deadletter",
    [
        "dead_letter_id",
        "reason_code",
        "reason",
        "source_topic",
        "partition",
        "offset",
        "index_in_batch",
        "size_bytes",
        "sha256",
        "received_ts_ns",
        "record_ts_ns",
        "event_id",
        "schema",
        "kind",
        "job_id",
        "node",
    ],
    lambda d: [
        d.dead_letter_id,
        d.reason_code,
        d.reason,
        d.source_topic,
        d.partition,
        d.offset,
        d.index_in_batch,
        d.size_bytes,
        d.sha256,
        d.received_ts,
        d.record_ts,
        d.event_id,
        d.schema_id,
        d.kind,
        d.job_id,
        d.node,
    ],
)


def _detection(d: Detection) -> Row:
    return [
        d.detection_id,
        d.detection_type,
        d.cluster,
        d.job_id,
        d.node,
        -1 if d.rank is None else d.rank,
        -1 if d.gpu is None else d.gpu,
        d.straggler_class or "",
        d.score,
        d.onset_ts,
        d.detected_ts,
        d.emitted_ts,
        d.summary,
        d.evidence,
        {k: str(v) for k, v in d.details.items()},
    ]


DETECTION_TABLE = TableSpec(
    "detections",
    [
        "detection_id",
        "detection_type",
        "cluster",
        "job_id",
        "node",
        "rank",
        "gpu",
        "straggler_class",
        "score",
        "onset_ts_ns",
        "detected_ts_ns",
        "emitted_ts_ns",
        "summary",
        "evidence",
        "details",
    ],
    _detection,
)


def _incident(i: Incident) -> Row:
    return [
        i.incident_id,
        i.revision,
        i.cluster,
        i.job_id,
        i.cause_class,
        i.node,
        -1 if i.gpu is None else i.gpu,
        -1 if i.rank is None else i.rank,
        i.device,
        i.xid,
        i.confidence,
        i.summary,
        i.first_cause_ts,
        i.first_symptom_ts,
        i.attributed_ts,
        i.emitted_ts,
        i.symptom_ranks,
        json.dumps([e.model_dump() for e in i.evidence]),
        i.clock_offsets_ns,
    ]


INCIDENT_TABLE = TableSpec(
    "incidents",
    [
        "incident_id",
        "revision",
        "cluster",
        "job_id",
        "cause_class",
        "node",
        "gpu",
        "rank",
        "device",
        "xid",
        "confidence",
        "summary",
        "first_cause_ts_ns",
        "first_symptom_ts_ns",
        "attributed_ts_ns",
        "emitted_ts_ns",
        "symptom_ranks",
        "evidence_json",
        "clock_offsets_ns",
    ],
    _incident,
)


AUDIT_TABLE = TableSpec(
    "redaction_audit",
    [
        "audit_id",
        "window_start_ns",
        "cluster",
        "job_id",
        "kind",
        "field",
        "entity",
        "rule",
        "action",
        "count",
        "rules_version",
    ],
    lambda a: [
        a.audit_id,
        a.window_start_ns,
        a.cluster,
        a.job_id,
        a.kind,
        a.field,
        a.entity,
        a.rule,
        a.action,
        a.count,
        a.rules_version,
    ],
)

QUARANTINE_TABLE = TableSpec(
    "redaction_quarantine",
    [
        "quarantine_id",
        "reason_code",
        "reason",
        "fields_removed",
        "rules_version",
        "source_topic",
        "partition",
        "offset",
        "quarantined_ts_ns",
        "event_id",
        "schema",
        "kind",
        "cluster",
        "job_id",
        "node",
        "ts_ns",
        "event_json",
    ],
    lambda q: [
        q.quarantine_id,
        q.reason_code,
        q.reason,
        q.fields_removed,
        q.rules_version,
        q.source_topic,
        q.partition,
        q.offset,
        q.quarantined_ts,
        q.event_id,
        q.schema_id,
        q.kind,
        q.cluster,
        q.job_id,
        q.node,
        q.ts,
        q.event_json,
    ],
)


def _recovery(r: RecoveryEvent) -> Row:
    return [
        r.key,
        r.stage,
        r.action,
        r.cluster,
        r.job_id,
        r.node,
        -1 if r.rank is None else r.rank,
        r.rule,
        r.reason,
        r.trigger_id,
        r.attempt,
        r.ts,
        r.not_before_ts,
    ]


RECOVERY_TABLE = TableSpec(
    "recovery_actions",
    [
        "key",
        "stage",
        "action",
        "cluster",
        "job_id",
        "node",
        "rank",
        "rule",
        "reason",
        "trigger_id",
        "attempt",
        "ts_ns",
        "not_before_ts_ns",
    ],
    _recovery,
)

ALL_TABLES: list[TableSpec] = [
    *EVENT_TABLES.values(),
    WINDOW_TABLE,
    LATE_TABLE,
    DEADLETTER_TABLE,
    DETECTION_TABLE,
    INCIDENT_TABLE,
    AUDIT_TABLE,
    QUARANTINE_TABLE,
    RECOVERY_TABLE,
]


def event_spec(ev: Event) -> TableSpec:
    return EVENT_TABLES[type(ev)]


__all__ = [
    "ALL_TABLES",
    "AUDIT_TABLE",
    "DEADLETTER_TABLE",
    "DETECTION_TABLE",
    "EVENT_TABLES",
    "INCIDENT_TABLE",
    "LATE_TABLE",
    "QUARANTINE_TABLE",
    "RECOVERY_TABLE",
    "WINDOW_TABLE",
    "DeadLetter",
    "LateEvent",
    "RankWindow",
    "TableSpec",
    "event_spec",
]


# -- fast path: rows straight from the JSON the validate stage wrote ----------------------------
# The sink reads ``<p>.events``, which only the validate stage writes (every field present,
# already validated), so it can skip a second pydantic pass. ``fast_row`` must produce exactly
# what ``TableSpec.to_row`` produces from the model (a test checks every kind).

#: schema id -> table spec
FAST_TABLES: dict[str, TableSpec] = {
    schema_id_of(_model): _spec for _model, _spec in EVENT_TABLES.items()
}


def fast_row(doc: dict[str, Any]) -> tuple[TableSpec, Row]:
    """(table, row) for one event dict as serialised by the validate stage."""
    spec = FAST_TABLES[doc["schema"]]
    rank, local, gpu = doc.get("rank"), doc.get("local_rank"), doc.get("gpu")
    row: Row = [
        doc["event_id"],
        doc["schema"],
        doc["cluster"],
        doc.get("job_id", ""),
        doc["node"],
        -1 if rank is None else rank,
        -1 if local is None else local,
        -1 if gpu is None else gpu,
        doc["ts"],
        doc["observed_ts"],
        doc.get("clock_offset_ns"),
    ]
    p = doc["payload"]
    for f in spec.payload_fields:
        fix = _NORMALISE.get(f)
        row.append(p[f] if fix is None else fix(p.get(f)))
    return spec, row
