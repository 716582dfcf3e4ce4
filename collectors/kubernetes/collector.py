"""The Kubernetes collector itself (its watch half and object half joined, with the dispatch of
listed and watched objects between them) and the factory the agent calls."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from rankscope.collectors.base import Emit, EventFactory
from rankscope.collectors.kubernetes.client import (
    KubeClient,
    KubernetesConnection,
    _Stream,
    resolve_connection,
)
from rankscope.collectors.kubernetes.config import KubernetesCollectorConfig
from rankscope.collectors.kubernetes.diff import _ObjectDiff
from rankscope.collectors.kubernetes.parsing import _get, _pod_key
from rankscope.collectors.kubernetes.state import _NodeState, _PodState, _Resource
from rankscope.collectors.kubernetes.watch import _Watches
from rankscope.schemas.events import Event

log = logging.getLogger("rankscope.collectors.kubernetes")  # one logger for the package, as before


class KubernetesCollector(_Watches, _ObjectDiff):
    """Event-driven: one watch thread per resource; ``stop()`` ends them promptly."""

    name = "kubernetes"
    interval_s: float | None = None

    def __init__(
        self,
        config: KubernetesCollectorConfig,
        factory: EventFactory,
        connection: KubernetesConnection | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.connection = connection or resolve_connection(config, environ)
        self.client = KubeClient(self.connection, config.request_timeout_s)
        self._stop = threading.Event()
        self._lock = threading.RLock()  # pod/node state, emit
        self._streams: dict[str, _Stream] = {}
        self._threads: list[threading.Thread] = []
        self._emit: Emit | None = None
        self._pods: dict[str, _PodState] = {}
        self._nodes: dict[str, _NodeState] = {}
        self._events_seen: dict[str, None] = {}
        #: per resource: lists, watches, relists after 410, drops, errors, current failure run
        self.stats: dict[str, dict[str, int]] = {}

    # -- dispatch ----------------------------------------------------------------------------

    def _sync(self, res: _Resource, items: list[dict[str, Any]]) -> None:
        """A (re)list: every object as ADDED; known pods/nodes that are gone as DELETED."""
        if res.name == "events":
            for obj in items:
                self._handle(res, "SYNC", obj)
            return
        with self._lock:
            if res.name == "pods":
                listed = {_pod_key(o) for o in items}
                gone = [self._pods.pop(u) for u in list(self._pods) if u not in listed]
                events: list[Event] = [
                    self._pod_event(
                        st,
                        "other",
                        "Gone",
                        "pod deleted while the watch was disconnected; its end is unknown",
                        None,
                        None,
                        ("gone",),
                    )
                    for st in gone
                    if not st.ended and not st.preempted
                ]
                if events and self._emit is not None:
                    self._emit(events)
            for obj in items:
                self._handle(res, "ADDED", obj)
            if res.name == "nodes":
                listed = {str(_get(o, "metadata", "name")) for o in items}
                for name in [n for n in self._nodes if n not in listed]:
                    self._handle(res, "DELETED", {"metadata": {"name": name}})

    def _handle(self, res: _Resource, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            try:
                if res.name == "pods":
                    events = self._on_pod(etype, obj)
                elif res.name == "nodes":
                    events = self._on_node(etype, obj)
                else:
                    events = self._on_event(etype, obj)
            except Exception:
                log.exception("kubernetes %s: cannot interpret %s object", res.name, etype)
                return
            if events and self._emit is not None:
                self._emit(events)


def create_kubernetes_collector(
    config: KubernetesCollectorConfig,
    factory: EventFactory,
    connection: KubernetesConnection | None = None,
    environ: Mapping[str, str] | None = None,
) -> KubernetesCollector:
    """The component factory the agent calls; resolves the API connection at once so that a
    misconfiguration fails at start-up, not in a background thread."""
    return KubernetesCollector(config, factory, connection=connection, environ=environ)
