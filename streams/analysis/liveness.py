"""Hangs and silent nodes, from the absence of progress or telemetry in event time.

**Hang.** A job makes progress when steps complete. If no step has completed for an adaptive
timeout (``timeout_factor`` x the recent median step time, clamped to [min, max]), the job is
hung. The rank everyone waits on is the one that never entered the collective: the others have
finished their compute phases of step N (their data/forward/backward/optimizer spans arrived),
while it is still at N-1. When the compute phases cannot tell (every rank finished them, and one
never started collective N: a desync), the hang is named again once the watchdog fires, whatever
its timeout (10 s in the suite, 600 s in production): the ranks that time out name SeqNum N, and
the awaited rank is the one that did not, its last completed collective seq behind N.

**Silent node.** Every node sends heartbeats. A node from which *nothing* has arrived for
``silence_factor`` heartbeat intervals while the rest of the job keeps going is unresponsive. If
its heartbeats stop but its ranks' spans keep arriving, the node is alive and only the collector
is dead: that is reported differently, because the remedy differs (restart the agent, not the job).
Each stream is judged by its own cadence (issue 20): heartbeats by the node's interval, declared
or observed (an agent whose loop runs late delivers slower than it declares), spans by the job's
step time (ranks report once per step; with 10 s steps a 7 s gap is normal). A node is
unresponsive only when both streams are overdue, its collector silent when only heartbeats are.

Time is the job's event time (corrected), so a replay gives the same answers as live operation.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rankscope.schemas.derived import Detection
from rankscope.schemas.events import (
    CommEventEvent,
    Event,
    HeartbeatEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from rankscope.streams.analysis.steps import COMPUTE_PHASES

S = 1_000_000_000
_PHASE_ORDER = {"data": 0, "forward": 1, "backward": 2, "optimizer": 3}
_PHASE_NAME = {v: k for k, v in _PHASE_ORDER.items()}
_TERMINAL = frozenset({"job_failed", "job_completed", "job_cancelled", "job_timeout", "preempted"})


class LivenessConfig(BaseModel):
    timeout_factor: float = Field(default=5.0, gt=1)
    min_timeout_s: float = Field(default=3.0, gt=0)
    max_timeout_s: float = Field(default=900.0, gt=0)
    silence_factor: float = Field(
        default=1.5, gt=1, description="Node silent this many heartbeat intervals: unresponsive."
    )
    min_silence_s: float = Field(default=6.0, gt=0)
    collector_silence_factor: float = Field(
        default=2.5, gt=1, description="No heartbeat this many intervals while spans still flow."
    )
    confirm_s: float = Field(
        default=2.0,
        ge=0,
        description="A hang must hold while this much of the job's other telemetry is read.",
    )
    confirm_min_events: int = Field(default=16, ge=0)
    max_silent_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="More nodes than this share silent at once: a job-wide cause, not per node.",
    )


@dataclass
class _Node:
    last_any: int = -1
    last_heartbeat: int = -1
    last_span: int = -1
    interval_s: float = 5.0
    flagged: str = ""  # "", "node_unresponsive", "collector_silent"
    #: recent gaps between its heartbeats (s): the cadence it really delivers
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=8))

    def cadence_s(self) -> float:
        """The heartbeat interval to judge this node by: declared, or observed when longer."""
        if self.gaps:
            return max(self.interval_s, statistics.median(self.gaps))
        return self.interval_s


@dataclass
class LivenessDetector:
    cluster: str
    job_id: str
    config: LivenessConfig = field(default_factory=LivenessConfig)
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=50))
    last_progress_ts: int = -1
    #: progress per rank: (step, phase index) of the latest compute span that ended
    rank_step: dict[int, tuple[int, int]] = field(default_factory=dict)
    rank_node: dict[int, str] = field(default_factory=dict)
    nodes: dict[str, _Node] = field(default_factory=dict)
    hang_flagged: bool = False
    #: first failure/end signal (error span, terminal scheduler event): silences and stalls that
    #: start after it are consequences, not causes
    ended_ts: int = -1
    #: events observed since the last span (any rank): a hang is confirmed in read order too
    since_span: int = 0
    non_span_events: int = 0
    first_ts: int = -1
    node_check_ns: int = 250_000_000
    _nodes_checked_ts: int = -(2**62)
    #: last completed collective sequence number per rank (span attribute ``collective.seq``)
    coll_seq: dict[int, int] = field(default_factory=dict)
    #: watchdog timeouts: collective seq -> ranks that reported timing out in it
    timed_out: dict[int, set[int]] = field(default_factory=dict)
    #: a hang found without a rank, named later from the sequence numbers
    unnamed_hang: Detection | None = None
    _steps_seen: int = 0
    _median_at: int = -1
    _median: float = 0.0

    def observe(self, ev: Event, ts: int) -> None:
        # once per event: comparisons where max() was (a tenth of this method), spans first
        self.since_span += 1
        if self.first_ts < 0:
            self.first_ts = ts
        node = self.nodes.get(ev.node)
        if node is None:
            node = self.nodes[ev.node] = _Node()
        if ts > node.last_any:
            node.last_any = ts
        if isinstance(ev, SpanEvent):
            if ev.rank is not None:
                self._span(ev, ev.rank, node, ts)
            return
        self.non_span_events += 1
        if isinstance(ev, HeartbeatEvent):
            if ts > node.last_heartbeat >= 0:
                node.gaps.append((ts - node.last_heartbeat) / S)
            if ts > node.last_heartbeat:
                node.last_heartbeat = ts
            node.interval_s = ev.payload.interval_s
        elif isinstance(ev, SchedulerEventEvent) and ev.payload.event_type in _TERMINAL:
            self._end(ts)
        elif (
            isinstance(ev, CommEventEvent)
            and ev.payload.event_type == "watchdog_timeout"
            and ev.payload.seq is not None
            and ev.rank is not None
        ):
            self.timed_out.setdefault(ev.payload.seq, set()).add(ev.rank)
            self.rank_node.setdefault(ev.rank, ev.node)

    def _span(self, ev: SpanEvent, rank: int, node: _Node, ts: int) -> None:
        """A rank's span: progress, its collective sequence and step position, a failure."""
        self.since_span = 0
        if ts > node.last_span:
            node.last_span = ts
        p = ev.payload
        self.rank_node[rank] = ev.node
        phase = p.phase
        if phase == "collective":
            seq = p.attributes.get("collective.seq")
            if isinstance(seq, int) and seq > self.coll_seq.get(rank, -1):
                self.coll_seq[rank] = seq
        elif phase == "step":
            self.step_times.append(p.duration_s)
            self._steps_seen += 1
            if ts > self.last_progress_ts:
                self.last_progress_ts = ts
                self.hang_flagged = False  # progress resumed: re-arm
                self.unnamed_hang = None
        elif phase in COMPUTE_PHASES and p.step is not None:
            pos = (p.step, _PHASE_ORDER[phase])
            if pos > self.rank_step.get(rank, (-1, -1)):
                self.rank_step[rank] = pos
        if p.status == "error":
            self._end(ts)

    def _end(self, ts: int) -> None:
        if self.ended_ts < 0 or ts < self.ended_ts:
            self.ended_ts = ts

    def _before_end(self, ts: int) -> bool:
        return self.ended_ts < 0 or ts <= self.ended_ts

    def _confirm_events(self, now_ts: int) -> int:
        """Events read since the last span before a stall counts as a hang.

        A hung job sends no spans at all (its ranks wait in the collective) while samples and
        heartbeats keep coming. A worker that is behind reads the span topic in bursts between
        bursts of the others, so event time can pass the timeout between two span bursts: the
        hang must also hold while ``confirm_s`` worth of the job's other telemetry (at its
        observed rate; more than one fetch of the other topics) is read without a single span.
        """
        rate = self.non_span_events / max(1.0, (now_ts - self.first_ts) / S)
        return max(self.config.confirm_min_events, round(rate * self.config.confirm_s))

    def timeout_ns(self) -> int:
        cfg = self.config
        med = self._median_step_s() if self.step_times else cfg.min_timeout_s
        return int(min(cfg.max_timeout_s, max(cfg.min_timeout_s, cfg.timeout_factor * med)) * S)

    def advance(self, now_ts: int, emitted_ns: int, check_nodes: bool = True) -> list[Detection]:
        """``check_nodes=False`` until clock offsets are known and the job's inputs are in step:
        before that, a node whose clock is behind looks silent, and a kind whose topic is read
        late looks like a stall."""
        out: list[Detection] = []
        timeout = self.timeout_ns()
        if (
            check_nodes
            and not self.hang_flagged
            and self.since_span >= self._confirm_events(now_ts)
            and self.last_progress_ts > 0
            and now_ts - self.last_progress_ts > timeout
            and self._before_end(self.last_progress_ts + timeout)
        ):
            self.hang_flagged = True
            hang = self._hang(now_ts, emitted_ns)
            self.unnamed_hang = hang if hang.rank is None and not hang.node else None
            out.append(hang)
        if self.unnamed_hang is not None and self.timed_out:
            named = self._named_by_seq(self.unnamed_hang, now_ts)
            if named is not None:
                self.unnamed_hang = None
                out.append(named)
        # node silences are seconds long: checking every ``node_check_s`` of event time is
        # enough, and keeps the O(nodes) scan off the per-record path of a 4,096-rank job
        if check_nodes and now_ts - self._nodes_checked_ts >= self.node_check_ns:
            self._nodes_checked_ts = now_ts
            out.extend(self._nodes(now_ts, emitted_ns))
        return out

    def _nodes(self, now_ts: int, emitted_ns: int) -> list[Detection]:
        """Per-node silence, unless most of the job went quiet at once.

        When more than ``max_silent_share`` of the nodes are silent together, the cause is not on
        the nodes (the whole job died, or its telemetry is read late by a lagging worker): naming
        each node would be dozens of false alarms, and the job-level hang or failure speaks for
        it. The nodes are re-evaluated on the next advance.
        """
        states = {name: self._state(node, now_ts) for name, node in self.nodes.items()}
        silent = sum(1 for st in states.values() if st)
        if len(states) >= 4 and silent > self.config.max_silent_share * len(states):
            return []
        out: list[Detection] = []
        for name, node in self.nodes.items():
            out.extend(self._node(name, node, states[name], now_ts, emitted_ns))
        return out

    def _hang(self, now_ts: int, emitted_ns: int) -> Detection:
        newest = max(self.rank_step.values(), default=(-1, -1))
        behind = sorted(r for r, s in self.rank_step.items() if s < newest)
        waited_s = (now_ts - self.last_progress_ts) / S
        timeout_s = self.timeout_ns() / S
        if behind and len(behind) < len(self.rank_step) / 2:
            rank = behind[0] if len(behind) == 1 else None
            node = self.rank_node.get(behind[0], "")
            who = (
                f"rank {behind[0]} on {node}"
                if rank is not None
                else f"ranks {behind[:8]}{'...' if len(behind) > 8 else ''}"
            )
            step, phase = newest
            at = self.rank_step[behind[0]]
            summary = (
                f"job hung: no step completed for {waited_s:.0f}s (timeout {timeout_s:.0f}s); "
                f"the other ranks finished {_PHASE_NAME[phase]} of step {step} and wait in the "
                f"collective for {who}, which stopped after {_PHASE_NAME[at[1]]} of step {at[0]} "
                "and never entered it"
            )
            evidence = [
                f"rank {r}: last completed phase {_PHASE_NAME[self.rank_step[r][1]]} of step "
                f"{self.rank_step[r][0]}"
                for r in behind[:16]
            ]
        else:
            rank, node = None, ""
            summary = (
                f"job hung: no step completed for {waited_s:.0f}s (timeout {timeout_s:.0f}s); "
                "all ranks reached the same step, so the collective itself is stuck"
            )
            evidence = []
        return Detection(
            detection_id=f"{self.job_id}/hang/{self.last_progress_ts}",
            detection_type="hang",
            cluster=self.cluster,
            job_id=self.job_id,
            node=node,
            rank=rank,
            score=round(waited_s / max(timeout_s, 1e-9), 3),
            onset_ts=self.last_progress_ts,
            detected_ts=now_ts,
            emitted_ts=emitted_ns,
            summary=summary,
            evidence=[f"median step time {timeout_s / self.config.timeout_factor:.2f}s", *evidence],
            details={"waited_s": round(waited_s, 3), "timeout_s": round(timeout_s, 3)},
        )

    def awaited_by_seq(self) -> tuple[int, list[int]] | None:
        """(seq N, the ranks that never entered it) once most ranks timed out in collective N."""
        seq, reporters = max(self.timed_out.items(), key=lambda kv: (len(kv[1]), -kv[0]))
        known = set(self.rank_node) | set(self.coll_seq)
        if len(reporters) < len(known) / 2:
            return None
        awaited = sorted(r for r in known - reporters if self.coll_seq.get(r, -1) < seq)
        if not awaited or len(awaited) >= len(known) / 2:
            return None
        return seq, awaited

    def _named_by_seq(self, hang: Detection, now_ts: int) -> Detection | None:
        """The job-level ``hang`` again (same id: the table replaces it), naming the awaited
        rank(s) from the watchdog's sequence numbers."""
        found = self.awaited_by_seq()
        if found is None:
            return None
        seq, awaited = found
        nodes = sorted({self.rank_node.get(r, "") for r in awaited} - {""})
        rank = awaited[0] if len(awaited) == 1 else None
        node = nodes[0] if len(nodes) == 1 else ""
        who = (
            f"rank {rank} on {node}"
            if rank is not None
            else f"ranks {awaited[:8]}{'...' if len(awaited) > 8 else ''}"
        )
        reporters = len(self.timed_out[seq])
        summary = (
            f"job hung: no step completed after {(now_ts - hang.onset_ts) / S:.0f}s; {reporters} "
            f"ranks timed out waiting in collective seq {seq} for {who}, which never entered it"
        )
        evidence = [
            f"rank {r}: last completed collective seq {self.coll_seq.get(r, -1)}"
            for r in awaited[:16]
        ]
        return hang.model_copy(
            update={
                "node": node,
                "rank": rank,
                "detected_ts": now_ts,  # when the rank became known
                "summary": summary,
                "evidence": [*hang.evidence, *evidence],
                "details": {**hang.details, "seq": seq},
            }
        )

    def _state(self, node: _Node, now_ts: int) -> str:
        """The state of one node at ``now_ts``: node_unresponsive, collector_silent or none."""
        if node.last_any < 0:
            return ""
        cfg = self.config
        limit = self._limit(node)
        hb_limit = int(max(cfg.min_silence_s, cfg.collector_silence_factor * node.cadence_s()) * S)
        spans_overdue = node.last_span < 0 or now_ts - node.last_span > self._span_limit()
        silent_all = now_ts - node.last_any > limit and spans_overdue
        silent_hb = (
            bool(node.gaps)  # two heartbeats: its cadence is known
            and now_ts - node.last_heartbeat > hb_limit
            # its ranks kept reporting well after the last heartbeat: the node is up
            and node.last_span - node.last_heartbeat > limit
            and not spans_overdue
        )
        state = "node_unresponsive" if silent_all else "collector_silent" if silent_hb else ""
        since_any = node.last_any if silent_all else node.last_heartbeat
        if state and not self._before_end(since_any):
            state = ""  # it went quiet after the job failed or ended: a consequence
        return state

    def _limit(self, node: _Node) -> int:
        """Silence (ns) after which the node's heartbeats are overdue, by its own cadence."""
        cfg = self.config
        return int(max(cfg.min_silence_s, cfg.silence_factor * node.cadence_s()) * S)

    def _span_limit(self) -> int:
        """Silence (ns) after which a node's spans are overdue: ranks report once per step."""
        cfg = self.config
        return int(max(cfg.min_silence_s, cfg.silence_factor * self._median_step_s()) * S)

    def _median_step_s(self) -> float:
        """The job's recent median step time (recomputed only after new step spans: a
        4,096-rank job reads thousands of events between two node checks)."""
        if self._median_at != self._steps_seen:
            self._median_at = self._steps_seen
            self._median = statistics.median(self.step_times) if self.step_times else 0.0
        return self._median

    def _node(
        self, name: str, node: _Node, state: str, now_ts: int, emitted_ns: int
    ) -> list[Detection]:
        limit = self._limit(node)
        if state == node.flagged:
            return []
        node.flagged = state
        if not state:
            return []
        since = node.last_any if state == "node_unresponsive" else node.last_heartbeat
        if state == "node_unresponsive":
            summary = (
                f"{name} is unresponsive: no telemetry at all (heartbeats, samples, spans) for "
                f"{(now_ts - since) / S:.0f}s while the rest of the job reports"
            )
        else:
            summary = (
                f"the collector on {name} is silent (no heartbeat for {(now_ts - since) / S:.0f}s) "
                "but its ranks' spans still arrive: the node is up, the agent is not"
            )
        return [
            Detection(
                detection_id=f"{self.job_id}/{state}/{name}/{since}",
                detection_type=state,
                cluster=self.cluster,
                job_id=self.job_id,
                node=name,
                score=round((now_ts - since) / limit, 3),
                onset_ts=since,
                detected_ts=now_ts,
                emitted_ts=emitted_ns,
                summary=summary,
                evidence=[
                    f"heartbeat interval {node.interval_s:g}s declared, "
                    f"{node.cadence_s():.3g}s observed",
                    f"median step time {self._median_step_s():.3g}s",
                ],
                details={"silent_s": round((now_ts - since) / S, 3)},
            )
        ]
