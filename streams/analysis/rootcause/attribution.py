"""Attribution of one cascade: candidates (explicit and inferred) -> primary cause -> Incident.

Why a module: this is the step that runs when a cascade is due (first emission or revision). It
is a pure function of the cascade and a read-only view of the job; keeping it apart from the
incremental engine keeps the engine about *when* to attribute and this about *what*.

Three kinds of candidate are *inferred* here, and only when nothing explicit on that subject
explains them: a node whose telemetry stopped while the others kept reporting
(node_unresponsive), a rank that reported nothing while the majority timed out (hang, on the
rank that never entered seq N), and a node named by its peers' IB errors (ib_link). With nothing
better, the earliest communication error is the cause (communication), and with nothing at all,
``unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rankscope.schemas.derived import Incident
from rankscope.streams.analysis.rootcause.config import RootCauseConfig
from rankscope.streams.analysis.rootcause.narrative import evidence, summary
from rankscope.streams.analysis.rootcause.records import NS, Cascade, RankState, Rec, where
from rankscope.streams.analysis.rootcause.scoring import NODE_KILLERS, Scorer, TopologyBonus

__all__ = ["JobView", "attribute", "fallback", "peer_named", "silent_nodes", "silent_ranks"]


@dataclass(frozen=True, slots=True)
class JobView:
    """What attribution reads of the job besides the cascade: the attributor's state now."""

    cluster: str
    job_id: str
    config: RootCauseConfig
    scorer: Scorer
    node_seen: Mapping[str, int]
    ranks: Mapping[int, RankState]
    offsets: Mapping[str, int]
    last_ok_step_start: int
    now: int
    clock_ns: Callable[[], int]


def attribute(c: Cascade, cands: list[Rec], job: JobView) -> tuple[Incident, bool]:
    """The incident of cascade ``c`` from the candidates in its window (``cands``, extended in
    place by the inferred ones); also whether a weak primary was re-attributed.

    Fixes ``c.primary`` at the first call and ``c.incident_id`` at the first emission.
    """
    scorer = job.scorer
    windows = scorer.windows
    explicit = [r for r in cands if scorer.eff(r) >= 0.3]
    reporters = set(c.rank_first)
    n_seq = c.watchdog.most_common(1)[0][0] if c.watchdog else None
    silent = silent_nodes(c, explicit, job)
    cands.extend(silent)
    hangs, never = silent_ranks(c, explicit + silent, reporters, n_seq, job)
    cands.extend(hangs)
    cands.extend(peer_named(c, explicit))
    bonus = TopologyBonus(c, never, windows.corroboration)
    scored, stall_explained = scorer.rank(cands, c, job.last_ok_step_start, bonus)
    reattributed = False
    primary = c.primary
    if primary is None:
        primary = scored[0][1] if scored else fallback(c)
        c.primary = primary
    elif scored and scorer.upgrade(primary, scored):
        # evidence read after the first emission explains the cascade better (a worker
        # catching up reads the busy span topic behind the XID's): re-attribute in a
        # revision of the same incident, and time the attribution from now
        primary = c.primary = scored[0][1]
        c.attributed_ts = max(c.attributed_ts, job.now)
        reattributed = True
    elif (refined := _named_hang(primary, scored)) is not None:
        # a job-level stall ("the collective is stuck") whose awaited rank became known from
        # the collective sequence numbers (the others' watchdog timeouts name seq N, this
        # rank never entered it): the same cause, now on the rank (issue 20)
        primary = c.primary = refined
        c.attributed_ts = max(c.attributed_ts, job.now)
        reattributed = True
    if not c.incident_id:
        c.incident_id = f"{job.cluster}/{job.job_id}/{primary.ts}"
    fault_nodes = {primary.node} if primary.cause in NODE_KILLERS and primary.node else set()
    symptom_ranks = sorted(
        r for r, s in c.rank_first.items() if r != primary.rank and s.node not in fault_nodes
    )
    corroborated = bool(symptom_ranks) or bonus(primary) > 0
    conf = scorer.confidence(primary, scored, stall_explained, corroborated)
    chain = evidence(c, primary, scored, symptom_ranks, scorer, job.config.max_evidence)
    first_symptom = min(
        (
            s.ts
            for s in [*c.rank_first.values(), *c.job_level]
            if not s.event_id or s.event_id != primary.event_id
        ),
        default=c.first_ts,
    )
    nodes = {e.node for e in chain}
    offsets = {n: o for n, o in job.offsets.items() if n in nodes}
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
    incident = Incident(
        incident_id=c.incident_id,
        cluster=job.cluster,
        job_id=job.job_id,
        cause_class=primary.cause or "unknown",
        node=primary.node,
        gpu=primary.gpu,
        rank=primary.rank,
        device=device,
        xid=primary.xid,
        confidence=round(min(0.99, conf), 3),
        summary=summary(c, primary, symptom_ranks)[:4096],
        first_cause_ts=primary.ts,
        first_symptom_ts=first_symptom,
        attributed_ts=c.attributed_ts,
        emitted_ts=job.clock_ns(),
        symptom_ranks=symptom_ranks[:16_384],
        evidence=chain,
        clock_offsets_ns=offsets,
    )
    return incident, reattributed


def silent_nodes(c: Cascade, explicit: list[Rec], job: JobView) -> list[Rec]:
    """Nodes whose telemetry stopped while the others kept reporting (inferred)."""
    windows = job.scorer.windows
    lower = max(c.first_ts - windows.lookback, c.floor + 1)
    seen = {n: t for n, t in job.node_seen.items() if t >= lower}
    if len(seen) < 2:
        return []
    latest = max(seen.values())
    gaps = sorted(latest - t for t in seen.values())
    median = gaps[len(gaps) // 2]
    limit = windows.node_silence
    if median >= limit // 2:
        return []
    out: list[Rec] = []
    for node, t in seen.items():
        gap = latest - t
        if gap < limit or t > c.first_ts + windows.after:
            continue
        rec = Rec(
            t,
            node,
            None,
            None,
            "inferred",
            f"{node}: no telemetry at all after this, {gap / NS:.1f} s while the other "
            "nodes kept reporting",
            cause="node_unresponsive",
            strength=1.0,
            node_level=True,
            derived=True,
        )
        if not job.scorer.explained(rec, explicit):
            out.append(rec)
    return out


def _named_hang(primary: Rec, scored: list[tuple[float, Rec]]) -> Rec | None:
    """The best-scored hang on a rank, when the primary is a hang of the whole job."""
    if primary.cause != "hang" or primary.rank is not None or primary.node:
        return None
    return next((r for _, r in scored if r.cause == "hang" and r.rank is not None), None)


def silent_ranks(
    c: Cascade,
    explainers: list[Rec],
    reporters: set[int],
    n_seq: tuple[str, int] | None,
    job: JobView,
) -> tuple[list[Rec], set[int]]:
    """Ranks that reported nothing while the majority timed out: the ones everybody waits
    on (inferred hangs), and the set of ranks that never entered the timed-out collective."""
    if not c.timeout_ranks:
        return [], set()
    lower = max(c.first_ts - job.scorer.windows.lookback, c.floor + 1)
    active = {r: st for r, st in job.ranks.items() if st.last_ts >= lower}
    if not active or len(reporters & active.keys()) < 0.5 * len(active):
        return [], set()
    silent = {e.node for e in explainers if e.derived and e.rank is None}
    never: set[int] = set()
    out: list[Rec] = []
    for rank, st in active.items():
        if rank in reporters:
            continue
        if n_seq is not None and st.seq < n_seq[1]:
            never.add(rank)
        if st.node in silent or len(out) >= 64:
            continue
        if n_seq is not None:
            op, seq = n_seq
            tail = f"; never entered {op} seq {seq} (last completed seq {st.seq})"
        else:
            tail = ""
        rec = Rec(
            st.last_ts,
            st.node,
            rank,
            st.gpu,
            "inferred",
            f"{where(st.node, rank, st.gpu)}: no progress after this and no error while "
            f"{len(reporters)} ranks timed out{tail}",
            cause="hang",
            strength=0.85,
            derived=True,
            seq=n_seq[1] if n_seq else None,
        )
        if not job.scorer.explained(rec, explainers):
            out.append(rec)
    return out, never


def peer_named(c: Cascade, explicit: list[Rec]) -> list[Rec]:
    """A node its peers' IB/remote errors name, with nothing explicit on it (inferred)."""
    out: list[Rec] = []
    has = {e.node for e in explicit}
    for node, reporters in c.named.items():
        if node in has or not reporters:
            continue
        ts = min((s.ts for s in c.rank_first.values() if s.node in reporters), default=c.first_ts)
        rec = Rec(
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


def fallback(c: Cascade) -> Rec:
    """No candidate: the earliest communication error, else the first failure signal."""
    syms = sorted(c.rank_first.values(), key=lambda s: s.ts)
    if syms:
        s = syms[0]
        return Rec(s.ts, s.node, s.rank, s.gpu, s.kind, s.what, s.event_id, "communication", 1.0)
    job = min(c.job_level, key=lambda s: s.ts, default=None)
    if job is not None:
        return Rec(job.ts, "", None, None, job.kind, job.what, job.event_id, "unknown", 1.0)
    return Rec(c.first_ts, "", None, None, "unknown", "failure signal", cause="unknown")
