"""Contracts: committed JSON Schema files match the models; compatibility rules hold."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from rankscope.schemas.events import EVENT_ADAPTER, KINDS, MODEL_BY_SCHEMA, dump_event
from rankscope.schemas.export import JSON_DIR, schema_documents
from rankscope.schemas.topics import Topics
from tests.factories import NOW_NS, span


def test_committed_json_schemas_match_models() -> None:
    docs = schema_documents()
    committed = {p.name: p.read_text() for p in JSON_DIR.glob("*.json")}
    assert set(committed) == set(docs), (
        "run `rankscope schemas-export --out schemas/json` and commit it"
    )
    for name, text in docs.items():
        assert committed[name] == text, (
            f"{name} drifted: run `rankscope schemas-export --out schemas/json`"
        )


def test_every_kind_has_a_raw_topic_and_a_schema() -> None:
    assert set(KINDS) == {
        "agent_event",
        "comm_event",
        "fabric_counters",
        "fabric_event",
        "gpu_event",
        "gpu_sample",
        "heartbeat",
        "node_inventory",
        "scheduler_event",
        "span",
    }
    assert all(sid.split("/")[0] in KINDS for sid in MODEL_BY_SCHEMA)
    assert Topics("x").raw == "x.raw.events"
    assert Topics("x").all_raw == ["x.raw.events", "otlp_spans", "x.raw.otlp_spans", "otlp_logs"]


def test_round_trip_uses_schema_alias() -> None:
    ev = span(1, NOW_NS)
    doc = json.loads(dump_event(ev))
    assert doc["schema"] == "span/1" and "schema_id" not in doc
    assert EVENT_ADAPTER.validate_python(doc) == ev


def test_kind_must_match_schema() -> None:
    doc = json.loads(dump_event(span(1, NOW_NS)))
    doc["kind"] = "gpu_sample"
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_python(doc)


def test_unknown_fields_are_refused_not_dropped() -> None:
    """Silently dropping an unknown field would lose data and skip redaction review."""
    doc = json.loads(dump_event(span(1, NOW_NS)))
    doc["payload"]["prompt"] = "text"
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_python(doc)
