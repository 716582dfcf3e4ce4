"""Every integer an event may carry fits the ClickHouse column it is stored in (issue 15).

A value the schema accepts but the column cannot hold (``rank=2**40`` into Int32,
``observed_ts=2**63+5`` into Int64) used to pass validation and then fail every insert of its
batch, wedging the sink. The bounds live in the schemas; these tests hold them against the
column types a freshly migrated real engine reports, and insert events carrying every bound.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from rankscope.schemas.events import dump_event
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.event_tables import EVENT_TABLES
from rankscope.sinks.rows import event_spec
from rankscope.streams.config import ValidationLimits
from rankscope.streams.validate import RecordRef, validate_message
from tests.conftest import Services
from tests.factories import NOW_NS, span
from tests.test_clickhouse import every_kind

LIMITS = ValidationLimits()
REF = RecordRef(topic="rankscope.raw.span", partition=0, offset=1, timestamp_ns=NOW_NS)

_INT = re.compile(r"^(?:Nullable\()?(U?)Int(8|16|32|64)\)?$")


def column_range(ch_type: str) -> tuple[int, int] | None:
    """The values a ClickHouse (Nullable) integer type holds; None for other types."""
    m = _INT.match(ch_type)
    if not m:
        return None
    bits = int(m.group(2))
    if m.group(1):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _field(model: type[BaseModel], path: str) -> FieldInfo:
    owner: Any = model
    info: FieldInfo | None = None
    for part in path.split("."):
        info = owner.model_fields[part]
        owner = info.annotation
    assert info is not None
    return info


def field_bounds(info: FieldInfo) -> tuple[int | None, int | None]:
    lo = hi = None
    for m in info.metadata:
        if isinstance(m, annotated_types.Ge):
            lo = int(m.ge)  # type: ignore[call-overload]
        elif isinstance(m, annotated_types.Gt):
            lo = int(m.gt) + 1  # type: ignore[call-overload]
        elif isinstance(m, annotated_types.Le):
            hi = int(m.le)  # type: ignore[call-overload]
        elif isinstance(m, annotated_types.Lt):
            hi = int(m.lt) - 1  # type: ignore[call-overload]
    return lo, hi


def _is_int(info: FieldInfo) -> bool:
    ann = info.annotation
    return ann is int or (getattr(ann, "__args__", None) is not None and int in ann.__args__)


@pytest.fixture(scope="module")
def column_types(services: Services) -> dict[tuple[str, str], str]:
    database = f"bounds{uuid.uuid4().hex[:8]}"
    client = connect(services.clickhouse_url)
    migrate(client, database)
    rows = client.query(
        "SELECT table, name, type FROM system.columns WHERE database = {db:String}",
        parameters={"db": database},
    ).result_rows
    return {(t, n): ty for t, n, ty in rows}


def test_every_integer_field_fits_its_column(column_types: dict[tuple[str, str], str]) -> None:
    problems = []
    checked = 0
    for spec in EVENT_TABLES.values():
        for name, path in zip(spec.columns, spec.paths, strict=True):
            rng = column_range(column_types[(spec.table, name)])
            info = _field(spec.model, path)
            if rng is None or not _is_int(info):
                continue
            checked += 1
            lo, hi = field_bounds(info)
            where = f"{spec.model.__name__}.{path} -> {spec.table}.{name} {rng}"
            if lo is None or lo < rng[0]:
                problems.append(f"{where}: lower bound {lo}")
            if hi is None or hi > rng[1]:
                problems.append(f"{where}: upper bound {hi}")
    assert checked > 40
    assert problems == [], "\n".join(problems)


def _int_paths(spec: Any, column_types: dict[tuple[str, str], str]) -> list[tuple[str, str]]:
    out = []
    for name, path in zip(spec.columns, spec.paths, strict=True):
        if column_range(column_types[(spec.table, name)]) and _is_int(_field(spec.model, path)):
            out.append((name, path))
    return out


def _with(doc: dict[str, Any], path: str, value: int) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    owner = doc
    *parents, last = path.split(".")
    for part in parents:
        owner = owner[part]
    owner["schema" if last == "schema_id" else last] = value
    return doc


def test_events_at_every_bound_are_stored_and_one_past_is_refused(
    services: Services, column_types: dict[tuple[str, str], str]
) -> None:
    """The bounds are not too wide (each stores) nor too narrow (each is the column's limit or a
    rule of the field), and one past the bound is a dead letter naming the field."""
    database = f"bounds{uuid.uuid4().hex[:8]}"
    client = connect(services.clickhouse_url)
    migrate(client, database)
    stored = 0
    for ev in every_kind():
        spec = event_spec(ev)
        base = json.loads(dump_event(ev))
        for name, path in _int_paths(spec, column_types):
            lo, hi = field_bounds(_field(spec.model, path))
            assert lo is not None and hi is not None
            for i, value in enumerate((lo, hi)):
                doc = _with(base, path, value)
                doc["event_id"] = f"{ev.event_id}{name}{i}"[:64]
                event = type(ev).model_validate(doc)
                client.insert(
                    f"{database}.{spec.table}", [spec.to_row(event)], column_names=spec.columns
                )
                got = client.query(
                    f"SELECT {name} FROM {database}.{spec.table} WHERE event_id = %(e)s",
                    parameters={"e": doc["event_id"]},
                ).result_rows
                assert got == [(value,)], f"{spec.table}.{name}"
                stored += 1
            res = validate_message(
                json.dumps([_with(base, path, hi + 1)]).encode(), REF, LIMITS, now_ns=NOW_NS
            )
            assert res.events == [] and [d.reason_code for d in res.dead] == ["invalid_event"]
            assert path.split(".")[-1] in res.dead[0].reason
    assert stored > 80


@pytest.mark.parametrize(
    ("path", "value"),
    [("rank", 2**40), ("local_rank", 70_000), ("observed_ts", 2**63 + 5), ("ts", 2**63 + 5)],
)
def test_the_issue_values_are_dead_letters(path: str, value: int) -> None:
    doc = _with(json.loads(dump_event(span(1, NOW_NS))), path, value)
    res = validate_message(json.dumps(doc).encode(), REF, LIMITS, now_ns=NOW_NS)
    assert res.events == [] and [d.reason_code for d in res.dead] == ["invalid_event"]
    assert path in res.dead[0].reason
