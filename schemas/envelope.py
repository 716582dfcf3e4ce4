"""The event envelope shared by every kind of telemetry.

Every event carries the same routing and timing fields so that any stage can key, order and
deduplicate it without knowing its payload. The payload is typed per kind in ``payloads``.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Final, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# Identifiers are bounded so that a hostile or broken producer cannot blow up row sizes.
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=256)]
OptionalText = Annotated[str, StringConstraints(max_length=256)]
EventId = Annotated[
    str, StringConstraints(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
]
# The ranges of the ClickHouse integer columns fields are stored in: a value the schema accepts
# must fit its column, or it fails the insert of its whole batch (tests/test_schema_storage_bounds
# holds every event field against the migrated tables).
INT16_MAX: Final = 2**15 - 1
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT16_MAX: Final = 2**16 - 1
UINT32_MAX: Final = 2**32 - 1
UINT64_MAX: Final = 2**64 - 1

NonNegativeNs = Annotated[int, Field(ge=0, le=INT64_MAX)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


def new_event_id() -> str:
    """A fresh event id: the key of every idempotent write downstream."""
    return uuid.uuid4().hex


class Envelope(BaseModel):
    """Fields common to every event; subclasses pin ``schema``/``kind`` and add ``payload``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    event_id: EventId = Field(description="Unique id; ClickHouse writes are idempotent on it.")
    schema_id: str = Field(
        alias="schema", description="Schema name and version, e.g. gpu_sample/1."
    )
    kind: str = Field(description="Event family; selects the raw topic and the table.")
    cluster: Identifier = Field(description="Cluster the source runs in.")
    job_id: OptionalText = Field(
        default="", description="Scheduler job id; empty for node-level events."
    )
    node: Identifier = Field(description="Host name of the node the event comes from.")
    rank: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Global rank, where it applies."
    )
    local_rank: int | None = Field(default=None, ge=0, le=INT16_MAX)
    gpu: int | None = Field(default=None, ge=0, le=INT16_MAX, description="GPU index on the node.")
    ts: NonNegativeNs = Field(
        description="Event time in ns since the epoch, from the source clock."
    )
    observed_ts: NonNegativeNs = Field(description="When the collector observed/published it (ns).")
    clock_offset_ns: int | None = Field(
        default=None,
        ge=INT64_MIN,
        le=INT64_MAX,
        description="Estimated offset of the source clock from true time, if known.",
    )


def schema_id_of(model: type[Envelope]) -> str:
    """The schema id a concrete event model pins with its ``schema_id`` Literal (``"span/1"``)."""
    return _pinned(model, "schema_id")


def kind_of(model: type[Envelope]) -> str:
    """The kind a concrete event model pins with its ``kind`` Literal (``"span"``)."""
    return _pinned(model, "kind")


def _pinned(model: type[Envelope], field: str) -> str:
    (value,) = get_args(model.model_fields[field].annotation)
    return str(value)
