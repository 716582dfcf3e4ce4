"""The node agent against a real Kafka broker and the real pipeline into ClickHouse.

Nothing is mocked: the sources are small test collectors (the agent accepts ready-made
collector instances), everything after them is production code. The outage test runs its own
private broker so that stopping it does not disturb the session broker other tests use.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from rankscope.collectors.agent import Agent, AgentConfig
from rankscope.collectors.base import EventFactory, JobRegistry, binding_from_environ
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas import EVENT_LIST_ADAPTER
from rankscope.services import LocalKafka
from rankscope.sinks.clickhouse import connect, migrate
from tests.conftest import Services
from tests.test_agent import FakeGpuCollector, StaticInventory, Tap, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JOB = "4242"
FIRST_RANK = 8  # this node hosts ranks 8..11 of a 16-rank job


def _job_registry() -> JobRegistry:
    """Bind GPUs 0..3 the way the GPU collector would, from the training processes' environ."""
    jobs = JobRegistry()
    for gpu in range(4):
        environ = {
            "SLURM_JOB_ID": JOB,
            "SLURM_PROCID": str(FIRST_RANK + gpu),
            "SLURM_LOCALID": str(gpu),
            "SLURM_NTASKS": "16",
        }
        jobs.bind_gpu(gpu, binding_from_environ(environ))
    return jobs


def _config(tmp_path: Path, bootstrap: str, prefix: str, **kafka: object) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "cluster": "it",
            "node": "gpu-node-01",
            "kafka": {"bootstrap": bootstrap, "topic_prefix": prefix, "linger_ms": 5, **kafka},
            "spool": {
                "dir": str(tmp_path / "spool"),
                "max_bytes": 8 << 20,
                "segment_bytes": 1 << 20,
            },
            "heartbeat_interval_s": 0.2,
            "inventory_interval_s": 60,
            "shutdown_timeout_s": 20,
            "retry_backoff_s": 0.2,
            "retry_backoff_max_s": 1.0,
        }
    )


def _wait_drained(pipeline: Pipeline, timeout_s: float) -> None:
    """``Pipeline.wait_drained``, tolerating the coordinator errors a freshly started broker
    answers lag probes with for its first seconds (NOT_COORDINATOR, COORDINATOR_LOAD_...)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pipeline.wait_drained(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            transient = isinstance(err, KafkaError) and err.code() in (
                KafkaError.NOT_COORDINATOR,
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
            )
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _scalar(cfg: PipelineConfig, sql: str) -> int:
    return int(connect(cfg.clickhouse_url).query(sql).result_rows[0][0])


def test_agent_events_reach_clickhouse_with_job_and_rank(
    pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    cfg = pipeline_config
    started = time.monotonic()
    factory = EventFactory("it", "gpu-node-01", _job_registry())
    gpu = FakeGpuCollector(factory, gpus=range(4), interval_s=0.2)
    tap = Tap()
    agent = Agent(
        _config(tmp_path, cfg.bootstrap, cfg.topic_prefix),
        collectors=[gpu],
        inventory=StaticInventory(nccl_version="2.21.5"),
        event_factory=factory,
        tap=tap,
    )
    agent.start()
    try:
        wait_for(lambda: gpu.polls >= 5 and agent.stats().delivered > 0, 30, "5 cycles")
    finally:
        stats = agent.stop()
    assert stats.pending == 0, stats
    assert stats.delivered >= stats.sampled == len(tap.events)
    assert stats.dropped == 0 and stats.collector_errors == 0

    with Pipeline(cfg) as pipeline:
        _wait_drained(pipeline, 120)

    db = cfg.database
    rows = (
        connect(cfg.clickhouse_url)
        .query(
            f"SELECT gpu, rank, local_rank, job_id, count() FROM {db}.gpu_samples FINAL "
            "GROUP BY gpu, rank, local_rank, job_id ORDER BY gpu"
        )
        .result_rows
    )
    per_gpu = gpu.polls
    assert rows == [(g, FIRST_RANK + g, g, JOB, per_gpu) for g in range(4)], rows
    ids = {
        r[0]
        for r in connect(cfg.clickhouse_url)
        .query(f"SELECT event_id FROM {db}.gpu_samples FINAL")
        .result_rows
    }
    assert ids == set(gpu.sampled)
    heartbeats = len(tap.of("heartbeat"))
    assert heartbeats >= 2
    assert _scalar(cfg, f"SELECT count() FROM {db}.heartbeats FINAL") == heartbeats
    assert (
        _scalar(cfg, f"SELECT count() FROM {db}.node_inventory FINAL WHERE node = 'gpu-node-01'")
        == 1
    )
    types = {
        r[0]
        for r in connect(cfg.clickhouse_url)
        .query(f"SELECT event_type FROM {db}.agent_events FINAL")
        .result_rows
    }
    assert {"agent_started", "agent_stopped"} <= types
    assert time.monotonic() - started < 90


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of this test's own (free ports, data in tmp_path), always stopped."""
    kafka = LocalKafka(tmp_path / "kafka", heap="384m")
    try:
        kafka.start(timeout_s=90)
        yield kafka
    finally:
        kafka.stop()


def _consume_ids(bootstrap: str, topics: list[str], want: set[str], timeout_s: float) -> list[str]:
    """Every event id on ``topics`` (with duplicates), read from the beginning with a bare
    consumer, until all of ``want`` were seen and the topics are exhausted."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"it-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        md = consumer.list_topics(timeout=10)
        parts = [
            TopicPartition(t, p, 0)  # offset 0: from the beginning
            for t in topics
            if t in md.topics
            for p in md.topics[t].partitions
        ]
        consumer.assign(parts)
        remaining = {(tp.topic, tp.partition) for tp in parts}
        ids: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if not remaining and want <= set(ids):
                    break
                continue
            if msg.error() is not None:
                remaining.discard((msg.topic(), msg.partition()))  # end of partition
                if not remaining and want <= set(ids):
                    break
                continue
            ids.extend(e.event_id for e in EVENT_LIST_ADAPTER.validate_json(msg.value()))
        return ids
    finally:
        consumer.close()


def test_broker_outage_loses_nothing_and_clickhouse_has_each_event_once(
    services: Services, private_kafka: LocalKafka, tmp_path: Path
) -> None:
    started = time.monotonic()
    kafka = private_kafka
    tag = f"t{uuid.uuid4().hex[:10]}"
    cfg = PipelineConfig(
        bootstrap=kafka.bootstrap,
        clickhouse_url=services.clickhouse_url,
        topic_prefix=tag,
        database=tag,
        home=tmp_path / "home",
    )
    create_pipeline_topics(cfg.bootstrap, cfg.topics, partitions=2)
    migrate(connect(cfg.clickhouse_url), cfg.database)

    factory = EventFactory("it", "gpu-node-02", _job_registry())
    gpu = FakeGpuCollector(factory, gpus=range(4), interval_s=0.1)
    tap = Tap()
    agent = Agent(
        _config(
            tmp_path,
            cfg.bootstrap,
            cfg.topic_prefix,
            # A short delivery timeout so the outage shows up as failed deliveries (and the
            # resend-in-order path runs) instead of only as messages queued in librdkafka.
            delivery_timeout_ms=3000,
            extra={"reconnect.backoff.max.ms": "500", "request.timeout.ms": "2000"},
        ),
        collectors=[gpu],
        inventory=StaticInventory(),
        event_factory=factory,
        tap=tap,
    )
    agent.start()
    try:
        wait_for(lambda: agent.stats().delivered >= 20, 30, "deliveries before the outage")
        kafka.stop(timeout_s=30)  # SIGTERM: a clean broker shutdown, mid-run
        outage_polls = gpu.polls
        wait_for(lambda: agent.stats().delivery_failures > 0, 30, "failed deliveries")
        wait_for(lambda: gpu.polls >= outage_polls + 20, 30, "sampling during the outage")
        # A batch produced just before the stop may still be confirmed after the first failure,
        # so "broker down" is awaited, not read at one instant.
        wait_for(lambda: agent.stats().broker_ok is False, 30, "agent sees the broker down")
        during = agent.stats()
        assert during.pending >= 4 * 20  # kept sampling into the spool

        kafka.start(timeout_s=90)  # same data dir, same ports
        wait_for(lambda: agent.stats().pending == 0, 60, "spool drained after the outage")
        wait_for(lambda: bool(tap.agent("spool_replayed")), 10, "spool_replayed")
    finally:
        stats = agent.stop()
    assert stats.pending == 0 and stats.dropped == 0, stats
    assert stats.delivery_failures > 0

    sampled = set(gpu.sampled)
    everything = {e.event_id for e in tap.events}
    on_kafka = _consume_ids(cfg.bootstrap, cfg.topics.all_raw, everything, timeout_s=30)
    missing = everything - set(on_kafka)
    assert not missing, f"{len(missing)} sampled event(s) never reached Kafka"
    duplicates = len(on_kafka) - len(set(on_kafka))  # allowed on Kafka

    with Pipeline(cfg) as pipeline:
        _wait_drained(pipeline, 120)
    db = cfg.database
    assert _scalar(cfg, f"SELECT count() FROM {db}.gpu_samples FINAL") == len(sampled)
    assert _scalar(cfg, f"SELECT uniqExact(event_id) FROM {db}.gpu_samples") == len(sampled)
    assert _scalar(
        cfg, f"SELECT count() FROM {db}.agent_events FINAL WHERE event_type = 'spool_replayed'"
    ) == len(tap.agent("spool_replayed"))
    elapsed = time.monotonic() - started
    print(
        f"outage test: {len(sampled)} samples, {len(on_kafka)} records' events on Kafka "
        f"({duplicates} duplicates), {stats.delivery_failures} failed batches, {elapsed:.1f}s"
    )
    assert elapsed < 90
