"""The publisher without a broker: batching, wire format, delivery accounting, clear errors."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from rankscope.collectors import (
    BrokerUnreachableError,
    Publisher,
    PublisherConfig,
    PublishError,
    batch_events,
    producer_settings,
)
from rankscope.schemas import EVENT_LIST_ADAPTER, Event, HeartbeatEvent, Topics, partition_key
from rankscope.schemas.payloads import Heartbeat
from rankscope.simulation import SimulationConfig, simulate

START_NS = 1_700_000_000_000_000_000
UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: connections are refused at once


def sim_events(**overrides: Any) -> list[Event]:
    return list(simulate(SimulationConfig(start_ns=START_NS, **overrides)))


def node_heartbeat(node: str, seq: int) -> HeartbeatEvent:
    """A node-level event (no job id): keyed by node."""
    return HeartbeatEvent(
        event_id=f"hb-{node}-{seq:08d}",
        schema_id="heartbeat/1",
        kind="heartbeat",
        cluster="c",
        node=node,
        ts=START_NS + seq,
        observed_ts=START_NS + seq,
        payload=Heartbeat(agent="a", seq=seq, interval_s=5.0),
    )


# ---------------------------------------------------------------- batching (pure)


def test_batches_group_by_key_and_respect_max() -> None:
    events = sim_events(duration_s=20.0) + sim_events(duration_s=20.0, job_id="other-job")
    batches = list(batch_events(events, 50))
    assert sum(len(b) for _, b in batches) == len(events)
    for key, batch in batches:
        assert 1 <= len(batch) <= 50
        assert {partition_key(e.job_id, e.node) for e in batch} == {key}
    assert {key for key, _ in batches} == {b"sim-job-1", b"other-job"}
    # kinds share batches: at most one partial batch per key
    partial = [key for key, b in batches if len(b) < 50]
    assert len(partial) == len(set(partial))
    assert any(len({e.kind for e in b}) > 1 for _, b in batches)


def test_batches_keep_the_emission_order_of_every_kind_per_key() -> None:
    """What the one raw topic promises: a key's events reach its partition in emission order,
    kinds interleaved as emitted (the analysis depends on it, not on how it reads the log)."""
    events = sim_events(duration_s=10.0)
    batches = list(batch_events(events, 7))
    for key in {key for key, _ in batches}:
        flattened = [e for kk, b in batches if kk == key for e in b]
        expected = [e for e in events if partition_key(e.job_id, e.node) == key]
        assert flattened == expected


def test_node_level_events_key_by_node() -> None:
    events: list[Event] = [
        node_heartbeat("n1", 0),
        node_heartbeat("n2", 0),
        node_heartbeat("n1", 1),
    ]
    batches = list(batch_events(events, 10))
    assert [(key, [e.event_id for e in b]) for key, b in batches] == [
        (b"node:n1", ["hb-n1-00000000", "hb-n1-00000001"]),
        (b"node:n2", ["hb-n2-00000000"]),
    ]


def test_batch_size_one_and_invalid() -> None:
    events = sim_events(duration_s=3.0)
    assert [len(b) for _, b in batch_events(events, 1)] == [1] * len(events)
    with pytest.raises(ValueError):
        list(batch_events(events, 0))


def test_partial_batches_flush_after_max_delay() -> None:
    """A slow live stream must not sit in a half-full batch until max_batch_events arrive."""
    now = [0.0]
    events = [node_heartbeat("n1", i) for i in range(5)]

    def arriving() -> Any:
        for e in events:
            now[0] += 1.0  # one event per second
            yield e

    batches = list(batch_events(arriving(), 100, max_delay_s=1.5, clock=lambda: now[0]))
    # opened at t=1; at t=3 it is 2 s old and goes out with the event that arrived then
    assert [len(b) for _, b in batches] == [3, 2]
    assert [e for _, b in batches for e in b] == events


# ---------------------------------------------------------------- settings


def test_producer_settings_are_idempotent_and_bounded() -> None:
    cfg = PublisherConfig(
        bootstrap="k:9092",
        max_retries=3,
        delivery_timeout_ms=1234,
        extra={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
    )
    s = producer_settings(cfg)
    assert s["bootstrap.servers"] == "k:9092"
    assert s["enable.idempotence"] is True
    assert s["acks"] == "all"
    assert s["retries"] == 3
    assert s["delivery.timeout.ms"] == 1234
    assert s["linger.ms"] == 20
    assert s["compression.type"] == "lz4"
    assert s["queue.buffering.max.messages"] == 200_000
    assert s["client.id"] == "rankscope-collector"
    assert s["security.protocol"] == "SASL_SSL"


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="compression"):
        PublisherConfig(bootstrap="k:9092", compression="brotli")
    with pytest.raises(ValueError):
        PublisherConfig(bootstrap="k:9092", max_batch_events=0)
    with pytest.raises(ValueError):
        PublisherConfig(bootstrap="")


# ---------------------------------------------------------------- publishing via a fake producer


class FakeProducer:
    """Records produce() calls; delivers (or fails) them on poll/flush like librdkafka."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.produced: list[dict[str, Any]] = []
        self.pending: list[tuple[Callable[..., None], str]] = []
        self.fail_with: KafkaError | None = None
        self.buffer_errors = 0
        self.stuck = False
        self.closed = False
        self.polls = 0

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        on_delivery: Callable[..., None] | None = None,
        headers: Any = None,
    ) -> None:
        if self.buffer_errors:
            self.buffer_errors -= 1
            raise BufferError("Local: Queue full")
        self.produced.append({"topic": topic, "value": value, "key": key, "headers": headers})
        assert on_delivery is not None
        self.pending.append((on_delivery, topic))

    def _deliver(self) -> None:
        if self.stuck:
            return
        pending, self.pending = self.pending, []
        for cb, topic in pending:
            cb(self.fail_with, Message(topic=topic))

    def poll(self, timeout: float = -1) -> int:
        self.polls += 1
        self._deliver()
        return 0

    def flush(self, timeout: float = -1) -> int:
        self._deliver()
        return len(self.pending)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.pending = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return {}

    def close(self) -> bool:
        self.closed = True
        return True

    def __len__(self) -> int:
        return len(self.pending)


def fake_publisher(**cfg: Any) -> tuple[Publisher, FakeProducer]:
    holder: list[FakeProducer] = []

    def factory(settings: dict[str, Any]) -> FakeProducer:
        holder.append(FakeProducer(settings))
        return holder[0]

    pub = Publisher(PublisherConfig(bootstrap="fake:9092", **cfg), producer_factory=factory)
    return pub, holder[0]


def test_wire_format() -> None:
    events = sim_events(duration_s=10.0)
    pub, fake = fake_publisher(topic_prefix="t1", max_batch_events=64)
    with pub:
        pub.publish(events)
        stats = pub.flush(5)
    assert fake.closed
    assert fake.settings["enable.idempotence"] is True
    topics = Topics("t1")
    decoded: list[Event] = []
    for msg in fake.produced:
        assert msg["headers"] == [("content-type", b"application/json")]
        assert msg["key"] == b"sim-job-1"
        batch = EVENT_LIST_ADAPTER.validate_json(msg["value"])
        assert 1 <= len(batch) <= 64
        assert msg["topic"] == topics.raw
        assert b'"schema":' in msg["value"] and b'"schema_id"' not in msg["value"]
        decoded.extend(batch)
    assert decoded == events  # one key: the partition holds them in emission order
    assert stats.events_sent == stats.events_delivered == len(events)
    assert stats.messages_sent == stats.messages_delivered == len(fake.produced)
    assert stats.messages_failed == stats.events_failed == 0
    assert stats.messages_pending == 0


def test_buffer_full_is_retried() -> None:
    pub, fake = fake_publisher()
    fake.buffer_errors = 3
    events = sim_events(duration_s=3.0)
    pub.publish(events)
    assert pub.flush(1).events_delivered == len(events)
    assert fake.polls >= 3


def test_failed_deliveries_raise_on_flush() -> None:
    pub, fake = fake_publisher()
    fake.fail_with = KafkaError(KafkaError._MSG_TIMED_OUT)
    events = sim_events(duration_s=3.0)
    pub.publish(events)
    with pytest.raises(PublishError, match="_MSG_TIMED_OUT") as err:
        pub.flush(1)
    assert err.value.stats.events_failed == len(events)
    assert err.value.stats.messages_failed == err.value.stats.messages_sent
    # the failure is reported once; a later clean flush succeeds
    fake.fail_with = None
    pub.publish(events[:5])
    assert pub.flush(1).events_delivered == 5


def test_flush_timeout_with_queued_messages_raises() -> None:
    pub, fake = fake_publisher()
    fake.stuck = True
    pub.publish(sim_events(duration_s=2.0))
    with pytest.raises(PublishError, match="still queued"):
        pub.flush(0.1)
    pub.close()
    assert fake.closed


def test_closed_publisher_refuses_work() -> None:
    pub, _ = fake_publisher()
    pub.close()
    pub.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pub.publish(sim_events(duration_s=2.0))


# ---------------------------------------------------------------- real librdkafka, no broker


def test_unreachable_broker_is_reported_quickly_and_clearly() -> None:
    t = time.monotonic()
    with (
        Publisher(PublisherConfig(bootstrap=UNREACHABLE)) as pub,
        pytest.raises(BrokerUnreachableError) as err,
    ):
        pub.check_connection(timeout_s=2)
    assert time.monotonic() - t < 6
    message = str(err.value)
    assert UNREACHABLE in message
    assert "rankscope services up" in message and "--bootstrap" in message


def test_undeliverable_messages_fail_within_delivery_timeout() -> None:
    events = sim_events(duration_s=2.0)
    t = time.monotonic()
    with Publisher(PublisherConfig(bootstrap=UNREACHABLE, delivery_timeout_ms=500)) as pub:
        pub.publish(events)
        with pytest.raises(PublishError) as err:
            pub.flush(10)
    assert time.monotonic() - t < 6
    stats = err.value.stats
    assert stats.messages_failed == stats.messages_sent > 0
    assert stats.events_failed == len(events)
    assert stats.last_error is not None and "timed out" in stats.last_error.lower()


def test_batches_carry_every_kind() -> None:
    events = sim_events(duration_s=6.0)
    kinds = {e.kind for _, b in batch_events(events, 200) for e in b}
    assert kinds == {"scheduler_event", "span", "gpu_sample", "heartbeat"}
    assert list(itertools.chain.from_iterable(b for _, b in batch_events([], 5))) == []
