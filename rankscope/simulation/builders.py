"""The event builders: one method per event kind, with the envelope, ids and collector delays.

Why a module of its own: every event the simulator (or a fault injector) emits is built here, so
the envelope fields, the deterministic ids and the clock-skew shift are applied the same way for
every kind; the hot kinds (spans, GPU samples, heartbeats, fabric counters) take the
:func:`~rankscope.simulation.fastmodel.fast_model` path.
"""

from __future__ import annotations

import random
from typing import Any

from rankscope.schemas import (
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
from rankscope.schemas.payloads import (
    CommEvent,
    FabricCounters,
    FabricEvent,
    GpuEvent,
    GpuEventType,
    Heartbeat,
    NodeInventory,
    SchedulerEvent,
    SchedulerEventType,
    Span,
    SpanPhase,
    inventory_fingerprint,
)
from rankscope.simulation.fastmodel import fast_model
from rankscope.simulation.hooks import _BYTE_RATES, _ZERO_RATES, SimulatorHooks
from rankscope.simulation.timing import (
    COMPUTE_PHASES,
    INIT_COLLECTIVES,
    SPAN_NAME,
    RankState,
    StepPlan,
)

__all__ = ["AGENT_NAME", "AGENT_VERSION", "EventBuilders"]


AGENT_NAME = "rankscope-sim"
AGENT_VERSION = "0.1.0"
_NS = 1_000_000_000
# Collector delay between the event time and when the agent publishes it (observed_ts - ts).
_MIN_DELAY_NS = 1_000_000
_MAX_DELAY_NS = 40_000_000


class EventBuilders(SimulatorHooks):
    """Builds the events of :class:`~rankscope.simulation.simulator.TrainingJobSimulator`.

    A base of the simulator, not used alone: the attributes below are set by the simulator's
    constructor.
    """

    ranks: list[RankState]
    clock_offsets: dict[str, int]
    _id_rng: random.Random
    _delay_rng: random.Random
    _heartbeat_seq: dict[str, int]
    _templates: dict[str, list[dict[str, Any]]]

    # ----------------------------------------------------------------- ids and delays

    def next_event_id(self) -> str:
        """A deterministic event id (for hooks that add events, too)."""
        return f"{self._id_rng.getrandbits(128):032x}"

    def span_id(self) -> str:
        return f"{self._id_rng.getrandbits(64) or 1:016x}"

    def trace_id(self) -> str:
        return f"{self._id_rng.getrandbits(128) or 1:032x}"

    def observed_ts(self, ts: int) -> int:
        """``ts`` plus a small, seeded collector delay: when the agent publishes the event."""
        return ts + _MIN_DELAY_NS + int(self._delay_rng.random() * (_MAX_DELAY_NS - _MIN_DELAY_NS))

    # ----------------------------------------------------------------- spans (the hot path)

    def _step_spans(self, plan: StepPlan, out: list[Event]) -> None:
        """Per rank: data/forward/backward/optimizer, collective until ``plan.end_ns``, the step.

        All ranks share the step's trace id; the phase spans are children of the rank's step span.
        The hot path of the generator: the same events :meth:`span_event` builds, with the
        per-rank envelope fields copied from a template and the random streams bound locally.
        """
        trace_id = self.trace_id()
        step, start, end = plan.step, plan.start_ns, plan.end_ns
        attrs = self.collective_attributes(step)
        ids = self._id_rng.getrandbits
        delay = self._delay_rng.random
        offsets = self.clock_offsets
        lo, spread = _MIN_DELAY_NS, _MAX_DELAY_NS - _MIN_DELAY_NS
        append = out.append
        templates = self._span_templates()

        def emit(
            tpl: dict[str, Any], phase: SpanPhase, span_id: str, parent: str, s: int, e: int
        ) -> None:
            off = offsets.get(tpl["node"], 0) if offsets else 0
            env = tpl.copy()
            env["event_id"] = f"{ids(128):032x}"
            env["ts"] = e + off
            env["observed_ts"] = e + lo + int(delay() * spread) + off
            env["payload"] = fast_model(
                Span,
                {
                    "name": SPAN_NAME[phase],
                    "phase": phase,
                    "trace_id": trace_id,
                    "span_id": span_id,
                    "parent_span_id": parent,
                    "start_ns": s + off,
                    "end_ns": e + off,
                    "step": step,
                    "status": "ok",
                    "error_type": "",
                    "error_message": "",
                    "attributes": dict(attrs) if phase == "collective" else {},
                },
            )
            append(fast_model(SpanEvent, env))

        for tpl, durations in zip(templates, plan.phases, strict=True):
            step_id = f"{ids(64) or 1:016x}"
            t = start
            for phase, dur in zip(COMPUTE_PHASES, durations, strict=True):
                emit(tpl, phase, f"{ids(64) or 1:016x}", step_id, t, t + dur)
                t += dur
            emit(tpl, "collective", f"{ids(64) or 1:016x}", step_id, t, end)
            emit(tpl, "step", step_id, "", start, end)

    def _span_templates(self) -> list[dict[str, Any]]:
        """Per rank, the envelope fields every span of that rank shares."""
        return self._rank_templates("span/1", "span")

    def _rank_templates(self, schema_id: str, kind: str) -> list[dict[str, Any]]:
        """Per rank, the envelope fields every event of ``kind`` from that rank shares."""
        templates = self._templates.get(kind)
        if templates is None:
            cfg = self.config
            templates = self._templates[kind] = [
                {
                    "event_id": "",
                    "schema_id": schema_id,
                    "kind": kind,
                    "cluster": cfg.cluster,
                    "job_id": cfg.job_id,
                    "node": r.node,
                    "rank": r.rank,
                    "local_rank": r.local_rank,
                    "gpu": r.gpu,
                    "ts": 0,
                    "observed_ts": 0,
                    "clock_offset_ns": None,
                    "payload": None,
                }
                for r in self.ranks
            ]
        return templates

    def collective_attributes(self, step: int) -> dict[str, str | int | float | bool]:
        """Attributes of a collective span: the op and PyTorch's sequence number."""
        return {"collective.op": "all_reduce", "collective.seq": self.collective_seq(step)}

    @staticmethod
    def collective_seq(step: int) -> int:
        """PyTorch's ``SeqNum`` of step ``step``'s all-reduce (see :data:`INIT_COLLECTIVES`)."""
        return step + INIT_COLLECTIVES + 1

    # ----------------------------------------------------------------- event builders

    def _envelope(
        self, node: str, t_ns: int, rank: RankState | None, job_id: str | None = None
    ) -> dict[str, Any]:
        """Envelope fields for an event that ``node`` stamps at true time ``t_ns``."""
        off = self.clock_offsets.get(node, 0) if self.clock_offsets else 0
        return {
            "event_id": self.next_event_id(),
            "cluster": self.config.cluster,
            "job_id": self.config.job_id if job_id is None else job_id,
            "node": node,
            "rank": None if rank is None else rank.rank,
            "local_rank": None if rank is None else rank.local_rank,
            "gpu": None if rank is None else rank.gpu,
            "ts": t_ns + off,
            "observed_ts": self.observed_ts(t_ns) + off,
            "clock_offset_ns": None,
        }

    def span_event(
        self,
        rank: RankState,
        step: int,
        phase: SpanPhase,
        trace_id: str,
        parent_span_id: str | None,
        start_ns: int,
        end_ns: int,
        *,
        span_id: str | None = None,
        status: str = "ok",
        error_type: str = "",
        error_message: str = "",
        attrs: dict[str, str | int | float | bool] | None = None,
    ) -> SpanEvent:
        """One span ending at true ``end_ns`` (its envelope ts); ``parent_span_id=None``: root."""
        off = self.clock_offsets.get(rank.node, 0) if self.clock_offsets else 0
        payload = fast_model(
            Span,
            {
                "name": SPAN_NAME[phase],
                "phase": phase,
                "trace_id": trace_id,
                "span_id": span_id or self.span_id(),
                "parent_span_id": parent_span_id or "",
                "start_ns": start_ns + off,
                "end_ns": end_ns + off,
                "step": step,
                "status": status,
                "error_type": error_type,
                "error_message": error_message,
                "attributes": dict(attrs) if attrs else {},
            },
        )
        return fast_model(
            SpanEvent,
            {
                "event_id": f"{self._id_rng.getrandbits(128):032x}",
                "schema_id": "span/1",
                "kind": "span",
                "cluster": self.config.cluster,
                "job_id": self.config.job_id,
                "node": rank.node,
                "rank": rank.rank,
                "local_rank": rank.local_rank,
                "gpu": rank.gpu,
                "ts": end_ns + off,
                "observed_ts": self.observed_ts(end_ns) + off,
                "clock_offset_ns": None,
                "payload": payload,
            },
        )

    def gpu_sample_event(self, rank: RankState, phase: SpanPhase, t_ns: int) -> GpuSampleEvent:
        off = self.clock_offsets.get(rank.node, 0) if self.clock_offsets else 0
        env = self._rank_templates("gpu_sample/1", "gpu_sample")[rank.rank].copy()
        env["event_id"] = self.next_event_id()
        env["ts"] = t_ns + off
        env["observed_ts"] = self.observed_ts(t_ns) + off
        env["payload"] = self.gpu_sample_payload(rank, phase, t_ns)
        return fast_model(GpuSampleEvent, env)

    def heartbeat_event(self, node: str, t_ns: int, job_id: str | None = None) -> HeartbeatEvent:
        """The agent tags its heartbeats with the job that owns the node, so they share the
        job's partition and a per-job detector sees a silent node."""
        seq = self._heartbeat_seq[node]
        self._heartbeat_seq[node] = seq + 1
        env = self._envelope(node, t_ns, None, job_id)
        env["schema_id"] = "heartbeat/1"
        env["kind"] = "heartbeat"
        env["payload"] = fast_model(
            Heartbeat,
            {
                "agent": AGENT_NAME,
                "agent_version": AGENT_VERSION,
                "seq": seq,
                "interval_s": self.config.heartbeat_interval_s,
            },
        )
        return fast_model(HeartbeatEvent, env)

    def fabric_counters_event(
        self, node: str, hca: int, t_ns: int, job_id: str | None = None
    ) -> FabricCountersEvent:
        """One poll of ``mlx5_<hca>`` port 1: totals, and per-second rates after the first poll
        (data counters as bytes/s under ``xmit_bytes``/``rcv_bytes``, like the fabric collector).
        """
        port = self._ports[self.node_index[node]][hca]
        counters = port.counters
        rates: dict[str, float] = {}
        interval_s: float | None = None
        if port.prev_ns is not None:
            interval = t_ns - port.prev_ns
            interval_s = interval / _NS
            per_s = _NS / interval
            rates = dict(_ZERO_RATES)
            for name, d in self.fabric_deltas(node, hca, t_ns, interval).items():
                counters[name] += d
                rate_name = _BYTE_RATES.get(name)
                if rate_name is not None:
                    rates[rate_name] = round(d * 4 * per_s, 1)
                else:
                    rates[name] = round(d * per_s, 3)
        port.prev_ns = t_ns
        state, phys = self.fabric_port_state(node, hca, t_ns)
        env = self._envelope(node, t_ns, None, job_id)  # node-level: no rank
        env["schema_id"] = "fabric_counters/1"
        env["kind"] = "fabric_counters"
        env["payload"] = fast_model(
            FabricCounters,
            {
                "device": port.device,
                "port": 1,
                "link_layer": "InfiniBand",
                "state": state,
                "phys_state": phys,
                "rate": "400 Gb/sec (4X NDR)",
                "counters": dict(counters),
                "rates_per_s": rates,
                "interval_s": interval_s,
            },
        )
        return fast_model(FabricCountersEvent, env)

    def scheduler_event(
        self,
        node: str,
        t_ns: int,
        event_type: SchedulerEventType,
        state: str,
        *,
        exit_code: int | None = None,
        reason: str = "",
        rank: RankState | None = None,
    ) -> SchedulerEventEvent:
        return SchedulerEventEvent(
            **self._envelope(node, t_ns, rank),
            schema_id="scheduler_event/1",
            kind="scheduler_event",
            payload=SchedulerEvent(
                source="simulator",
                event_type=event_type,
                state=state,
                reason=reason,
                exit_code=exit_code,
            ),
        )

    def gpu_event(
        self,
        rank: RankState,
        t_ns: int,
        event_type: GpuEventType,
        *,
        xid: int | None = None,
        count: int = 1,
        message: str = "",
    ) -> GpuEventEvent:
        """A GPU event as the GPU collector sends it (job and rank from its process binding)."""
        return GpuEventEvent(
            **self._envelope(rank.node, t_ns, rank),
            schema_id="gpu_event/1",
            kind="gpu_event",
            payload=GpuEvent(
                event_type=event_type,
                gpu_uuid=rank.gpu_uuid,
                xid=xid,
                count=count,
                message=message,
            ),
        )

    def fabric_event(
        self, node: str, t_ns: int, payload: FabricEvent, rank: RankState | None = None
    ) -> FabricEventEvent:
        """An HCA port event (node-level, ``rank=None``) or an NVLink event (on a GPU's rank)."""
        return FabricEventEvent(
            **self._envelope(node, t_ns, rank),
            schema_id="fabric_event/1",
            kind="fabric_event",
            payload=payload,
        )

    def comm_event(self, rank: RankState, t_ns: int, payload: CommEvent) -> CommEventEvent:
        """A parsed NCCL / ProcessGroupNCCL log line of ``rank``'s process."""
        return CommEventEvent(
            **self._envelope(rank.node, t_ns, rank),
            schema_id="comm_event/1",
            kind="comm_event",
            payload=payload,
        )

    def node_inventory_event(self, node: str, t_ns: int) -> NodeInventoryEvent:
        fields = self.inventory_fields(node)
        return NodeInventoryEvent(
            **self._envelope(node, t_ns, None),
            schema_id="node_inventory/1",
            kind="node_inventory",
            payload=NodeInventory(**fields, fingerprint=inventory_fingerprint(fields)),
        )
