"""The delivery thread's transport: spooled bytes to Kafka, one confirmation per batch.

Why not :class:`~collectors.publisher.Publisher`: it batches ``Event`` objects and only counts
deliveries, while the agent needs a confirmation *per spooled batch* (to move the spool cursor)
and sends bytes it already serialised. :class:`KafkaTransport` is a thin wrapper around
``confluent_kafka.Producer`` with exactly the publisher's settings
(:func:`~collectors.publisher.producer_settings`) and wire contract.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rankscope.collectors.publisher import CONTENT_TYPE_HEADER, PublisherConfig, producer_settings
from rankscope.kafka_security import AUTH_ERROR_CODES, resolve

__all__ = [
    "DeliveryCallback",
    "DeliveryError",
    "KafkaTransport",
    "PermanentSendError",
    "Transport",
    "TransportFactory",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeliveryError:
    """Why a batch was not delivered; ``permanent`` ones are never retried (and are counted)."""

    message: str
    permanent: bool = False


DeliveryCallback = Callable[[int, DeliveryError | None], None]


class PermanentSendError(Exception):
    """The batch can never be produced (e.g. larger than the broker accepts)."""


class Transport(Protocol):
    """The delivery layer: bytes to a topic, one confirmation per batch through ``on_done``
    (called from :meth:`poll`/:meth:`close` on the delivery thread)."""

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: DeliveryCallback
    ) -> None:
        """Queue one batch. Raises ``BufferError`` when the local queue is full (try later) and
        :class:`PermanentSendError` when it can never be sent."""
        ...

    def poll(self, timeout_s: float) -> None: ...

    @property
    def broken(self) -> str | None:
        """Set after a fatal client error: the agent then builds a new transport."""
        ...

    def close(self, timeout_s: float) -> None: ...


# Errors on which retrying the same bytes cannot help.
_PERMANENT_CODES = frozenset(
    code
    for code in (
        getattr(KafkaError, "MSG_SIZE_TOO_LARGE", None),
        getattr(KafkaError, "INVALID_MSG", None),
        getattr(KafkaError, "INVALID_RECORD", None),
        getattr(KafkaError, "RECORD_LIST_TOO_LARGE", None),
        getattr(KafkaError, "TOPIC_EXCEPTION", None),
        getattr(KafkaError, "_INVALID_ARG", None),
    )
    if code is not None
)


class _RepeatFilter(logging.Filter):
    """Lets one librdkafka message of each shape through per ``interval_s``: during an outage
    librdkafka logs every reconnect attempt (several a second), which would drown the agent's
    own, more useful "delivery failing / replayed" lines."""

    def __init__(self, interval_s: float = 60.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        shape = re.sub(r"\d+", "#", record.getMessage())[:300]
        now = time.monotonic()
        if now - self._last.get(shape, -self.interval_s) < self.interval_s:
            return False
        if len(self._last) > 1000:
            self._last.clear()
        self._last[shape] = now
        return True


# The logger keeps the name it had before the agent became a package (logging configs use it).
_LIBRDKAFKA_LOG = logging.getLogger("rankscope.collectors.agent.librdkafka")
_LIBRDKAFKA_LOG.addFilter(_RepeatFilter())


class KafkaTransport:
    """``confluent_kafka.Producer`` with the publisher's settings and a callback per batch
    (librdkafka's own log lines go to ``rankscope.collectors.agent.librdkafka``, repeats
    suppressed)."""

    def __init__(
        self,
        config: PublisherConfig,
        *,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    ) -> None:
        self.config = config
        self._fatal: str | None = None
        self.last_client_error: str | None = None
        self._auth_reported = False
        settings = producer_settings(config, error_cb=self._on_error)
        settings["logger"] = _LIBRDKAFKA_LOG
        self._producer = producer_factory(settings)

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: DeliveryCallback
    ) -> None:
        try:
            self._producer.produce(
                topic,
                value,
                key,
                on_delivery=partial(self._delivered, seq, on_done),
                headers=[CONTENT_TYPE_HEADER],
            )
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in _PERMANENT_CODES:
                raise PermanentSendError(f"{err.name()}: {err.str()}") from exc
            raise

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    @property
    def broken(self) -> str | None:
        return self._fatal

    def close(self, timeout_s: float) -> None:
        """Deliver what is queued within ``timeout_s``; the rest stays in the spool."""
        with contextlib.suppress(Exception):
            if self._producer.flush(timeout_s):
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.poll(0)

    @staticmethod
    def _delivered(
        seq: int, on_done: DeliveryCallback, err: KafkaError | None, msg: Message
    ) -> None:
        if err is None:
            on_done(seq, None)
            return
        on_done(
            seq,
            DeliveryError(
                f"{msg.topic()}: {err.name()}: {err.str()}",
                permanent=err.code() in _PERMANENT_CODES,
            ),
        )

    def _on_error(self, err: KafkaError) -> None:
        self.last_client_error = f"{err.name()}: {err.str()}"
        if err.fatal():
            self._fatal = self.last_client_error
            log.error("fatal Kafka producer error: %s", self.last_client_error)
        elif err.code() in AUTH_ERROR_CODES and not self._auth_reported:
            # once per transport: the agent keeps spooling (nothing is lost) until the
            # credentials are fixed, so it says so clearly instead of exiting
            self._auth_reported = True
            who = resolve(self.config.security).describe()
            log.error(
                "Kafka authentication failed for %s at %s: %s; telemetry stays in the spool",
                who,
                self.config.bootstrap,
                err.str().replace("\n", " "),
            )
        else:
            log.debug("kafka client error: %s", self.last_client_error)


TransportFactory = Callable[[PublisherConfig], Transport]
