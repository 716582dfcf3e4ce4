"""The write-ahead step: events are redacted (light mode, issue 16: no secret the rules know
reaches the disk spool or the raw topic), batched per partition key, serialised in the Kafka
wire format and appended to the spool before any network I/O, so nothing sampled while Kafka is
away is lost (a spool overflow is itself reported as an event, and so are the redaction
counts)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from rankscope.collectors.agent.config import AgentConfig
from rankscope.collectors.agent.stats import CollectorStats
from rankscope.collectors.agent.xid_dedup import XidDedup
from rankscope.collectors.base import EventFactory
from rankscope.collectors.publisher import batch_events
from rankscope.collectors.spool import RecordTooLargeError, Spool
from rankscope.redaction.source import SourceRedaction
from rankscope.schemas import AgentEventEvent, Event, dump_events
from rankscope.schemas.payloads import AgentEvent, AgentEventType

__all__ = ["SpoolIngest"]

log = logging.getLogger(__name__)


class SpoolIngest:
    """The agent's ingest part: the ``emit`` handed to event-driven collectors, the agent's own
    events, batches into the spool (thread-safe). It owns the spool (set by
    :meth:`Agent.start <rankscope.collectors.agent.Agent.start>`), the per-source stats, the
    ingest counters, the ingest lock and the wake event the delivery thread waits on."""

    def __init__(
        self,
        config: AgentConfig,
        factory: EventFactory,
        stats: dict[str, CollectorStats],
        *,
        tap: Callable[[Sequence[Event]], None] | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.spool: Spool | None = None
        #: per-source counters; entries are added under the agent's state lock
        self.stats = stats
        self.tap = tap
        self.lock = threading.Lock()
        #: set after each append (and at shutdown): wakes the delivery thread
        self.wake = threading.Event()
        self.sampled = 0
        self.spooled = 0
        self.lost = 0  # could not be spooled at all (too large, spool closed)
        self.reported_dropped = 0
        #: light redaction before the spool (None: turned off in the config)
        self.redaction = (
            SourceRedaction(config.redaction, stage="agent", origin=config.node)
            if config.redaction.enabled
            else None
        )
        #: drops NVML's copy of an XID the kernel log also reported (set when both run)
        self.xid_dedup: XidDedup | None = None

    def emit_from(self, name: str, events: Sequence[Event]) -> None:
        """The ``emit`` handed to event-driven collectors (thread-safe)."""
        stats = self.stats.get(name)
        if stats is not None:
            stats.events += len(events)
        self.ingest(events)

    def agent_event(
        self, event_type: AgentEventType, *, collector: str = "", count: int = 0, message: str = ""
    ) -> None:
        payload = AgentEvent(
            event_type=event_type,
            agent=self.config.agent_name,
            collector=collector,
            count=count,
            message=message,
        )
        self.ingest([self.factory.make(AgentEventEvent, payload)])

    def ingest(self, events: Sequence[Event]) -> None:
        """Serialise per key batch and append to the spool: the write-ahead step."""
        if self.xid_dedup is not None:
            with self.lock:
                events = self.xid_dedup.filter(events)
        if not events:
            return
        if self.redaction is not None:  # report events of its counts come last
            events = self.redaction.publishable(events, self._report, agent=self.config.agent_name)
        with self.lock:
            self.sampled += len(events)
            if self.tap is not None:
                self.tap(events)
            spool = self.spool
            if spool is None or spool.closed:
                self.lost += len(events)
                log.error("agent not running: %d event(s) not spooled", len(events))
                return
            self._append(spool, events)
            dropped = spool.dropped_events
            if dropped > self.reported_dropped:
                delta = dropped - self.reported_dropped
                self.reported_dropped = dropped  # before appending: a drop it causes is next
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
                self.sampled += 1
                if self.tap is not None:
                    self.tap([overflow])
                self._append(spool, [overflow])
        self.wake.set()

    def _report(self, payload: AgentEvent) -> AgentEventEvent:
        return self.factory.make(AgentEventEvent, payload)

    def close_spool(self) -> None:
        """Close the spool under the ingest lock (no append can be half-way through it)."""
        with self.lock:
            if self.spool is not None:
                self.spool.close()

    def _append(self, spool: Spool, events: Sequence[Event]) -> None:
        for key, batch in batch_events(events, self.config.kafka.max_batch_events):
            data = dump_events(batch)
            try:
                # meta = "<kind>\n<key>"; the kind is empty since all kinds share one topic
                # (spools written by older agents name one, and delivery ignores it)
                spool.append(data, len(batch), meta=b"\n" + key)
            except (RecordTooLargeError, OSError) as exc:  # OSError: disk full, I/O error
                self.lost += len(batch)
                log.error("batch of %d event(s) not spooled: %s", len(batch), exc)
                continue
            self.spooled += len(batch)
