"""The ClickHouse sink: Kafka (its own consumer group) -> batched, idempotent ClickHouse writes.

Offsets are committed only after every row consumed so far is in ClickHouse (or, refused by
ClickHouse for its data, in the dead-letter table with ClickHouse's reason). A crash between the
write and the commit re-delivers the batch; the tables' ReplacingMergeTree keys (ending in the
event id) make the second copy invisible to ``FINAL`` queries and collapse it on merge.

When ClickHouse is unavailable the sink neither exits nor holds rows: it drops its buffers,
rewinds its partitions to the committed offsets, pauses them (polling on, so it keeps its place in
the consumer group), waits for the server with jittered backoff, and resumes.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import orjson
from clickhouse_connect.driver.exceptions import DatabaseError
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from tenacity import RetryCallState, RetryError, Retrying, retry_if_result, wait_exponential_jitter

from rankscope.kafka_security import KafkaSecurity, check_access, kafka_config
from rankscope.observability.exporters import serve_sink
from rankscope.schemas.baselines import Baseline
from rankscope.schemas.derived import (
    RANK_WINDOWS_ADAPTER,
    DeadLetter,
    DeadLetterCode,
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
from rankscope.sinks.baseline_table import BASELINE_TABLE
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
from rankscope.sinks.writer import ClickHouseUnavailable, write_rows

log = logging.getLogger("rankscope.sink")

#: where a buffered row came from: topic, partition, offset, index in the record's batch
RowRef = tuple[str, int, int, int]


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
    outage_max_backoff_s: float = Field(
        default=30.0, gt=0, description="Longest wait between checks while ClickHouse is away."
    )
    status_every_s: float = Field(
        default=60.0, gt=0, description="How often a status line (rows, refusals, lag) is logged."
    )
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
    rows_refused: int = 0
    outages: int = 0
    outage_s: float = 0.0
    rows_by_table: dict[str, int] = field(default_factory=dict)
    in_outage: bool = False
    #: records behind per (topic, partition) and the poll loop's last turn (monotonic)
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    polled: float = field(default_factory=time.monotonic)
    #: the metrics histograms when exported: (table, seconds) per INSERT, rows per batch
    observe_insert: Callable[[str, float], None] = field(default=lambda table, seconds: None)
    observe_batch: Callable[[int], None] = field(default=lambda rows: None)


class _Buffers:
    def __init__(self) -> None:
        self.rows: dict[str, tuple[TableSpec, list[Row], list[RowRef]]] = {}
        self.count = 0

    def add(self, spec: TableSpec, row: Row, ref: RowRef) -> None:
        entry = self.rows.get(spec.table)
        if entry is None:
            entry = self.rows[spec.table] = (spec, [], [])
        entry[1].append(row)
        entry[2].append(ref)
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
            # one job's windows per record; one window in records from before they were batched
            topics.windows: self._decode_model(RankWindow, WINDOW_TABLE, RANK_WINDOWS_ADAPTER),
            topics.late: self._decode_model(LateEvent, LATE_TABLE),
            topics.deadletter: self._decode_model(DeadLetter, DEADLETTER_TABLE),
            topics.detections: self._decode_model(Detection, DETECTION_TABLE),
            topics.incidents: self._decode_model(Incident, INCIDENT_TABLE),
            topics.quarantine: self._decode_model(QuarantinedEvent, QUARANTINE_TABLE),
            topics.redaction_audit: self._decode_model(RedactionAudit, AUDIT_TABLE),
            topics.recovery: self._decode_model(RecoveryEvent, RECOVERY_TABLE),
            topics.baselines: self._decode_model(Baseline, BASELINE_TABLE),
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
        #: outages in a row without a stored batch between them (sets the first wait)
        self._outage_streak = 0
        self._status_due = time.monotonic() + config.status_every_s
        self._lag_due = time.monotonic()
        #: a commit after a stored batch failed (coordinator moving, broker restarting): retried
        #: on later polls while nothing is buffered, or the last batch before a quiet spell
        #: stays uncommitted (and counted as lag) until new records arrive
        self._commit_owed = False
        #: the newest status line logged (read it from any thread; ``status()`` only from the
        #: sink's own: librdkafka's consumer calls block while another thread consumes)
        self.last_status = ""

    # -- decoding ------------------------------------------------------------------------
    def _decode_events(self, msg: Message) -> None:
        value = msg.value() or b""
        topic, partition, offset = _where(msg)
        try:
            docs = orjson.loads(value)
            rows = [fast_row(d) for d in (docs if isinstance(docs, list) else [docs])]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError):
            rows = None  # not what the validate stage writes: take the validating path
        if rows is not None:
            for i, (spec, row) in enumerate(rows):
                self._buffers.add(spec, row, (topic, partition, offset, i))
            return
        try:
            events = EVENT_LIST_ADAPTER.validate_json(value)
        except ValidationError as exc:
            self._undecodable(
                msg, f"sink could not decode events record: {exc.error_count()} errors"
            )
            return
        for i, ev in enumerate(events):
            spec = event_spec(ev)
            self._buffers.add(spec, spec.to_row(ev), (topic, partition, offset, i))

    def _decode_model(
        self,
        model: type[BaseModel],
        spec: TableSpec,
        batch: TypeAdapter[list[Any]] | None = None,
    ) -> Callable[[Message], None]:
        """A derived record: one ``model``, or with ``batch`` also a JSON array of them (each
        row then referenced by its index in the record, as events are)."""

        def decode(msg: Message) -> None:
            value = msg.value() or b""
            try:
                if batch is not None and value.lstrip().startswith(b"["):
                    records = list(enumerate(batch.validate_json(value)))
                else:
                    records = [(-1, model.model_validate_json(value))]
            except ValidationError as exc:
                self._undecodable(
                    msg, f"sink could not decode {spec.table} record: {exc.error_count()} errors"
                )
                return
            where = _where(msg)
            for index, rec in records:
                self._buffers.add(spec, spec.to_row(rec), (*where, index))

        return decode

    def _undecodable(self, msg: Message, reason: str) -> None:
        """A record on a derived topic that is not what the workers write: keep a trace of it
        in the dead-letter table instead of crashing or dropping it."""
        import hashlib

        self.stats.decode_errors += 1
        raw = msg.value() or b""
        ref = (*_where(msg), -1)
        row = _letter_row(
            ref,
            "invalid_event",
            reason,
            size_bytes=len(raw),
            sha256=hashlib.sha256(raw).hexdigest(),
        )
        self._buffers.add(DEADLETTER_TABLE, row, ref)

    # -- writing -------------------------------------------------------------------------
    def _insert(self, spec: TableSpec, rows: Sequence[Row]) -> None:
        started = time.perf_counter()
        self._client.insert(f"{self.config.database}.{spec.table}", rows, column_names=spec.columns)
        self.stats.observe_insert(spec.table, time.perf_counter() - started)

    def _write(self, spec: TableSpec, rows: list[Row]) -> list[tuple[int, str]]:
        """Store ``rows``; the (position, ClickHouse's error) of each one it refused."""
        refused = write_rows(lambda chunk: self._insert(spec, chunk), rows)
        return [(r.position, r.error) for r in refused]

    def _refused_letter(self, spec: TableSpec, row: Row, ref: RowRef, error: str) -> Row:
        """The dead letter of a row ClickHouse refused: where it came from, and ClickHouse's
        reason; the row itself stays on Kafka (the source of truth)."""
        named = dict(zip(spec.columns, row, strict=True))
        ident: dict[str, str] = {
            col: str(named[col])[:256] for col in ("event_id", "job_id", "node") if col in named
        }
        reason = f"ClickHouse refused this row for table {spec.table}: {error}"
        return _letter_row(ref, "store_refused", reason, ident=ident)

    def flush(self) -> None:
        """Write every buffered row (refused ones as dead letters), then commit the consumed
        offsets (never the other way). Raises ClickHouseUnavailable with nothing committed."""
        if self._buffers.count:
            dead: list[Row] = []
            for spec, rows, refs in self._buffers.rows.values():
                refused = self._write(spec, rows)
                for position, error in refused:
                    dead.append(self._refused_letter(spec, rows[position], refs[position], error))
                stored = len(rows) - len(refused)
                self.stats.rows_by_table[spec.table] = (
                    self.stats.rows_by_table.get(spec.table, 0) + stored
                )
            if dead:
                self.stats.rows_refused += len(dead)
                log.warning("ClickHouse refused %d rows: stored as dead letters", len(dead))
                for _, error in self._write(DEADLETTER_TABLE, dead):
                    # nothing left to fall back on; the records stay on Kafka at their offsets
                    log.error("dead letter refused too (records kept on Kafka): %s", error)
            self.stats.rows_written += self._buffers.count
            self.stats.observe_batch(self._buffers.count)
            self.stats.batches += 1
            self._buffers.clear()
            self._outage_streak = 0
            self._commit()
        self._last_flush = time.monotonic()

    def _commit(self) -> None:
        """Commit the consumed offsets (every row read so far is stored); a failure is owed."""
        try:
            self._consumer.commit(asynchronous=False)
            self.stats.commits += 1
            self._commit_owed = False
        except Exception as exc:  # nothing to commit yet, or a rebalance: re-read is safe
            if isinstance(exc.args[0], KafkaError) and exc.args[0].code() == -168:
                self._commit_owed = False  # _NO_OFFSET: nothing consumed since the last commit
                return
            self._commit_owed = True
            log.warning("offset commit failed (retried; else records are re-read): %s", exc)

    def _flush_or_wait(self) -> None:
        try:
            self.flush()
        except ClickHouseUnavailable as exc:
            self._wait_for_clickhouse(str(exc))

    # -- outages -------------------------------------------------------------------------
    def _rewind(self) -> None:
        """Forget buffered rows; every assigned partition reads again from its committed offset."""
        self._buffers.clear()
        assignment = self._consumer.assignment()
        if not assignment:
            return
        for tp in self._consumer.committed(assignment, timeout=10):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def _idle(self, seconds: float) -> None:
        """Wait while staying in the consumer group: poll paused partitions. A record that
        arrives anyway (a partition assigned meanwhile) is put back for after the outage."""
        deadline = time.monotonic() + seconds
        while not self._stop and (left := deadline - time.monotonic()) > 0:
            msgs = self._consumer.consume(num_messages=500, timeout=min(left, 0.5))
            first: dict[tuple[str, int], int] = {}
            for msg in msgs:
                if msg.error() is None:
                    first.setdefault((msg.topic() or "", msg.partition() or 0), msg.offset() or 0)
            for (topic, partition), offset in first.items():
                self._consumer.seek(TopicPartition(topic, partition, offset))
            self._consumer.pause(self._consumer.assignment())

    def _clickhouse_up(self) -> bool:
        try:
            return bool(self._client.ping())
        except Exception:
            return False

    def _wait_for_clickhouse(self, reason: str) -> None:
        self.stats.outages += 1
        self.stats.in_outage = True
        self._outage_streak += 1
        started = time.monotonic()
        log.warning("ClickHouse unavailable (%s): pausing consumption, nothing is lost", reason)
        self._rewind()
        self._consumer.pause(self._consumer.assignment())
        backoff = self.config.outage_max_backoff_s
        # an outage right after the last one (the server answers pings but refuses writes)
        # starts with a longer wait, so the sink does not spin
        self._idle(min(backoff, 0.5 * 2 ** (self._outage_streak - 1)))

        def note(state: RetryCallState) -> None:
            if state.attempt_number % 5 == 0:
                log.warning(
                    "ClickHouse still unavailable after %.0f s (%d checks)",
                    time.monotonic() - started,
                    state.attempt_number,
                )

        try:
            Retrying(
                retry=retry_if_result(lambda up: not up),
                wait=wait_exponential_jitter(multiplier=0.5, max=backoff),
                stop=lambda _state: self._stop,
                sleep=self._idle,
                before_sleep=note,
            )(self._clickhouse_up)
        except RetryError:
            return  # stopping: offsets stay uncommitted, the records are read again later
        finally:
            self.stats.outage_s += time.monotonic() - started
            self.stats.in_outage = False
            self._consumer.resume(self._consumer.assignment())
        log.warning(
            "ClickHouse is back after %.0f s: resuming from the committed offsets",
            time.monotonic() - started,
        )

    # -- loop ----------------------------------------------------------------------------
    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self.flush()
        except ClickHouseUnavailable:
            self._rewind()  # the new owners read the unstored records again; we keep nothing

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
            self._flush_or_wait()
        self.stats.polled = time.monotonic()
        if self._commit_owed and not self._buffers.count and not msgs:
            self._commit()  # a quiet partition's last batch: commit once the coordinator is back
        if self.stats.polled >= self._lag_due:  # made here, on the sink's thread: see below
            self._lag_due = self.stats.polled + 1.0
            self.stats.lag = self.lag_by_partition() or {}
        if time.monotonic() >= self._status_due:
            self._status_due = time.monotonic() + self.config.status_every_s
            # made on the sink's own thread: the consumer is not safe to query from another
            self.last_status = self.status()
            log.warning("sink status: %s", self.last_status)
        return len(msgs)

    def lag(self) -> int:
        """Records on the assigned partitions not read yet (-1: unknown)."""
        by_partition = self.lag_by_partition()
        return sum(by_partition.values()) if by_partition is not None else -1

    def lag_by_partition(self) -> dict[tuple[str, int], int] | None:
        """Per (topic, partition): records not read yet (from the high watermarks the
        consumer last fetched: no request to the broker); None when unknown."""
        behind: dict[tuple[str, int], int] = {}
        try:
            assignment = self._consumer.assignment()
            for tp in self._consumer.position(assignment) if assignment else []:
                _, high = self._consumer.get_watermark_offsets(tp, cached=True)
                if high >= 0 and tp.offset >= 0:
                    behind[tp.topic, tp.partition] = max(0, high - tp.offset)
        except (RuntimeError, KafkaException):  # closed, or the broker is away
            return None
        return behind

    def status(self) -> str:
        """One line: what the sink stored, refused and waited for, and how far behind it is."""
        s = self.stats
        return (
            f"{s.records:,} records read, {s.rows_written:,} rows written in {s.batches:,} "
            f"batches ({s.rows_refused:,} refused, {s.decode_errors:,} undecodable), "
            f"{s.outages} ClickHouse outages ({s.outage_s:.0f} s), {_lag_text(self.lag())}"
        )

    def run(self, until: Callable[[], bool] | None = None) -> SinkStats:
        self._consumer.subscribe(list(self._decoders), on_revoke=self._on_revoke)
        try:
            while not self._stop and not (until and until()):
                self.poll_once()
            self._flush_or_wait()
        finally:
            self._consumer.close()
        return self.stats


def run_sink(config: SinkConfig, metrics_port: int | None = None) -> SinkStats:
    """Run in the foreground until SIGTERM/SIGINT (what ``rankscope sink`` does); ``/metrics``,
    ``/healthz`` and ``/readyz`` on ``metrics_port`` unless it is None."""
    check_access(config.bootstrap, config.security)  # a refused login: one line, not retries
    sink = ClickHouseSink(config)
    if metrics_port is not None:
        serve_sink(sink.stats, config.bootstrap, config.security, metrics_port)

    def _handle(signum: int, frame: FrameType | None) -> None:
        sink.stop()

    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    return sink.run()


def _letter_row(
    ref: RowRef,
    code: DeadLetterCode,
    reason: str,
    *,
    size_bytes: int = 0,
    sha256: str = "",
    ident: dict[str, str] | None = None,
) -> Row:
    """A dead-letter row the sink writes itself, located by ``ref`` on Kafka."""
    topic, partition, offset, index = ref
    dead = DeadLetter(
        dead_letter_id=DeadLetter.make_id(topic, partition, offset, index),
        reason_code=code,
        reason=reason[:2048],
        source_topic=topic,
        partition=partition,
        offset=offset,
        index_in_batch=index,
        size_bytes=size_bytes,
        sha256=sha256,
        received_ts=time.time_ns(),
        **(ident or {}),
    )
    return DEADLETTER_TABLE.to_row(dead)


def _lag_text(lag: int) -> str:
    return "lag unknown" if lag < 0 else f"lag {lag:,} records"


def _where(msg: Message) -> tuple[str, int, int]:
    return msg.topic() or "", msg.partition() or 0, msg.offset() or 0
