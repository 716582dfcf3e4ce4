"""The validate stage on a plain confluent-kafka loop: ``rankscope validator``.

Why: in the faust worker the validate agent's consume, commit and produce through aiokafka cost
more than the validation itself (bench/results/worker_profile_r3.json). This is the first half of
issue 21's plan (the analysis fed in process on this loop is the second). Validators are
stateless, so they run as their own processes in their own consumer group
(``StreamsConfig.validate_group_id``) and the faust workers, started with ``validate_in_worker``
off, read only ``<p>.events`` and their own topics. Measured: rows stored 1.21-1.38x sooner, the
same CPU per event in total (the worker then parses every events record;
bench/results/e2e_throughput_validators.json).

Delivery is the faust agent's, made explicit: a batch's outputs are produced, the producer is
flushed, and only then are the batch's offsets committed. A crash re-validates at most the
uncommitted batch; its events records carry their raw position, so the windows agent skips the
repeats. A batch whose outputs were not delivered (a broker outage longer than the delivery
timeout) is read again from its first offsets, never committed past. The events records go to
the partitions the faust agent would pick (Kafka's murmur2 of the key), so the two are
interchangeable on a running pipeline.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from rankscope.kafka_retry import is_transient, kafka_error
from rankscope.kafka_security import KafkaAuthError, kafka_config
from rankscope.schemas.topics import KEY_PARTITIONER, Topics
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.shared import StageCounters
from rankscope.streams.stages.validate import (
    RawRecord,
    RecordOutputs,
    ValidateStage,
    header_pairs,
)

log = logging.getLogger("rankscope.streams.validator")

#: the largest record the validator writes (as the faust worker's producer)
MAX_REQUEST_BYTES = 8 * 1024 * 1024
Headers = list[tuple[str, str | bytes | None]]
#: a commit refused with these leaves its offsets to the next try (a rebalance under way, the
#: coordinator moving); anything else stops the validator with the error
COMMIT_LATER = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._WAIT_COORD,
    }
)
#: how often the loop logs what it did
STATUS_EVERY_S = 60.0


@dataclass
class LoopSettings:
    """The loop's own knobs (the stage's come from ``StreamsConfig``)."""

    #: records handed to the stage per consume call; a batch is committed as one
    batch_records: int = 500
    #: seconds a consume call waits for the first record
    poll_timeout_s: float = 0.5
    #: milliseconds librdkafka keeps retrying an output before it reports it failed (then the
    #: batch is read again); until then the loop waits for the batch's delivery reports
    delivery_timeout_ms: int = 120_000
    #: seconds to wait for outstanding outputs when the loop stops
    flush_timeout_s: float = 30.0
    #: seconds between a failed batch and reading it again
    retry_pause_s: float = 1.0
    linger_ms: int = 5


@dataclass
class _Delivery:
    """Delivery reports of one batch's outputs."""

    failed: list[str] = field(default_factory=list)

    def __call__(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed.append(err.str())


class ValidateLoop:
    """Consume the raw topics, validate and redact each record, produce its outputs, and
    commit a batch's offsets once its outputs are delivered."""

    def __init__(
        self,
        config: StreamsConfig,
        settings: LoopSettings | None = None,
        counters: StageCounters | None = None,
    ) -> None:
        self.config = config
        self.settings = settings or LoopSettings()
        self.counters = counters or StageCounters()
        self.stage = ValidateStage(config, None, self.counters)
        self.topics = config.topics
        self.stopping = threading.Event()
        #: batches read again because their outputs were not delivered
        self.batches_retried = 0
        #: commits the group refused for now (a rebalance): their offsets went with the next
        self.commits_deferred = 0
        #: next offsets of delivered batches whose commit the group refused, per partition
        self._uncommitted: dict[tuple[str, int], int] = {}
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None

    # -- clients ------------------------------------------------------------------------------
    def _clients(self) -> tuple[Consumer, Producer]:
        config = self.config
        consumer = Consumer(
            kafka_config(
                config.bootstrap,
                **{
                    "group.id": config.validate_group_id,
                    "client.id": f"{config.validate_group_id}-loop",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": int(config.session_timeout_s * 1000),
                    "max.partition.fetch.bytes": config.fetch_max_bytes,
                    # a raw record may be up to the validation limit (it is refused, not stuck)
                    "fetch.max.bytes": max(config.limits.max_message_bytes * 2, 64 * 1024**2),
                    "partition.assignment.strategy": "cooperative-sticky",
                },
            )
        )
        producer_settings: dict[str, Any] = {
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": self.settings.linger_ms,
            "message.max.bytes": MAX_REQUEST_BYTES,
            "message.timeout.ms": self.settings.delivery_timeout_ms,
            # the partition of a key as the faust worker's producer chooses it
            "partitioner": KEY_PARTITIONER,
        }
        if config.output_compression != "none":
            producer_settings["compression.type"] = config.output_compression
        producer = Producer(kafka_config(config.bootstrap, **producer_settings))
        return consumer, producer

    # -- the loop -----------------------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> StageCounters:
        """Run until ``stop()`` (or SIGTERM/SIGINT in ``run_validator``); leave the group
        cleanly, the last batch committed."""
        consumer, producer = self._consumer, self._producer = self._clients()
        consumer.subscribe(list(self.topics.all_raw), on_revoke=self._revoked)
        s = self.settings
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        status_due = time.monotonic() + STATUS_EVERY_S
        try:
            while not self.stopping.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    break
                self.counters.ticked = time.monotonic()
                batch = consumer.consume(num_messages=s.batch_records, timeout=s.poll_timeout_s)
                records = [m for m in batch if _usable(m)]
                if records:
                    self._process_batch(consumer, producer, records)
                elif self._uncommitted:
                    self._commit(consumer)  # a deferred commit, while no batch carries it
                producer.poll(0)
                if time.monotonic() >= status_due:
                    status_due = time.monotonic() + STATUS_EVERY_S
                    log.warning("validator status: %s", self.counters.summary())
        finally:
            producer.flush(s.flush_timeout_s)
            if self._uncommitted:
                try:
                    self._commit(consumer)
                except Exception:  # the next owner validates the batch again
                    log.warning("last offsets left uncommitted", exc_info=True)
            consumer.close()  # leaves the group: its partitions move at once
            self._consumer = self._producer = None
        return self.counters

    def stop(self) -> None:
        self.stopping.set()

    def _process_batch(self, consumer: Consumer, producer: Producer, batch: list[Message]) -> None:
        delivery = _Delivery()
        outputs: list[RecordOutputs] = []
        for m in batch:
            out = self.stage.process(raw_record(m))
            send_outputs(producer, self.topics, out, delivery)
            outputs.append(out)
        # every output is reported, delivered or failed, within delivery_timeout_ms
        while producer.flush(1.0):
            if self.stopping.is_set():
                return  # stopping mid-delivery: nothing committed, the next owner reads it
        if delivery.failed:
            # Not delivered: nothing of the batch is committed; read it again from its start
            # (what was delivered is repeated, and skipped downstream by its raw position).
            self.batches_retried += 1
            log.error(
                "outputs of %d raw records not delivered (%d failed: %s); reading them again",
                len(batch), len(delivery.failed), "; ".join(delivery.failed[:3]),
            )  # fmt: skip
            for tp in first_offsets(batch):
                consumer.seek(tp)
            self.stopping.wait(self.settings.retry_pause_s)
            return
        for out in outputs:
            self.stage.count_outputs(out)
        for tp in next_offsets(batch):
            self._uncommitted[tp.topic, tp.partition] = tp.offset
        self._commit(consumer)

    def _commit(self, consumer: Consumer) -> None:
        """Commit the delivered batches' offsets. A group in a rebalance refuses the commit
        (the generation moved): the offsets wait for the next try, and a partition that moved
        meanwhile is validated again from its last commit by its next owner (the repeats are
        skipped downstream by raw position); any other refusal stops the validator."""
        offsets = [TopicPartition(t, p, o) for (t, p), o in self._uncommitted.items()]
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:
            err = kafka_error(exc)
            if err is None or not is_transient(err, COMMIT_LATER):
                raise
            self.commits_deferred += 1
            log.warning("commit deferred (%s): tried again with the next batch", err.str())
            return
        self._uncommitted.clear()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions leaving: commit what was delivered for them if the group still takes
        it, then forget it (the next owner starts from the group's commit)."""
        gone = {(tp.topic, tp.partition) for tp in partitions}
        if any(tp in gone for tp in self._uncommitted):
            try:
                self._commit(consumer)
            except Exception:  # not ours to commit any more: the next owner reads it again
                log.warning("offsets of revoked partitions left uncommitted", exc_info=True)
        for tp in gone:
            self._uncommitted.pop(tp, None)


def send_outputs(
    producer: Producer,
    topics: Topics,
    out: RecordOutputs,
    on_delivery: Callable[[KafkaError | None, Message], None],
) -> None:
    """Produce one record's outputs (waiting for room when librdkafka's queue is full)."""
    t = topics
    sends: list[tuple[str, bytes, bytes | None, Headers | None]] = []
    sends += [(t.quarantine, value, key, None) for key, value in out.quarantined]
    sends += [(t.redaction_audit, value, a.job_id.encode(), None) for a, value in out.audit]
    sends += [(t.events, value, key, list(headers)) for key, value, headers, _ in out.events]
    sends += [(t.deadletter, value, d.dead_letter_id.encode(), None) for d, value in out.dead]
    for topic, value, key, headers in sends:
        while True:
            try:
                producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let librdkafka send
                producer.poll(0.1)


#: refusals that only an operator can lift (the ACL plan): the validator stops with one line
#: instead of logging the same refusal every poll
REFUSED = frozenset({KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED})


def _usable(m: Message) -> bool:
    """A record to validate; consumer errors are logged (librdkafka retries them itself),
    except a fatal one or an authorization refusal, which stop the validator with it."""
    err = m.error()
    if err is None:
        return True
    if err.fatal():
        raise KafkaException(err)
    if err.code() in REFUSED:
        raise KafkaAuthError(
            f"the broker refuses the validator: {err.str()} "
            "(`rankscope kafka-acls` prints the rules each principal needs)"
        )
    if err.code() != KafkaError._PARTITION_EOF:
        log.warning("consumer: %s", err.str())
    return False


def raw_record(m: Message) -> RawRecord:
    """A confluent-kafka message as the stage reads it (timestamps in ns, exact)."""
    ts_type, ts_ms = m.timestamp()
    return RawRecord(
        topic=m.topic() or "",
        partition=m.partition() or 0,
        offset=m.offset() or 0,
        timestamp_ns=ts_ms * 1_000_000 if ts_type != 0 and ts_ms > 0 else 0,
        key=m.key(),
        value=m.value(),
        headers=header_pairs(m.headers()),
    )


def next_offsets(batch: Iterable[Message]) -> list[TopicPartition]:
    """The offsets to commit after ``batch``: one past each partition's last record."""
    last: dict[tuple[str, int], int] = {}
    for m in batch:
        last[m.topic() or "", m.partition() or 0] = m.offset() or 0
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def first_offsets(batch: Iterable[Message]) -> list[TopicPartition]:
    """Where to read ``batch`` again: each partition's first record in it."""
    first: dict[tuple[str, int], int] = {}
    for m in batch:
        first.setdefault((m.topic() or "", m.partition() or 0), m.offset() or 0)
    return [TopicPartition(t, p, o) for (t, p), o in first.items()]


def run_validator(config: StreamsConfig, metrics_port: int | None = None) -> StageCounters:
    """Run one validator in the foreground until SIGTERM/SIGINT (``rankscope validator``)."""
    from rankscope.kafka_security import check_access
    from rankscope.streams.app import tune_gc

    check_access(config.bootstrap)  # a refused login: one line and an exit
    loop = ValidateLoop(config)
    if metrics_port is not None:
        from rankscope.observability.exporters import serve_worker

        serve_worker(loop.counters, config.bootstrap, metrics_port, role="validator")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop())
    tune_gc()
    log.warning(
        "validator started: group %s, raw topics %s",
        config.validate_group_id, ", ".join(config.topics.all_raw),
    )  # fmt: skip
    counters = loop.run()
    log.warning("validator stopped: %s", counters.summary())
    return counters
