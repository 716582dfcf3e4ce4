"""One job's analysis: clock alignment, stragglers, hangs, silent nodes and root cause, composed.

The stream worker keeps one :class:`JobAnalyzer` per job (a job's events share a partition) and
feeds it every validated event. Everything is driven by the job's *event time* (the highest
corrected timestamp seen), never the worker's clock, and the detectors run at points fixed by the
event sequence itself (every ``step_events`` events or ``step_s`` of event time), not at the
record or fetch boundaries the worker happened to read: the same partition gives the same
detections and incidents, read live, behind, in bulk or replayed.

Quiet detections tables (issue 20): a finding is attributed to a node, rank or GPU, or folded
into the incident that explains it. A hang that names no rank ("the collective itself is stuck")
is held until the attributor's next incident, which the hang's note opens or joins within its
settling time: when that incident names a cause on a node or rank, the hang is one of its
symptoms and is not a row of its own; when it names none, the hang row is published. Both
sides are decided in event time, so the choice is the same live and in replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rankscope.schemas.derived import Detection, Incident
from rankscope.schemas.events import Event
from rankscope.streams.analysis.baseline import BaselineConfig, ProfileTracker
from rankscope.streams.analysis.liveness import LivenessConfig, LivenessDetector
from rankscope.streams.analysis.reorder import EventTimeBuffer
from rankscope.streams.analysis.rootcause import RootCauseAttributor, RootCauseConfig
from rankscope.streams.analysis.steps import ClockOffsets, StepJoin
from rankscope.streams.analysis.stragglers import StragglerConfig, StragglerDetector


class AnalysisConfig(BaseModel):
    stragglers: StragglerConfig = Field(default_factory=StragglerConfig)
    liveness: LivenessConfig = Field(default_factory=LivenessConfig)
    rootcause: RootCauseConfig = Field(default_factory=RootCauseConfig)
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)


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
    #: run the detectors after this many events ...
    step_events: int = 256
    #: ... or once the newest event time moved this far (a small job still advances promptly)
    step_s: float = 0.25
    #: the findings' ``emitted`` stamp (metadata only: nothing is decided on it)
    clock_ns: Callable[[], int] = time.time_ns

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
        self.rootcause = RootCauseAttributor(
            self.cluster, self.job_id, self.config.rootcause, clock_ns=self.clock_ns
        )
        #: the job's profile for the reference-baseline comparison (streams/stages/baselines.py)
        self.baseline = ProfileTracker(self.cluster, self.job_id, self.config.baseline)
        self._step_ns = int(self.step_s * 1e9)
        self._pushed = 0  # since the last step
        self._stepped_lead = -(2**62)  # the buffer's newest event time at the last step
        self._detections: list[Detection] = []
        self._incidents: list[Incident] = []
        #: job-level hangs waiting for the incident that may explain them
        self._held: list[Detection] = []
        #: job-level hangs folded into an incident naming the cause (not published)
        self.folded_hangs = 0

    def observe(self, ev: Event) -> None:
        """Buffer one event (detectors see events in event-time order, ``reorder``); run the
        detectors when the event sequence reaches the next step point."""
        ts = ev.ts - self.clock.offsets.get(ev.node, 0)  # clock.correct, inlined: per event
        for ready, rts in self.buffer.push(ev, ts):
            self._process(ready, rts)
        self._pushed += 1
        if (
            self._pushed >= self.step_events
            or self.buffer.lead - self._stepped_lead >= self._step_ns
        ):
            self._step()

    def take(self) -> tuple[list[Detection], list[Incident]]:
        """The findings of the steps run since the last call (what the worker publishes)."""
        out = self._detections, self._incidents
        self._detections, self._incidents = [], []
        return out

    def _process(self, ev: Event, ts: int) -> None:
        node_time = self._node_time
        if ev.node not in node_time:
            self._since_recompute = self.recompute_every
        node_time[ev.node] = ts
        self._since_recompute += 1
        if self._since_recompute >= self.recompute_every:
            self._recompute_event_time()
        self.steps.observe(ev)
        self.stragglers.observe(ev)
        # Liveness judges arrivals against the job's clock, so a node whose clock is off is
        # neither "silent" (behind) nor pushing everyone else into silence (ahead).
        event_time = self.event_time
        self.liveness.observe(ev, event_time if event_time > 0 else 0)
        self.rootcause.observe(ev, ts)
        self.baseline.observe(ev)

    def _recompute_event_time(self) -> None:
        """The job's event time: the 75th percentile of the nodes' latest corrected times.

        The maximum would let one node with a clock running ahead (not yet estimated) make all
        the others look silent; the percentile tolerates a quarter of the nodes being off. It is
        never the newest node while two or more report (issue 20): in the first second of a job
        only three or four nodes have spoken, their 75th percentile is their maximum, and one
        node whose clock runs 30 s ahead (offset not yet learnt) pushed the job's time 30 s
        forward for good (event time never goes back), stamping every node's last telemetry
        there, so a node that then went silent was not seen before the job failed.
        """
        self._since_recompute = 0
        self._recomputed_at = self.buffer.watermark
        times = sorted(self._node_time.values())
        if not times:
            return
        robust = times[max(0, min(len(times) - 2, (3 * len(times)) // 4))]
        self.event_time = max(self.event_time, robust)

    def flush(self) -> tuple[list[Detection], list[Incident]]:
        """End of the stream (the job went quiet): attribute whatever is still settling; returns
        everything not yet taken."""
        for ev, ts in self.buffer.drain():
            self._process(ev, ts)
        self._step()
        more = self._with_offsets(
            self.rootcause.flush(self.event_time if self.event_time >= 0 else None)
        )
        self._fold(more)
        self._incidents.extend(more)
        self._detections.extend(self._held)  # no incident came: the hang stands on its own
        self._held = []
        return self.take()

    def _with_offsets(self, incidents: list[Incident]) -> list[Incident]:
        if incidents and self.clock.offsets:
            offsets = {n: o for n, o in self.clock.offsets.items() if abs(o) >= 1_000_000}
            incidents = [i.model_copy(update={"clock_offsets_ns": offsets}) for i in incidents]
        return incidents

    def _step(self) -> None:
        """Run the detectors up to the job's event time; what is new waits for :meth:`take`."""
        self._pushed = 0
        self._stepped_lead = self.buffer.lead
        now = self.clock_ns()
        for ev, ts in self.buffer.release():
            self._process(ev, ts)
        if self._since_recompute and self.buffer.watermark - self._recomputed_at >= 50_000_000:
            self._recompute_event_time()  # O(nodes): once per 50 ms of progress, not per record
        detections = self._detections
        for node, delta in self.steps.drain_late_offsets():
            self.clock.add_sample(node, delta)
        for stats in self.steps.finalize_ready():
            self._steps_done += 1
            self.clock.update(stats)
            end = min(stats.end_ts_by_node.values()) if stats.end_ts_by_node else self.event_time
            node0 = min(stats.end_ts_by_node, key=lambda n: stats.end_ts_by_node[n], default="")
            step_end = self.clock.correct(node0, end)
            detections.extend(self.stragglers.on_step(stats, step_end, now))
            self.baseline.on_step(stats, step_end)
        if self.event_time >= 0:
            aligned = self._steps_done >= self.min_steps_for_clock
            for det in self.liveness.advance(self.event_time, now, check_nodes=aligned):
                detections.append(det)
                if det.detection_type == "hang":
                    seq = det.details.get("seq")
                    seq = seq if isinstance(seq, int) else None
                    self.rootcause.note_hang(det.rank, det.node, det.onset_ts, seq)
                    if det.rank is None and not det.node:
                        detections.pop()
                        self._held.append(det)
                elif det.detection_type == "node_unresponsive":
                    self.rootcause.note_node_unresponsive(det.node, det.onset_ts)
        if self.event_time >= 0:
            incidents = self._with_offsets(self.rootcause.advance(self.event_time))
            self._fold(incidents)
            self._incidents.extend(incidents)

    def _fold(self, incidents: list[Incident]) -> None:
        """Settle the held job-level hangs against the incidents just attributed."""
        if not self._held or not incidents:
            return
        if any(i.node or i.rank is not None for i in incidents):
            self.folded_hangs += len(self._held)  # a symptom of the named cause
        else:
            self._detections.extend(self._held)
        self._held = []
