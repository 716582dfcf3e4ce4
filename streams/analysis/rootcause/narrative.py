"""Narrative: the evidence chain and the one-paragraph summary of an Incident record.

Why a module: what an operator reads (which events are listed in which role, how the cause and
its consequences are phrased) changes for readers, not for the attribution; the text is built
here from the records the engine chose.
"""

from __future__ import annotations

import time

from rankscope.schemas.derived import EvidenceItem
from rankscope.streams.analysis.rootcause.records import MS, NS, Cascade, Rec, Role, key, where
from rankscope.streams.analysis.rootcause.scoring import Scored, Scorer
from rankscope.streams.analysis.rootcause.xid import xid_description

__all__ = ["cause_sentence", "dur", "evidence", "hms", "summary"]


def hms(ns: int) -> str:
    """'HH:MM:SS.mmm' (UTC) of an event time in ns."""
    s, rem = divmod(ns, NS)
    return time.strftime("%H:%M:%S", time.gmtime(s)) + f".{rem // MS:03d}"


def dur(seconds: float) -> str:
    """A short human duration: '0.3 s', '10 s', '2.5 min'."""
    if seconds < 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def evidence(
    c: Cascade,
    primary: Rec,
    scored: Scored,
    symptom_ranks: list[int],
    scorer: Scorer,
    cap: int,
) -> list[EvidenceItem]:
    """The evidence chain: the cause, its precursors, competing precursors, then symptoms;
    each event once, in time order, at most ``cap`` items."""
    chain: list[tuple[Rec, Role]] = [(primary, "cause")]
    pkey = key(primary)
    same = [r for _, r in scored if key(r) != pkey and scorer.same_subject(r, primary)]
    chain.extend((r, "precursor") for r in sorted(same, key=lambda r: r.ts)[:48])
    others = [
        r
        for s, r in scored
        if not scorer.same_subject(r, primary)
        and scorer.eff(r) >= 0.3
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
        k = r.event_id or f"{r.ts}/{r.what}"
        if k in seen:
            continue
        seen.add(k)
        items.append(
            EvidenceItem(
                ts=r.ts,
                node=r.node,
                rank=r.rank,
                kind=r.kind,
                what=f"{hms(r.ts)} {r.what}"[:1024],
                event_id=r.event_id,
                role=role,
            )
        )
    order = {"cause": 0, "precursor": 1, "symptom": 2}
    items.sort(key=lambda e: (e.ts, order[e.role]))
    return items[:cap]


def summary(c: Cascade, p: Rec, symptom_ranks: list[int]) -> str:
    """The incident's summary: the cause, then what the other ranks and the scheduler did."""
    at = hms(p.ts)
    cause = cause_sentence(p, at)
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
            f"about {dur((first_to - p.ts) / NS)} later"
        )
    errored = len(symptom_ranks) - len(timed_out)
    if errored:
        first_err = min(c.rank_first[r].ts for r in symptom_ranks if r not in c.timeout_ranks)
        parts.append(
            f"{errored} {'other ' if timed_out else ''}rank{'s' if errored != 1 else ''} "
            f"failed with errors from {dur((first_err - p.ts) / NS)} after it"
        )
    if not symptom_ranks:
        parts.append("no other rank has reported an error yet")
    failed = min(
        (s.ts for s in c.job_level if s.what.startswith("scheduler: job failed")), default=None
    )
    if failed is not None:
        parts.append(f"the scheduler failed the job at T+{dur((failed - p.ts) / NS)}")
    return "; ".join(parts)


def cause_sentence(p: Rec, at: str) -> str:
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
        text = f"rank {p.rank} ({where(p.node, None, p.gpu)}) stopped making progress"
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
