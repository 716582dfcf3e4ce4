"""The ClickHouse sink: Kafka (its own consumer group) -> batched, idempotent ClickHouse writes.

Offsets are committed only after every row consumed so far is in ClickHouse. A crash between
the write and the commit re-delivers the batch; the tables' ReplacingMergeTree keys (ending in
the event id) make the second copy invisible to ``FINAL`` queries and collapse it on merge.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import orjson
from clickhouse_connect.driver.exceptions import DatabaseError
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pydantic import BaseModel, Field, ValidationError

from rankscope.kafka_security import KafkaSecurity, check_access, kafka_config
from rankscope.schemas.derived import (
    DeadLetter,
    Detection,
    Incident,
    LateEvent,
    QuarantinedEvent,
    RankWindow,
    RecoveryEvent,
    RedactionAudit,
)
from rankscope.schemas.events import EVENT_LIST_ADAPTER
from rankscope.schemas.topics import DEFAULT_PREFIX, Topics
from rankscope.sinks.access import url_for
from rankscope.sinks.clickhouse import Migration, connect, migrate, pending_migrations
from rankscope.sinks.rows import (
    AUDIT_TABLE,
    DEADLETTER_TABLE,
    DETECTION_TABLE,
    INCIDENT_TABLE,
    LATE_TABLE,
    QUARANTINE_TABLE,
    RECOVERY_TABLE,
    WINDOW_TABLE,
    Row,
    TableSpec,
    event_spec,
    fast_row,
)

log = logging.getLogger("rankscope.sink")


def _unmigrated(database: str, pending: list[Migration]) -> str:
    return (
        f"ClickHouse database {database!r} lacks migrations {[m.name for m in pending]} and "
        "this login may not apply them: run `rankscope migrate` (as admin) first"
    )


class SinkConfig(BaseModel):
    bootstrap: str
    clickhouse_url: str
    database: str = "rankscope"
    topic_prefix: str = DEFAULT_PREFIX
    group_id: str = "rankscope-sink"
    max_batch_rows: int = Field(default=50_000, gt=0)
    max_batch_latency_s: float = Field(default=1.0, gt=0)
    insert_retries: int = Field(default=5, ge=0)
    migrate: bool = True
    consumer_extra: dict[str, str] = Field(default_factory=dict)
    security: KafkaSecurity | None = Field(
        default=None, description="TLS/SASL; None: the RANKSCOPE_KAFKA_* environment's."
    )

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)


@dataclass
class SinkStats:
    records: int = 0
    rows_written: int = 0
    batches: int = 0
    commits: int = 0
    decode_errors: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)


class _Buffers:
    def __init__(self) -> None:
        self.rows: dict[str, tuple[TableSpec, list[Row]]] = {}
        self.count = 0

    def add(self, spec: TableSpec, row: Row) -> None:
        entry = self.rows.get(spec.table)
        if entry is None:
            entry = self.rows[spec.table] = (spec, [])
        entry[1].append(row)
        self.count += 1

    def clear(self) -> None:
        self.rows.clear()
        self.count = 0


class ClickHouseSink:
    """Consume the derived topics and write them to ClickHouse; one instance per process."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.stats = SinkStats()
        # the writer's login when one is configured (RANKSCOPE_CLICKHOUSE_WRITER_*) and the URL
        # names none. A writer may not run DDL: migrations run here only while some are
        # pending (a fresh local database); otherwise `rankscope migrate` (admin) does them.
        url = url_for(config.clickhouse_url, "writer")
        self._client = connect(url)
        log.info("ClickHouse login: %s", urlsplit(url).username or "the server's default user")
        pending = pending_migrations(self._client, config.database)
        if pending:
            if not config.migrate:
                raise RuntimeError(_unmigrated(config.database, pending))
            try:
                migrate(self._client, config.database)
            except DatabaseError as exc:
                if "ACCESS_DENIED" not in str(exc):
                    raise
                raise RuntimeError(_unmigrated(config.database, pending)) from exc
        topics = config.topics
        self._decoders: dict[str, Callable[[Message], None]] = {
            topics.events: self._decode_events,
            topics.windows: self._decode_model(RankWindow, WINDOW_TABLE),
            topics.late: self._decode_model(LateEvent, LATE_TABLE),
            topics.deadletter: self._decode_model(DeadLetter, DEADLETTER_TABLE),
            topics.detections: self._decode_model(Detection, DETECTION_TABLE),
            topics.incidents: self._decode_model(Incident, INCIDENT_TABLE),
            topics.quarantine: self._decode_model(QuarantinedEvent, QUARANTINE_TABLE),
            topics.redaction_audit: self._decode_model(RedactionAudit, AUDIT_TABLE),
            topics.recovery: self._decode_model(RecoveryEvent, RECOVERY_TABLE),
        }
        consumer_conf: dict[str, Any] = {
            **kafka_config(config.bootstrap, config.security),
            "group.id": config.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": True,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "partition.assignment.strategy": "cooperative-sticky",
            # a crashed sink's partitions move to another after 10 s, not librdkafka's 45 s;
            # heartbeats come from librdkafka's own thread, so a slow insert does not miss them
            # (max.poll.interval.ms bounds that instead)
            "session.timeout.ms": 10_000,
            **config.consumer_extra,
        }
        self._consumer = Consumer(consumer_conf)
        self._buffers = _Buffers()
        self._stop = False
        self._last_flush = time.monotonic()

    # -- decoding ------------------------------------------------------------------------
    def _decode_events(self, msg: Message) -> None:
        value = msg.value() or b""
        try:
            docs = orjson.loads(value)
            rows = [fast_row(d) for d in (docs if isinstance(docs, list) else [docs])]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            rows = None  # not what the validate stage writes: take the validating path
        if rows is not None:
            for spec, row in rows:
                self._buffers.add(spec, row)
            return
        try:
            events = EVENT_LIST_ADAPTER.validate_json(value)
        except ValidationError as exc:
            self._undecodable(
                msg, f"sink could not decode events record: {exc.error_count()} errors"
            )
            return
        for ev in events:
            spec = event_spec(ev)
            self._buffers.add(spec, spec.to_row(ev))

    def _decode_model(self, model: type[BaseModel], spec: TableSpec) -> Callable[[Message], None]:
        def decode(msg: Message) -> None:
            try:
                rec = model.model_validate_json(msg.value() or b"")
            except ValidationError as exc:
                self._undecodable(
                    msg, f"sink could not decode {spec.table} record: {exc.error_count()} errors"
                )
                return
            self._buffers.add(spec, spec.to_row(rec))

        return decode

    def _undecodable(self, msg: Message, reason: str) -> None:
        """A record on a derived topic that is not what the workers write: keep a trace of it
        in the dead-letter table instead of crashing or dropping it."""
        import hashlib

        self.stats.decode_errors += 1
        raw = msg.value() or b""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        dead = DeadLetter(
            dead_letter_id=DeadLetter.make_id(topic, partition, offset, -1),
            reason_code="invalid_event",
            reason=reason,
            source_topic=topic,
            partition=partition,
            offset=offset,
            size_bytes=len(raw),
            sha256=hashlib.sha256(raw).hexdigest(),
            received_ts=time.time_ns(),
        )
        self._buffers.add(DEADLETTER_TABLE, DEADLETTER_TABLE.to_row(dead))

    # -- writing -------------------------------------------------------------------------
    def _insert(self, spec: TableSpec, rows: list[Row]) -> None:
        table = f"{self.config.database}.{spec.table}"
        for attempt in range(self.config.insert_retries + 1):
            try:
                self._client.insert(table, rows, column_names=spec.columns)
                return
            except Exception:
                if attempt >= self.config.insert_retries:
                    raise
                delay = min(10.0, 0.2 * 2**attempt)
                log.warning("insert into %s failed; retry %d in %.1fs", table, attempt + 1, delay)
                time.sleep(delay)

    def flush(self) -> None:
        """Write every buffered row, then commit the consumed offsets (never the other way)."""
        if self._buffers.count:
            for spec, rows in self._buffers.rows.values():
                self._insert(spec, rows)
                self.stats.rows_by_table[spec.table] = self.stats.rows_by_table.get(
                    spec.table, 0
                ) + len(rows)
            self.stats.rows_written += self._buffers.count
            self.stats.batches += 1
            self._buffers.clear()
            try:
                self._consumer.commit(asynchronous=False)
                self.stats.commits += 1
            except Exception as exc:  # nothing to commit yet, or a rebalance: re-read is safe
                if not (isinstance(exc.args[0], KafkaError) and exc.args[0].code() == -168):
                    log.warning("offset commit failed (records will be re-read): %s", exc)
        self._last_flush = time.monotonic()

    # -- loop ----------------------------------------------------------------------------
    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.flush()

    def stop(self) -> None:
        self._stop = True

    def poll_once(self, timeout_s: float = 0.2) -> int:
        msgs = self._consumer.consume(num_messages=2000, timeout=timeout_s)
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error: %s", err)
                continue
            self.stats.records += 1
            decoder = self._decoders.get(msg.topic() or "")
            if decoder is not None:
                decoder(msg)
        due = time.monotonic() - self._last_flush >= self.config.max_batch_latency_s
        if self._buffers.count >= self.config.max_batch_rows or (
            self._buffers.count and (due or not msgs)
        ):
            self.flush()
        return len(msgs)

    def run(self, until: Callable[[], bool] | None = None) -> SinkStats:
        self._consumer.subscribe(list(self._decoders), on_revoke=self._on_revoke)
        try:
            while not self._stop and not (until and until()):
                self.poll_once()
            self.flush()
        finally:
            self._consumer.close()
        return self.stats


def run_sink(config: SinkConfig) -> SinkStats:
    """Run in the foreground until SIGTERM/SIGINT (what ``rankscope sink`` does)."""
    check_access(config.bootstrap, config.security)  # a refused login: one line, not retries
    sink = ClickHouseSink(config)

    def _handle(signum: int, frame: FrameType | None) -> None:
        sink.stop()

    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    return sink.run()
