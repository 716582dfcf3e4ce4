"""``rankscope validator`` (streams/validate_loop.py) on a real broker: where its outputs go, and
that a batch whose outputs were not delivered is read again and never committed past."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from rankscope.kafka_admin import create_pipeline_topics
from rankscope.schemas.events import dump_events
from rankscope.schemas.topics import Topics
from rankscope.streams.config import RedactionConfig, StreamsConfig
from rankscope.streams.sources import source_value
from rankscope.streams.validate_loop import LoopSettings, ValidateLoop
from tests.conftest import Services
from tests.factories import NOW_NS, span

PARTITIONS = 4


def _config(services: Services, tmp_path: Path, partitions: int = PARTITIONS) -> StreamsConfig:
    tag = f"v{uuid.uuid4().hex[:10]}"
    create_pipeline_topics(services.bootstrap, Topics(tag), partitions=partitions)
    return StreamsConfig(
        bootstrap=services.bootstrap,
        topic_prefix=tag,
        app_id=f"{tag}-streams",
        validate_in_worker=False,
        redaction=RedactionConfig(key_file=tmp_path / "redaction.key"),
    )


@contextmanager
def _running(loop: ValidateLoop) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        loop.stop()
        thread.join(60)
        assert not thread.is_alive(), "the loop did not stop"


def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, timeout=0.5) if not m.error()]
    finally:
        consumer.close()
    return got


def _committed(config: StreamsConfig, topic: str, partitions: int) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": config.bootstrap, "group.id": config.validate_group_id})
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        probe.close()
    return {tp.partition: tp.offset for tp in found}


def _wait(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_events_go_where_the_faust_worker_sends_them_and_offsets_follow_delivery(
    services: Services, tmp_path: Path
) -> None:
    """Each job's events record lands on the partition aiokafka (the faust worker's producer)
    picks for its key, carries its raw position, and the raw offsets are committed to the end."""
    config = _config(services, tmp_path)
    topics = config.topics
    jobs = [f"job-{i}" for i in range(40)]
    raw = Producer({"bootstrap.servers": config.bootstrap})
    for job in jobs:
        events = [span(r, NOW_NS + r, job=job) for r in range(3)]
        raw.produce(topics.raw, key=job.encode(), value=dump_events(events))
    raw.produce(topics.raw, key=b"job-0", value=b"not json")
    assert raw.flush(30) == 0

    loop = ValidateLoop(config)
    with _running(loop):
        records = _read_all(config.bootstrap, topics.events, len(jobs))
        letters = _read_all(config.bootstrap, topics.deadletter, 1)
        _wait(
            lambda: (
                sum(v for v in _committed(config, topics.raw, PARTITIONS).values() if v > 0)
                == len(jobs) + 1
            ),
            30,
            "the raw offsets to be committed",
        )
    assert len(records) == len(jobs)
    assert len(letters) == 1
    choose = DefaultPartitioner()
    every = list(range(PARTITIONS))
    for m in records:
        assert m.partition() == choose(m.key(), every, every), m.key()
        source = source_value(m.headers())
        assert source is not None and source.startswith(topics.raw.encode() + b":")
    assert loop.counters.events_valid == 3 * len(jobs)
    assert loop.counters.dead_letters_by_reason == {"not_json": 1}
    assert loop.batches_retried == 0


def _topic_max_bytes(admin: AdminClient, topic: str, limit: int) -> None:
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_a_batch_not_delivered_is_read_again_and_never_committed_past(
    services: Services, tmp_path: Path
) -> None:
    """The broker refuses the dead-letter topic's records (its size limit set below a letter's
    size), so a bad record's letter is not delivered: the batch's offsets stay uncommitted and
    it is read again until the limit is lifted; then every output is there and the offsets
    move."""
    config = _config(services, tmp_path, partitions=1)
    topics = config.topics
    admin = AdminClient({"bootstrap.servers": config.bootstrap})
    _topic_max_bytes(admin, topics.deadletter, 64)
    raw = Producer({"bootstrap.servers": config.bootstrap})
    raw.produce(topics.raw, key=b"job-1", value=dump_events([span(0, NOW_NS)]))
    raw.produce(topics.raw, key=b"job-1", value=b"{broken")
    assert raw.flush(30) == 0

    loop = ValidateLoop(config, LoopSettings(delivery_timeout_ms=5_000, retry_pause_s=0.2))
    with _running(loop):
        _wait(lambda: loop.batches_retried >= 2, 60, "the batch to be read again")
        assert _committed(config, topics.raw, 1)[0] < 0, "committed past undelivered outputs"
        _topic_max_bytes(admin, topics.deadletter, 1024 * 1024)
        letters = _read_all(config.bootstrap, topics.deadletter, 1)
        _wait(lambda: _committed(config, topics.raw, 1)[0] == 2, 60, "the commit")
    assert len(letters) >= 1
    assert loop.counters.dead_letters_by_reason == {"not_json": 1}  # counted once, when sent
    # the valid record was produced again with each try: its copies share one raw position
    events = _read_all(config.bootstrap, topics.events, loop.batches_retried + 1, timeout_s=10)
    assert len(events) == loop.batches_retried + 1
    assert {source_value(m.headers()) for m in events} == {f"{topics.raw}:0:0".encode()}


def test_a_commit_the_group_refuses_waits_for_the_next_try(
    services: Services, tmp_path: Path
) -> None:
    """A commit refused because the group moved on (what a validator killed and restarted
    beside this one caused in a clean-clone run: ILLEGAL_GENERATION, and the validator exited)
    keeps its offsets for the next try instead of stopping the loop. Made deterministic with a
    client outside the group while another member holds it (the broker answers
    UNKNOWN_MEMBER_ID); once the member leaves, the same offsets are committed."""
    config = _config(services, tmp_path, partitions=1)
    topics = config.topics
    member = Consumer(
        {
            "bootstrap.servers": config.bootstrap,
            "group.id": config.validate_group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    member.subscribe([topics.raw])
    _wait(lambda: bool(member.consume(1, 0.5) or member.assignment()), 60, "the member to join")
    outsider = Consumer(
        {"bootstrap.servers": config.bootstrap, "group.id": config.validate_group_id}
    )
    outsider.assign([TopicPartition(topics.raw, 0, 0)])
    loop = ValidateLoop(config)
    loop._uncommitted[topics.raw, 0] = 7
    try:
        loop._commit(outsider)  # refused: the group has a member and this is not it
        assert loop.commits_deferred == 1
        assert loop._uncommitted == {(topics.raw, 0): 7}
        member.close()  # the group is empty now: a commit from outside is taken
        _wait(lambda: _try_commit(loop, outsider), 60, "the deferred commit")
        assert loop._uncommitted == {}
        assert _committed(config, topics.raw, 1) == {0: 7}
    finally:
        outsider.close()


def _try_commit(loop: ValidateLoop, consumer: Consumer) -> bool:
    loop._commit(consumer)
    return not loop._uncommitted
