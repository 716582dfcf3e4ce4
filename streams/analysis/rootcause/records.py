"""The records root-cause attribution keeps: signals, per-rank progress, cascades, counters.

Why a module: every other part (signal reader, scoring, inference, narrative) reads and writes
these few shapes; keeping them in one leaf module lets those parts import them without importing
each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from rankscope.schemas.derived import CauseClass, Incident

__all__ = [
    "MS",
    "NS",
    "Cascade",
    "RankState",
    "Rec",
    "RecKey",
    "Role",
    "RootCauseStats",
    "key",
    "where",
]

NS = 1_000_000_000
MS = 1_000_000
#: the role of an event in an incident's evidence chain
Role = Literal["cause", "precursor", "symptom"]


@dataclass(slots=True)
class Rec:
    """One candidate precursor or symptom, reduced to what attribution needs."""

    ts: int  # corrected
    node: str
    rank: int | None
    gpu: int | None
    kind: str
    what: str  # sentence without the time prefix
    event_id: str = ""
    cause: CauseClass | None = None  # None: a symptom only
    strength: float = 0.0
    xid: int | None = None
    device: str = ""  # HCA port ("mlx5_3:1") or GPU uuid (+":" NVLink index)
    node_level: bool = False  # concerns the whole node (preemption, node down, silence)
    derived: bool = False  # inferred at attribution time, not an event
    timeout: bool = False  # a watchdog timeout (symptom)
    op: str = ""
    seq: int | None = None


RecKey = tuple[int, str, int | None, str, str | None, str]


def key(r: Rec) -> RecKey:
    """Identity of a record across rebuilds (inferred records are re-created each time)."""
    return (r.ts, r.node, r.rank, r.kind, r.cause, r.event_id)


@dataclass(slots=True)
class RankState:
    """What the hot path keeps per rank: where it runs and how far it got."""

    node: str
    gpu: int | None
    last_ts: int = -1  # corrected end of the last successful span
    seq: int = -1  # last collective sequence number completed
    seq_ts: int = -1


@dataclass
class Cascade:
    """Everything one failure cascade has accumulated."""

    first_ts: int
    floor: int  # precursors at or before this belong to an earlier cascade
    last_ts: int = -1
    end_ts: int | None = None  # scheduler ended the job (corrected)
    rank_first: dict[int, Rec] = field(default_factory=dict)
    timeout_ranks: set[int] = field(default_factory=set)
    job_level: list[Rec] = field(default_factory=list)
    watchdog: Counter[tuple[str, int]] = field(default_factory=Counter)
    named: dict[str, set[str]] = field(default_factory=dict)  # named node -> reporter nodes
    symptom_events: int = 0
    primary: Rec | None = None
    incident: Incident | None = None
    attributed_ts: int = 0
    dirty: bool = False
    revisions: int = 0
    #: a failure signal other than a detector's note was seen
    real: bool = False
    #: earliest onset a detector's note gave (a note-only cascade that the job's progress
    #: contradicts is dropped)
    note_onset: int | None = None
    #: fixed at first emission; revisions (even re-attributed ones) keep it
    incident_id: str = ""


class RootCauseStats(BaseModel):
    """Counters for the worker's metrics."""

    events: int = 0
    candidates: int = 0
    symptoms: int = 0
    history_dropped: int = 0
    cascades: int = 0
    cascades_dropped: int = 0
    incidents: int = 0
    revisions: int = 0
    reattributed: int = 0


def where(node: str, rank: int | None, gpu: int | None) -> str:
    """'node007 GPU 3 (rank 59)' / 'node007 rank 59' / 'node007'."""
    if gpu is not None:
        return f"{node} GPU {gpu}" + (f" (rank {rank})" if rank is not None else "")
    return f"{node} rank {rank}" if rank is not None else node
