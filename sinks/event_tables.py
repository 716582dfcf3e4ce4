"""The raw event tables: envelope columns, then one kind's payload columns, per event model.

Each event table writes rows two ways from the same declaration: ``to_row`` from a validated
model, and ``fast_row`` straight from the JSON the validate stage wrote to ``<p>.events`` (every
field present, already validated), so the sink skips a second pydantic pass on its hot path.
Both are built from the same columns in the same order (a test checks they agree for every kind).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

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
from rankscope.sinks.columns import (
    REQUIRED,
    Column,
    Row,
    TableSpec,
    as_columns,
    fixes_of,
    nullable_int,
    str_map,
)

#: the columns every event table starts with, read from the envelope
ENVELOPE: tuple[Column, ...] = (
    Column("event_id"),
    Column("schema", "schema_id", key="schema"),
    Column("cluster"),
    Column("job_id", missing=""),
    Column("node"),
    nullable_int("rank"),
    nullable_int("local_rank"),
    nullable_int("gpu"),
    Column("ts_ns", "ts"),
    Column("observed_ts_ns", "observed_ts"),
    Column("clock_offset_ns", missing=None),
)


class EventTableSpec(TableSpec):
    """An event table: ``ENVELOPE`` then ``payload``'s columns (read from ``ev.payload``)."""

    model: type[Envelope]

    def __init__(self, table: str, model: type[Envelope], payload: Sequence[str | Column]):
        pay = as_columns(payload)
        super().__init__(
            table,
            model,
            ENVELOPE + pay,
            paths=[c.source for c in ENVELOPE] + [f"payload.{c.source}" for c in pay],
        )
        self.schema_id = schema_id_of(model)
        #: the row of one event dict as serialised by the validate stage
        self.doc_row = _doc_row(pay)


def _doc_row(payload: tuple[Column, ...]) -> Callable[[dict[str, Any]], Row]:
    """Row writer for an event dict.

    The validate stage writes every key, so the row is read by two C-level ``itemgetter`` calls
    (no Python loop over the columns); only a document that lacks a key takes the per-key path,
    where an optional key reads as its ``Column.missing`` and a required one raises ``KeyError``.
    """
    env_get, pay_get = _getter(ENVELOPE), _getter(payload)
    env = tuple((c.json_key, c.missing) for c in ENVELOPE)
    pay = tuple((c.json_key, c.missing) for c in payload)
    fixes = fixes_of(ENVELOPE + payload)

    def lenient(doc: dict[str, Any]) -> Row:
        row = [doc[k] if m is REQUIRED else doc.get(k, m) for k, m in env]
        p = doc["payload"]
        return row + [p[k] if m is REQUIRED else p.get(k, m) for k, m in pay]

    def doc_row(doc: dict[str, Any]) -> Row:
        try:
            row = [*env_get(doc), *pay_get(doc["payload"])]
        except KeyError:
            row = lenient(doc)
        for i, fix in fixes:
            row[i] = fix(row[i])
        return row

    return doc_row


def _getter(columns: tuple[Column, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """``itemgetter`` of the columns' keys that always returns a tuple."""
    get = itemgetter(*(c.json_key for c in columns))
    if len(columns) == 1:
        return lambda d: (get(d),)
    return get


EVENT_TABLES: dict[type[Envelope], EventTableSpec] = {
    spec.model: spec
    for spec in (
        EventTableSpec(
            "spans",
            SpanEvent,
            (
                "name",
                "phase",
                "trace_id",
                "span_id",
                "parent_span_id",
                "start_ns",
                "end_ns",
                nullable_int("step"),
                "status",
                "error_type",
                "error_message",
                str_map("attributes"),
            ),
        ),
        EventTableSpec(
            "gpu_samples",
            GpuSampleEvent,
            (
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
                # optional since migration 0012 (dcgm-exporter): older documents lack them
                Column("source", missing=""),
                Column("sm_active_pct", missing=None),
                Column("sm_occupancy_pct", missing=None),
                Column("tensor_active_pct", missing=None),
                Column("dram_active_pct", missing=None),
                Column("gr_engine_active_pct", missing=None),
                Column("nvlink_tx_bytes_per_s", missing=None),
                Column("nvlink_rx_bytes_per_s", missing=None),
                Column("pcie_tx_bytes_per_s", missing=None),
                Column("pcie_rx_bytes_per_s", missing=None),
                Column("nvlink_bandwidth_total", missing=None),
            ),
        ),
        EventTableSpec(
            "gpu_events",
            GpuEventEvent,
            (
                "gpu_uuid",
                "event_type",
                "xid",
                "count",
                "message",
                # optional since migration 0010 (kernel-log collector): older documents lack them
                Column("pci_bus_id", missing=""),
                Column("source", missing=""),
                Column("pattern", missing=""),
                Column("sxid", missing=None),
                Column("xid_bucket", missing=""),  # since migration 0011
            ),
        ),
        EventTableSpec(
            "heartbeats", HeartbeatEvent, ("agent", "agent_version", "seq", "interval_s")
        ),
        EventTableSpec(
            "scheduler_events",
            SchedulerEventEvent,
            (
                "source",
                "event_type",
                "state",
                "reason",
                "exit_code",
                # optional since migration 0014 (runs across attempts): older documents lack them
                Column("run_id", missing=""),
                Column("attempt", missing=0),
            ),
        ),
        EventTableSpec(
            "fabric_counters",
            FabricCountersEvent,
            (
                "device",
                "port",
                "link_layer",
                "state",
                "phys_state",
                "rate",
                "counters",
                "rates_per_s",
                "interval_s",
            ),
        ),
        EventTableSpec(
            "fabric_events",
            FabricEventEvent,
            (
                "event_type",
                "device",
                "port",
                "counter",
                "delta",
                "old_state",
                "new_state",
                "message",
            ),
        ),
        EventTableSpec(
            "comm_events",
            CommEventEvent,
            (
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
            ),
        ),
        EventTableSpec(
            "node_inventory",
            NodeInventoryEvent,
            (
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
            ),
        ),
        EventTableSpec(
            "agent_events",
            AgentEventEvent,
            ("event_type", "agent", "collector", "count", "message"),
        ),
    )
}

#: schema id -> table spec, for the fast path
FAST_TABLES: dict[str, EventTableSpec] = {spec.schema_id: spec for spec in EVENT_TABLES.values()}


def event_spec(ev: Event) -> EventTableSpec:
    return EVENT_TABLES[type(ev)]


def fast_row(doc: dict[str, Any]) -> tuple[EventTableSpec, Row]:
    """(table, row) for one event dict as serialised by the validate stage.

    Raises ``KeyError``, ``TypeError`` or ``AttributeError`` on anything else (an unknown schema,
    a required key absent, a payload that is no object): the sink then takes the validating path.
    """
    spec = FAST_TABLES[doc["schema"]]
    return spec, spec.doc_row(doc)


__all__ = ["ENVELOPE", "EVENT_TABLES", "FAST_TABLES", "EventTableSpec", "event_spec", "fast_row"]
