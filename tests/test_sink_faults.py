"""The sink cannot be wedged (issue 15): rows ClickHouse refuses are isolated and dead-lettered,
inserts that span too many partitions are split, and a ClickHouse outage pauses the sink instead
of ending it. Real broker, real engine (a private one where the test stops it)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.exceptions import OperationalError
from confluent_kafka import Producer

from rankscope.kafka_admin import create_pipeline_topics
from rankscope.schemas.events import dump_event, dump_events
from rankscope.schemas.topics import Topics
from rankscope.services.clickhouse_local import LocalClickHouse
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.event_tables import EVENT_TABLES
from rankscope.sinks.kafka_sink import ClickHouseSink, SinkConfig
from rankscope.sinks.writer import ClickHouseUnavailable, classify, write_rows
from tests.conftest import Services
from tests.factories import NOW_NS, span

SPANS = next(s for s in EVENT_TABLES.values() if s.table == "spans")
RANK = SPANS.columns.index("rank")
TS = SPANS.columns.index("ts_ns")
DAY_NS = 86_400 * 10**9


@pytest.fixture
def database(services: Services) -> Iterator[str]:
    name = f"w{uuid.uuid4().hex[:10]}"
    migrate(connect(services.clickhouse_url), name)
    yield name


def _rows(n: int, job: str = "job-w") -> list[list[Any]]:
    return [SPANS.to_row(span(i % 64, NOW_NS + i, step=i, job=job)) for i in range(n)]


def _counting_insert(client: Any, database: str, calls: list[int]) -> Any:
    def insert(rows: Sequence[Any]) -> None:
        calls.append(len(rows))
        client.insert(f"{database}.spans", rows, column_names=SPANS.columns)

    return insert


def test_refused_rows_are_isolated_by_bisection(services: Services, database: str) -> None:
    client = connect(services.clickhouse_url)
    rows = _rows(200)
    rows[37][RANK] = 2**40  # past Int32: the client cannot serialise it
    rows[150][RANK] = "seven"  # not a number at all
    calls: list[int] = []
    refused = write_rows(_counting_insert(client, database, calls), rows)
    assert [r.position for r in refused] == [37, 150]
    assert all(r.error for r in refused)
    stored = client.query(f"SELECT count() FROM {database}.spans FINAL").result_rows[0][0]
    assert stored == 198
    # k refused rows in n cost at most 1 + 2k*ceil(log2 n) inserts, not n
    assert len(calls) <= 1 + 2 * 2 * 8


def test_an_insert_over_the_partition_limit_is_split_not_refused(
    services: Services, database: str
) -> None:
    client = connect(services.clickhouse_url)
    rows = _rows(400)
    for i, row in enumerate(rows):  # 200 days: twice ClickHouse's 100 partitions per insert
        row[TS] = NOW_NS - (i % 200) * DAY_NS
    calls: list[int] = []
    assert write_rows(_counting_insert(client, database, calls), rows) == []
    days = client.query(
        f"SELECT uniqExact(toDate(ts)), count() FROM {database}.spans FINAL"
    ).result_rows[0]
    assert days == (200, 400)
    assert calls[0] == 400 and len(calls) > 1


def test_a_server_that_is_not_there_is_unavailable_not_refused(
    services: Services, database: str
) -> None:
    client = connect(services.clickhouse_url)

    def missing_table(rows: Sequence[Any]) -> None:
        client.insert(f"{database}.no_such_table", rows, column_names=SPANS.columns)

    with pytest.raises(ClickHouseUnavailable):
        write_rows(missing_table, _rows(3))
    assert classify(OperationalError("connection refused")) == "unavailable"
    assert classify(ValueError("invalid literal for int()")) == "refused"


def _sink_config(services: Services, prefix: str, database: str, url: str) -> SinkConfig:
    return SinkConfig(
        bootstrap=services.bootstrap,
        clickhouse_url=url,
        database=database,
        topic_prefix=prefix,
        group_id=f"{prefix}-sink",
        max_batch_latency_s=0.2,
        outage_max_backoff_s=2.0,
        status_every_s=0.5,
        # a sink that stopped polling during the outage would be dropped from its group
        consumer_extra={"max.poll.interval.ms": "15000"},
    )


def _count(url: str, sql: str) -> int:
    try:
        return int(connect(url, send_receive_timeout=10).query(sql).result_rows[0][0])
    except Exception:
        return -1


def _run_sink(config: SinkConfig) -> tuple[ClickHouseSink, threading.Thread, list[BaseException]]:
    sink = ClickHouseSink(config)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            sink.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return sink, thread, errors


def test_a_refused_row_is_dead_lettered_and_the_sink_moves_on(
    services: Services, database: str
) -> None:
    prefix = f"w{uuid.uuid4().hex[:10]}"
    topics = Topics(prefix)
    create_pipeline_topics(services.bootstrap, topics, partitions=1)
    before = [span(r, NOW_NS + r, job="wedge") for r in range(30)]
    after = [span(r, NOW_NS + 100 + r, job="wedge", step=2) for r in range(30)]
    hostile = json.loads(dump_event(span(5, NOW_NS + 50, job="wedge", step=3)))
    hostile["rank"] = 2**40  # on the events topic no schema guards it: only the sink can
    producer = Producer({"bootstrap.servers": services.bootstrap})
    producer.produce(topics.events, key=b"wedge", value=dump_events(before))
    producer.produce(topics.events, key=b"wedge", value=json.dumps([hostile]).encode())
    producer.produce(topics.events, key=b"wedge", value=dump_events(after))
    assert producer.flush(30) == 0

    config = _sink_config(services, prefix, database, services.clickhouse_url)
    url = services.clickhouse_url
    sink, thread, errors = _run_sink(config)
    try:
        deadline = time.monotonic() + 90
        while _count(url, f"SELECT count() FROM {database}.spans FINAL") < 60 or (
            _count(url, f"SELECT count() FROM {database}.deadletter FINAL") < 1
        ):
            assert thread.is_alive(), errors
            assert time.monotonic() < deadline, sink.stats
            time.sleep(0.2)
        while sink.stats.commits < 1 or sink.stats.records < 3:
            assert time.monotonic() < deadline, sink.stats
            time.sleep(0.1)
        # the status line the sink logs (every 0.5 s here, once a minute by default)
        while "lag 0 records" not in sink.last_status or "(1 refused" not in sink.last_status:
            assert time.monotonic() < deadline, sink.last_status
            time.sleep(0.1)
        status = sink.last_status
    finally:
        sink.stop()
        thread.join(30)
    assert not errors
    client = connect(url)
    letter = client.query(
        f"SELECT reason_code, reason, event_id, source_topic, index_in_batch "
        f"FROM {database}.deadletter FINAL"
    ).result_rows
    assert letter == [("store_refused", letter[0][1], hostile["event_id"], topics.events, 0)], (
        letter
    )
    assert "table spans" in letter[0][1]
    assert sink.stats.rows_refused == 1
    assert "3 records read" in status and "(1 refused" in status, status
    assert status.endswith("lag 0 records"), status

    # the offsets moved on: a second sink in the same group finds nothing to read again
    again = ClickHouseSink(config)
    quiet_until = time.monotonic() + 8
    again.run(until=lambda: again.stats.records > 0 or time.monotonic() > quiet_until)
    assert again.stats.records == 0


@pytest.fixture
def private_clickhouse(tmp_path: Path) -> Iterator[LocalClickHouse]:
    server = LocalClickHouse(tmp_path / "ch").start()
    try:
        yield server
    finally:
        server.stop()


OUTAGE_S = 120.0


def test_clickhouse_down_two_minutes_while_events_flow_loses_and_duplicates_nothing(
    services: Services, private_clickhouse: LocalClickHouse
) -> None:
    ch = private_clickhouse
    prefix = f"w{uuid.uuid4().hex[:10]}"
    database = prefix
    topics = Topics(prefix)
    create_pipeline_topics(services.bootstrap, topics, partitions=2)
    migrate(connect(ch.url), database)
    config = _sink_config(services, prefix, database, ch.url)
    producer = Producer({"bootstrap.servers": services.bootstrap})
    batches = [
        [span(r, NOW_NS + b * 1000 + r, step=b, job="outage") for r in range(50)] for b in range(40)
    ]

    def produce(part: list[list[Any]]) -> None:
        for batch in part:
            producer.produce(topics.events, key=b"outage", value=dump_events(batch))
        assert producer.flush(30) == 0

    sink, thread, errors = _run_sink(config)
    restarted: LocalClickHouse | None = None
    try:
        produce(batches[:10])
        deadline = time.monotonic() + 60
        while _count(ch.url, f"SELECT count() FROM {database}.spans FINAL") < 500:
            assert thread.is_alive() and time.monotonic() < deadline, (errors, sink.stats)
            time.sleep(0.2)
        ch.stop()
        down_at = time.monotonic()
        for i in range(10, 30, 5):  # events keep coming while ClickHouse is away
            produce(batches[i : i + 5])
            time.sleep(OUTAGE_S / 5)
        while time.monotonic() - down_at < OUTAGE_S:
            assert thread.is_alive(), errors
            time.sleep(1)
        assert sink.stats.outages >= 1
        restarted = LocalClickHouse(ch.data_dir, port=ch.port).start()
        produce(batches[30:])
        deadline = time.monotonic() + 120
        while _count(ch.url, f"SELECT count() FROM {database}.spans FINAL") < 2000:
            assert thread.is_alive(), errors
            assert time.monotonic() < deadline, sink.stats
            time.sleep(0.5)
        client = connect(ch.url)
        distinct, visible = client.query(
            f"SELECT uniqExact(event_id), (SELECT count() FROM {database}.spans FINAL) "
            f"FROM {database}.spans"
        ).result_rows[0]
    finally:
        sink.stop()
        thread.join(60)
        if restarted is not None:
            restarted.stop()
    assert not errors, errors
    assert (distinct, visible) == (2000, 2000)
    assert sink.stats.outage_s >= OUTAGE_S * 0.9
