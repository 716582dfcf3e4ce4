"""Scoring: how strongly a candidate explains a cascade, who it concerns, and the confidence.

Why a module: the weights and factors below are the attribution policy; they are tuned against
the fault catalogue independently of how events are read or cascades are tracked.

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

Ties go to the earliest candidate.

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
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rankscope.schemas.derived import CauseClass
from rankscope.streams.analysis.rootcause.records import Cascade, Rec, key

if TYPE_CHECKING:
    from rankscope.streams.analysis.rootcause.config import RootCauseConfig, Windows

__all__ = [
    "DEFAULT_CLASS_WEIGHTS",
    "NODE_KILLERS",
    "SILENCE_EXPLAINERS",
    "WEAK_CAUSES",
    "Scored",
    "Scorer",
    "TopologyBonus",
]

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

SILENCE_EXPLAINERS = frozenset({"scheduler_preemption", "node_unresponsive"})
NODE_KILLERS = frozenset({"scheduler_preemption", "node_unresponsive"})
#: primaries a later revision may replace (they say *that* the job failed, not *what* broke)
WEAK_CAUSES = frozenset({"hang", "communication", "unknown"})

#: candidates with their scores, best first (ties: earliest first)
Scored = list[tuple[float, Rec]]


class TopologyBonus:
    """The topology bonus of a candidate in one cascade (see the module docstring)."""

    def __init__(self, c: Cascade, never: set[int], corroboration: int) -> None:
        self._named = {n: 0.15 * min(len(v), 3) for n, v in c.named.items()}
        self._never = never
        self._corroboration = corroboration
        self._sym_by_node: dict[str, list[Rec]] = {}
        for s in c.rank_first.values():
            self._sym_by_node.setdefault(s.node, []).append(s)

    def __call__(self, r: Rec) -> float:
        b = self._named.get(r.node, 0.0)
        if r.rank is not None and r.rank in self._never:
            b += 0.2
        hi = r.ts + self._corroboration
        if any(r.ts <= s.ts <= hi for s in self._sym_by_node.get(r.node, ())):
            b += 0.1  # a symptom follows on the same node
        return min(b, 0.5)


class Scorer:
    """The scoring policy of one attributor: class weights, time factors, subject identity."""

    def __init__(self, config: RootCauseConfig, windows: Windows) -> None:
        self.config = config
        self.windows = windows
        self.weights = {**DEFAULT_CLASS_WEIGHTS, **config.class_weights}

    def eff(self, r: Rec) -> float:
        """How diagnostic ``r`` is by itself: class weight x strength (0 for a symptom)."""
        return self.weights.get(r.cause, 0.0) * r.strength if r.cause else 0.0

    def score(
        self,
        r: Rec,
        c: Cascade,
        last_ok_step_start: int,
        bonus: float,
        stall_explained: bool = False,
    ) -> float:
        cfg = self.config
        assert r.cause is not None
        w = self.weights.get(r.cause, 0.0) * r.strength
        d = c.first_ts - r.ts
        if d < 0:
            f = cfg.after_factor
        else:
            f = 1.0
            decay_after = self.windows.decay_after
            if d > decay_after:
                span = max(1, self.windows.lookback - decay_after)
                f -= cfg.decay_max * min(1.0, (d - decay_after) / span)
        if last_ok_step_start > r.ts:
            f *= cfg.survived_factor
        if stall_explained and r.cause == "hang":
            f *= cfg.survived_factor  # the stall is a consequence of a fatal precursor
        return w * f * (1.0 + bonus)

    def rank(
        self, cands: list[Rec], c: Cascade, last_ok_step_start: int, bonus: TopologyBonus
    ) -> tuple[Scored, bool]:
        """Score every candidate, best first; and whether a fatal precursor explains a stall."""
        # a fatal precursor (XID, preemption, OOM kill, link down...) explains a stalled job:
        # the hang detector's "no progress" is then a symptom, whoever it names
        stall_explained = any(
            r.cause != "hang" and self.score(r, c, last_ok_step_start, 0.0) >= 0.6
            for r in cands
            if not r.derived or r.cause == "node_unresponsive"
        )
        scored = sorted(
            ((self.score(r, c, last_ok_step_start, bonus(r), stall_explained), r) for r in cands),
            key=lambda x: (-x[0], x[1].ts),
        )
        return scored, stall_explained

    def confidence(
        self, primary: Rec, scored: Scored, stall_explained: bool, corroborated: bool
    ) -> float:
        """The incident's confidence in ``primary`` (see the module docstring), unrounded."""
        pkey = key(primary)
        s1 = next((s for s, r in scored if key(r) == pkey), 0.0)
        s2 = max(
            (
                s
                for s, r in scored
                if r.cause != "communication"
                and not (stall_explained and r.cause == "hang")
                and not self.same_subject(r, primary)
            ),
            default=0.0,
        )
        margin = (s1 - s2) / s1 if s1 > 0 and s2 < s1 else 0.0
        w = self.eff(primary)
        conf = math.sqrt(max(0.0, min(1.0, w))) * (0.5 + 0.5 * margin)
        conf *= 1.0 if corroborated else 0.8
        return conf

    def upgrade(self, primary: Rec, scored: Scored) -> bool:
        """A revision replaces a *weak* primary (a stall or silence the detectors inferred, a
        communication error, unknown) by an event that outscores it; a primary that is itself a
        fatal event stays, so the cause does not flap between revisions."""
        if not self.config.reattribute:
            return False
        weak = primary.cause in WEAK_CAUSES or primary.kind == "detection" or primary.derived
        if not weak:
            return False
        s_top, top = scored[0]
        if key(top) == key(primary) or top.derived or top.cause in WEAK_CAUSES:
            return False
        s_primary = next((s for s, r in scored if key(r) == key(primary)), 0.0)
        return s_top > s_primary

    @staticmethod
    def unit(r: Rec) -> tuple[str, object]:
        """The thing ``r`` is about on its node: an HCA port, a GPU, a rank, or the node."""
        if r.cause == "ib_link" and r.device:
            return ("dev", r.device)
        if r.gpu is not None and not r.node_level:
            return ("gpu", r.gpu)
        if r.rank is not None and not r.node_level:
            return ("rank", r.rank)
        return ("node", None)

    def same_subject(self, a: Rec, b: Rec) -> bool:
        """Do ``a`` and ``b`` concern the same subject (one explanation, not two)?"""
        if a is b or key(a) == key(b):
            return True
        if a.node != b.node:
            return False
        ua, ub = self.unit(a), self.unit(b)
        if ua == ub:
            return True
        if (ua[0] == "node" and a.cause in NODE_KILLERS) or (
            ub[0] == "node" and b.cause in NODE_KILLERS
        ):
            return True  # a node taken away explains everything on it
        return a.cause == b.cause and (ua[0] == "node" or ub[0] == "node")

    def explained(self, r: Rec, by: Iterable[Rec]) -> bool:
        """Is the silent/hung subject ``r`` explained by an explicit candidate on it?"""
        for e in by:
            if e.node != r.node or e.ts > r.ts + self.windows.after + self.windows.settle:
                continue
            if r.rank is None:  # a silent node
                if e.cause in SILENCE_EXPLAINERS:
                    return True
                continue
            on_it = e.rank == r.rank or (e.gpu is not None and e.gpu == r.gpu) or e.node_level
            if on_it and (self.eff(e) >= 0.5 or e.cause in NODE_KILLERS):
                return True
        return False
