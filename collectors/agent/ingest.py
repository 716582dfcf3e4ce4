"""The write-ahead step: events are batched per (kind, partition key), serialised in the Kafka
wire format and appended to the spool before any network I/O, so nothing sampled while Kafka is
away is lost (a spool overflow is itself reported as an event)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from rankscope.collectors.agent.config import AgentConfig
from rankscope.collectors.agent.stats import CollectorStats
from rankscope.collectors.base import EventFactory
from rankscope.collectors.publisher import batch_events
from rankscope.collectors.spool import RecordTooLargeError, Spool
from rankscope.schemas import AgentEventEvent, Event, dump_events
from rankscope.schemas.payloads import AgentEvent, AgentEventType

__all__ = ["SpoolIngest"]

log = logging.getLogger(__name__)


class SpoolIngest:
    """The agent's ingest part: the ``emit`` handed to event-driven collectors, the agent's own
    events, batches into the spool (thread-safe). :class:`~rankscope.collectors.agent.Agent`
    builds on it and sets the attributes declared here."""

    config: AgentConfig
    factory: EventFactory
    spool: Spool | None
    _stats: dict[str, CollectorStats]
    _tap: Callable[[Sequence[Event]], None] | None
    _ingest_lock: threading.Lock
    _wake: threading.Event
    _sampled: int
    _spooled: int
    _lost: int
    _reported_dropped: int

    def _emit_from(self, name: str, events: Sequence[Event]) -> None:
        """The ``emit`` handed to event-driven collectors (thread-safe)."""
        stats = self._stats.get(name)
        if stats is not None:
            stats.events += len(events)
        self._ingest(events)

    def _agent_event(
        self, event_type: AgentEventType, *, collector: str = "", count: int = 0, message: str = ""
    ) -> None:
        payload = AgentEvent(
            event_type=event_type,
            agent=self.config.agent_name,
            collector=collector,
            count=count,
            message=message,
        )
        self._ingest([self.factory.make(AgentEventEvent, payload)])

    def _ingest(self, events: Sequence[Event]) -> None:
        """Serialise per (kind, key) batch and append to the spool: the write-ahead step."""
        if not events:
            return
        with self._ingest_lock:
            self._sampled += len(events)
            if self._tap is not None:
                self._tap(events)
            spool = self.spool
            if spool is None or spool.closed:
                self._lost += len(events)
                log.error("agent not running: %d event(s) not spooled", len(events))
                return
            self._append(spool, events)
            dropped = spool.dropped_events
            if dropped > self._reported_dropped:
                delta = dropped - self._reported_dropped
                self._reported_dropped = dropped  # before appending: a drop it causes is next
                overflow = self.factory.make(
                    AgentEventEvent,
                    AgentEvent(
                        event_type="spool_overflow",
                        agent=self.config.agent_name,
                        count=delta,
                        message=(
                            f"spool full ({spool.max_bytes} bytes): dropped the {delta} oldest "
                            f"undelivered event(s); {dropped} since start"
                        ),
                    ),
                )
                self._sampled += 1
                if self._tap is not None:
                    self._tap([overflow])
                self._append(spool, [overflow])
        self._wake.set()

    def _append(self, spool: Spool, events: Sequence[Event]) -> None:
        for kind, key, batch in batch_events(events, self.config.kafka.max_batch_events):
            data = dump_events(batch)
            try:
                spool.append(data, len(batch), meta=kind.encode() + b"\n" + key)
            except (RecordTooLargeError, OSError) as exc:  # OSError: disk full, I/O error
                self._lost += len(batch)
                log.error("batch of %d %s event(s) not spooled: %s", len(batch), kind, exc)
                continue
            self._spooled += len(batch)
