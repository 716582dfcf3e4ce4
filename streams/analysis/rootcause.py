"""Cross-rank root cause of a failure cascade: one incident per cascade, with its evidence chain.

Why: on a large job one GPU falls off the bus (or an HCA port flaps, or the scheduler takes a
node away) and seconds to minutes later every other rank dies with an NCCL watchdog timeout. The
last exception, and most of the log volume, points at the wrong place. This module looks back
across all ranks and nodes of one job when a failure signal appears, orders the precursors by
*corrected* time, weighs them by how diagnostic their kind is and by topology, and emits ONE
:class:`~schemas.derived.Incident` naming the primary cause, its evidence chain, the symptom ranks
and a confidence (design: Processing semantics -> Root cause; the fault catalogue gives the
expected attribution per scenario).

It is pure and incremental: no Kafka, no faust, no wall clock except ``emitted_ts``. The caller
(one :class:`RootCauseAttributor` per job) feeds every event of the job with its corrected
timestamp through :meth:`RootCauseAttributor.observe`, tells it about hangs and silent nodes that
other detectors found (:meth:`~RootCauseAttributor.note_hang`,
:meth:`~RootCauseAttributor.note_node_unresponsive`), and calls
:meth:`~RootCauseAttributor.advance` with the job's event time; ``advance`` returns the incidents
that became due.

**What is kept.** Only candidate precursors (XIDs, ECC, GPU not answering, fabric link/counter
events, NVLink, scheduler preemption/OOM/node down/drain, notes from detectors) in a bounded
deque, and, while a cascade is open, the first symptom of each rank. The hot kinds (GPU samples,
fabric counters, heartbeats, successful spans) only update a per-node "last seen" time and a
per-rank progress record, O(1) each, so memory is O(ranks + nodes + max_history).

**Failure signals** open a cascade: error spans, NCCL/PyTorch communication errors (watchdog
timeout, nccl_error, remote process exited, process-group abort, IB completion errors), the
scheduler failing the job, and (``trigger_on_fatal_precursors``) precursors that always kill the
process: fatal XIDs (48, 62, 74, 79, 94, 95, 119, 120), an uncorrectable ECC event, a GPU not
answering, a preemption, an OOM kill, a node down, and the detectors' notes. Triggering on the
precursor itself matters in production: with PyTorch's 600 s watchdog the surviving ranks'
timeouts come ten minutes after the XID, far beyond any sensible look-back.

**When an incident is emitted.** When the job's event time passes ``first signal + settle_s``
(late evidence within ``settle_s`` still counts), or as soon as the scheduler reports the job
ended (no more events of this job will come to advance its event time). Later failure signals of
the same cascade do not create a second incident: they are absorbed, and the incident is
re-emitted with the **same** ``incident_id`` and the same primary cause once they settle (a
revision with more symptom ranks and evidence; the ``incidents`` table is a ReplacingMergeTree on
``incident_id``). A cascade ends when the job is restarted (scheduler ``job_started``), when it
makes progress again (a step that started after the cascade's last signal completes), or after
``cascade_gap_s`` without a new signal; the next failure signal then opens a new cascade, and
precursors from before the old cascade's end can no longer be chosen.

**Choosing the primary cause.** Every candidate gets

    score = class_weight[class] x strength x time_factor x survived_factor x (1 + topology bonus)

- ``class_weight``: the design's order, GPU XID/ECC (1.0) > NVLink (0.95) > IB link (0.9) >
  node unresponsive (0.85) > host OOM = preemption (0.8) > hang (0.7) > application (0.5) >
  communication (0.25) > unknown (0.1); configurable.
- ``strength``: how diagnostic this particular event is within its class (XID 79 1.0, XID 45
  0.15 because it is the driver cleaning up after a killed process, a 1-error symbol counter
  0.05, an inferred hang 0.85 vs a detector's 1.0, ...).
- ``time_factor``: 1 for a precursor at or before the first failure signal (decaying linearly by
  at most ``decay_max`` once it is more than ``decay_after_s`` older); ``after_factor`` (0.6) for
  one up to ``after_tolerance_s`` *after* it (collectors poll; a cause is rarely logged after its
  effect); nothing outside ``[first signal - lookback_s, first signal + after_tolerance_s]``.
- ``survived_factor`` (0.3): the job completed a step that *started after* this event, so the
  event did not stall it (a link flap NCCL rode through, a corrected ECC error).
- topology bonus (capped at 0.5): +0.15 per distinct peer node whose errors name this node
  (``net_ib_error``/``remote_process_exited`` peer addresses, up to 3); +0.2 when the candidate is
  on a rank that never entered the collective sequence number the others timed out on; +0.1
  when a symptom follows on the same rank (or node, for node-level causes) within
  ``corroboration_s`` (an NVLink XID whose local ranks fail first).

Ties go to the earliest candidate. Three kinds of candidate are *inferred* at attribution time,
and only when nothing explicit on that subject explains them: a node whose telemetry stopped
while the others kept reporting (node_unresponsive), a rank that reported nothing while the
majority timed out (hang, on the rank that never entered seq N), and a node named by its peers'
IB errors (ib_link). With nothing better, the earliest communication error is the cause
(communication), and with nothing at all, ``unknown``.

**Confidence** = ``min(0.99, sqrt(w) x (0.5 + 0.5 x margin) x corroboration)`` where ``w`` is the
primary's class weight x strength (how diagnostic its evidence is), ``margin = (s1 - s2) / s1``
compares its score ``s1`` with the best competing explanation ``s2`` (a non-communication
candidate on another subject; 0 when there is none), and ``corroboration`` is 1 when the
symptoms point at it (other ranks failed after it, or the topology bonus is positive) and 0.8
otherwise (e.g. an XID reported before any rank has failed yet). An uncontested XID 79 followed by
timeouts scores 0.99; an uncontested application exception 0.71; a bare NCCL error 0.5.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas.derived import CauseClass, EvidenceItem, Incident
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
from rankscope.schemas.payloads import Span

__all__ = [
    "DEFAULT_CLASS_WEIGHTS",
    "XID_INFO",
    "RootCauseAttributor",
    "RootCauseConfig",
    "RootCauseStats",
    "XidInfo",
    "xid_description",
]

_NS = 1_000_000_000
_MS = 1_000_000
_Role = Literal["cause", "precursor", "symptom"]


class XidInfo(NamedTuple):
    """What an XID means for attribution: its text, class, strength, and whether it is fatal."""

    description: str
    cause: CauseClass
    strength: float
    #: always ends the process on that GPU, so it is itself a failure signal
    fatal: bool


#: The XIDs seen in practice on training clusters (NVIDIA's XID catalogue). XIDs 13/31/43 are
#: usually an application bug surfacing on the GPU (weaker than the exception span they come
#: with); 45 is the driver cleaning up after a killed process (a consequence, e.g. of an OOM
#: kill); 92 is ECC-related, so it maps to gpu_ecc.
XID_INFO: dict[int, XidInfo] = {
    13: XidInfo("Graphics Engine Exception, usually an application fault", "gpu_xid", 0.35, False),
    31: XidInfo("GPU memory page fault, usually an application fault", "gpu_xid", 0.35, False),
    43: XidInfo("GPU stopped processing, a channel was reset", "gpu_xid", 0.3, False),
    45: XidInfo("Preemptive cleanup, due to previous errors", "gpu_xid", 0.15, False),
    48: XidInfo("Double Bit ECC Error", "gpu_ecc", 1.0, True),
    61: XidInfo("Internal micro-controller breakpoint/warning", "gpu_xid", 0.8, False),
    62: XidInfo("Internal micro-controller halt", "gpu_xid", 0.95, True),
    63: XidInfo("ECC page retirement or row remapping recording event", "gpu_ecc", 0.5, False),
    64: XidInfo("ECC page retirement or row remapper recording failure", "gpu_ecc", 0.85, False),
    74: XidInfo("NVLink Error", "nvlink", 1.0, True),
    79: XidInfo("GPU has fallen off the bus", "gpu_xid", 1.0, True),
    92: XidInfo("High single-bit ECC error rate", "gpu_ecc", 0.3, False),
    94: XidInfo("Contained ECC error", "gpu_ecc", 0.9, True),
    95: XidInfo("Uncontained ECC error", "gpu_ecc", 1.0, True),
    119: XidInfo("GSP RPC timeout", "gpu_xid", 0.95, True),
    120: XidInfo("GSP error", "gpu_xid", 0.95, True),
}
_UNKNOWN_XID = XidInfo("", "gpu_xid", 0.6, False)


def xid_description(xid: int) -> str:
    """Human text for an XID ("XID 79 (GPU has fallen off the bus)")."""
    info = XID_INFO.get(xid)
    return f"XID {xid} ({info.description})" if info else f"XID {xid}"


#: The design's order of cause classes (Processing semantics -> Root cause).
DEFAULT_CLASS_WEIGHTS: dict[CauseClass, float] = {
    "gpu_xid": 1.0,
    "gpu_ecc": 1.0,
    "nvlink": 0.95,
    "ib_link": 0.9,
    "node_unresponsive": 0.85,
    "scheduler_preemption": 0.8,
    "host_oom": 0.8,
    "hang": 0.7,
    "application": 0.5,
    "communication": 0.25,
    "unknown": 0.1,
}


class RootCauseConfig(BaseModel):
    """Knobs of the attributor; every default is explained by the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lookback_s: float = Field(
        default=120.0, gt=0, description="Event time before the first failure signal searched."
    )
    settle_s: float = Field(
        default=5.0,
        ge=0,
        description="Event time after the first failure signal to wait for more evidence "
        "(late arrivals, clock error) before attributing.",
    )
    end_grace_s: float = Field(
        default=0.0,
        ge=0,
        description="Attribute at most this long after the scheduler ends the job: nothing of "
        "the job arrives after that to advance its event time.",
    )
    after_tolerance_s: float = Field(
        default=3.0, ge=0, description="A precursor this far after the first signal still counts."
    )
    after_factor: float = Field(default=0.6, ge=0, le=1)
    decay_after_s: float = Field(default=30.0, ge=0)
    decay_max: float = Field(default=0.2, ge=0, le=1)
    survived_factor: float = Field(
        default=0.3, ge=0, le=1, description="For a precursor the job made progress after."
    )
    corroboration_s: float = Field(default=3.0, ge=0)
    node_silence_s: float = Field(
        default=3.0,
        gt=0,
        description="A node with no event for this long while the others report is silent "
        "(>= 3 GPU sample intervals).",
    )
    cascade_gap_s: float = Field(
        default=660.0,
        gt=0,
        description="Without a restart or progress, a failure signal this long after the last "
        "one opens a new cascade; >= the NCCL watchdog timeout (600 s in production) so the "
        "survivors' timeouts join the incident of the death they follow.",
    )
    class_weights: dict[CauseClass, float] = Field(
        default_factory=lambda: dict(DEFAULT_CLASS_WEIGHTS)
    )
    trigger_on_fatal_precursors: bool = True
    emit_revisions: bool = True
    reattribute: bool = Field(
        default=True,
        description="A revision may replace a weak primary (inferred stall or silence, "
        "communication error) by an event read later that explains the cascade better.",
    )
    max_revisions: int = Field(default=8, ge=0)
    max_history: int = Field(default=4096, ge=16, description="Candidate precursors kept.")
    max_evidence: int = Field(default=256, ge=8, le=256)
    node_addresses: dict[str, str] = Field(
        default_factory=dict,
        description="Peer address (as NCCL logs it, e.g. an IPoIB address) -> node name.",
    )


@dataclass(slots=True)
class _Rec:
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


@dataclass(slots=True)
class _RankState:
    node: str
    gpu: int | None
    last_ts: int = -1  # corrected end of the last successful span
    seq: int = -1  # last collective sequence number completed
    seq_ts: int = -1


@dataclass
class _Cascade:
    """Everything one failure cascade has accumulated."""

    first_ts: int
    floor: int  # precursors at or before this belong to an earlier cascade
    last_ts: int = -1
    end_ts: int | None = None  # scheduler ended the job (corrected)
    rank_first: dict[int, _Rec] = field(default_factory=dict)
    timeout_ranks: set[int] = field(default_factory=set)
    job_level: list[_Rec] = field(default_factory=list)
    watchdog: Counter[tuple[str, int]] = field(default_factory=Counter)
    named: dict[str, set[str]] = field(default_factory=dict)  # named node -> reporter nodes
    symptom_events: int = 0
    primary: _Rec | None = None
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


_QUIET_KINDS = (
    GpuSampleEvent,
    FabricCountersEvent,
    HeartbeatEvent,
    NodeInventoryEvent,
    AgentEventEvent,
)
_COMM_TRIGGERS = frozenset(
    {"watchdog_timeout", "nccl_error", "remote_process_exited", "process_group_abort"}
)
_COMM_SPAN_MARKERS = ("nccl", "watchdog", "processgroup", "process group", "c10d", "net/ib")
_HCA_RE = re.compile(r"\b(mlx\d+_\d+):(\d+)\b")
_PEER_RE = re.compile(r"from peer (\S+?) with")
_SILENCE_EXPLAINERS = frozenset({"scheduler_preemption", "node_unresponsive"})
_NODE_KILLERS = frozenset({"scheduler_preemption", "node_unresponsive"})
#: primaries a later revision may replace (they say *that* the job failed, not *what* broke)
_WEAK_CAUSES = frozenset({"hang", "communication", "unknown"})


def _hms(ns: int) -> str:
    s, rem = divmod(ns, _NS)
    return time.strftime("%H:%M:%S", time.gmtime(s)) + f".{rem // _MS:03d}"


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _where(node: str, rank: int | None, gpu: int | None) -> str:
    """'node007 GPU 3 (rank 59)' / 'node007 rank 59' / 'node007'."""
    if gpu is not None:
        return f"{node} GPU {gpu}" + (f" (rank {rank})" if rank is not None else "")
    return f"{node} rank {rank}" if rank is not None else node


def _peer_host(peer: str) -> str:
    """'10.0.0.6<43210>' -> '10.0.0.6'; 'host:1234' -> 'host'."""
    host = peer.split("<", 1)[0].strip().strip("[]")
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host


class RootCauseAttributor:
    """Incremental root-cause attribution for one job (see the module docstring).

    ``observe`` every event with its corrected timestamp, ``advance`` with the job's event time;
    ``flush`` at the end of a stream attributes whatever is still settling.
    """

    def __init__(
        self,
        cluster: str,
        job_id: str,
        config: RootCauseConfig | None = None,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.cluster = cluster
        self.job_id = job_id
        self.config = config or RootCauseConfig()
        self.clock_ns = clock_ns
        self.stats = RootCauseStats()
        cfg = self.config
        self._lookback = round(cfg.lookback_s * _NS)
        self._settle = round(cfg.settle_s * _NS)
        self._after = round(cfg.after_tolerance_s * _NS)
        self._weights = {**DEFAULT_CLASS_WEIGHTS, **cfg.class_weights}
        self._history: deque[_Rec] = deque(maxlen=cfg.max_history)
        self._pre: deque[_Rec] = deque(maxlen=1024)  # symptoms seen while no cascade is open
        self._node_seen: dict[str, int] = {}
        self._ranks: dict[int, _RankState] = {}
        self._err_seen: dict[int, tuple[int, int]] = {}
        self._offsets: dict[str, int] = {}
        self._addresses: dict[str, str] = dict(cfg.node_addresses)
        self._last_ok_step_start = -1
        self._restart_ts = -1
        self._floor = -1
        self._now = -1
        self._cascade: _Cascade | None = None
        self._out: list[Incident] = []

    # ------------------------------------------------------------------------------ input

    def observe(self, event: Event, corrected_ts: int) -> None:
        """Take one event of the job; ``corrected_ts`` is its time on the reference clock.

        O(1) for the hot kinds: GPU samples, fabric counters, heartbeats and successful spans
        only update liveness/progress records.
        """
        if isinstance(event, SpanEvent):
            p = event.payload
            if p.status != "error":
                self._progress(event, p, corrected_ts)
                return
        node = event.node
        if corrected_ts > self._node_seen.get(node, -1):
            self._node_seen[node] = corrected_ts
        if isinstance(event, _QUIET_KINDS):
            return
        self.stats.events += 1
        off = event.ts - corrected_ts
        if off:
            self._offsets[node] = off
        if isinstance(event, SpanEvent):
            self._error_span(event, corrected_ts)
        elif isinstance(event, GpuEventEvent):
            self._gpu_event(event, corrected_ts)
        elif isinstance(event, CommEventEvent):
            self._comm_event(event, corrected_ts)
        elif isinstance(event, FabricEventEvent):
            self._fabric_event(event, corrected_ts)
        elif isinstance(event, SchedulerEventEvent):
            self._scheduler_event(event, corrected_ts)

    def note_hang(self, rank: int | None, node: str, ts: int, seq: int | None) -> None:
        """The hang detector's finding: ``rank`` (None: the collective itself is stuck) stopped
        making progress at ``ts`` (corrected), never entering collective ``seq`` if known."""
        gpu = None
        if rank is not None:
            st = self._ranks.get(rank)
            if st is not None:
                node = node or st.node
                gpu = st.gpu
        tail = f"; never entered collective seq {seq}" if seq is not None else ""
        who = _where(node, rank, gpu) if node else "the job"
        rec = _Rec(
            ts,
            node,
            rank,
            gpu,
            "detection",
            f"{who}: stopped making progress (hang detector){tail}",
            cause="hang",
            strength=1.0,
            node_level=rank is None,
            seq=seq,
        )
        # the detector learned it now: the cascade's clock starts at detection, not at the onset
        self._candidate(rec, trigger=True, signal_ts=max(ts, self._now), note=True)

    def note_node_unresponsive(self, node: str, ts: int) -> None:
        """The liveness detector's finding: no telemetry from ``node`` since ``ts`` (corrected)."""
        rec = _Rec(
            ts,
            node,
            None,
            None,
            "detection",
            f"{node}: no telemetry since then (liveness detector: node unresponsive)",
            cause="node_unresponsive",
            strength=1.0,
            node_level=True,
        )
        self._candidate(rec, trigger=True, signal_ts=max(ts, self._now), note=True)

    def note_node_address(self, node: str, address: str) -> None:
        """Map a peer address as NCCL logs it (IPoIB address or host name) to its node."""
        self._addresses[_peer_host(address)] = node

    # ------------------------------------------------------------------------------ output

    def advance(self, event_time_ns: int) -> list[Incident]:
        """Attribute what is due at the job's event time ``event_time_ns``; returns new incidents
        and revisions (same ``incident_id``) of already emitted ones."""
        now = self._now = max(self._now, event_time_ns)
        c = self._cascade
        if c is not None:
            if c.incident is None:
                if now >= self._deadline(c):
                    if self._contradicted(c):
                        self._cascade = None  # the job kept going: the note was wrong
                        self.stats.cascades_dropped += 1
                    elif not self._unconfirmed(c, now):
                        self._emit(c, now)
            elif c.dirty and self._revision_due(c, now):
                self._revise(c)
            if c.incident is not None and now > c.last_ts + round(self.config.cascade_gap_s * _NS):
                self._close(c)
        self._prune(now)
        out, self._out = self._out, []
        return out

    def flush(self, event_time_ns: int | None = None) -> list[Incident]:
        """Attribute a cascade still settling and revise an emitted one now (end of stream)."""
        now = max(self._now, event_time_ns if event_time_ns is not None else self._now)
        self._now = now
        c = self._cascade
        if c is not None:
            if c.incident is None:
                self._emit(c, now)
            elif c.dirty:
                self._revise(c)
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------------------ hot path

    def _progress(self, event: SpanEvent, p: Span, ts: int) -> None:
        node = event.node
        if ts > self._node_seen.get(node, -1):
            self._node_seen[node] = ts
        rank = event.rank
        if rank is None:
            return
        st = self._ranks.get(rank)
        if st is None:
            st = self._ranks[rank] = _RankState(node, event.gpu)
        elif st.node != node:
            st.node, st.gpu = node, event.gpu
        st.last_ts = max(st.last_ts, ts)
        phase = p.phase
        if phase == "collective":
            seq = p.attributes.get("collective.seq")
            if isinstance(seq, int) and seq > st.seq:
                st.seq, st.seq_ts = seq, ts
        elif phase == "step":
            start = p.start_ns - (event.ts - ts)
            self._last_ok_step_start = max(self._last_ok_step_start, start)

    # ------------------------------------------------------------------------------ per kind

    def _gpu_event(self, ev: GpuEventEvent, ts: int) -> None:
        p = ev.payload
        node, rank, gpu = ev.node, ev.rank, ev.gpu
        where = _where(node, rank, gpu)
        if p.event_type == "xid" and p.xid is not None:
            info = XID_INFO.get(p.xid, _UNKNOWN_XID)
            rec = _Rec(
                ts,
                node,
                rank,
                gpu,
                ev.kind,
                f"{where}: {xid_description(p.xid)}",
                ev.event_id,
                cause=info.cause,
                strength=info.strength,
                xid=p.xid,
                device=p.gpu_uuid,
            )
            self._candidate(rec, trigger=info.fatal)
        elif p.event_type == "ecc":
            text = p.message.lower()
            if "double" in text or "uncorrect" in text:
                strength, fatal = 0.95, True
            elif "single" in text or "corrected" in text:
                strength, fatal = 0.05, False
            else:
                strength, fatal = 0.3, False
            what = f"{where}: {_first_line(p.message) or 'ECC error'}"
            rec = _Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="gpu_ecc")
            rec.strength, rec.device = strength, p.gpu_uuid
            self._candidate(rec, trigger=fatal)
        elif p.event_type == "gpu_unresponsive":
            what = f"{where}: GPU not answering NVML ({_first_line(p.message, 120)})"
            rec = _Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="gpu_xid")
            rec.strength, rec.device = 0.95, p.gpu_uuid
            self._candidate(rec, trigger=True)

    def _fabric_event(self, ev: FabricEventEvent, ts: int) -> None:
        p = ev.payload
        node, rank, gpu = ev.node, ev.rank, ev.gpu
        et = p.event_type
        port = f":{p.port}" if p.port is not None else ""
        if et in ("nvlink_error", "nvlink_down"):
            link = f" NVLink {p.port}" if p.port is not None else " NVLink"
            detail = _first_line(p.message, 160) or et
            rec = _Rec(ts, node, rank, gpu, ev.kind, f"{_where(node, rank, gpu)}{link}: {detail}")
            rec.event_id, rec.cause, rec.device = ev.event_id, "nvlink", f"{p.device}{port}"
            rec.strength = 0.95 if et == "nvlink_down" else 0.65
            self._candidate(rec, trigger=False)
            return
        dev = f"{p.device}{port}"
        if et == "link_down" or (et == "state_change" and "DOWN" in p.new_state.upper()):
            strength = 1.0 if et == "link_down" else 0.8
            what = f"{node} {dev}: link down ({p.old_state or '?'} -> {p.new_state or 'DOWN'})"
        elif et == "link_up":
            strength, what = 0.1, f"{node} {dev}: link up ({p.old_state} -> {p.new_state})"
        elif et == "error_counter_increase":
            delta = p.delta or 0
            if p.counter == "link_downed":
                strength = 0.9
            elif p.counter == "link_error_recovery":
                strength = 0.7
            else:
                strength = 0.6 if delta >= 10 else 0.05
            what = f"{node} {dev}: {p.counter or 'error counter'} +{delta}"
        elif et == "port_unreadable":
            strength, what = 0.2, f"{node} {dev}: port unreadable"
        else:
            return
        rec = _Rec(ts, node, None, None, ev.kind, what, ev.event_id, cause="ib_link")
        rec.strength, rec.device, rec.node_level = strength, dev, True
        self._candidate(rec, trigger=False)

    def _scheduler_event(self, ev: SchedulerEventEvent, ts: int) -> None:
        p = ev.payload
        node, et = ev.node, p.event_type
        reason = _first_line(p.reason, 200)
        if et == "job_started":
            self._restart_ts = max(self._restart_ts, ts)
            return
        if et in ("job_cancelled", "job_timeout", "job_completed"):
            # not a failure signal, but nothing of the job comes after it: attribute now
            why = f", {reason}" if reason else ""
            what = f"scheduler: {et.replace('_', ' ')} ({p.state or et}{why})"
            self._symptom(_Rec(ts, node, None, None, ev.kind, what, ev.event_id), end=True)
            return
        if et == "job_failed":
            code = f", exit code {p.exit_code}" if p.exit_code is not None else ""
            why = f", {reason}" if reason else ""
            what = f"scheduler: job failed ({p.state or 'FAILED'}{why}{code})"
            sym = _Rec(ts, node, None, None, ev.kind, what, ev.event_id)
            state = f"{p.state} {p.reason}".upper()
            derived: CauseClass | None = None
            if "PREEMPT" in state:
                derived = "scheduler_preemption"
            elif "OUT_OF_MEMORY" in state or "OOM" in state:
                derived = "host_oom"
            elif "NODE_FAIL" in state:
                derived = "node_unresponsive"
            if derived is not None:
                cand = _Rec(ts, "", None, None, ev.kind, what, ev.event_id, cause=derived)
                cand.strength, cand.node_level = 0.75, True
                self._candidate(cand, trigger=False)
            self._symptom(sym, trigger=True, end=True)
            return
        if et == "preempted":
            cause: CauseClass = "scheduler_preemption"
            strength, fatal = 1.0, True
            what = f"{node}: the scheduler preempted the node ({reason or p.state})"
        elif et == "oom_killed":
            cause, strength, fatal = "host_oom", 1.0, True
            who = _where(node, ev.rank, ev.gpu)
            what = f"{who}: the host OOM killer ended the process ({reason or p.state})"
        elif et == "node_down":
            cause, strength, fatal = "node_unresponsive", 1.0, True
            what = f"{node}: the scheduler marked the node down ({reason or p.state})"
        elif et == "node_drain":
            cause, strength, fatal = "scheduler_preemption", 0.4, False
            what = f"{node}: the scheduler drained the node ({reason or p.state})"
        else:
            return
        rec = _Rec(ts, node, ev.rank, ev.gpu, ev.kind, what, ev.event_id, cause=cause)
        rec.strength, rec.node_level = strength, ev.rank is None
        self._candidate(rec, trigger=fatal)

    def _comm_event(self, ev: CommEventEvent, ts: int) -> None:
        p = ev.payload
        et = p.event_type
        if et == "other":
            return
        node, rank, gpu = ev.node, ev.rank, ev.gpu
        where = _where(node, rank, None)
        text = _first_line(p.message, 240)
        if et == "watchdog_timeout":
            op = p.op or "collective"
            seq = f" seq {p.seq}" if p.seq is not None else ""
            ran = f" after {p.elapsed_ms} ms" if p.elapsed_ms is not None else ""
            sym = _Rec(
                ts, node, rank, gpu, ev.kind, f"{where}: NCCL watchdog timeout in {op}{seq}{ran}"
            )
            sym.event_id, sym.timeout, sym.op, sym.seq = ev.event_id, True, p.op, p.seq
            self._symptom(sym, trigger=True)
            return
        peer = p.peer or self._peer_from_text(p.message)
        if et == "net_ib_error" and ("non-fatal" in p.message or "async event" in p.message):
            # the port's own NCCL proxy noticed the port error: a local precursor
            m = _HCA_RE.search(p.hca or "") or _HCA_RE.search(p.message)
            dev = f"{m.group(1)}:{m.group(2)}" if m else p.hca
            what = f"{where}: NET/IB async port error on {dev or 'an HCA'} ({text})"
            rec = _Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="ib_link")
            rec.strength, rec.device, rec.node_level = 0.75, dev, True
            self._candidate(rec, trigger=False)
            self._symptom(_Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id), trigger=False)
            return
        label = {
            "net_ib_error": "NET/IB error",
            "remote_process_exited": "remote process exited or network error",
            "nccl_error": "NCCL error",
            "process_group_abort": "process group aborted",
            "nccl_warn": "NCCL warning",
        }.get(et, et)
        frm = f" (peer {peer})" if peer else ""
        sym = _Rec(ts, node, rank, gpu, ev.kind, f"{where}: {label}{frm}: {text}", ev.event_id)
        trigger = et in _COMM_TRIGGERS or et == "net_ib_error"
        self._classify_text(p.message, sym)
        self._symptom(sym, trigger=trigger, peer=peer)

    def _error_span(self, ev: SpanEvent, ts: int) -> None:
        p = ev.payload
        node, rank, gpu = ev.node, ev.rank, ev.gpu
        etype = p.error_type or "error"
        msg = p.error_message
        what = f"{_where(node, rank, None)}: {etype} in {p.phase}: {_first_line(msg)}"
        sym = _Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id)
        low = f"{etype} {msg}".lower()
        comm = etype.startswith("Dist") or any(m in low for m in _COMM_SPAN_MARKERS)
        # the failing phase span and its step span carry the same error: one candidate
        sig = (ts, hash(msg))
        if rank is not None and self._err_seen.get(rank) == sig:
            self._symptom(sym, trigger=True)
            return
        if rank is not None:
            if len(self._err_seen) >= 65_536:
                self._err_seen.clear()
            self._err_seen[rank] = sig
        if not self._classify_text(msg, sym) and not comm:
            app = _Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="application")
            app.strength = 1.0
            self._candidate(app, trigger=False)
        self._symptom(sym, trigger=True, peer=self._peer_from_text(msg) if comm else "")

    def _classify_text(self, text: str, sym: _Rec) -> bool:
        """An error text that names hardware (NVLink, ECC) adds a candidate on its rank."""
        low = text.lower()
        cause: CauseClass | None = None
        if "nvlink" in low:
            cause, strength = "nvlink", 0.65
        elif "ecc error" in low or "uncorrectable ecc" in low:
            cause, strength = "gpu_ecc", 0.7
        if cause is None:
            return False
        rec = _Rec(sym.ts, sym.node, sym.rank, sym.gpu, sym.kind, sym.what, sym.event_id)
        rec.cause, rec.strength = cause, strength
        self._candidate(rec, trigger=False)
        return True

    def _peer_from_text(self, text: str) -> str:
        m = _PEER_RE.search(text)
        return m.group(1) if m else ""

    def _resolve(self, peer: str) -> str:
        host = _peer_host(peer)
        if not host:
            return ""
        node = self._addresses.get(host)
        if node is not None:
            return node
        if host in self._node_seen:
            return host
        short = host.split(".", 1)[0]
        return short if short in self._node_seen and not short.isdigit() else ""

    # ------------------------------------------------------------------------------ cascades

    def _candidate(
        self, rec: _Rec, *, trigger: bool, signal_ts: int | None = None, note: bool = False
    ) -> None:
        self.stats.candidates += 1
        if len(self._history) == self._history.maxlen:
            self.stats.history_dropped += 1
        self._history.append(rec)
        if trigger and (note or self.config.trigger_on_fatal_precursors) and rec.ts > self._floor:
            c = self._signal(rec.ts if signal_ts is None else signal_ts, real=not note)
            if note:
                c.note_onset = rec.ts if c.note_onset is None else min(c.note_onset, rec.ts)
            if c.incident is not None:
                c.dirty = True

    def _symptom(
        self, rec: _Rec, *, trigger: bool = False, peer: str = "", end: bool = False
    ) -> None:
        self.stats.symptoms += 1
        if rec.ts <= self._floor:
            return  # a late symptom of a cascade already closed
        c = self._cascade
        if trigger:
            c = self._signal(rec.ts)
        elif c is not None and self._starts_new(c, rec.ts):
            c = None
        if c is None:
            self._pre.append(rec)
            return
        self._absorb(c, rec, peer, end)

    def _absorb(self, c: _Cascade, rec: _Rec, peer: str = "", end: bool = False) -> None:
        c.symptom_events += 1
        c.last_ts = max(c.last_ts, rec.ts)
        if c.incident is not None:
            c.dirty = True
        if end:
            c.end_ts = rec.ts if c.end_ts is None else min(c.end_ts, rec.ts)
        if rec.rank is None:
            if len(c.job_level) < 32:
                c.job_level.append(rec)
        else:
            first = c.rank_first.get(rec.rank)
            if first is None or rec.ts < first.ts:
                c.rank_first[rec.rank] = rec
            if rec.timeout:
                c.timeout_ranks.add(rec.rank)
        if rec.timeout and rec.seq is not None:
            c.watchdog[(rec.op or "collective", rec.seq)] += 1
        if peer:
            named = self._resolve(peer)
            if named and named != rec.node:
                reporters = c.named.setdefault(named, set())
                if len(reporters) < 64:
                    reporters.add(rec.node)

    def _starts_new(self, c: _Cascade, ts: int) -> bool:
        """A failure at ``ts`` is a new cascade: the old one is attributed and the job was
        restarted, made progress, or stayed quiet for ``cascade_gap_s`` since."""
        if c.incident is None:
            return False
        if ts > c.last_ts + round(self.config.cascade_gap_s * _NS):
            return True
        if self._restart_ts > c.last_ts and ts >= self._restart_ts:
            return True
        return self._last_ok_step_start > c.last_ts and ts >= self._last_ok_step_start

    def _signal(self, ts: int, *, real: bool = True) -> _Cascade:
        c = self._cascade
        if c is not None and self._starts_new(c, ts):
            self._close(c)
            c = None
        if c is None:
            c = self._cascade = _Cascade(first_ts=ts, floor=self._floor, last_ts=ts)
            self.stats.cascades += 1
            lower = max(ts - self._lookback, self._floor + 1)
            for rec in self._pre:
                if rec.ts >= lower:
                    self._absorb(c, rec)
            self._pre.clear()
        elif c.incident is None:
            c.first_ts = min(c.first_ts, ts)
        c.last_ts = max(c.last_ts, ts)
        c.real = c.real or real
        return c

    def _close(self, c: _Cascade) -> None:
        if c.incident is not None and c.dirty and self.config.emit_revisions:
            self._revise(c)
        self._floor = max(self._floor, c.last_ts)
        self._cascade = None

    def _contradicted(self, c: _Cascade) -> bool:
        """Only detector notes opened ``c`` and the job completed a step that started after the
        onset they gave: a synchronous job cannot progress with a hung rank or a dead node (a
        note made, e.g., before the clock offsets converged)."""
        return not c.real and c.note_onset is not None and self._last_ok_step_start >= c.note_onset

    def _unconfirmed(self, c: _Cascade, now: int) -> bool:
        """Only detector notes opened ``c`` and the job has not completed any step yet, so
        nothing can confirm or contradict them (a detector without a baseline, or event time
        pushed ahead by a skewed clock before offsets converge): wait, at most
        ``cascade_gap_s``."""
        gap = round(self.config.cascade_gap_s * _NS)
        return not c.real and self._last_ok_step_start < 0 and now < c.first_ts + gap

    def _deadline(self, c: _Cascade) -> int:
        due = c.first_ts + self._settle
        if c.end_ts is not None:
            due = min(due, max(c.end_ts, c.first_ts) + round(self.config.end_grace_s * _NS))
        return due

    def _revision_due(self, c: _Cascade, now: int) -> bool:
        if not self.config.emit_revisions or c.revisions >= self.config.max_revisions:
            return False
        if now >= c.last_ts + self._settle:
            return True
        return c.end_ts is not None and now >= c.end_ts + round(self.config.end_grace_s * _NS)

    def _prune(self, now: int) -> None:
        c = self._cascade
        keep = now - self._lookback - self._settle - self._after
        if c is not None and c.incident is None:
            keep = min(keep, c.first_ts - self._lookback)
        h = self._history
        while h and h[0].ts < keep:
            h.popleft()

    # ------------------------------------------------------------------------------ attribution

    def _emit(self, c: _Cascade, now: int) -> None:
        c.attributed_ts = now
        inc = self._build(c)
        c.incident, c.dirty = inc, False
        self.stats.incidents += 1
        self._out.append(inc)

    def _revise(self, c: _Cascade) -> None:
        if c.revisions >= self.config.max_revisions:
            return
        inc = self._build(c)
        c.dirty = False
        if c.incident is not None and inc.model_dump(
            exclude={"emitted_ts", "revision"}
        ) == c.incident.model_dump(exclude={"emitted_ts", "revision"}):
            return
        c.revisions += 1
        inc = inc.model_copy(update={"revision": c.revisions})
        c.incident = inc
        self.stats.revisions += 1
        self._out.append(inc)

    def _window(self, c: _Cascade) -> list[_Rec]:
        lower = max(c.first_ts - self._lookback, c.floor + 1)
        upper = c.first_ts + self._after
        return [r for r in self._history if lower <= r.ts <= upper and r.cause is not None]

    def _score(self, r: _Rec, c: _Cascade, bonus: float, stall_explained: bool = False) -> float:
        cfg = self.config
        assert r.cause is not None
        w = self._weights.get(r.cause, 0.0) * r.strength
        d = c.first_ts - r.ts
        if d < 0:
            f = cfg.after_factor
        else:
            f = 1.0
            decay_after = round(cfg.decay_after_s * _NS)
            if d > decay_after:
                span = max(1, self._lookback - decay_after)
                f -= cfg.decay_max * min(1.0, (d - decay_after) / span)
        if self._last_ok_step_start > r.ts:
            f *= cfg.survived_factor
        if stall_explained and r.cause == "hang":
            f *= cfg.survived_factor  # the stall is a consequence of a fatal precursor
        return w * f * (1.0 + bonus)

    def _build(self, c: _Cascade) -> Incident:
        cands = self._window(c)
        explicit = [r for r in cands if self._eff(r) >= 0.3]
        reporters = set(c.rank_first)
        n_seq = c.watchdog.most_common(1)[0][0] if c.watchdog else None
        silent_nodes = self._silent_nodes(c, explicit)
        cands.extend(silent_nodes)
        hangs, never = self._silent_ranks(c, explicit + silent_nodes, reporters, n_seq)
        cands.extend(hangs)
        cands.extend(self._peer_named(c, explicit))
        named_bonus = {n: 0.15 * min(len(v), 3) for n, v in c.named.items()}
        sym_by_node: dict[str, list[_Rec]] = {}
        for s in c.rank_first.values():
            sym_by_node.setdefault(s.node, []).append(s)

        def bonus(r: _Rec) -> float:
            b = named_bonus.get(r.node, 0.0)
            if r.rank is not None and r.rank in never:
                b += 0.2
            hi = r.ts + round(self.config.corroboration_s * _NS)
            if any(r.ts <= s.ts <= hi for s in sym_by_node.get(r.node, ())):
                b += 0.1  # a symptom follows on the same node
            return min(b, 0.5)

        # a fatal precursor (XID, preemption, OOM kill, link down...) explains a stalled job:
        # the hang detector's "no progress" is then a symptom, whoever it names
        stall_explained = any(
            r.cause != "hang" and self._score(r, c, 0.0) >= 0.6
            for r in cands
            if not r.derived or r.cause == "node_unresponsive"
        )
        scored = sorted(
            ((self._score(r, c, bonus(r), stall_explained), r) for r in cands),
            key=lambda x: (-x[0], x[1].ts),
        )
        primary = c.primary
        if primary is None:
            primary = scored[0][1] if scored else self._fallback(c)
            c.primary = primary
        elif scored and self._upgrade(primary, scored):
            # evidence read after the first emission explains the cascade better (a worker
            # catching up reads the busy span topic behind the XID's): re-attribute in a
            # revision of the same incident, and time the attribution from now
            primary = c.primary = scored[0][1]
            c.attributed_ts = max(c.attributed_ts, self._now)
            self.stats.reattributed += 1
        if not c.incident_id:
            c.incident_id = f"{self.cluster}/{self.job_id}/{primary.ts}"
        pkey = _key(primary)
        s1 = next((s for s, r in scored if _key(r) == pkey), 0.0)
        s2 = max(
            (
                s
                for s, r in scored
                if r.cause != "communication"
                and not (stall_explained and r.cause == "hang")
                and not self._same_subject(r, primary)
            ),
            default=0.0,
        )
        fault_nodes = {primary.node} if primary.cause in _NODE_KILLERS and primary.node else set()
        symptom_ranks = sorted(
            r for r, s in c.rank_first.items() if r != primary.rank and s.node not in fault_nodes
        )
        corroborated = bool(symptom_ranks) or bonus(primary) > 0
        margin = (s1 - s2) / s1 if s1 > 0 and s2 < s1 else 0.0
        w = self._eff(primary)
        conf = math.sqrt(max(0.0, min(1.0, w))) * (0.5 + 0.5 * margin)
        conf *= 1.0 if corroborated else 0.8
        evidence = self._evidence(c, primary, scored, symptom_ranks)
        first_symptom = min(
            (
                s.ts
                for s in [*c.rank_first.values(), *c.job_level]
                if not s.event_id or s.event_id != primary.event_id
            ),
            default=c.first_ts,
        )
        nodes = {e.node for e in evidence}
        offsets = {n: o for n, o in self._offsets.items() if n in nodes}
        device = primary.device
        if primary.cause == "nvlink" and ":" not in device:
            # the NVLink counter event of the same GPU knows which link
            device = next(
                (
                    r.device
                    for _, r in scored
                    if r.kind == "fabric_event"
                    and ":" in r.device
                    and r.gpu == primary.gpu
                    and r.node == primary.node
                ),
                device,
            )
        return Incident(
            incident_id=c.incident_id,
            cluster=self.cluster,
            job_id=self.job_id,
            cause_class=primary.cause or "unknown",
            node=primary.node,
            gpu=primary.gpu,
            rank=primary.rank,
            device=device,
            xid=primary.xid,
            confidence=round(min(0.99, conf), 3),
            summary=self._summary(c, primary, symptom_ranks)[:4096],
            first_cause_ts=primary.ts,
            first_symptom_ts=first_symptom,
            attributed_ts=c.attributed_ts,
            emitted_ts=self.clock_ns(),
            symptom_ranks=symptom_ranks[:16_384],
            evidence=evidence,
            clock_offsets_ns=offsets,
        )

    def _upgrade(self, primary: _Rec, scored: list[tuple[float, _Rec]]) -> bool:
        """A revision replaces a *weak* primary (a stall or silence the detectors inferred, a
        communication error, unknown) by an event that outscores it; a primary that is itself a
        fatal event stays, so the cause does not flap between revisions."""
        if not self.config.reattribute:
            return False
        weak = primary.cause in _WEAK_CAUSES or primary.kind == "detection" or primary.derived
        if not weak:
            return False
        s_top, top = scored[0]
        if _key(top) == _key(primary) or top.derived or top.cause in _WEAK_CAUSES:
            return False
        s_primary = next((s for s, r in scored if _key(r) == _key(primary)), 0.0)
        return s_top > s_primary

    def _eff(self, r: _Rec) -> float:
        return self._weights.get(r.cause, 0.0) * r.strength if r.cause else 0.0

    @staticmethod
    def _unit(r: _Rec) -> tuple[str, object]:
        if r.cause == "ib_link" and r.device:
            return ("dev", r.device)
        if r.gpu is not None and not r.node_level:
            return ("gpu", r.gpu)
        if r.rank is not None and not r.node_level:
            return ("rank", r.rank)
        return ("node", None)

    def _same_subject(self, a: _Rec, b: _Rec) -> bool:
        if a is b or _key(a) == _key(b):
            return True
        if a.node != b.node:
            return False
        ua, ub = self._unit(a), self._unit(b)
        if ua == ub:
            return True
        if (ua[0] == "node" and a.cause in _NODE_KILLERS) or (
            ub[0] == "node" and b.cause in _NODE_KILLERS
        ):
            return True  # a node taken away explains everything on it
        return a.cause == b.cause and (ua[0] == "node" or ub[0] == "node")

    def _explained(self, r: _Rec, by: Iterable[_Rec]) -> bool:
        """Is the silent/hung subject ``r`` explained by an explicit candidate on it?"""
        for e in by:
            if e.node != r.node or e.ts > r.ts + self._after + self._settle:
                continue
            if r.rank is None:  # a silent node
                if e.cause in _SILENCE_EXPLAINERS:
                    return True
                continue
            on_it = e.rank == r.rank or (e.gpu is not None and e.gpu == r.gpu) or e.node_level
            if on_it and (self._eff(e) >= 0.5 or e.cause in _NODE_KILLERS):
                return True
        return False

    def _silent_nodes(self, c: _Cascade, explicit: list[_Rec]) -> list[_Rec]:
        """Nodes whose telemetry stopped while the others kept reporting (inferred)."""
        lower = max(c.first_ts - self._lookback, c.floor + 1)
        seen = {n: t for n, t in self._node_seen.items() if t >= lower}
        if len(seen) < 2:
            return []
        latest = max(seen.values())
        gaps = sorted(latest - t for t in seen.values())
        median = gaps[len(gaps) // 2]
        limit = round(self.config.node_silence_s * _NS)
        if median >= limit // 2:
            return []
        out: list[_Rec] = []
        for node, t in seen.items():
            gap = latest - t
            if gap < limit or t > c.first_ts + self._after:
                continue
            rec = _Rec(
                t,
                node,
                None,
                None,
                "inferred",
                f"{node}: no telemetry at all after this, {gap / _NS:.1f} s while the other "
                "nodes kept reporting",
                cause="node_unresponsive",
                strength=1.0,
                node_level=True,
                derived=True,
            )
            if not self._explained(rec, explicit):
                out.append(rec)
        return out

    def _silent_ranks(
        self,
        c: _Cascade,
        explainers: list[_Rec],
        reporters: set[int],
        n_seq: tuple[str, int] | None,
    ) -> tuple[list[_Rec], set[int]]:
        """Ranks that reported nothing while the majority timed out: the ones everybody waits
        on (inferred hangs), and the set of ranks that never entered the timed-out collective."""
        if not c.timeout_ranks:
            return [], set()
        lower = max(c.first_ts - self._lookback, c.floor + 1)
        active = {r: st for r, st in self._ranks.items() if st.last_ts >= lower}
        if not active or len(reporters & active.keys()) < 0.5 * len(active):
            return [], set()
        silent_nodes = {e.node for e in explainers if e.derived and e.rank is None}
        never: set[int] = set()
        out: list[_Rec] = []
        for rank, st in active.items():
            if rank in reporters:
                continue
            if n_seq is not None and st.seq < n_seq[1]:
                never.add(rank)
            if st.node in silent_nodes or len(out) >= 64:
                continue
            if n_seq is not None:
                op, seq = n_seq
                tail = f"; never entered {op} seq {seq} (last completed seq {st.seq})"
            else:
                tail = ""
            rec = _Rec(
                st.last_ts,
                st.node,
                rank,
                st.gpu,
                "inferred",
                f"{_where(st.node, rank, st.gpu)}: no progress after this and no error while "
                f"{len(reporters)} ranks timed out{tail}",
                cause="hang",
                strength=0.85,
                derived=True,
                seq=n_seq[1] if n_seq else None,
            )
            if not self._explained(rec, explainers):
                out.append(rec)
        return out, never

    def _peer_named(self, c: _Cascade, explicit: list[_Rec]) -> list[_Rec]:
        """A node its peers' IB/remote errors name, with nothing explicit on it (inferred)."""
        out: list[_Rec] = []
        has = {e.node for e in explicit}
        for node, reporters in c.named.items():
            if node in has or not reporters:
                continue
            ts = min(
                (s.ts for s in c.rank_first.values() if s.node in reporters), default=c.first_ts
            )
            rec = _Rec(
                ts,
                node,
                None,
                None,
                "inferred",
                f"{node}: named as the failing peer by the IB/NCCL errors of "
                f"{len(reporters)} node(s) ({', '.join(sorted(reporters)[:4])})",
                cause="ib_link",
                strength=0.55 + 0.05 * min(len(reporters), 4),
                node_level=True,
                derived=True,
            )
            out.append(rec)
        return out

    def _fallback(self, c: _Cascade) -> _Rec:
        """No candidate: the earliest communication error, else the first failure signal."""
        syms = sorted(c.rank_first.values(), key=lambda s: s.ts)
        if syms:
            s = syms[0]
            return _Rec(
                s.ts, s.node, s.rank, s.gpu, s.kind, s.what, s.event_id, "communication", 1.0
            )
        job = min(c.job_level, key=lambda s: s.ts, default=None)
        if job is not None:
            return _Rec(job.ts, "", None, None, job.kind, job.what, job.event_id, "unknown", 1.0)
        return _Rec(c.first_ts, "", None, None, "unknown", "failure signal", cause="unknown")

    def _evidence(
        self,
        c: _Cascade,
        primary: _Rec,
        scored: list[tuple[float, _Rec]],
        symptom_ranks: list[int],
    ) -> list[EvidenceItem]:
        cap = self.config.max_evidence
        chain: list[tuple[_Rec, _Role]] = [(primary, "cause")]
        pkey = _key(primary)
        same = [r for _, r in scored if _key(r) != pkey and self._same_subject(r, primary)]
        chain.extend((r, "precursor") for r in sorted(same, key=lambda r: r.ts)[:48])
        others = [
            r
            for s, r in scored
            if not self._same_subject(r, primary)
            and self._eff(r) >= 0.3
            and r.cause != "communication"
        ]
        chain.extend((r, "precursor") for r in others[:16])
        chain.extend((r, "symptom") for r in sorted(c.job_level, key=lambda r: r.ts)[:8])
        own = c.rank_first.get(primary.rank) if primary.rank is not None else None
        if own is not None and own is not primary and own.event_id != primary.event_id:
            chain.append((own, "symptom"))
        room = max(0, cap - len(chain))
        firsts = sorted((c.rank_first[r] for r in symptom_ranks), key=lambda s: s.ts)
        chain.extend((s, "symptom") for s in firsts[:room])
        seen: set[str] = set()
        items: list[EvidenceItem] = []
        for r, role in chain:  # an event is listed once, in its first (strongest) role
            key = r.event_id or f"{r.ts}/{r.what}"
            if key in seen:
                continue
            seen.add(key)
            items.append(
                EvidenceItem(
                    ts=r.ts,
                    node=r.node,
                    rank=r.rank,
                    kind=r.kind,
                    what=f"{_hms(r.ts)} {r.what}"[:1024],
                    event_id=r.event_id,
                    role=role,
                )
            )
        order = {"cause": 0, "precursor": 1, "symptom": 2}
        items.sort(key=lambda e: (e.ts, order[e.role]))
        return items[:cap]

    def _summary(self, c: _Cascade, p: _Rec, symptom_ranks: list[int]) -> str:
        at = _hms(p.ts)
        cause = self._cause_sentence(p, at)
        parts = [cause]
        timed_out = [r for r in symptom_ranks if r in c.timeout_ranks]
        if timed_out:
            first_to = min(
                (c.rank_first[r].ts for r in timed_out if c.rank_first[r].timeout),
                default=min(c.rank_first[r].ts for r in timed_out),
            )
            coll = ""
            if c.watchdog:
                (op, seq), _ = c.watchdog.most_common(1)[0]
                coll = f" in {op} seq {seq}"
            parts.append(
                f"{len(timed_out)} rank{'s' if len(timed_out) != 1 else ''} then timed out{coll} "
                f"about {_dur((first_to - p.ts) / _NS)} later"
            )
        errored = len(symptom_ranks) - len(timed_out)
        if errored:
            first_err = min(c.rank_first[r].ts for r in symptom_ranks if r not in c.timeout_ranks)
            parts.append(
                f"{errored} {'other ' if timed_out else ''}rank{'s' if errored != 1 else ''} "
                f"failed with errors from {_dur((first_err - p.ts) / _NS)} after it"
            )
        if not symptom_ranks:
            parts.append("no other rank has reported an error yet")
        failed = min(
            (s.ts for s in c.job_level if s.what.startswith("scheduler: job failed")), default=None
        )
        if failed is not None:
            parts.append(f"the scheduler failed the job at T+{_dur((failed - p.ts) / _NS)}")
        return "; ".join(parts)

    @staticmethod
    def _cause_sentence(p: _Rec, at: str) -> str:
        """The first clause of the summary: what happened, where, when."""
        who = f"GPU {p.gpu} on {p.node}" if p.gpu is not None else p.node or "the job"
        rank = f" (rank {p.rank})" if p.rank is not None else ""
        detail = p.what.split(": ", 1)[-1][:200]
        cc = p.cause
        if cc == "gpu_xid" and p.xid == 79:
            text = f"{who}{rank} fell off the bus (XID 79) at {at}"
        elif cc in ("gpu_ecc", "nvlink") and p.xid is not None:
            kind = "an uncorrectable ECC error" if cc == "gpu_ecc" else "an NVLink error"
            text = f"{who}{rank} had {kind} (XID {p.xid}) at {at}"
        elif p.xid is not None:
            text = f"{who}{rank} reported {xid_description(p.xid)} at {at}"
        elif cc == "gpu_xid":
            text = f"{who}{rank} was lost (stopped answering) at {at}"
        elif cc == "gpu_ecc":
            text = f"{who}{rank} had an uncorrectable ECC error at {at}"
        elif cc == "nvlink":
            text = f"NVLink of {who}{rank} failed at {at}"
        elif cc == "ib_link":
            dev = f"InfiniBand port {p.device} on {p.node}" if p.device else f"{p.node}'s IB link"
            if p.derived:
                text = f"{dev} is the likely failing peer: its peers' IB errors name it from {at}"
            else:
                verb = "went down" if "link down" in p.what else "reported errors"
                text = f"{dev} {verb} at {at}"
        elif cc == "scheduler_preemption":
            text = f"the scheduler preempted {p.node or 'the job'} at {at} (not a hardware fault)"
        elif cc == "host_oom":
            victim = f"rank {p.rank}'s process" if p.rank is not None else "a process"
            text = f"the host OOM killer ended {victim} on {p.node or 'a node'} at {at}"
        elif cc == "node_unresponsive":
            text = f"{p.node} stopped sending telemetry (unresponsive) at {at}"
        elif cc == "hang" and p.rank is None:
            text = f"the job stopped making progress at {at} (a stuck collective)"
        elif cc == "hang":
            seq = f" and never entered collective seq {p.seq}" if p.seq is not None else ""
            text = f"rank {p.rank} ({_where(p.node, None, p.gpu)}) stopped making progress"
            text += f" at {at}{seq}"
        elif cc == "application":
            text = f"rank {p.rank} on {p.node} raised an application error at {at}: {detail}"
        elif cc == "communication":
            text = (
                "no hardware, scheduler or application cause found; the first communication "
                f"error was on {p.node} rank {p.rank} at {at}: {detail}"
            )
        else:
            text = f"the job failed at {at} with no precursor found"
        return text


def _key(r: _Rec) -> tuple[int, str, int | None, str, str | None, str]:
    """Identity of a record across rebuilds (inferred records are re-created each time)."""
    return (r.ts, r.node, r.rank, r.kind, r.cause, r.event_id)


def _dur(seconds: float) -> str:
    """A short human duration: '0.3 s', '10 s', '2.5 min'."""
    if seconds < 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"
