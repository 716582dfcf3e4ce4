"""The worker's Kafka transport: faust's aiokafka driver with the consumer's fetch wait set.

faust-streaming 0.15 creates its aiokafka consumer with ``fetch_max_wait_ms=1500`` and offers
no setting for it. aiokafka keeps one fetch in flight per broker and leaves out of it every
partition whose fetched records are still buffered. A worker that validates reads its own output
back (the validate agent writes ``<p>.events``, the windows agent reads it), so whenever the
events partitions are caught up, the fetch in flight can hold only them: the broker keeps it
open for the whole wait, because nothing new reaches those partitions until more raw records
are validated, and the raw partitions, drained meanwhile, cannot be fetched before it returns.
The worker then idles in ``select`` for up to 1.5 s at a time (docs/decisions.md, "The
consumer's fetch wait"). The shorter the events records on the wire (compressed output), the
sooner the events partitions catch up and the more often it happens.

Only the wait is changed: everything else is faust's own consumer.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka


def transport_class(fetch_max_wait_ms: int) -> type[faust_aiokafka.Transport]:
    """faust's aiokafka ``Transport`` whose worker consumer waits at most ``fetch_max_wait_ms``
    on the broker for a fetch to fill (the broker answers sooner whenever any data is there)."""

    class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
        def _create_worker_consumer(self, transport: Any) -> Any:  # AIOKafkaConsumer
            consumer = super()._create_worker_consumer(transport)
            # aiokafka hands this attribute to its Fetcher in start(); no public setter exists
            # and faust passes a constant (tests/test_worker_transport.py pins the attribute).
            if not hasattr(consumer, "_fetch_max_wait_ms"):
                raise RuntimeError(
                    "this aiokafka keeps the fetch wait elsewhere: streams/transport.py needs "
                    "updating for it"
                )
            consumer._fetch_max_wait_ms = fetch_max_wait_ms
            return consumer

    class WaitingConsumer(faust_aiokafka.Consumer):
        def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
            return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    class Transport(faust_aiokafka.Transport):
        Consumer = WaitingConsumer

    return Transport
