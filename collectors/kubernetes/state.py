"""What the collector's two halves share: the per-pod and per-node state, the watched
resources, the attributes ``KubernetesCollector.__init__`` sets, and the event builders.

:class:`~rankscope.collectors.kubernetes.collector.KubernetesCollector` is the watch half
(:mod:`.watch`) plus the object half (:mod:`.diff`); both read and write the state declared
here once, so each type-checks alone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from rankscope.collectors.base import BaseCollector, Emit, EventFactory
from rankscope.collectors.kubernetes.client import KubeClient, _Stream
from rankscope.collectors.kubernetes.config import KubernetesCollectorConfig
from rankscope.schemas.events import AgentEventEvent, SchedulerEventEvent
from rankscope.schemas.payloads import AgentEvent, SchedulerEvent, SchedulerEventType


@dataclass
class _PodState:
    uid: str
    name: str
    namespace: str
    node: str
    job_id: str
    rank: int | None
    started: bool = False
    preempted: bool = False
    ended: bool = False
    terms: set[str] = field(default_factory=set)
    failed_terms: set[str] = field(default_factory=set)
    #: the highest container restartCount whose (re)start was reported
    restarts: int = 0


@dataclass
class _NodeState:
    klass: Literal["up", "drain", "down"]
    pressure: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Resource:
    """One watched collection."""

    name: Literal["pods", "nodes", "events"]
    path: str
    params: dict[str, str]


class _KubernetesCollectorBase(BaseCollector):
    """What ``KubernetesCollector.__init__`` sets, the hooks the watch half calls, and the
    event builders both halves use."""

    config: KubernetesCollectorConfig
    factory: EventFactory
    client: KubeClient
    _stop: threading.Event
    _lock: threading.RLock
    _streams: dict[str, _Stream]
    _threads: list[threading.Thread]
    _emit: Emit | None
    _pods: dict[str, _PodState]
    _nodes: dict[str, _NodeState]
    _events_seen: dict[str, None]
    stats: dict[str, dict[str, int]]

    # -- hooks: the watch half hands listed and watched objects to the collector --------------

    def _sync(self, res: _Resource, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _handle(self, res: _Resource, etype: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- envelopes ---------------------------------------------------------------------------

    def _event(
        self,
        etype: SchedulerEventType,
        *,
        state: str,
        reason: str,
        exit_code: int | None,
        ts_ns: int | None,
        job_id: str | None,
        rank: int | None,
        node: str | None,
        event_id: str | None,
        attempt: int = 0,
    ) -> SchedulerEventEvent:
        """``attempt`` > 0: a job's pod event, stamped with the job's run (collectors/runs.py)."""
        payload = SchedulerEvent(
            source="kubernetes",
            event_type=etype,
            state=state[:256],
            reason=reason[:16_384],
            exit_code=exit_code,
            run_id=self.config.runs.resolve(job_id, name=job_id) if job_id and attempt else "",
            attempt=attempt if job_id else 0,
        )
        ev = self.factory.make(SchedulerEventEvent, payload, ts_ns=ts_ns, job_id=job_id, rank=rank)
        update: dict[str, Any] = {}
        if node and node != ev.node:
            update["node"] = node
        if event_id:
            update["event_id"] = event_id
        return ev.model_copy(update=update) if update else ev

    def _agent_event(
        self,
        etype: Literal["collector_error", "collector_recovered"],
        res: _Resource,
        count: int,
        message: str,
    ) -> None:
        payload = AgentEvent(
            event_type=etype,
            collector=self.name,
            count=count,
            message=f"{res.name} watch: {message}".rstrip(": ")[:16_384],
        )
        ev = self.factory.make(AgentEventEvent, payload)
        with self._lock:
            if self._emit is not None:
                self._emit([ev])
