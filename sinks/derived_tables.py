"""The derived tables: what the workers compute (windows, detections, incidents, recovery
actions, redaction audit) and the records they set aside (late events, dead letters,
quarantine), one ``TableSpec`` per model, columns in migration order."""

from __future__ import annotations

import json

from rankscope.schemas.derived import (
    DeadLetter,
    Detection,
    EvidenceItem,
    Incident,
    LateEvent,
    QuarantinedEvent,
    RankWindow,
    RecoveryEvent,
    RedactionAudit,
)
from rankscope.sinks.baseline_table import BASELINE_TABLE
from rankscope.sinks.columns import Column, TableSpec, nullable_int, str_map


def _or_empty(value: str | None) -> str:
    return value or ""


def _evidence_json(items: list[EvidenceItem]) -> str:
    return json.dumps([e.model_dump() for e in items])


WINDOW_TABLE = TableSpec(
    "rank_windows",
    RankWindow,
    (
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
        Column("emitted_ts_ns", "emitted_ts"),
    ),
)

LATE_TABLE = TableSpec(
    "late_events",
    LateEvent,
    (
        "event_id",
        "kind",
        "cluster",
        "job_id",
        nullable_int("rank"),
        "node",
        Column("ts_ns", "ts"),
        "window_start_ns",
        "watermark_ns",
        "lateness_ns",
        Column("received_ts_ns", "received_ts"),
    ),
)

DEADLETTER_TABLE = TableSpec(
    "deadletter",
    DeadLetter,
    (
        "dead_letter_id",
        "reason_code",
        "reason",
        "source_topic",
        "partition",
        "offset",
        "index_in_batch",
        "size_bytes",
        "sha256",
        Column("received_ts_ns", "received_ts"),
        Column("record_ts_ns", "record_ts"),
        "event_id",
        Column("schema", "schema_id"),
        "kind",
        "job_id",
        "node",
    ),
)

DETECTION_TABLE = TableSpec(
    "detections",
    Detection,
    (
        "detection_id",
        "detection_type",
        "cluster",
        "job_id",
        "node",
        nullable_int("rank"),
        nullable_int("gpu"),
        Column("straggler_class", fix=_or_empty),
        "score",
        Column("onset_ts_ns", "onset_ts"),
        Column("detected_ts_ns", "detected_ts"),
        Column("emitted_ts_ns", "emitted_ts"),
        "summary",
        "evidence",
        str_map("details"),
    ),
)

INCIDENT_TABLE = TableSpec(
    "incidents",
    Incident,
    (
        "incident_id",
        "revision",
        "cluster",
        "job_id",
        "cause_class",
        "node",
        nullable_int("gpu"),
        nullable_int("rank"),
        "device",
        "xid",
        "confidence",
        "summary",
        Column("first_cause_ts_ns", "first_cause_ts"),
        Column("first_symptom_ts_ns", "first_symptom_ts"),
        Column("attributed_ts_ns", "attributed_ts"),
        Column("emitted_ts_ns", "emitted_ts"),
        "symptom_ranks",
        Column("evidence_json", "evidence", fix=_evidence_json),
        "clock_offsets_ns",
    ),
)

AUDIT_TABLE = TableSpec(
    "redaction_audit",
    RedactionAudit,
    (
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
        "stage",
    ),
)

QUARANTINE_TABLE = TableSpec(
    "redaction_quarantine",
    QuarantinedEvent,
    (
        "quarantine_id",
        "reason_code",
        "reason",
        "fields_removed",
        "rules_version",
        "source_topic",
        "partition",
        "offset",
        Column("quarantined_ts_ns", "quarantined_ts"),
        "event_id",
        Column("schema", "schema_id"),
        "kind",
        "cluster",
        "job_id",
        "node",
        Column("ts_ns", "ts"),
        "event_json",
    ),
)

RECOVERY_TABLE = TableSpec(
    "recovery_actions",
    RecoveryEvent,
    (
        "key",
        "stage",
        "action",
        "cluster",
        "job_id",
        "node",
        nullable_int("rank"),
        "rule",
        "reason",
        "trigger_id",
        "attempt",
        Column("ts_ns", "ts"),
        Column("not_before_ts_ns", "not_before_ts"),
    ),
)

DERIVED_TABLES: list[TableSpec] = [
    WINDOW_TABLE,
    LATE_TABLE,
    DEADLETTER_TABLE,
    DETECTION_TABLE,
    INCIDENT_TABLE,
    AUDIT_TABLE,
    QUARANTINE_TABLE,
    RECOVERY_TABLE,
    BASELINE_TABLE,
]

__all__ = [
    "AUDIT_TABLE",
    "DEADLETTER_TABLE",
    "DERIVED_TABLES",
    "DETECTION_TABLE",
    "INCIDENT_TABLE",
    "LATE_TABLE",
    "QUARANTINE_TABLE",
    "RECOVERY_TABLE",
    "WINDOW_TABLE",
]
