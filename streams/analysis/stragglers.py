"""Persistent stragglers from compute time and arrival order, never from step time.

In synchronous training every rank's step time is the same (fast ranks wait in the collective),
so step time hides the straggler. Per finalised step, a rank is *suspect* when its compute time is
well above the job's median for that step **and** it is among the last to arrive (shortest
collective). A rank is flagged when it is suspect in at least ``min_share`` of its last ``history``
steps: a one-window slowdown (noise, a checkpoint, a GC pause) never reaches that, a rank that
recovers stops being suspect and re-arms.

The class comes from what else is known about the rank at detection time: a data phase far above
the median with normal forward/backward is the input pipeline; throttle reasons or low SM clocks
on its GPU are thermal/power; a node whose inventory fingerprint differs from the job's majority is
config drift; otherwise compute.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rankscope.schemas.derived import Detection, StragglerClass
from rankscope.schemas.events import Event, GpuSampleEvent, NodeInventoryEvent
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


@dataclass
class _RankTrack:
    node: str
    suspect: deque[bool]
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
        out: list[Detection] = []
        for rank, compute in stats.compute_ns.items():
            tr = self.ranks.get(rank)
            if tr is None:
                tr = self.ranks[rank] = _RankTrack(
                    node=stats.node_of[rank],
                    suspect=deque(maxlen=cfg.history),
                    ratios=deque(maxlen=cfg.history),
                    data_ratios=deque(maxlen=cfg.history),
                    other_ratios=deque(maxlen=cfg.history),
                )
            ratio = compute / med
            data = stats.data_ns.get(rank, 0)
            other_med = max(1.0, med - med_data)
            tr.ratios.append(ratio)
            tr.data_ratios.append(data / med_data)
            tr.other_ratios.append((compute - data) / other_med)
            is_suspect = ratio >= cfg.compute_ratio and rank in late
            tr.suspect.append(is_suspect)
            if is_suspect and tr.first_suspect_ts is None:
                tr.first_suspect_ts = step_end_ts
            n = len(tr.suspect)
            share = sum(tr.suspect) / n
            if not tr.flagged and n >= cfg.history and share >= cfg.min_share:
                tr.flagged = True
                out.append(self._detection(rank, tr, step_end_ts, emitted_ns))
            elif tr.flagged and share <= 1 - cfg.min_share:
                tr.flagged = False  # recovered: re-arm
                tr.first_suspect_ts = None
            if not is_suspect and share == 0:
                tr.first_suspect_ts = None
        return out

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
