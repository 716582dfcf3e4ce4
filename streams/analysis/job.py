"""One job's analysis: clock alignment, stragglers, hangs, silent nodes and root cause, composed.

The stream worker keeps one :class:`JobAnalyzer` per job (a job's events share a partition) and
feeds it every validated event. Everything is driven by the job's *event time* (the highest
corrected timestamp seen), never the worker's clock, so replaying the topics reproduces the same
detections and incidents.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rankscope.schemas.derived import Detection, Incident
from rankscope.schemas.events import Event
from rankscope.streams.analysis.liveness import LivenessConfig, LivenessDetector
from rankscope.streams.analysis.reorder import EventTimeBuffer
from rankscope.streams.analysis.rootcause import RootCauseAttributor, RootCauseConfig
from rankscope.streams.analysis.steps import ClockOffsets, StepJoin
from rankscope.streams.analysis.stragglers import StragglerConfig, StragglerDetector


class AnalysisConfig(BaseModel):
    stragglers: StragglerConfig = Field(default_factory=StragglerConfig)
    liveness: LivenessConfig = Field(default_factory=LivenessConfig)
    rootcause: RootCauseConfig = Field(default_factory=RootCauseConfig)


@dataclass
class JobAnalyzer:
    cluster: str
    job_id: str
    config: AnalysisConfig = field(default_factory=AnalysisConfig)
    event_time: int = -1
    #: recompute the robust job time every this many events (it costs O(nodes))
    recompute_every: int = 256
    #: node-silence checks wait until this many steps have aligned the clocks
    min_steps_for_clock: int = 5

    def __post_init__(self) -> None:
        self._node_time: dict[str, int] = {}
        self._since_recompute = 0
        self._recomputed_at = -(2**62)
        self.buffer = EventTimeBuffer()
        self._steps_done = 0
        self.steps = StepJoin()
        self.clock = ClockOffsets()
        self.stragglers = StragglerDetector(self.cluster, self.job_id, self.config.stragglers)
        self.liveness = LivenessDetector(self.cluster, self.job_id, self.config.liveness)
        self.rootcause = RootCauseAttributor(self.cluster, self.job_id, self.config.rootcause)

    def observe(self, ev: Event) -> None:
        """Buffer one event; detectors see events in event-time order (``reorder``)."""
        for ready, ts in self.buffer.push(ev, self.clock.correct(ev.node, ev.ts)):
            self._process(ready, ts)

    def _process(self, ev: Event, ts: int) -> None:
        if ev.node not in self._node_time:
            self._node_time[ev.node] = ts
            self._since_recompute = self.recompute_every
        else:
            self._node_time[ev.node] = ts
        self._since_recompute += 1
        if self._since_recompute >= self.recompute_every:
            self._recompute_event_time()
        self.steps.observe(ev)
        self.stragglers.observe(ev)
        # Liveness judges arrivals against the job's clock, so a node whose clock is off is
        # neither "silent" (behind) nor pushing everyone else into silence (ahead).
        self.liveness.observe(ev, max(self.event_time, 0))
        self.rootcause.observe(ev, ts)

    def _recompute_event_time(self) -> None:
        """The job's event time: the 75th percentile of the nodes' latest corrected times.

        The maximum would let one node with a clock running ahead (not yet estimated) make all
        the others look silent; the percentile tolerates a quarter of the nodes being off.
        """
        self._since_recompute = 0
        self._recomputed_at = self.buffer.watermark
        times = sorted(self._node_time.values())
        if not times:
            return
        robust = times[min(len(times) - 1, (3 * len(times)) // 4)] if len(times) > 2 else times[0]
        self.event_time = max(self.event_time, robust)

    def flush(self, emitted_ns: int | None = None) -> tuple[list[Detection], list[Incident]]:
        """End of the stream (the job went quiet): attribute whatever is still settling."""
        for ev, ts in self.buffer.drain():
            self._process(ev, ts)
        detections, incidents = self.advance(emitted_ns)
        more = self.rootcause.flush(self.event_time if self.event_time >= 0 else None)
        return detections, incidents + self._with_offsets(more)

    def _with_offsets(self, incidents: list[Incident]) -> list[Incident]:
        if incidents and self.clock.offsets:
            offsets = {n: o for n, o in self.clock.offsets.items() if abs(o) >= 1_000_000}
            incidents = [i.model_copy(update={"clock_offsets_ns": offsets}) for i in incidents]
        return incidents

    def advance(self, emitted_ns: int | None = None) -> tuple[list[Detection], list[Incident]]:
        """Run the detectors up to the job's event time; returns what is new."""
        now = time.time_ns() if emitted_ns is None else emitted_ns
        for ev, ts in self.buffer.release():
            self._process(ev, ts)
        if self._since_recompute and self.buffer.watermark - self._recomputed_at >= 50_000_000:
            self._recompute_event_time()  # O(nodes): once per 50 ms of progress, not per record
        detections: list[Detection] = []
        for node, delta in self.steps.drain_late_offsets():
            self.clock.add_sample(node, delta)
        for stats in self.steps.finalize_ready():
            self._steps_done += 1
            self.clock.update(stats)
            end = min(stats.end_ts_by_node.values()) if stats.end_ts_by_node else self.event_time
            node0 = min(stats.end_ts_by_node, key=lambda n: stats.end_ts_by_node[n], default="")
            detections.extend(self.stragglers.on_step(stats, self.clock.correct(node0, end), now))
        if self.event_time >= 0:
            aligned = self._steps_done >= self.min_steps_for_clock
            for det in self.liveness.advance(self.event_time, now, check_nodes=aligned):
                detections.append(det)
                if det.detection_type == "hang":
                    self.rootcause.note_hang(det.rank, det.node, det.onset_ts, None)
                elif det.detection_type == "node_unresponsive":
                    self.rootcause.note_node_unresponsive(det.node, det.onset_ts)
        incidents = self.rootcause.advance(self.event_time) if self.event_time >= 0 else []
        return detections, self._with_offsets(incidents)
