"""``<p>.windows`` records: one per job and close, a JSON array of its ranks' windows.

A close emits one window per rank; sent one record each they were the worker's most numerous
output. The sink reads the arrays and, for a log retained from before, single windows too.
Real broker and ClickHouse engine for the sink's part.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from rankscope.kafka_admin import create_pipeline_topics
from rankscope.schemas.derived import RANK_WINDOWS_ADAPTER, RankWindow, dump_rank_windows
from rankscope.schemas.topics import Topics
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.kafka_sink import ClickHouseSink, SinkConfig
from rankscope.streams.stages import windows as windows_stage
from rankscope.streams.stages.shared import StageCounters
from tests.conftest import Services
from tests.factories import NOW_NS

S = 10**9


def _window(job: str, rank: int, start_s: int = 0) -> RankWindow:
    start = NOW_NS + start_s * S
    return RankWindow(
        window_id=RankWindow.make_id(job, rank, start),
        cluster="c1",
        job_id=job,
        rank=rank,
        node=f"node{rank // 8:03d}",
        window_start_ns=start,
        window_end_ns=start + 5 * S,
        step_count=3,
        step_time_mean_s=1.25,
        step_time_max_s=1.5 + rank / 100,
        gpu_util_mean_pct=None,
        gpu_sample_count=5,
        event_count=40,
        emitted_ts=start + 8 * S,
    )


def test_the_record_is_the_list_serializers_bytes_and_parses_back() -> None:
    windows = [_window("job-a", r) for r in range(5)]
    value = dump_rank_windows(windows)
    assert value == RANK_WINDOWS_ADAPTER.dump_json(windows)
    assert RANK_WINDOWS_ADAPTER.validate_json(value) == windows
    assert dump_rank_windows([]) == b"[]"


class _Topic:
    """Stands in for the faust topic: keeps what was sent, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes]] = []

    async def send(self, *, key: bytes, value: bytes) -> None:
        self.sent.append((key, value))


class _Stage:
    """The attributes ``WindowsStage.emit`` reads."""

    def __init__(self) -> None:
        self.counters = StageCounters()
        self.topics: Any = type("Topics", (), {"windows": _Topic()})()


def test_a_close_sends_one_record_per_job_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows_stage, "WINDOWS_PER_RECORD", 3)
    stage = _Stage()
    closed = [_window("job-a", r) for r in range(7)] + [_window("job-b", r) for r in range(2)]
    closed.insert(2, _window("job-b", 9))  # jobs interleave in what the aggregator closes
    asyncio.run(windows_stage.WindowsStage.emit(stage, closed))  # type: ignore[arg-type]
    sent = stage.topics.windows.sent
    assert [(key, len(RANK_WINDOWS_ADAPTER.validate_json(v))) for key, v in sent] == [
        (b"job-a", 3),
        (b"job-a", 3),
        (b"job-a", 1),
        (b"job-b", 3),
    ]
    received = [w for _, v in sent for w in RANK_WINDOWS_ADAPTER.validate_json(v)]
    assert sorted(received, key=lambda w: w.window_id) == sorted(closed, key=lambda w: w.window_id)
    assert stage.counters.windows_emitted == len(closed)


def test_the_sink_stores_arrays_and_single_windows_and_dead_letters_a_bad_array(
    services: Services,
) -> None:
    prefix = f"w{uuid.uuid4().hex[:10]}"
    database = f"w{uuid.uuid4().hex[:10]}"
    migrate(connect(services.clickhouse_url), database)
    topics = Topics(prefix)
    create_pipeline_topics(services.bootstrap, topics, partitions=1)
    batched = [_window("job-a", r) for r in range(64)]
    single = _window("job-old", 3, start_s=5)  # written before windows were batched
    bad = json.loads(dump_rank_windows([_window("job-c", 1)]))
    bad[0]["step_count"] = -1
    producer = Producer({"bootstrap.servers": services.bootstrap})
    producer.produce(topics.windows, key=b"job-a", value=dump_rank_windows(batched))
    producer.produce(topics.windows, key=b"job-old", value=single.model_dump_json().encode())
    producer.produce(topics.windows, key=b"job-c", value=json.dumps(bad).encode())
    assert producer.flush(30) == 0

    sink = ClickHouseSink(
        SinkConfig(
            bootstrap=services.bootstrap,
            clickhouse_url=services.clickhouse_url,
            database=database,
            topic_prefix=prefix,
            group_id=f"{prefix}-sink",
            max_batch_latency_s=0.2,
        )
    )
    deadline = time.monotonic() + 60
    sink.run(until=lambda: sink.stats.commits >= 1 or time.monotonic() > deadline)
    assert sink.stats.records == 3, sink.stats
    client = connect(services.clickhouse_url)
    stored = client.query(
        f"SELECT job_id, rank, step_time_max_s FROM {database}.rank_windows FINAL "
        "ORDER BY job_id, rank"
    ).result_rows
    expected = [(w.job_id, w.rank, w.step_time_max_s) for w in [*batched, single]]
    assert stored == sorted(expected)
    letters = client.query(
        f"SELECT reason_code, reason, source_topic FROM {database}.deadletter FINAL"
    ).result_rows
    assert len(letters) == 1 and letters[0][2] == topics.windows, letters
    assert "rank_windows record: 1 errors" in letters[0][1], letters
