"""Typed records -> ClickHouse rows: the one import path for every table the sink writes.

The tables are declared in ``event_tables`` (raw events, with the sink's JSON fast path) and
``derived_tables`` (what the workers compute), on the column machinery of ``columns``. Column
lists must match ``migrations``; a test inserts one row of every kind through these mappings
into a freshly migrated engine.
"""

from __future__ import annotations

from rankscope.sinks.columns import Column, Row, TableSpec
from rankscope.sinks.derived_tables import (
    AUDIT_TABLE,
    DEADLETTER_TABLE,
    DERIVED_TABLES,
    DETECTION_TABLE,
    INCIDENT_TABLE,
    LATE_TABLE,
    QUARANTINE_TABLE,
    RECOVERY_TABLE,
    WINDOW_TABLE,
)
from rankscope.sinks.event_tables import (
    EVENT_TABLES,
    FAST_TABLES,
    EventTableSpec,
    event_spec,
    fast_row,
)

ALL_TABLES: list[TableSpec] = [*EVENT_TABLES.values(), *DERIVED_TABLES]

__all__ = [
    "ALL_TABLES",
    "AUDIT_TABLE",
    "DEADLETTER_TABLE",
    "DETECTION_TABLE",
    "EVENT_TABLES",
    "FAST_TABLES",
    "INCIDENT_TABLE",
    "LATE_TABLE",
    "QUARANTINE_TABLE",
    "RECOVERY_TABLE",
    "WINDOW_TABLE",
    "Column",
    "EventTableSpec",
    "Row",
    "TableSpec",
    "event_spec",
    "fast_row",
]
