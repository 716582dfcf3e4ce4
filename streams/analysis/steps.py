"""Per-step join of all ranks' phase spans: the raw material of clock alignment and stragglers.

In synchronous data-parallel training, step N's collective completes for every rank at the same
true moment (when the last rank arrives). Two facts follow and everything here rests on them:

- **Clock offsets.** The collective-end timestamps of different nodes for the same step differ
  only by the nodes' clock offsets, so per node ``median(end_node - end_reference)`` over recent
  steps estimates its offset (NTP-free, from data the job produces anyway).
- **Arrival order without clocks.** A rank that arrives late waits *less* in the collective, so
  the shortest collective duration marks the last arrival. Durations are measured on one node's
  clock, so they need no alignment; neither do compute durations.

Memory is bounded: only the last ``max_open_steps`` steps are kept open; a step is finalised when
a later step has been seen from most ranks (or on ``flush``).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from rankscope.schemas.events import Event, SpanEvent

COMPUTE_PHASES = frozenset({"data", "forward", "backward", "optimizer"})


@dataclass
class RankStep:
    node: str = ""
    compute_ns: int = 0
    data_ns: int = 0
    collective_ns: int | None = None
    collective_end_ts: int | None = None  # source clock of the rank's node
    phases: int = 0
    phase_ns: dict[str, int] = field(default_factory=dict)  # per compute phase


@dataclass
class StepStats:
    """A finalised step: per-rank compute/data/collective and the arrival order."""

    step: int
    end_ts_by_node: dict[str, int]
    compute_ns: dict[int, int]
    data_ns: dict[int, int]
    collective_ns: dict[int, int]
    node_of: dict[int, str]
    median_compute_ns: float
    median_data_ns: float
    #: per phase (compute phases and "collective"): the median over ranks (0 where a rank
    #: lacks it), and "step" (each rank's compute + collective): what a reference-baseline
    #: profile is built from (streams/analysis/baseline.py)
    median_phase_ns: dict[str, float] = field(default_factory=dict)

    def late_arrivers(self, share: float) -> set[int]:
        """Ranks among the last ``share`` to arrive (shortest collectives)."""
        if not self.collective_ns:
            return set()
        n = max(1, int(len(self.collective_ns) * share))
        ordered = sorted(self.collective_ns, key=lambda r: self.collective_ns[r])
        return set(ordered[:n])

    @property
    def last_arriver(self) -> int | None:
        if not self.collective_ns:
            return None
        return min(self.collective_ns, key=lambda r: self.collective_ns[r])


@dataclass
class StepJoin:
    """Collects phase spans per (step, rank) and finalises steps into :class:`StepStats`."""

    max_open_steps: int = 8
    steps: dict[int, dict[int, RankStep]] = field(default_factory=dict)
    finalized_upto: int = -1
    ranks_seen: set[int] = field(default_factory=set)
    done: deque[StepStats] = field(default_factory=deque)
    #: (node, collective end minus the step's reference end) from spans of finalised steps
    late_offsets: list[tuple[str, int]] = field(default_factory=list)
    _references: dict[int, int] = field(default_factory=dict)  # step -> median end, recent
    _late_seen: set[tuple[str, int]] = field(default_factory=set)

    def observe(self, ev: Event) -> None:
        if not isinstance(ev, SpanEvent) or ev.rank is None:
            return
        p = ev.payload
        if p.step is None:
            return
        if p.step <= self.finalized_upto:
            self._late(ev.node, p.step, p.phase, ev.ts)
            return
        phase = p.phase
        if phase not in COMPUTE_PHASES and phase != "collective":
            return
        self.ranks_seen.add(ev.rank)
        per_rank = self.steps.get(p.step)
        if per_rank is None:
            per_rank = self.steps[p.step] = {}
            if len(self.steps) > self.max_open_steps:
                self._finalize(min(self.steps))
        rs = per_rank.get(ev.rank)
        if rs is None:
            rs = per_rank[ev.rank] = RankStep(node=ev.node)
        dur = p.end_ns - p.start_ns
        if dur < 0:
            dur = 0
        if phase == "collective":
            rs.collective_ns = dur
            rs.collective_end_ts = ev.ts
        else:
            rs.compute_ns += dur
            rs.phases += 1
            rs.phase_ns[phase] = rs.phase_ns.get(phase, 0) + dur
            if phase == "data":
                rs.data_ns += dur

    def _late(self, node: str, step: int, phase: str, ts: int) -> None:
        """A collective end of an already finalised step still measures its node's clock.

        A node whose clock runs ahead is released late by the event-time reorder buffer until
        its offset is known; in a large job the others finalise the step without it (they are
        90% of the ranks), so without this the offset would never be learnt at all."""
        if phase != "collective":
            return
        reference = self._references.get(step)
        if reference is None or (node, step) in self._late_seen:
            return
        self._late_seen.add((node, step))
        self.late_offsets.append((node, ts - reference))

    def drain_late_offsets(self) -> list[tuple[str, int]]:
        out, self.late_offsets = self.late_offsets, []
        return out

    def _finalize(self, step: int) -> None:
        per_rank = self.steps.pop(step, {})
        self.finalized_upto = max(self.finalized_upto, step)
        complete = {
            r: s for r, s in per_rank.items() if s.collective_ns is not None and s.phases >= 1
        }
        if len(complete) < 2:
            return
        ends: dict[str, list[int]] = {}
        for s in complete.values():
            assert s.collective_end_ts is not None
            ends.setdefault(s.node, []).append(s.collective_end_ts)
        compute = {r: s.compute_ns for r, s in complete.items()}
        data = {r: s.data_ns for r, s in complete.items()}
        end_by_node = {n: int(statistics.median(v)) for n, v in ends.items()}
        phase_names = {p for s in complete.values() for p in s.phase_ns}
        median_phase = {
            p: float(statistics.median(s.phase_ns.get(p, 0) for s in complete.values()))
            for p in phase_names
        }
        median_phase["collective"] = float(
            statistics.median(s.collective_ns or 0 for s in complete.values())
        )
        median_phase["step"] = float(
            statistics.median(s.compute_ns + (s.collective_ns or 0) for s in complete.values())
        )
        self._references[step] = int(statistics.median(end_by_node.values()))
        while len(self._references) > 32:
            oldest = min(self._references)
            del self._references[oldest]
            self._late_seen = {k for k in self._late_seen if k[1] > oldest}
        self.done.append(
            StepStats(
                step=step,
                end_ts_by_node=end_by_node,
                compute_ns=compute,
                data_ns=data,
                collective_ns={r: s.collective_ns or 0 for r, s in complete.items()},
                node_of={r: s.node for r, s in complete.items()},
                median_compute_ns=statistics.median(compute.values()),
                median_data_ns=statistics.median(data.values()),
                median_phase_ns=median_phase,
            )
        )

    def finalize_ready(self) -> list[StepStats]:
        """Finalise steps that every rank has moved past; return what finalised since last call."""
        if len(self.steps) >= 2:
            newest = max(self.steps)
            for step in sorted(self.steps):
                if step >= newest:
                    break
                later = self.steps.get(step + 1, {})
                if len(later) >= 0.9 * max(1, len(self.ranks_seen)):
                    self._finalize(step)
        out = list(self.done)
        self.done.clear()
        return out

    def flush(self) -> list[StepStats]:
        for step in sorted(self.steps):
            self._finalize(step)
        out = list(self.done)
        self.done.clear()
        return out


@dataclass
class ClockOffsets:
    """Per-node clock offset estimates (ns) from simultaneous collective completions."""

    history: int = 20
    samples: dict[str, deque[int]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)

    def update(self, stats: StepStats) -> None:
        ends = stats.end_ts_by_node
        if len(ends) < 2:
            return
        reference = statistics.median(ends.values())
        for node, end in ends.items():
            self.add_sample(node, int(end - reference))

    def add_sample(self, node: str, delta_ns: int) -> None:
        """One (node end - reference end) measurement learnt outside ``update``."""
        dq = self.samples.get(node)
        if dq is None:
            dq = self.samples[node] = deque(maxlen=self.history)
        dq.append(int(delta_ns))
        self.offsets[node] = int(statistics.median(dq))

    def offset(self, node: str) -> int:
        return self.offsets.get(node, 0)

    def correct(self, node: str, ts: int) -> int:
        return ts - self.offsets.get(node, 0)
