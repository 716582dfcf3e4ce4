"""Spool -> Kafka: the delivery state machine and the agent's delivery thread that runs it.

Delivery path (why nothing is lost): ``events -> spool (write-ahead) -> Kafka``. Events are
grouped per partition key into batches in the Kafka wire format (the same contract as
:class:`~collectors.publisher.Publisher`: topic ``Topics(prefix).raw``, key
``partition_key(job, node)``, value ``dump_events(batch)``, content-type header) and appended to
the spool *before* any network I/O. The delivery thread reads the spool in sequence order,
produces each batch with its own delivery callback, and acknowledges a batch in the spool only
after Kafka confirmed it (acks=all, idempotent producer); the spool's cursor is the contiguous
low-water mark of confirmed batches. A failed delivery (broker gone: the producer's
``delivery.timeout.ms`` expires) pauses sending until every in-flight batch has resolved, then,
after an exponential backoff, resends from the oldest unconfirmed batch *in order* (batches
that were confirmed meanwhile are skipped, so such a batch stays ahead of an older one that
failed: order on Kafka is per partition and the stream workers order by event time anyway;
what matters is that the backlog is not starved by, or interleaved with, new data).
So while the broker is unreachable the agent keeps sampling into the spool (bounded; on
overflow the oldest batches go and a ``spool_overflow`` event with the dropped count is itself
spooled), and when it returns the backlog is replayed oldest first, followed by new data (a
``spool_replayed`` event reports the size of the backlog). A crash or restart replays what was
not yet confirmed: duplicates are possible, loss is not; ClickHouse writes are idempotent by
``event_id``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from rankscope.collectors.agent.config import AgentConfig
from rankscope.collectors.agent.ingest import SpoolIngest
from rankscope.collectors.agent.transport import (
    DeliveryError,
    PermanentSendError,
    Transport,
    TransportFactory,
)
from rankscope.collectors.spool import Spool
from rankscope.schemas import Topics

__all__ = ["DeliveryThread"]

log = logging.getLogger(__name__)


class _Delivery:
    """Spool -> Kafka, on its own thread. Owns every piece of in-flight state (only this
    thread touches it; the transport's callbacks run inside ``transport.poll``)."""

    def __init__(
        self,
        spool: Spool,
        transport_factory: Callable[[], Transport],
        topics: Topics,
        *,
        max_inflight: int,
        backoff_s: float,
        backoff_max_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool = spool
        self._transport_factory = transport_factory
        self.transport = transport_factory()
        self.topics = topics
        self.max_inflight = max_inflight
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.lwm = spool.committed_seq  # every seq <= lwm is confirmed (or gone)
        self.sent_upto = self.lwm  # every seq <= sent_upto was handed to the transport
        self.inflight: dict[int, int] = {}
        self.done: set[int] = set()
        self.failed: list[int] = []
        self.retry_at = 0.0
        self._backoff = backoff_s
        self.broker_ok: bool | None = None
        self.last_error = ""
        # counters (events unless said otherwise)
        self.published = 0
        self.delivered = 0
        self.rejected = 0
        self.failures = 0  # batches
        # backlog tracking for spool_replayed
        self.backlog_target: int | None = spool.last_seq if spool.pending_records else None
        self.backlog_events = 0  # events acknowledged since the backlog began
        self.backlog_since = clock()
        self.replayed: list[tuple[int, float]] = []  # (events, seconds) to report

    # --------------------------------------------------------------- one iteration

    def step(self, wait_s: float) -> None:
        if self.transport.broken is not None:
            self._reset_transport()
        # After a failure nothing new is sent until every batch in flight has resolved and the
        # backoff has passed: then the resend starts from the oldest unconfirmed batch.
        if not self.failed and self.clock() >= self.retry_at:
            self.retry_at = 0.0
            self._fill()
        self.transport.poll(wait_s if self.inflight else 0.0)
        self._settle()

    def _fill(self) -> None:
        # Records the bound dropped are behind the spool's cursor: never wait for them.
        self.sent_upto = max(self.sent_upto, self.spool.committed_seq)
        room = self.max_inflight - len(self.inflight)
        while room > 0:
            records = self.spool.read(after=self.sent_upto, max_records=min(room, 256))
            if not records:
                return
            for record in records:
                seq = record.seq
                if seq > self.sent_upto + 1:
                    # A record in between vanished (corrupt on disk): nothing to wait for.
                    self.done.update(range(self.sent_upto + 1, seq))
                if seq in self.done or seq in self.inflight:
                    self.sent_upto = seq
                    continue
                _, _, key = record.meta.partition(b"\n")  # "<kind>\n<key>", kind unused
                try:
                    self.transport.send(seq, self.topics.raw, key, record.data, self._on_done)
                except BufferError:
                    return  # local queue full: serve callbacks first
                except PermanentSendError as exc:
                    log.error(
                        "dropping spooled batch %d (%d events): %s", seq, record.n_events, exc
                    )
                    self.rejected += record.n_events
                    self.done.add(seq)
                    self.sent_upto = seq
                    continue
                except KafkaException as exc:
                    self._note_failure(seq, f"produce failed: {exc}")
                    return
                self.inflight[seq] = record.n_events
                self.published += record.n_events
                self.sent_upto = seq
                room -= 1
                if room <= 0:
                    return

    def _on_done(self, seq: int, error: DeliveryError | None) -> None:
        n_events = self.inflight.pop(seq, None)
        if n_events is None:
            return  # from a transport we already replaced
        if error is None:
            self.done.add(seq)
            self.delivered += n_events
            self.broker_ok = True
            self._backoff = self.backoff_s
        elif error.permanent:
            log.error(
                "Kafka rejected spooled batch %d (%d events): %s", seq, n_events, error.message
            )
            self.done.add(seq)
            self.rejected += n_events
            self.last_error = error.message
        else:
            self._note_failure(seq, error.message)

    def _note_failure(self, seq: int, message: str) -> None:
        self.failed.append(seq)
        self.failures += 1
        self.last_error = message
        if self.broker_ok is not False:
            log.warning("Kafka delivery failing, spooling until it recovers: %s", message)
        self.broker_ok = False

    def _settle(self) -> None:
        if self.failed and not self.inflight:
            # Everything in flight resolved: resend from the oldest unconfirmed batch, in order,
            # after a backoff. Batches confirmed meanwhile are skipped by _fill.
            first = min(self.failed)
            self.failed.clear()
            self.sent_upto = min(self.sent_upto, max(first - 1, self.lwm))
            self.retry_at = self.clock() + self._backoff
            self._backoff = min(self._backoff * 2, self.backoff_max_s)
            if self.backlog_target is None:
                self.backlog_target = self.spool.last_seq
                self.backlog_events = 0
                self.backlog_since = self.clock()
        committed = self.spool.committed_seq  # moves past records dropped by the bound
        if committed > self.lwm:
            self.lwm = committed
            self.done = {s for s in self.done if s > committed}
            self.sent_upto = max(self.sent_upto, committed)
        lwm = self.lwm
        while lwm + 1 in self.done:
            lwm += 1
            self.done.discard(lwm)
        if lwm > self.lwm:
            acked = self.spool.ack(lwm)
            if self.backlog_target is not None:
                self.backlog_events += acked
            self.lwm = lwm
        if self.backlog_target is not None and self.lwm >= self.backlog_target:
            if self.backlog_events:
                self.replayed.append((self.backlog_events, self.clock() - self.backlog_since))
            self.backlog_target = None
            self.backlog_events = 0
        if self.backlog_target is not None and self.broker_ok is False:
            # Still failing: the backlog keeps growing; it is reported once it has drained.
            self.backlog_target = self.spool.last_seq

    def _reset_transport(self) -> None:
        reason = self.transport.broken
        log.error("recreating the Kafka producer after a fatal error: %s", reason)
        self.inflight.clear()  # first, so the old producer's purge reports are ignored
        self.failed.clear()
        with contextlib.suppress(Exception):
            self.transport.close(0.0)
        self.sent_upto = self.lwm
        self.transport = self._transport_factory()

    # --------------------------------------------------------------- shutdown

    @property
    def drained(self) -> bool:
        return self.lwm >= self.spool.last_seq

    def close(self, timeout_s: float) -> None:
        self.transport.close(timeout_s)
        self._settle()


class DeliveryThread:
    """The agent's delivery thread: runs :class:`_Delivery` until stopped and drained (or the
    shutdown deadline), reports replayed backlogs and stuck polls. Owns the delivery state
    (:attr:`state`, made by :meth:`open` at each start), its stop event and the shutdown
    deadline; appends wake it through the ingest's wake event."""

    def __init__(
        self,
        config: AgentConfig,
        ingest: SpoolIngest,
        check_stuck: Callable[[], None],
        transport_factory: TransportFactory,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self._ingest = ingest
        self._check_stuck = check_stuck
        self._transport_factory = transport_factory
        self._clock = clock
        self.state: _Delivery | None = None
        self.stop = threading.Event()
        #: set by the agent before :attr:`stop`: when the loop gives up on draining
        self.deadline = 0.0

    def open(self, spool: Spool) -> None:
        """A fresh :class:`_Delivery` over ``spool`` (may raise: e.g. a bad librdkafka setting
        in ``kafka.extra``)."""
        cfg = self.config
        self.state = _Delivery(
            spool,
            lambda: self._transport_factory(cfg.kafka),
            Topics(cfg.kafka.topic_prefix),
            max_inflight=cfg.max_inflight_batches,
            backoff_s=cfg.retry_backoff_s,
            backoff_max_s=cfg.retry_backoff_max_s,
            clock=self._clock,
        )

    def loop(self) -> None:
        delivery = self.state
        assert delivery is not None
        while True:
            stopping = self.stop.is_set()
            if stopping and (delivery.drained or self._clock() >= self.deadline):
                break
            try:
                delivery.step(0.05)
            except Exception:  # never let the delivery thread die: the spool keeps the data
                log.exception("delivery step failed")
                time.sleep(0.5)
            self._after_delivery_step(delivery)
            if not delivery.inflight:
                # Idle: appends wake us (the ingest's wake); the timeout only serves producer
                # events and the stuck-poll check, so a slow tick keeps an idle agent near 0 CPU.
                wait = 0.02 if stopping else min(1.0, self.config.stuck_poll_s / 4)
                if delivery.retry_at:
                    wait = min(wait, max(0.0, delivery.retry_at - self._clock()))
                if self._ingest.wake.wait(wait):
                    self._ingest.wake.clear()
        remaining = max(0.0, self.deadline - self._clock())
        delivery.close(min(remaining, 2.0))

    def _after_delivery_step(self, delivery: _Delivery) -> None:
        for events, seconds in delivery.replayed:
            self._ingest.agent_event(
                "spool_replayed",
                message=f"replayed {events} spooled event(s) after {seconds:.1f}s of backlog",
                count=events,
            )
        delivery.replayed.clear()
        self._check_stuck()
