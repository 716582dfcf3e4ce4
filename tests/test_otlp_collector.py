"""Acceptance (issue 17 point 7): what an OpenTelemetry Collector's kafkaexporter writes, on its
default topics (``otlp_spans``, ``otlp_logs``), in both encodings, through the real pipeline: a
real Kafka broker, the stream worker and the sink into a real ClickHouse engine (chDB).

The Collector itself is not run here (building it with its builder is too slow for this
machine; docs/decisions.md says so): its records are built with the official OTLP classes and
written with the exporter's record keys (none by default; the trace id with
``partition_traces_by_id``) and no headers (it sets none unless configured). Every OTLP record
mixes two jobs, as a Collector batch does. The same spans and log lines also go the project's
own way (span/1 events on the raw topic; the NCCL log collector reading the lines from files),
and the stored rows are compared.

The default OTLP topic names are shared by every test namespace of a broker, so the test empties
them (Kafka's DeleteRecords) before and after its run: no other test's worker sees its records.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.collectors.nccl_log import NcclLogCollectorConfig, create_nccl_log_collector
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event
from rankscope.schemas.topics import DEFAULT_OTLP_LOGS_TOPICS, DEFAULT_OTLP_TRACES_TOPICS
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.streams.otlp import decode_otlp_traces
from rankscope.streams.otlp.logs import decode_otlp_logs
from tests.conftest import Services
from tests.factories import NOW_NS
from tests.otlp_payloads import DATA, data_lines, encode, log_lines, logs, resource, span, traces

SPANS, LOGS = DEFAULT_OTLP_TRACES_TOPICS[0], DEFAULT_OTLP_LOGS_TOPICS[0]
# two jobs whose keys the worker's producer (aiokafka's murmur2 partitioner) puts on different
# partitions of a two-partition events topic; the test checks that it did
JOB_A, JOB_B = "train-a", "train-b"
NODE_A, NODE_B = "gpu-a03", "gpu-b07"
# trace id blocks: which path each stored span came by
PROTO, JSON_, OURS, AFTER_BAD = 0x1000, 0x2000, 0x3000, 0x4000
T0 = NOW_NS - 120 * 10**9


def _traces(block: int) -> bytes:
    """Two spans of each job in one TracesData (a Collector batch mixing jobs)."""
    return encode(
        traces(
            (
                resource(rankscope__job_id=JOB_A, rankscope__rank=0, k8s__node__name=NODE_A),
                [span(block + 1, block + 1, T0, step=1), span(block + 1, block + 2, T0, step=2)],
            ),
            (
                resource(rankscope__job_id=JOB_B, rankscope__rank=1, k8s__node__name=NODE_B),
                [span(block + 2, block + 3, T0, step=1), span(block + 2, block + 4, T0, step=2)],
            ),
        ),
        "otlp_proto",
    )


def _traces_json(block: int) -> bytes:
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    return encode(TracesData.FromString(_traces(block)), "otlp_json")


@dataclass(frozen=True)
class LogFiles:
    a: Path
    b: Path


def _logs(files: LogFiles, observed_ns: int, encoding: str) -> bytes:
    res_a = resource(
        rankscope__job_id=JOB_A, rankscope__rank=0, k8s__node__name=NODE_A, k8s__cluster__name="c1"
    )
    res_b = resource(
        rankscope__job_id=JOB_B, rankscope__rank=1, k8s__node__name=NODE_B, k8s__cluster__name="c1"
    )
    data = logs(
        (res_a, log_lines(data_lines("rank0.log"), observed_ns, **{"log.file.path": str(files.a)})),
        (res_b, log_lines(data_lines("rank1.log"), observed_ns, **{"log.file.path": str(files.b)})),
    )
    return encode(data, encoding)  # type: ignore[arg-type]


def _agent_events(files: LogFiles) -> list[Event]:
    """The same lines read by the agent's NCCL log collector on each job's node."""
    out: list[Event] = []
    for path, node, job, rank in ((files.a, NODE_A, JOB_A, 0), (files.b, NODE_B, JOB_B, 1)):
        jobs = JobRegistry(default_job_id=job)
        jobs.bind_gpu(4, JobBinding(job, rank=rank))  # NCCL's [4] is this rank's GPU
        collector = create_nccl_log_collector(
            NcclLogCollectorConfig(paths=[str(path)], from_start=True),
            EventFactory("c1", node, jobs=jobs),
        )
        out += collector.poll(NOW_NS)
    return out


def _empty_default_topics(bootstrap: str) -> None:
    """DeleteRecords up to the end of the shared default OTLP topics."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"x{uuid.uuid4().hex}"})
    try:
        tps = []
        for topic in (SPANS, LOGS):
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            for p in meta.partitions if meta and not meta.error else ():
                end = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                tps.append(TopicPartition(topic, p, end))
        if tps:
            for fut in admin.delete_records(tps).values():
                fut.result(30)
    finally:
        consumer.close()


def _events_records(cfg: PipelineConfig) -> list[tuple[int, bytes | None, list[dict[str, object]]]]:
    """Every record of the events topic: (partition, key, events)."""
    consumer = Consumer(
        {"bootstrap.servers": cfg.bootstrap, "group.id": "test-read", "enable.auto.commit": False}
    )
    out = []
    try:
        topic = cfg.topics.events
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            end = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            consumer.assign([TopicPartition(topic, p, 0)])
            got = 0
            deadline = time.monotonic() + 30
            while got < end and time.monotonic() < deadline:
                msg = consumer.poll(1)
                if msg is None or msg.error():
                    continue
                out.append((p, msg.key(), json.loads(msg.value())))
                got += 1
            assert got == end, f"read {got} of {end} records of {topic}[{p}]"
    finally:
        consumer.close()
    return out


@dataclass(frozen=True)
class Run:
    cfg: PipelineConfig
    log_ids: dict[str, set[str]]  # path -> event ids of its comm_events
    events: list[tuple[int, bytes | None, list[dict[str, object]]]]


@pytest.fixture(scope="module")
def run(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tag = f"t{uuid.uuid4().hex[:10]}"
    home = tmp_path_factory.mktemp("otlp")
    cfg = PipelineConfig(
        bootstrap=services.bootstrap,
        clickhouse_url=services.clickhouse_url,
        topic_prefix=tag,
        database=tag,
        home=home / "home",
    )
    create_pipeline_topics(cfg.bootstrap, cfg.topics, partitions=2)
    migrate(connect(cfg.clickhouse_url), cfg.database)
    _empty_default_topics(cfg.bootstrap)
    files = LogFiles(home / "a" / "rank0.log", home / "b" / "rank1.log")
    for path, name in ((files.a, "rank0.log"), (files.b, "rank1.log")):
        path.parent.mkdir()
        path.write_text((DATA / name).read_text())

    obs_proto, obs_json = NOW_NS - 60 * 10**9, NOW_NS - 59 * 10**9
    logs_proto = _logs(files, obs_proto, "otlp_proto")
    logs_json = _logs(files, obs_json, "otlp_json")
    agent = _agent_events(files)
    ours, _ = decode_otlp_traces(_traces(OURS), cluster_default="otel")
    try:
        raw = Producer({"bootstrap.servers": cfg.bootstrap})
        # the kafkaexporter's defaults: no key, no headers
        raw.produce(SPANS, value=_traces(PROTO))
        raw.produce(SPANS, value=_traces_json(JSON_), key=f"{JSON_ + 1:032x}".encode())
        raw.produce(LOGS, value=logs_proto)
        raw.produce(LOGS, value=logs_json)
        # bad records, then a good one on the same partition: the stage goes on
        raw.produce(SPANS, value=b"\xff\x00 definitely not protobuf", partition=0)
        raw.produce(LOGS, value=b'{"schema": "comm_event/1", "kind": "comm_event"}', partition=0)
        raw.produce(SPANS, value=_traces(AFTER_BAD), partition=0)
        assert raw.flush(30) == 0
        with Publisher(PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=tag)) as pub:
            pub.publish([*ours, *agent])
            assert pub.flush(30).events_delivered == len(ours) + len(agent)
        with Pipeline(cfg) as pipeline:
            pipeline.wait_drained(240)
        log_ids = {
            "otlp_proto": {e.event_id for e in decode_otlp_logs(logs_proto).events},
            "otlp_json": {e.event_id for e in decode_otlp_logs(logs_json).events},
            "agent": {e.event_id for e in agent},
        }
        yield Run(cfg, log_ids, _events_records(cfg))
    finally:
        _empty_default_topics(cfg.bootstrap)


def _rows(cfg: PipelineConfig, table: str, where: str, drop: str) -> list[tuple[object, ...]]:
    client = connect(cfg.clickhouse_url)
    rows = client.query(
        f"SELECT * EXCEPT ({drop}) FROM {cfg.database}.{table} FINAL WHERE {where}"
    ).result_rows
    return sorted(rows, key=repr)


SPAN_IDS = "event_id, trace_id, span_id, parent_span_id, observed_ts_ns, ingested_at"


def _block(block: int) -> str:
    return f"startsWith(trace_id, '{f'{block:032x}'[:29]}')"


def test_spans_in_both_encodings_are_stored_like_our_own(run: Run) -> None:
    ours = _rows(run.cfg, "spans", _block(OURS), SPAN_IDS)
    assert len(ours) == 4
    assert {(r[2], r[4]) for r in ours} == {(JOB_A, 0), (JOB_B, 1)}  # job_id, rank
    assert _rows(run.cfg, "spans", _block(PROTO), SPAN_IDS) == ours
    assert _rows(run.cfg, "spans", _block(JSON_), SPAN_IDS) == ours
    assert _rows(run.cfg, "spans", _block(AFTER_BAD), SPAN_IDS) == ours  # after the bad ones


def test_nccl_lines_in_both_encodings_are_stored_like_the_agents(run: Run) -> None:
    drop = "event_id, ts, ts_ns, observed_ts_ns, ingested_at"

    def rows(source: str) -> list[tuple[object, ...]]:
        ids = ", ".join(f"'{i}'" for i in sorted(run.log_ids[source]))
        return _rows(run.cfg, "comm_events", f"event_id IN ({ids})", drop)

    agent = rows("agent")
    assert len(agent) == 4  # 2 lines of rank 0, 2 of rank 1; the INFO and progress lines dropped
    assert rows("otlp_proto") == agent
    assert rows("otlp_json") == agent
    client = connect(run.cfg.clickhouse_url)
    total = client.query(f"SELECT count() FROM {run.cfg.database}.comm_events FINAL").result_rows
    assert total[0][0] == 12


def test_a_batch_mixing_two_jobs_lands_on_both_jobs_partitions(run: Run) -> None:
    partitions: dict[str, set[int]] = {}
    for partition, key, events in run.events:
        jobs = {str(e["job_id"]) for e in events}
        assert len(jobs) == 1, f"an events record mixes jobs {jobs}"
        (job,) = jobs
        assert key == job.encode()  # keyed by its own job, never by the Collector's key
        partitions.setdefault(job, set()).add(partition)
    assert set(partitions) == {JOB_A, JOB_B}
    # one partition per job, the same for OTLP records and the project's own; two jobs, two
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert partitions[JOB_A] != partitions[JOB_B]
    otlp_records = [r for r in run.events if any(e["kind"] == "span" for e in r[2])]
    assert len(otlp_records) >= 2 * 4  # 4 span records (3 OTLP + ours), each split in two


def test_corrupt_and_non_otlp_records_are_dead_letters_with_a_reason(run: Run) -> None:
    client = connect(run.cfg.clickhouse_url)
    dead = client.query(
        f"SELECT source_topic, reason_code, reason FROM {run.cfg.database}.deadletter FINAL "
        "ORDER BY source_topic"
    ).result_rows
    assert [(d[0], d[1]) for d in dead] == [(LOGS, "not_an_event"), (SPANS, "not_an_event")]
    assert "not an OTLP logs message: no resource_logs" in dead[0][2]
    assert "not an OTLP traces message: neither otlp_json" in dead[1][2]
