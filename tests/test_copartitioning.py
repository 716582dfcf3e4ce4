"""A job's raw partition has the number of its ``<p>.events`` partition (the worker's producer).

Both topics are keyed by job. faust assigns topics with equal partition counts together, so when
the publisher chooses a key's partition as aiokafka does (murmur2, Kafka's Java default), the
worker that validates a job's raw records also analyses its events, and hands them over parsed
instead of another worker parsing them again (bench/scale_out.py: ~64% of events records parsed
again with two workers under librdkafka's CRC32 default). This publishes through the collectors'
``Publisher`` to a real broker and compares every record's partition with aiokafka's choice.
"""

from __future__ import annotations

import uuid

from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import Consumer

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.kafka_security import kafka_config
from rankscope.schemas.topics import Topics, partition_key
from tests.conftest import Services
from tests.factories import NOW_NS, gpu_sample

PARTITIONS = 4
JOBS = [f"train-{i}" for i in range(24)]


def test_a_jobs_raw_partition_is_the_one_the_workers_producer_picks(services: Services) -> None:
    prefix = f"cop{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix)
    create_pipeline_topics(services.bootstrap, topics, partitions=PARTITIONS)
    events = [gpu_sample(rank=0, ts=NOW_NS, job=job) for job in JOBS]
    with Publisher(PublisherConfig(bootstrap=services.bootstrap, topic_prefix=prefix)) as pub:
        pub.publish(events)
        pub.flush(30)

    consumer = Consumer(
        kafka_config(
            services.bootstrap,
            **{"group.id": f"{prefix}-check", "auto.offset.reset": "earliest"},
        )
    )
    consumer.subscribe([topics.raw])
    seen: dict[bytes, int | None] = {}
    try:
        for _ in range(60):
            for msg in consumer.consume(num_messages=100, timeout=1.0):
                if msg.error() is None:
                    seen[msg.key()] = msg.partition()
            if len(seen) == len(JOBS):
                break
    finally:
        consumer.close()

    everything = list(range(PARTITIONS))
    aiokafka = {
        partition_key(job, "").decode(): DefaultPartitioner()(
            partition_key(job, ""), everything, everything
        )
        for job in JOBS
    }
    assert {k.decode(): p for k, p in seen.items()} == aiokafka
    assert len(set(aiokafka.values())) == PARTITIONS  # the jobs spread: the check can fail
