"""Small Kafka admin helpers the orchestration layer needs: topics and consumer-group lag."""

from __future__ import annotations

import uuid

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from tenacity import retry_if_exception

from rankscope.kafka_retry import is_transient, kafka_error, retry_within
from rankscope.kafka_security import KafkaSecurity, kafka_config
from rankscope.kafka_topics import create_topics
from rankscope.schemas.topics import Topics, topic_specs
from rankscope.streams.recovery.replay import read_partition


def create_pipeline_topics(
    bootstrap: str,
    topics: Topics,
    partitions: int = 4,
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> None:
    """Create every topic of the pipeline as the table in ``rankscope.schemas.topics`` says
    (existing ones are left alone) and wait until metadata shows them.

    The local services, the tests and `rankscope kafka-acls --create-topics` call this; the
    operator's `rankscope topics create` reads the same table with more options."""
    create_topics(bootstrap, topic_specs(topics, partitions), timeout_s, security)


#: answers that mean "not known yet", not "wrong": a coordinator moving or loading (right after
#: a broker or group starts), and a partition whose leader just moved (after a broker died the
#: new leader refuses its high watermark until the dead replica leaves the in-sync set, up to
#: ``replica.lag.time.max.ms``), or a request lost with its connection
_TRANSIENT_LAG_ERRORS = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    }
)


def transient_lag_error(exc: BaseException) -> bool:
    """Whether ``exc`` from a lag probe is worth asking again (:data:`_TRANSIENT_LAG_ERRORS`)."""
    error = kafka_error(exc)
    return error is not None and is_transient(error, _TRANSIENT_LAG_ERRORS)


def group_lag(
    bootstrap: str,
    group_id: str,
    topic_names: list[str],
    timeout_s: float = 10,
    retry_s: float = 30,
    security: KafkaSecurity | None = None,
) -> int:
    """Records on ``topic_names`` not yet committed by ``group_id`` (uncommitted = all).

    Asks again, for up to ``retry_s``, while the cluster answers with an error of
    :data:`_TRANSIENT_LAG_ERRORS` instead of failing the caller; any other error is raised.
    """
    return retry_within(retry_s, retry_if_exception(transient_lag_error))(
        _group_lag_once, bootstrap, group_id, topic_names, timeout_s, security
    )


def _group_lag_once(
    bootstrap: str,
    group_id: str,
    topic_names: list[str],
    timeout_s: float,
    security: KafkaSecurity | None,
) -> int:
    probe = Consumer(
        kafka_config(
            bootstrap,
            security,
            **{
                "group.id": group_id,
                "enable.auto.commit": False,
                "client.id": f"rankscope-lag-{uuid.uuid4().hex[:6]}",
            },
        )
    )
    try:
        md = probe.list_topics(timeout=timeout_s)
        tps = [
            TopicPartition(t, p)
            for t in topic_names
            if t in md.topics
            for p in md.topics[t].partitions
        ]
        committed = probe.committed(tps, timeout=timeout_s)
        lag = 0
        for tp in committed:
            low, high = probe.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
            pos = tp.offset if tp.offset >= 0 else low
            lag += max(0, high - pos)
        return lag
    finally:
        probe.close()


def watermarks(
    bootstrap: str,
    topic_names: list[str],
    timeout_s: float = 10,
    security: KafkaSecurity | None = None,
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (first offset still held, offset the next record will get)."""
    probe = Consumer(kafka_config(bootstrap, security, **{"group.id": "rankscope-ends"}))
    try:
        md = probe.list_topics(timeout=timeout_s)
        return {
            (t, p): probe.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s)
            for t in topic_names
            if t in md.topics
            for p in md.topics[t].partitions
        }
    finally:
        probe.close()


def end_offsets(
    bootstrap: str,
    topic_names: list[str],
    timeout_s: float = 10,
    security: KafkaSecurity | None = None,
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset the next record will get, for every partition now."""
    return {
        tp: high
        for tp, (_, high) in watermarks(bootstrap, topic_names, timeout_s, security).items()
    }


def committed_offsets(
    bootstrap: str,
    group_id: str,
    partitions: list[tuple[str, int]],
    timeout_s: float = 10,
    security: KafkaSecurity | None = None,
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> ``group_id``'s committed offset (-1: none yet)."""
    probe = Consumer(
        kafka_config(bootstrap, security, **{"group.id": group_id, "enable.auto.commit": False})
    )  # never subscribes: it reads the group's offsets without joining it
    try:
        found = probe.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
        return {(tp.topic, tp.partition): tp.offset for tp in found}
    finally:
        probe.close()


def topic_record_count(
    bootstrap: str,
    topic_names: list[str],
    timeout_s: float = 10,
    security: KafkaSecurity | None = None,
) -> int:
    """Records currently in ``topic_names`` (high minus low watermark over partitions)."""
    probe = Consumer(kafka_config(bootstrap, security, **{"group.id": "rankscope-count"}))
    try:
        md = probe.list_topics(timeout=timeout_s)
        total = 0
        for t in topic_names:
            if t not in md.topics:
                continue
            for p in md.topics[t].partitions:
                low, high = probe.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s)
                total += high - low
        return total
    finally:
        probe.close()


_GROUP_ADMINS: dict[tuple[str, ...], AdminClient] = {}


def release_admins() -> None:
    """Drop the long-lived admin clients while their broker still answers.

    Left to the interpreter's final garbage collection, a client whose broker has already
    stopped (the local services of ``demo``/``eval`` stop first) can block the exit for good in
    librdkafka's destroy, joining threads that keep reconnecting: a ``rankscope eval`` wrote its
    results and then never exited. A pipeline releases them when it stops, so none outlives the
    broker it was made for (a clean-clone test run once aborted in librdkafka while such
    clients of stopped brokers were still held; librdkafka #4605 is the suspected cause).
    """
    while _GROUP_ADMINS:
        _GROUP_ADMINS.popitem()


def group_stable(
    bootstrap: str,
    group_id: str,
    members: int = 1,
    timeout_s: float = 5.0,
    security: KafkaSecurity | None = None,
) -> bool:
    """True once ``group_id`` has at least ``members`` members and has finished rebalancing
    (partitions assigned)."""
    # One long-lived client per cluster: a fresh client's describe timed out every time here
    # (it was still finding the group coordinator), so `rankscope eval` never saw the worker.
    conf = kafka_config(bootstrap, security)
    key = tuple(f"{k}={v}" for k, v in sorted(conf.items()))
    admin = _GROUP_ADMINS.get(key)
    if admin is None:
        admin = _GROUP_ADMINS[key] = AdminClient(conf)
    try:
        # Wait past the request's own timeout, so librdkafka always finishes the request: a
        # future left behind while its request is in flight can abort the whole process when
        # the request later times out (librdkafka #4605, `eonce->refcnt > 0`).
        # ListGroups first: it asks every broker and needs no group coordinator, while
        # DescribeGroups first looks the coordinator up, and a coordinator lookup timing out (a
        # fresh or failing-over cluster) is the path #4605 aborts on; describe only a group
        # that is already listed as stable (its coordinator is then known and loaded).
        listed = admin.list_consumer_groups(request_timeout=timeout_s).result(
            timeout=timeout_s + 30
        )
        if not any(
            g.group_id == group_id and g.state == ConsumerGroupState.STABLE for g in listed.valid
        ):
            return False
        future = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)[group_id]
        desc = future.result(timeout=timeout_s + 30)
    except (KafkaException, TimeoutError):  # a busy broker: not known to be stable yet
        return False
    return bool(desc.state == ConsumerGroupState.STABLE and len(desc.members) >= max(1, members))


def read_topic(bootstrap: str, topic: str, security: KafkaSecurity | None = None) -> list[bytes]:
    """Every record of a topic from its start to its end now, in record-time order."""
    probe = Consumer(kafka_config(bootstrap, security, **{"group.id": f"read-{uuid.uuid4().hex}"}))
    try:
        meta = probe.list_topics(topic, timeout=10).topics.get(topic)
    finally:
        probe.close()
    if meta is None or meta.error is not None:
        return []
    records = [
        r for p in meta.partitions for r in read_partition(bootstrap, topic, p, security=security)
    ]
    return [value for _, value in sorted(records, key=lambda r: r[0])]
