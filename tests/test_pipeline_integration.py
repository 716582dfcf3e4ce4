"""The whole path on a real broker and a real ClickHouse engine, each stage its own process."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import dump_event, dump_events
from rankscope.sinks.clickhouse import connect
from tests.factories import NOW_NS, gpu_sample, heartbeat, span

TEN_YEARS_NS = int(10 * 365.25 * 86400 * 1e9)


def _count(cfg: PipelineConfig, table: str, where: str = "1") -> int:
    client = connect(cfg.clickhouse_url)
    return int(
        client.query(f"SELECT count() FROM {cfg.database}.{table} FINAL WHERE {where}").result_rows[
            0
        ][0]
    )


def test_bad_input_is_dead_lettered_and_neighbours_are_stored(
    pipeline_config: PipelineConfig,
) -> None:
    cfg = pipeline_config
    t = cfg.topics
    before = [span(r, NOW_NS + r) for r in range(20)]
    after = [gpu_sample(r, NOW_NS + 100 + r) for r in range(20)]
    missing = json.loads(dump_event(heartbeat("node001", NOW_NS)))
    del missing["payload"]["seq"]
    del missing["cluster"]
    bad = {
        "not_json": (t.raw, b"GPU0 util=97% temp=71C \x00"),
        "unknown_schema": (
            t.raw,
            json.dumps({"schema": "gpu_sample/9", "kind": "gpu_sample", "x": 1}).encode(),
        ),
        "invalid_event": (t.raw, json.dumps(missing).encode()),
        "too_large": (t.raw, b"[" + b" " * (2 * 1024 * 1024) + b"]"),
        "ts_out_of_range": (t.raw, dump_event(span(3, NOW_NS - TEN_YEARS_NS))),
    }
    # A bare producer, as a broken third-party collector would be: not the project's publisher.
    raw = Producer({"bootstrap.servers": cfg.bootstrap, "message.max.bytes": 4 * 1024 * 1024})
    raw.produce(t.raw, key=b"job-1", value=dump_events(before))
    for topic, value in bad.values():
        raw.produce(topic, key=b"job-1", value=value)
    raw.produce(t.raw, key=b"job-1", value=dump_events(after))
    assert raw.flush(30) == 0

    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(120)  # the worker joins its group (what `rankscope eval` waits for)
        pipeline.wait_drained(180)

    client = connect(cfg.clickhouse_url)
    rows = client.query(
        f"SELECT reason_code, reason, source_topic, size_bytes FROM {cfg.database}.deadletter FINAL"
    ).result_rows
    by_code = {r[0]: r for r in rows}
    assert sorted(by_code) == sorted(bad), rows
    assert len(rows) == len(bad)
    assert "not JSON" in by_code["not_json"][1]
    assert "unknown schema 'gpu_sample/9'" in by_code["unknown_schema"][1]
    assert "cluster: Field required" in by_code["invalid_event"][1]
    assert "payload.seq: Field required" in by_code["invalid_event"][1]
    assert "exceeds the 1,048,576-byte limit" in by_code["too_large"][1]
    assert by_code["too_large"][3] == 2 * 1024 * 1024 + 2
    assert "days before the record time" in by_code["ts_out_of_range"][1]
    assert by_code["ts_out_of_range"][2] == t.raw

    assert _count(cfg, "spans") == len(before)
    assert _count(cfg, "gpu_samples") == len(after)
    ids = {r[0] for r in client.query(f"SELECT event_id FROM {cfg.database}.spans").result_rows}
    assert ids == {e.event_id for e in before}


def test_sink_sigkill_mid_stream_loses_and_duplicates_nothing(
    pipeline_config: PipelineConfig,
) -> None:
    total = 100_000
    cfg = PipelineConfig(**{**pipeline_config.__dict__, "sink_max_batch_rows": 4_000})
    events = [span(i % 64, NOW_NS + i * 1000, step=i // 64, job="kill-test") for i in range(total)]
    with Publisher(PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix)) as pub:
        pub.publish(events)
        stats = pub.flush(60)
    assert stats.events_delivered == total

    client = connect(cfg.clickhouse_url)
    physical = f"SELECT count() FROM {cfg.database}.spans"
    pipeline = Pipeline(cfg)
    pipeline.start()
    try:
        deadline = time.monotonic() + 180
        while True:
            stored = int(client.query(physical).result_rows[0][0])
            if stored >= 12_000:
                break
            assert pipeline.sink.alive, pipeline.sink.log_tail()
            assert pipeline.worker.alive, pipeline.worker.log_tail()
            assert time.monotonic() < deadline, "sink never got going"
            time.sleep(0.05)
        pipeline.sink.kill()
        at_kill = int(client.query(physical).result_rows[0][0])
        assert at_kill < total, "the kill must land in the middle of the stream"
        pipeline.sink.start()
        pipeline.wait_drained(240)
    finally:
        pipeline.stop()

    distinct, visible = client.query(
        f"SELECT uniqExact(event_id), (SELECT count() FROM {cfg.database}.spans FINAL) "
        f"FROM {cfg.database}.spans"
    ).result_rows[0]
    assert distinct == total
    assert visible == total
    ids = client.query(
        f"SELECT count() FROM (SELECT event_id, count() c FROM {cfg.database}.spans FINAL "
        "GROUP BY event_id HAVING c > 1)"
    ).result_rows[0][0]
    assert ids == 0


def test_windows_reach_clickhouse_once_per_rank_and_window(
    pipeline_config: PipelineConfig,
) -> None:
    cfg = pipeline_config
    s = 10**9
    base = (NOW_NS // (5 * s)) * 5 * s - 60 * s
    steps = [span(r, base + k * s + s // 2, dur_s=1.0, step=k) for k in range(20) for r in range(4)]
    with Publisher(PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix)) as pub:
        pub.publish(steps)
        pub.flush(30)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_drained(180)
    client = connect(cfg.clickhouse_url)
    rows = client.query(
        f"SELECT rank, count(), sum(step_count), uniqExact(window_start_ns) "
        f"FROM {cfg.database}.rank_windows FINAL GROUP BY rank ORDER BY rank"
    ).result_rows
    assert rows == [(r, 4, 20, 4) for r in range(4)]


def test_otlp_spans_from_an_otel_collector_are_stored_like_our_own(
    pipeline_config: PipelineConfig,
) -> None:
    """An OTel Collector's Kafka exporter writes OTLP protobuf; it joins the same path."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, TracesData
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

    def kv(k: str, v: str | int) -> KeyValue:
        val = AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=v)
        return KeyValue(key=k, value=val)

    cfg = pipeline_config
    spans = [
        PbSpan(
            trace_id=bytes.fromhex(f"{step + 1:032x}"),
            span_id=bytes.fromhex(f"{rank + 1:02x}{step + 1:014x}"),
            name="train_step",
            start_time_unix_nano=NOW_NS + step * 10**9,
            end_time_unix_nano=NOW_NS + (step + 1) * 10**9,
            attributes=[kv("rankscope.phase", "step"), kv("rankscope.step", step)],
        )
        for rank in range(2)
        for step in range(5)
    ]
    data = TracesData(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[kv("host.name", "gpu-node-7"), kv("rankscope.job_id", "otel-job")]
                ),
                scope_spans=[ScopeSpans(spans=spans)],
            )
        ]
    ).SerializeToString()
    raw = Producer({"bootstrap.servers": cfg.bootstrap})
    raw.produce(cfg.topics.otlp_spans, value=data)
    raw.produce(cfg.topics.otlp_spans, value=b"\xff\x00 definitely not protobuf")
    assert raw.flush(30) == 0

    with Pipeline(cfg) as pipeline:
        pipeline.wait_drained(180)
    client = connect(cfg.clickhouse_url)
    rows = client.query(
        f"SELECT node, job_id, count(), countIf(phase = 'step') FROM {cfg.database}.spans FINAL "
        "GROUP BY node, job_id"
    ).result_rows
    assert rows == [("gpu-node-7", "otel-job", 10, 10)]
    dead = client.query(
        f"SELECT reason_code, reason FROM {cfg.database}.deadletter FINAL"
    ).result_rows
    assert len(dead) == 1 and dead[0][0] == "not_an_event"
    assert "not an OTLP traces message" in dead[0][1]
