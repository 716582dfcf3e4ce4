"""Signals: each event of a job, or a detector's note, read into typed candidate/symptom records.

Why a module: how a GPU event, a fabric event, a scheduler event, an NCCL error or an exception
span is read (its cause class, strength, whether it opens a cascade, which peer it names) is
knowledge about collectors and libraries; the cascade engine only sees the resulting
:class:`Signal` records, in the order they are to be applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rankscope.schemas.derived import CauseClass
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
from rankscope.streams.analysis.rootcause.records import Rec, where
from rankscope.streams.analysis.rootcause.xid import UNKNOWN_XID, XID_INFO, xid_description

__all__ = [
    "QUIET_KINDS",
    "Signal",
    "SignalReader",
    "hang_note",
    "peer_from_text",
    "peer_host",
    "unresponsive_note",
]

#: kinds that only tell the attributor a node is alive (never a candidate or a symptom)
QUIET_KINDS = (
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


@dataclass(frozen=True, slots=True)
class Signal:
    """What one event means to the cascade engine, applied in order.

    ``candidate``: a possible cause (``trigger``: it opens a cascade by itself, a fatal
    precursor); ``symptom``: a rank or the job failing (``trigger``: a failure signal; ``peer``:
    the peer its error names; ``end``: the scheduler ended the job); ``restart``: the scheduler
    (re)started the job at ``rec.ts``.
    """

    rec: Rec
    role: Literal["candidate", "symptom", "restart"]
    trigger: bool = False
    peer: str = ""
    end: bool = False


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def peer_host(peer: str) -> str:
    """'10.0.0.6<43210>' -> '10.0.0.6'; 'host:1234' -> 'host'."""
    host = peer.split("<", 1)[0].strip().strip("[]")
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host


def peer_from_text(text: str) -> str:
    """The peer an NCCL error message names ("... from peer 10.0.0.6<43210> with ...")."""
    m = _PEER_RE.search(text)
    return m.group(1) if m else ""


def hang_note(rank: int | None, node: str, gpu: int | None, ts: int, seq: int | None) -> Rec:
    """The hang detector's finding as a candidate (``rank`` None: the collective is stuck)."""
    tail = f"; never entered collective seq {seq}" if seq is not None else ""
    who = where(node, rank, gpu) if node else "the job"
    return Rec(
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


def unresponsive_note(node: str, ts: int) -> Rec:
    """The liveness detector's finding (no telemetry from ``node`` since ``ts``) as a candidate."""
    return Rec(
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


class SignalReader:
    """Reads the non-quiet events of one job into :class:`Signal` records.

    Stateful only to list an exception once: the failing phase span and its step span carry the
    same error.
    """

    def __init__(self) -> None:
        self.err_seen: dict[int, tuple[int, int]] = {}

    def read(self, event: Event, ts: int) -> list[Signal]:
        """The signals of ``event`` (corrected time ``ts``), in the order to apply them."""
        out: list[Signal] = []
        if isinstance(event, SpanEvent):
            self._error_span(event, ts, out)
        elif isinstance(event, GpuEventEvent):
            _gpu_event(event, ts, out)
        elif isinstance(event, CommEventEvent):
            _comm_event(event, ts, out)
        elif isinstance(event, FabricEventEvent):
            _fabric_event(event, ts, out)
        elif isinstance(event, SchedulerEventEvent):
            _scheduler_event(event, ts, out)
        return out

    def _error_span(self, ev: SpanEvent, ts: int, out: list[Signal]) -> None:
        p = ev.payload
        node, rank, gpu = ev.node, ev.rank, ev.gpu
        etype = p.error_type or "error"
        msg = p.error_message
        what = f"{where(node, rank, None)}: {etype} in {p.phase}: {_first_line(msg)}"
        sym = Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id)
        low = f"{etype} {msg}".lower()
        comm = etype.startswith("Dist") or any(m in low for m in _COMM_SPAN_MARKERS)
        # the failing phase span and its step span carry the same error: one candidate
        sig = (ts, hash(msg))
        if rank is not None and self.err_seen.get(rank) == sig:
            out.append(Signal(sym, "symptom", trigger=True))
            return
        if rank is not None:
            if len(self.err_seen) >= 65_536:
                self.err_seen.clear()
            self.err_seen[rank] = sig
        if not _classify_text(msg, sym, out) and not comm:
            app = Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="application")
            app.strength = 1.0
            out.append(Signal(app, "candidate"))
        out.append(Signal(sym, "symptom", trigger=True, peer=peer_from_text(msg) if comm else ""))


def _classify_text(text: str, sym: Rec, out: list[Signal]) -> bool:
    """An error text that names hardware (NVLink, ECC) adds a candidate on its rank."""
    low = text.lower()
    cause: CauseClass | None = None
    if "nvlink" in low:
        cause, strength = "nvlink", 0.65
    elif "ecc error" in low or "uncorrectable ecc" in low:
        cause, strength = "gpu_ecc", 0.7
    if cause is None:
        return False
    rec = Rec(sym.ts, sym.node, sym.rank, sym.gpu, sym.kind, sym.what, sym.event_id)
    rec.cause, rec.strength = cause, strength
    out.append(Signal(rec, "candidate"))
    return True


def _gpu_event(ev: GpuEventEvent, ts: int, out: list[Signal]) -> None:
    p = ev.payload
    node, rank, gpu = ev.node, ev.rank, ev.gpu
    here = where(node, rank, gpu)
    if p.event_type == "xid" and p.xid is not None:
        info = XID_INFO.get(p.xid, UNKNOWN_XID)
        rec = Rec(
            ts,
            node,
            rank,
            gpu,
            ev.kind,
            f"{here}: {xid_description(p.xid)}",
            ev.event_id,
            cause=info.cause,
            strength=info.strength,
            xid=p.xid,
            device=p.gpu_uuid,
        )
        out.append(Signal(rec, "candidate", trigger=info.fatal))
    elif p.event_type == "ecc":
        text = p.message.lower()
        if "double" in text or "uncorrect" in text:
            strength, fatal = 0.95, True
        elif "single" in text or "corrected" in text:
            strength, fatal = 0.05, False
        else:
            strength, fatal = 0.3, False
        what = f"{here}: {_first_line(p.message) or 'ECC error'}"
        rec = Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="gpu_ecc")
        rec.strength, rec.device = strength, p.gpu_uuid
        out.append(Signal(rec, "candidate", trigger=fatal))
    elif p.event_type == "gpu_unresponsive":
        what = f"{here}: GPU not answering NVML ({_first_line(p.message, 120)})"
        rec = Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="gpu_xid")
        rec.strength, rec.device = 0.95, p.gpu_uuid
        out.append(Signal(rec, "candidate", trigger=True))


def _fabric_event(ev: FabricEventEvent, ts: int, out: list[Signal]) -> None:
    p = ev.payload
    node, rank, gpu = ev.node, ev.rank, ev.gpu
    et = p.event_type
    port = f":{p.port}" if p.port is not None else ""
    if et in ("nvlink_error", "nvlink_down"):
        link = f" NVLink {p.port}" if p.port is not None else " NVLink"
        detail = _first_line(p.message, 160) or et
        rec = Rec(ts, node, rank, gpu, ev.kind, f"{where(node, rank, gpu)}{link}: {detail}")
        rec.event_id, rec.cause, rec.device = ev.event_id, "nvlink", f"{p.device}{port}"
        rec.strength = 0.95 if et == "nvlink_down" else 0.65
        out.append(Signal(rec, "candidate"))
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
    rec = Rec(ts, node, None, None, ev.kind, what, ev.event_id, cause="ib_link")
    rec.strength, rec.device, rec.node_level = strength, dev, True
    out.append(Signal(rec, "candidate"))


def _scheduler_event(ev: SchedulerEventEvent, ts: int, out: list[Signal]) -> None:
    p = ev.payload
    node, et = ev.node, p.event_type
    reason = _first_line(p.reason, 200)
    if et == "job_started":
        out.append(Signal(Rec(ts, node, None, None, ev.kind, "", ev.event_id), "restart"))
        return
    if et in ("job_cancelled", "job_timeout", "job_completed"):
        # not a failure signal, but nothing of the job comes after it: attribute now
        why = f", {reason}" if reason else ""
        what = f"scheduler: {et.replace('_', ' ')} ({p.state or et}{why})"
        out.append(
            Signal(Rec(ts, node, None, None, ev.kind, what, ev.event_id), "symptom", end=True)
        )
        return
    if et == "job_failed":
        code = f", exit code {p.exit_code}" if p.exit_code is not None else ""
        why = f", {reason}" if reason else ""
        what = f"scheduler: job failed ({p.state or 'FAILED'}{why}{code})"
        sym = Rec(ts, node, None, None, ev.kind, what, ev.event_id)
        state = f"{p.state} {p.reason}".upper()
        derived: CauseClass | None = None
        if "PREEMPT" in state:
            derived = "scheduler_preemption"
        elif "OUT_OF_MEMORY" in state or "OOM" in state:
            derived = "host_oom"
        elif "NODE_FAIL" in state:
            derived = "node_unresponsive"
        if derived is not None:
            cand = Rec(ts, "", None, None, ev.kind, what, ev.event_id, cause=derived)
            cand.strength, cand.node_level = 0.75, True
            out.append(Signal(cand, "candidate"))
        out.append(Signal(sym, "symptom", trigger=True, end=True))
        return
    if et == "preempted":
        cause: CauseClass = "scheduler_preemption"
        strength, fatal = 1.0, True
        what = f"{node}: the scheduler preempted the node ({reason or p.state})"
    elif et == "oom_killed":
        cause, strength, fatal = "host_oom", 1.0, True
        who = where(node, ev.rank, ev.gpu)
        what = f"{who}: the host OOM killer ended the process ({reason or p.state})"
    elif et == "node_down":
        cause, strength, fatal = "node_unresponsive", 1.0, True
        what = f"{node}: the scheduler marked the node down ({reason or p.state})"
    elif et == "node_drain":
        cause, strength, fatal = "scheduler_preemption", 0.4, False
        what = f"{node}: the scheduler drained the node ({reason or p.state})"
    else:
        return
    rec = Rec(ts, node, ev.rank, ev.gpu, ev.kind, what, ev.event_id, cause=cause)
    rec.strength, rec.node_level = strength, ev.rank is None
    out.append(Signal(rec, "candidate", trigger=fatal))


def _comm_event(ev: CommEventEvent, ts: int, out: list[Signal]) -> None:
    p = ev.payload
    et = p.event_type
    if et == "other":
        return
    node, rank, gpu = ev.node, ev.rank, ev.gpu
    here = where(node, rank, None)
    text = _first_line(p.message, 240)
    if et == "watchdog_timeout":
        op = p.op or "collective"
        seq = f" seq {p.seq}" if p.seq is not None else ""
        ran = f" after {p.elapsed_ms} ms" if p.elapsed_ms is not None else ""
        sym = Rec(ts, node, rank, gpu, ev.kind, f"{here}: NCCL watchdog timeout in {op}{seq}{ran}")
        sym.event_id, sym.timeout, sym.op, sym.seq = ev.event_id, True, p.op, p.seq
        out.append(Signal(sym, "symptom", trigger=True))
        return
    peer = p.peer or peer_from_text(p.message)
    if et == "net_ib_error" and ("non-fatal" in p.message or "async event" in p.message):
        # the port's own NCCL proxy noticed the port error: a local precursor
        m = _HCA_RE.search(p.hca or "") or _HCA_RE.search(p.message)
        dev = f"{m.group(1)}:{m.group(2)}" if m else p.hca
        what = f"{here}: NET/IB async port error on {dev or 'an HCA'} ({text})"
        rec = Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id, cause="ib_link")
        rec.strength, rec.device, rec.node_level = 0.75, dev, True
        out.append(Signal(rec, "candidate"))
        out.append(Signal(Rec(ts, node, rank, gpu, ev.kind, what, ev.event_id), "symptom"))
        return
    label = {
        "net_ib_error": "NET/IB error",
        "remote_process_exited": "remote process exited or network error",
        "nccl_error": "NCCL error",
        "process_group_abort": "process group aborted",
        "nccl_warn": "NCCL warning",
    }.get(et, et)
    frm = f" (peer {peer})" if peer else ""
    sym = Rec(ts, node, rank, gpu, ev.kind, f"{here}: {label}{frm}: {text}", ev.event_id)
    trigger = et in _COMM_TRIGGERS or et == "net_ib_error"
    _classify_text(p.message, sym, out)
    out.append(Signal(sym, "symptom", trigger=trigger, peer=peer))
