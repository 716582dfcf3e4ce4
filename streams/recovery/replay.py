"""Read back a stretch of one partition: for a decider rebuilding its state after a restart,
and for commands that show what a topic holds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankscope.kafka_security import KafkaSecurity, kafka_config


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int,
    since_ms: int = 0,
    end_offset: int | None = None,
    timeout_s: float = 60.0,
    start_offset: int | None = None,
    security: KafkaSecurity | None = None,
) -> Iterator[tuple[int, bytes]]:
    """(record time ms, value) of ``topic``/``partition`` from the first record at or after
    ``since_ms`` (or from ``start_offset``) up to ``end_offset`` (exclusive; None: the end
    now), in offset order. Stops at the partition's end too, so a compacted topic's gaps below
    the end do not stall it."""
    consumer = Consumer(
        kafka_config(
            bootstrap,
            security,
            **{
                "group.id": f"rankscope-replay-{uuid.uuid4().hex}",  # never commits
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            },
        )
    )
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s
        )
        end = high if end_offset is None else min(end_offset, high)
        if start_offset is not None:
            start = start_offset
        else:
            (found,) = consumer.offsets_for_times(
                [TopicPartition(topic, partition, max(0, since_ms))], timeout=timeout_s
            )
            start = found.offset if found.offset >= 0 else end  # -1: nothing that recent
        start = max(start, low)
        if start >= end:
            return
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while True:
            msgs = consumer.consume(500, timeout=1.0)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    continue
                offset = msg.offset() or 0
                if offset >= end:
                    return
                yield msg.timestamp()[1], msg.value() or b""
                if offset + 1 >= end:
                    return
            if not msgs and time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}/{partition} [{start}, {end}) timed out")
            if msgs:
                deadline = time.monotonic() + timeout_s
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """Where ``group`` resumes on ``topic``/``partition``: its committed offset, or the
    partition's start when it never committed (the workers read from the earliest)."""
    consumer = Consumer(
        kafka_config(bootstrap, **{"group.id": group, "enable.auto.commit": False})
    )  # never subscribes: it reads the group's offsets without joining it
    try:
        tp = TopicPartition(topic, partition)
        (found,) = consumer.committed([tp], timeout=30)
        if found.offset >= 0:
            return int(found.offset)
        low, _ = consumer.get_watermark_offsets(tp, timeout=30)
        return int(low)
    finally:
        consumer.close()
