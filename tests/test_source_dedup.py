"""A raw record validated twice is analysed once (``streams/sources.py``).

The validate agent commits its raw offsets once a second, so a worker killed (or rebalanced)
in between has the next owner validate some raw records again and produce their events a
second time. The broker test writes exactly such repeats onto the events topic (the records read
back, headers and all, as a re-validating worker produces them) and expects the windows and
findings of the log without them.
"""

from __future__ import annotations

import time
from dataclasses import replace

from confluent_kafka import Consumer, Producer, TopicPartition

from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.simulation.faults import simulate_with_faults
from rankscope.streams.sources import (
    SOURCE_HEADER,
    SourceOffsets,
    record_source,
    source_headers,
)
from tests.test_findings_determinism import in_process, stored
from tests.test_worker_state import _cascade, _publish, expected_windows, stored_windows


def test_the_source_header_round_trips_in_either_header_shape() -> None:
    headers = source_headers("p.raw.events", 3, 1234)
    assert record_source(headers) == ("p.raw.events:3", 1234)
    assert record_source(dict(headers)) == ("p.raw.events:3", 1234)
    assert record_source(None) is None
    assert record_source([("other", b"x")]) is None
    assert record_source([(SOURCE_HEADER, b"p.raw.events:3:not-a-number")]) is None


def test_a_source_offset_read_before_is_a_duplicate_per_events_partition() -> None:
    seen = SourceOffsets()
    assert seen.first_time("tp0", ("raw:0", 5))
    assert seen.first_time("tp0", ("raw:1", 2))  # another raw partition: its own sequence
    assert not seen.first_time("tp0", ("raw:0", 5))
    assert not seen.first_time("tp0", ("raw:0", 4))
    assert seen.first_time("tp0", ("raw:0", 6))
    assert seen.first_time("tp1", ("raw:0", 5))  # another events partition
    assert seen.first_time("tp0", None)  # no header (written by hand): never a duplicate
    assert seen.export("tp0") == {"raw:0": 6, "raw:1": 2}
    restored = SourceOffsets()
    restored.install("tp0", seen.export("tp0"))
    assert not restored.first_time("tp0", ("raw:1", 2))
    restored.drop("tp0")
    assert restored.first_time("tp0", ("raw:1", 2))


def _records(cfg: PipelineConfig) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]:
    """Every record of the events topic: (partition, key, value, headers)."""
    consumer = Consumer(
        {"bootstrap.servers": cfg.bootstrap, "group.id": "test-read", "enable.auto.commit": False}
    )
    out = []
    try:
        metadata = consumer.list_topics(cfg.topics.events, timeout=10)
        for p in metadata.topics[cfg.topics.events].partitions:
            _, end = consumer.get_watermark_offsets(TopicPartition(cfg.topics.events, p), 10)
            if end == 0:
                continue
            consumer.assign([TopicPartition(cfg.topics.events, p, 0)])
            got = 0
            while got < end:
                msg = consumer.poll(10)
                assert msg is not None and not msg.error()
                out.append((p, msg.key(), msg.value(), list(msg.headers() or [])))
                got += 1
    finally:
        consumer.close()
    return out


def _raw_records(cfg: PipelineConfig) -> int:
    consumer = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": "test-read"})
    try:
        metadata = consumer.list_topics(cfg.topics.raw, timeout=10)
        return sum(
            consumer.get_watermark_offsets(TopicPartition(cfg.topics.raw, p), 10)[1]
            for p in metadata.topics[cfg.topics.raw].partitions
        )
    finally:
        consumer.close()


def test_events_produced_twice_by_a_re_validation_count_once(
    pipeline_config: PipelineConfig,
) -> None:
    case = _cascade()
    events_, labels = simulate_with_faults(case.config, case.faults)
    events = list(events_)
    onset = labels[0].onset_ns
    assert onset is not None
    split = next(i for i, ev in enumerate(events) if ev.ts > onset + 3 * 10**9)
    cfg = replace(pipeline_config, env={"RANKSCOPE_WORKER_FLUSH_IDLE_S": "600"})
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready()
        _publish(cfg, events[:split])
        deadline = time.monotonic() + 60
        while len(records := _records(cfg)) < _raw_records(cfg):
            assert time.monotonic() < deadline, "the first half was not validated in 60 s"
            time.sleep(0.2)
        # the validate stage says where each events record came from
        assert all(record_source(headers) is not None for *_, headers in records)
        # a worker that died before committing its last raw offsets: the next one validates
        # those raw records again and produces the same events records once more
        repeats = records[-8:]
        producer = Producer({"bootstrap.servers": cfg.bootstrap})
        for partition, key, value, headers in repeats:
            producer.produce(cfg.topics.events, value, key, partition=partition, headers=headers)
        assert producer.flush(30) == 0
        _publish(cfg, events[split:])
        pipeline.wait_drained(timeout_s=300)
    windows, conflicting = stored_windows(cfg, case.config.job_id)
    assert windows == expected_windows(events)
    assert conflicting == 0
    dets, incs = stored(cfg)
    assert (dets, incs) == in_process([case], flush=False)
