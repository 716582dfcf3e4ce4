"""Persistent stragglers from compute time and arrival order, never from step time.

In synchronous training every rank's step time is the same (fast ranks wait in the collective),
so step time hides the straggler. Per finalised step, a rank is *suspect* when its compute time is
well above the job's median for that step **and** it is among the last to arrive (shortest
collective). A rank is flagged when it is suspect in at least ``min_share`` of its last ``history``
steps: a one-window slowdown (noise, a checkpoint, a GC pause) never reaches that, a rank that
recovers stops being suspect and re-arms.

**Thresholds scale with the job's own noise** (issue 20). The job's spread is the median, over
its recent steps, of the robust dispersion of the ranks' compute ratios (1.4826 x MAD: the
standard deviation for normal noise, unmoved by the stragglers themselves). With 15% per-phase
jitter that spread is ~0.1, and a healthy rank is by chance slow and late in 8 of 10 steps now
and then; so a rank is suspect in a step only above ``1 + step_z`` spreads, and flagged only when
the median of its recent ratios is also ``window_z`` standard errors of a windowed median above
1. At the suite's 3% jitter both bounds sit below ``compute_ratio`` and nothing changes.
A slow input pipeline is also found from its own phase: data loading ``input_data_ratio`` x the
median in ``min_share`` of the recent steps while the rank's compute is above the median. A 3x
slower loader of a 5% data phase costs ~10% of compute, inside 15% jitter's noise, but its data
phase stands out by many spreads.

A whole node slower by a similar factor (config drift) is one finding on the node, not one per
rank (:mod:`.node_slowdown`): its ranks are not flagged one by one while the node shows the
pattern.

The class comes from what else is known about the rank at detection time: a data phase far above
the median with normal forward/backward is the input pipeline; throttle reasons or low SM clocks
on its GPU are thermal/power; a node whose inventory fingerprint differs from the job's majority is
config drift; otherwise compute.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rankscope.schemas.derived import Detection, StragglerClass
from rankscope.schemas.events import Event, GpuSampleEvent, NodeInventoryEvent
from rankscope.streams.analysis.node_slowdown import NodeSlowdown, NodeSlowdownConfig
from rankscope.streams.analysis.steps import StepStats

# NVML clock-event reasons that mean "slowed down by heat or power", not idle/app clocks.
_THROTTLE_MASK = 0x8 | 0x20 | 0x40 | 0x80 | 0x4 | 0x100  # HW slowdown/thermal/power brake, SW


class StragglerConfig(BaseModel):
    compute_ratio: float = Field(default=1.04, gt=1, description="Suspect above median x this.")
    late_share: float = Field(default=0.2, gt=0, le=1, description="Among the last x of arrivals.")
    history: int = Field(default=10, ge=2, description="Steps considered for persistence.")
    min_share: float = Field(default=0.8, gt=0, le=1, description="Suspect in >= x of history.")
    input_data_ratio: float = Field(default=1.5, gt=1)
    clock_ratio: float = Field(default=0.93, gt=0, lt=1)
    step_z: float = Field(
        default=0.5, ge=0, description="Suspect in a step above 1 + this x the job's spread."
    )
    window_z: float = Field(
        default=3.5,
        ge=0,
        description="Flag only when the rank's median ratio over its history is this many "
        "standard errors of a windowed median (1.2533 x spread / sqrt(history)) above 1.",
    )
    spread_steps: int = Field(
        default=32, ge=1, description="Steps the job's spread is the median of."
    )
    node: NodeSlowdownConfig = Field(default_factory=NodeSlowdownConfig)


@dataclass
class _RankTrack:
    node: str
    suspect: deque[bool]
    data_suspect: deque[bool]
    ratios: deque[float]
    data_ratios: deque[float]
    other_ratios: deque[float]
    first_suspect_ts: int | None = None
    flagged: bool = False


@dataclass
class StragglerDetector:
    cluster: str
    job_id: str
    config: StragglerConfig = field(default_factory=StragglerConfig)
    ranks: dict[int, _RankTrack] = field(default_factory=dict)
    throttled: dict[int, int] = field(default_factory=dict)  # rank -> last throttle bitmask
    sm_clock: dict[int, float] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)  # node -> inventory fingerprint
    #: the job's recent per-step spreads of compute ratios (robust sigma)
    spreads: deque[float] = field(default_factory=lambda: deque(maxlen=32))

    node_slowdown: NodeSlowdown = field(default_factory=NodeSlowdown)

    def __post_init__(self) -> None:
        self.spreads = deque(self.spreads, maxlen=self.config.spread_steps)
        self.node_slowdown = NodeSlowdown(self.config.node)

    def spread(self) -> float:
        """The job's noise: the median of its recent per-step robust spreads."""
        return statistics.median(self.spreads) if self.spreads else 0.0

    def observe(self, ev: Event) -> None:
        """Side information for classification (cheap: two kinds only)."""
        if isinstance(ev, GpuSampleEvent) and ev.rank is not None:
            p = ev.payload
            if p.throttle_reasons is not None:
                self.throttled[ev.rank] = p.throttle_reasons
            if p.sm_clock_mhz is not None:
                self.sm_clock[ev.rank] = p.sm_clock_mhz
        elif isinstance(ev, NodeInventoryEvent):
            self.fingerprints[ev.node] = ev.payload.fingerprint

    def on_step(self, stats: StepStats, step_end_ts: int, emitted_ns: int) -> list[Detection]:
        cfg = self.config
        late = stats.late_arrivers(cfg.late_share)
        med = stats.median_compute_ns or 1.0
        med_data = stats.median_data_ns or 1.0
        if len(stats.compute_ns) >= 4:
            mad = statistics.median(abs(c - med) for c in stats.compute_ns.values())
            self.spreads.append(1.4826 * mad / med)
        noise = self.spread()
        step_ratio = max(cfg.compute_ratio, 1 + cfg.step_z * noise)
        window_ratio = max(
            cfg.compute_ratio, 1 + cfg.window_z * 1.2533 * noise / math.sqrt(cfg.history)
        )
        out: list[Detection] = []
        by_node: dict[str, list[float]] = {}
        members: dict[str, list[int]] = {}
        for rank, compute in stats.compute_ns.items():
            tr = self.ranks.get(rank)
            if tr is None:
                tr = self.ranks[rank] = _RankTrack(
                    node=stats.node_of[rank],
                    suspect=deque(maxlen=cfg.history),
                    data_suspect=deque(maxlen=cfg.history),
                    ratios=deque(maxlen=cfg.history),
                    data_ratios=deque(maxlen=cfg.history),
                    other_ratios=deque(maxlen=cfg.history),
                )
            ratio = compute / med
            data = stats.data_ns.get(rank, 0)
            other_med = max(1.0, med - med_data)
            tr.ratios.append(ratio)
            by_node.setdefault(tr.node, []).append(ratio)
            members.setdefault(tr.node, []).append(rank)
            tr.data_ratios.append(data / med_data)
            tr.other_ratios.append((compute - data) / other_med)
            is_suspect = ratio >= step_ratio and rank in late
            tr.suspect.append(is_suspect)
            slow_input = data / med_data >= cfg.input_data_ratio and ratio > 1
            tr.data_suspect.append(slow_input)
            if (is_suspect or slow_input) and tr.first_suspect_ts is None:
                tr.first_suspect_ts = step_end_ts
        self.node_slowdown.on_step(by_node, step_end_ts)
        slow_nodes = self._slow_nodes(members, noise, step_end_ts, emitted_ns, out)
        for rank in stats.compute_ns:
            tr = self.ranks[rank]
            n = len(tr.suspect)
            share = sum(tr.suspect) / n
            if (
                not tr.flagged
                and tr.node not in slow_nodes
                and n >= cfg.history
                and self._persistent(tr, window_ratio)
            ):
                tr.flagged = True
                out.append(self._detection(rank, tr, step_end_ts, emitted_ns))
            elif (
                tr.flagged
                and share <= 1 - cfg.min_share
                and sum(tr.data_suspect) / n <= 1 - cfg.min_share
            ):
                tr.flagged = False  # recovered: re-arm
                tr.first_suspect_ts = None
            if not tr.suspect[-1] and share == 0 and not any(tr.data_suspect):
                tr.first_suspect_ts = None
        return out

    def _slow_nodes(
        self,
        members: dict[str, list[int]],
        noise: float,
        step_end_ts: int,
        emitted_ns: int,
        out: list[Detection],
    ) -> set[str]:
        """Nodes showing the whole-node pattern now (their ranks are not flagged one by one);
        a node-level finding for each newly found one, appended to ``out``."""
        slow: set[str] = set()
        for name, ranks in members.items():
            node = self.node_slowdown.nodes[name]
            if node.flagged:
                if self.node_slowdown.recovered(name):
                    node.flagged = False
                    node.first_ts = None
                else:
                    slow.add(name)
                continue
            ratio = self.node_slowdown.candidate(name, noise)
            if ratio is None or any(self._thermal(r) for r in ranks):
                continue
            medians = [statistics.median(self.ranks[r].ratios) for r in ranks]
            if not self.node_slowdown.uniform(ratio, medians):
                continue
            data = statistics.median(statistics.median(self.ranks[r].data_ratios) for r in ranks)
            if data >= self.config.input_data_ratio:
                continue  # the node's input pipeline (shared storage), per rank below
            node.flagged = True
            slow.add(name)
            out.append(self._node_detection(name, ratio, len(ranks), step_end_ts, emitted_ns))
        return slow

    def _thermal(self, rank: int) -> bool:
        return bool(self.throttled.get(rank, 0) & _THROTTLE_MASK)

    def _node_detection(
        self, name: str, ratio: float, ranks: int, detected_ts: int, emitted_ns: int
    ) -> Detection:
        node = self.node_slowdown.nodes[name]
        onset = node.first_ts or detected_ts
        fps = Counter(self.fingerprints.values())
        majority = fps.most_common(1)[0][0] if fps else ""
        mine = self.fingerprints.get(name, "")
        if mine and majority and mine != majority:
            inventory = f"{name} runs a different software stack (inventory fingerprint)"
        elif mine:
            inventory = f"{name}'s inventory matches the job's majority: drift it does not list"
        else:
            inventory = f"no inventory read from {name}"
        n = len(node.ratios)
        return Detection(
            detection_id=f"{self.job_id}/straggler/{name}/{onset}",
            detection_type="straggler",
            cluster=self.cluster,
            job_id=self.job_id,
            node=name,
            straggler_class="config_drift",
            score=round(ratio, 4),
            onset_ts=onset,
            detected_ts=detected_ts,
            emitted_ts=emitted_ns,
            summary=(
                f"{name} is slower as a whole (config drift): its {ranks} ranks compute "
                f"{(ratio - 1) * 100:.1f}% more than the job median, steadily, without a "
                "thermal or input signal; every collective waits for them"
            ),
            evidence=[
                f"node median compute {ratio:.3f}x the job median over {n} steps, "
                f"job spread {self.spread():.3f}",
                inventory,
            ],
            details={"compute_ratio": round(ratio, 4), "steps": n, "ranks": ranks},
        )

    def _persistent(self, tr: _RankTrack, window_ratio: float) -> bool:
        """Slow and late in most recent steps, beyond the job's noise; or a data phase that
        stayed far above the median while the rank's compute is above it."""
        cfg = self.config
        n = len(tr.suspect)
        slow = sum(tr.suspect) / n >= cfg.min_share
        slow_input = sum(tr.data_suspect) / n >= cfg.min_share
        if not (slow or slow_input):
            return False  # the common case: no median per rank and step
        median_ratio = statistics.median(tr.ratios)
        if slow and median_ratio >= window_ratio:
            return True
        return slow_input and median_ratio >= cfg.compute_ratio

    def _classify(self, rank: int, tr: _RankTrack) -> tuple[StragglerClass, list[str]]:
        cfg = self.config
        why: list[str] = []
        data_ratio = statistics.median(tr.data_ratios)
        other_ratio = statistics.median(tr.other_ratios)
        if data_ratio >= cfg.input_data_ratio and other_ratio < 1.1:
            why.append(f"data loading {data_ratio:.1f}x the job median; forward/backward normal")
            return "input_pipeline", why
        bits = self.throttled.get(rank, 0)
        clocks = [c for c in self.sm_clock.values() if c > 0]
        med_clock = statistics.median(clocks) if clocks else 0.0
        mine = self.sm_clock.get(rank, 0.0)
        if bits & _THROTTLE_MASK or (med_clock and mine and mine < cfg.clock_ratio * med_clock):
            if bits & _THROTTLE_MASK:
                why.append(f"GPU reports clock throttle reasons 0x{bits:x}")
            if med_clock and mine:
                why.append(f"SM clock {mine:.0f} MHz vs job median {med_clock:.0f} MHz")
            return "thermal", why
        fps = Counter(self.fingerprints.values())
        if len(fps) > 1:
            majority = fps.most_common(1)[0][0]
            if self.fingerprints.get(tr.node, majority) != majority:
                why.append(f"{tr.node} runs a different software stack (inventory fingerprint)")
                return "config_drift", why
        return "compute", why

    def _detection(self, rank: int, tr: _RankTrack, detected_ts: int, emitted_ns: int) -> Detection:
        cls, why = self._classify(rank, tr)
        ratio = statistics.median(tr.ratios)
        onset = tr.first_suspect_ts or detected_ts
        evidence = [
            f"compute {ratio:.2f}x the job median in {sum(tr.suspect)}/{len(tr.suspect)} recent "
            "steps, arriving last at the collective",
            *why,
        ]
        return Detection(
            detection_id=f"{self.job_id}/straggler/{rank}/{onset}",
            detection_type="straggler",
            cluster=self.cluster,
            job_id=self.job_id,
            node=tr.node,
            rank=rank,
            straggler_class=cls,
            score=round(ratio, 4),
            onset_ts=onset,
            detected_ts=detected_ts,
            emitted_ts=emitted_ns,
            summary=(
                f"rank {rank} on {tr.node} is a persistent straggler ({cls.replace('_', ' ')}): "
                f"{(ratio - 1) * 100:.0f}% more compute time than the job median; the other ranks "
                "wait for it in every collective"
            ),
            evidence=evidence,
            details={"compute_ratio": round(ratio, 4), "steps": len(tr.suspect)},
        )
