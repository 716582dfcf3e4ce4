"""Publishes events to Kafka in the wire format the stream workers read.

Wire contract (the stream workers depend on it; change it only together with them):

* topic ``Topics(prefix).raw``, one topic for every event kind;
* key ``rankscope.schemas.partition_key(job_id, node)``: all events of a job land in one partition,
  in the order the collectors emitted them, kinds interleaved; node-level events (no job id) key
  by node;
* value: a JSON array of events of *one* key (kinds mixed, in emission order), serialised with
  ``rankscope.schemas.dump_events`` (aliases on, so the discriminator field is called ``schema``);
* header ``content-type: application/json``.

Delivery is idempotent (``enable.idempotence``, ``acks=all``) with bounded retries and a delivery
timeout, so a broker outage surfaces as a counted failure and a :class:`PublishError` on
:meth:`Publisher.flush` instead of an unbounded wait or silent loss.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from types import TracebackType
from typing import Any, NoReturn, Protocol, Self

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rankscope.kafka_security import AUTH_ERROR_CODES, KafkaAuthError, KafkaSecurity, resolve
from rankscope.schemas import Event, Topics, dump_events, partition_key
from rankscope.schemas.topics import KEY_PARTITIONER

__all__ = [
    "CONTENT_TYPE_HEADER",
    "BrokerUnreachableError",
    "KafkaProducerLike",
    "PublishError",
    "Publisher",
    "PublisherConfig",
    "PublisherStats",
    "batch_events",
    "create_publisher",
    "producer_settings",
]

log = logging.getLogger(__name__)

CONTENT_TYPE_HEADER: tuple[str, bytes] = ("content-type", b"application/json")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Batch = (partition key, events of that key, kinds mixed, in arrival order).
Batch = tuple[bytes, list[Event]]


class PublisherConfig(BaseModel):
    """Typed config of the Kafka publisher component (one per collector process)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field(min_length=1, description="Kafka bootstrap servers, host:port[,...].")
    topic_prefix: str = Field(default="rankscope", min_length=1)
    client_id: str = Field(default="rankscope-collector", min_length=1)
    max_batch_event_span_s: float | None = Field(
        default=None,
        gt=0,
        description="Replays: close a batch once it spans this much event time (None: live).",
    )
    max_batch_events: int = Field(default=200, ge=1, description="Events per Kafka message.")
    linger_ms: int = Field(
        default=20,
        ge=0,
        description="librdkafka linger.ms, and the longest a partial batch waits for more events.",
    )
    compression: str = "lz4"
    delivery_timeout_ms: int = Field(default=30_000, ge=1)
    max_retries: int = Field(default=5, ge=1, description="Idempotence needs at least one.")
    queue_buffering_max_messages: int = Field(default=200_000, ge=1)
    security: KafkaSecurity | None = Field(
        default=None, description="TLS/SASL; None: the RANKSCOPE_KAFKA_* environment's."
    )
    extra: dict[str, str] = Field(
        default_factory=dict, description="Passed to librdkafka as-is, last (overrides)."
    )

    @field_validator("compression")
    @classmethod
    def _known_codec(cls, value: str) -> str:
        if value not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}")
        return value


@dataclass(slots=True)
class PublisherStats:
    """Counters kept from delivery callbacks: what was handed to Kafka vs what it acknowledged."""

    events_sent: int = 0
    messages_sent: int = 0
    messages_delivered: int = 0
    events_delivered: int = 0
    messages_failed: int = 0
    events_failed: int = 0
    last_error: str | None = None

    @property
    def messages_pending(self) -> int:
        """Produced but neither acknowledged nor failed yet."""
        return self.messages_sent - self.messages_delivered - self.messages_failed


class PublishError(RuntimeError):
    """Messages were not delivered (failed, or still queued when the flush timed out)."""

    def __init__(self, message: str, stats: PublisherStats) -> None:
        super().__init__(message)
        self.stats = stats


class BrokerUnreachableError(ConnectionError):
    """The bootstrap broker did not answer a metadata request in time."""


class KafkaProducerLike(Protocol):
    """The part of ``confluent_kafka.Producer`` the publisher uses (a seam for unit tests)."""

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None: ...

    def poll(self, timeout: float = -1) -> int: ...

    def flush(self, timeout: float = -1) -> int: ...

    def purge(
        self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True
    ) -> None: ...

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def __len__(self) -> int: ...


def producer_settings(
    config: PublisherConfig, *, error_cb: Callable[[KafkaError], None] | None = None
) -> dict[str, Any]:
    """librdkafka settings for ``config``: idempotent, acks from all replicas, bounded retries."""
    settings: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap,
        "client.id": config.client_id,
        "enable.idempotence": True,
        "acks": "all",
        "retries": config.max_retries,  # alias of message.send.max.retries
        "delivery.timeout.ms": config.delivery_timeout_ms,
        "linger.ms": config.linger_ms,
        "compression.type": config.compression,
        "queue.buffering.max.messages": config.queue_buffering_max_messages,
        # the worker that validates a job's raw records then also analyses its events, handed
        # over in process instead of parsed again by another worker
        "partitioner": KEY_PARTITIONER,
        "logger": logging.getLogger(f"{__name__}.librdkafka"),
    }
    if error_cb is not None:
        settings["error_cb"] = error_cb
    settings.update(resolve(config.security).librdkafka())
    settings.update(config.extra)
    return settings


def batch_events(
    events: Iterable[Event],
    max_batch_events: int,
    *,
    max_delay_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Batch]:
    """Group events into per-key batches of at most ``max_batch_events``.

    One batch is open per partition key; events of every kind are appended in arrival order, so
    the partition holds a job's events in the order the collectors emitted them (spans between
    GPU samples, as they happened), which is what makes the analysis a function of the log. A
    batch is emitted when full, when it has been open for ``max_delay_s`` (checked as events
    arrive, so a slow live stream still publishes promptly), and at the end of the input.
    """
    if max_batch_events < 1:
        raise ValueError("max_batch_events must be >= 1")
    open_batches: dict[bytes, list[Event]] = {}
    opened_at: dict[bytes, float] = {}
    for event in events:
        key = partition_key(event.job_id, event.node)
        batch = open_batches.get(key)
        if batch is None:
            batch = open_batches[key] = []
            if max_delay_s is not None:
                opened_at[key] = clock()
        batch.append(event)
        if len(batch) >= max_batch_events:
            del open_batches[key]
            opened_at.pop(key, None)
            yield key, batch
        if max_delay_s is not None and opened_at:
            deadline = clock() - max_delay_s
            for stale in [k for k, t in opened_at.items() if t <= deadline]:
                del opened_at[stale]
                yield stale, open_batches.pop(stale)
    yield from open_batches.items()


class Publisher:
    """Idempotent Kafka producer for event batches, with counted delivery reports."""

    def __init__(
        self,
        config: PublisherConfig,
        *,
        producer_factory: Callable[[dict[str, Any]], KafkaProducerLike] = Producer,
    ) -> None:
        self.config = config
        self.topics = Topics(config.topic_prefix)
        self.stats = PublisherStats()
        self._failed_seen = 0
        self._last_client_error: str | None = None
        self._auth_error: str | None = None
        self._producer: KafkaProducerLike | None = producer_factory(
            producer_settings(config, error_cb=self._on_error)
        )

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def producer(self) -> KafkaProducerLike:
        if self._producer is None:
            raise RuntimeError("publisher is closed")
        return self._producer

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is queued within ``timeout_s``, then drop the rest (counted as failed).

        Bounded on purpose: closing must not hang for ``delivery_timeout_ms`` when the broker
        is gone. Call :meth:`flush` first when every message matters.
        """
        producer, self._producer = self._producer, None
        if producer is None:
            return
        remaining = producer.flush(timeout_s)
        if remaining:
            log.warning("dropping %d undelivered Kafka messages on close", remaining)
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)  # serve the purge's delivery reports so they are counted
        close = getattr(producer, "close", None)
        if callable(close):
            close()

    # ----------------------------------------------------------------- connectivity

    def check_connection(self, timeout_s: float = 10.0) -> None:
        """Fail fast, with a message that says what to do, when the broker cannot be reached."""
        deadline = time.monotonic() + timeout_s
        while True:  # short tries: a refused login is reported at once, not at the deadline
            try:
                self.producer.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
                return
            except KafkaException as exc:
                self.producer.poll(0)  # collect error_cb details, e.g. "Connection refused"
                if self._auth_error is not None:
                    who = resolve(self.config.security).describe()
                    raise KafkaAuthError(
                        f"Kafka authentication failed for {who} at {self.config.bootstrap}: "
                        f"{self._auth_error}"
                    ) from None
                if time.monotonic() >= deadline:
                    self._unreachable(exc, timeout_s)

    def _unreachable(self, exc: KafkaException, timeout_s: float) -> NoReturn:
        """The broker did not answer in time: say what to check."""
        detail = _kafka_error_text(exc)
        if self._last_client_error and self._last_client_error not in detail:
            detail = f"{detail}; last client error: {self._last_client_error}"
        raise BrokerUnreachableError(
            f"Kafka broker at {self.config.bootstrap!r} is not reachable "
            f"(no metadata within {timeout_s:g}s: {detail}). "
            "Is Kafka running? Try `rankscope services up`, or pass --bootstrap HOST:PORT "
            "for another broker; if it needs TLS/SASL, set RANKSCOPE_KAFKA_*."
        ) from exc

    # ----------------------------------------------------------------- publishing

    def publish(self, events: Iterable[Event]) -> PublisherStats:
        """Batch and produce ``events``; returns a snapshot of the stats (deliveries are async)."""
        span = self.config.max_batch_event_span_s
        if span is None:
            batches = batch_events(
                events, self.config.max_batch_events, max_delay_s=self.config.linger_ms / 1000.0
            )
        else:
            # Replays: close a batch once it covers ``span`` seconds of *event* time, as live
            # collectors (one batch per cycle) would deliver it.
            now = [0.0]

            def tracked(evs: Iterable[Event]) -> Iterator[Event]:
                for ev in evs:
                    now[0] = ev.ts / 1e9
                    yield ev

            batches = batch_events(
                tracked(events),
                self.config.max_batch_events,
                max_delay_s=span,
                clock=lambda: now[0],
            )
        for key, batch in batches:
            self._produce(self.topics.raw, key, batch)
        return replace(self.stats)

    def _produce(self, topic: str, key: bytes, batch: list[Event]) -> None:
        value = dump_events(batch)
        callback = partial(self._on_delivery, len(batch))
        while True:
            try:
                self.producer.produce(
                    topic,
                    value,
                    key,
                    on_delivery=callback,
                    headers=[CONTENT_TYPE_HEADER],
                )
                break
            except BufferError:
                # Local queue full: let librdkafka send and serve callbacks, then retry.
                self.producer.poll(0.1)
        self.stats.messages_sent += 1
        self.stats.events_sent += len(batch)
        self.producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> PublisherStats:
        """Wait for every delivery report; raise :class:`PublishError` if anything was lost."""
        remaining = self.producer.flush(timeout_s)
        stats = replace(self.stats)
        new_failures = stats.messages_failed - self._failed_seen
        self._failed_seen = stats.messages_failed
        if remaining:
            raise PublishError(
                f"{remaining} Kafka messages still queued after {timeout_s:g}s "
                f"(broker {self.config.bootstrap!r}; last error: {stats.last_error})",
                stats,
            )
        if new_failures:
            raise PublishError(
                f"{new_failures} Kafka messages ({stats.events_failed} events so far) failed "
                f"to deliver to {self.config.bootstrap!r}: {stats.last_error}",
                stats,
            )
        return stats

    # ----------------------------------------------------------------- callbacks

    def _on_delivery(self, n_events: int, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.stats.messages_delivered += 1
            self.stats.events_delivered += n_events
        else:
            self.stats.messages_failed += 1
            self.stats.events_failed += n_events
            self.stats.last_error = f"{msg.topic()}: {err.name()}: {err.str()}"

    def _on_error(self, err: KafkaError) -> None:
        # Client-level errors (connection refused, auth failures); librdkafka keeps retrying.
        self._last_client_error = f"{err.name()}: {err.str()}"
        if err.code() in AUTH_ERROR_CODES:
            self._auth_error = err.str().replace("\n", " ")
        log.debug("kafka client error: %s", self._last_client_error)


def _kafka_error_text(exc: KafkaException) -> str:
    arg = exc.args[0] if exc.args else None
    if isinstance(arg, KafkaError):
        return f"{arg.name()}: {arg.str()}"
    return str(exc)


def create_publisher(config: PublisherConfig) -> Publisher:
    """Factory (OpenTelemetry Collector style): typed config in, component out."""
    return Publisher(config)
