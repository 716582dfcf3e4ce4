"""The validate stage: raw records (JSON batches, OTLP spans) in; redacted events, dead letters,
quarantined events and the redaction audit out.

Every raw record ends as valid events downstream, dead letters, or both. Redaction runs here,
before anything reaches the events topic, so no derived stage ever sees raw telemetry text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import faust
from pydantic import BaseModel

from rankscope.redaction.keys import load_key
from rankscope.redaction.rules import load_rules
from rankscope.redaction.stage import RedactionStage, StageResult
from rankscope.schemas.derived import DeadLetter, RedactionAudit
from rankscope.schemas.events import Event, dump_events
from rankscope.schemas.topics import partition_key
from rankscope.streams.config import RedactionConfig, StreamsConfig
from rankscope.streams.otlp.wire import content_type_of
from rankscope.streams.sources import source_headers
from rankscope.streams.stages.handoff import ParsedHandoff, RawFlow
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.validate import (
    RecordRef,
    ValidationResult,
    internal_error_letter,
    validate_message,
    validate_otlp_message,
)

log = logging.getLogger("rankscope.streams")

M = TypeVar("M", bound=BaseModel)


class ValidateStage:
    """Owns the redaction stage; ``process`` turns a raw record into its outputs, ``register``
    adds the faust agent that sends them (``streams/validate_loop.py`` is the other sender)."""

    def __init__(
        self,
        config: StreamsConfig,
        topics: StageTopics | None,
        counters: StageCounters,
        handoff: ParsedHandoff | None = None,
        flow: RawFlow | None = None,
        local_events_partition: Callable[[int], bool] | None = None,
    ):
        self.config = config
        self.topics = topics
        self.counters = counters
        self.redact = build_redaction(config.redaction)
        #: the events it produced, still parsed, for this worker's windows agent
        self.handoff = handoff
        #: pauses the raw topics while the windows agent is behind on what the handoff holds
        self.flow = flow
        #: whether an events partition is read by this worker (else the handoff lets it go)
        self.local_events_partition = local_events_partition or (lambda partition: True)

    def register(self, app: faust.App) -> None:
        config = self.config
        topics = self.topics
        assert topics is not None, "the faust agent sends to the app's topics"
        handoff = self.handoff
        flow = self.flow
        local = self.local_events_partition

        def delivered(source: bytes) -> Callable[[Any], None]:
            """On delivery: an events record another worker reads is not held for this one; one
            this worker reads takes its place in its partition's order."""

            def on_delivery(fut: Any) -> None:
                try:
                    partition = fut.result().partition
                except Exception:  # not delivered: faust raises on the send; nothing to hold
                    partition = None
                if handoff is None:
                    return
                if partition is None or not local(partition):
                    handoff.discard(source)
                else:  # this worker's windows agent reads it, in this order
                    handoff.delivered(source, partition)

            return on_delivery

        async def emit(out: RecordOutputs) -> None:
            """Send a prepared record's outputs; Kafka's own errors propagate (faust restarts the
            agent from the last commit: nothing is lost)."""
            self.count_outputs(out)
            for key, value in out.quarantined:
                await topics.quarantine.send(key=key, value=value)
            for a, value in out.audit:
                await topics.audit.send(key=a.job_id.encode(), value=value)
            for key, value, headers, events in out.events:
                on_delivery = None
                if handoff is not None:
                    source = headers[0][1]
                    handoff.put(source, value, events)
                    on_delivery = delivered(source)
                await topics.events.send(
                    key=key, value=value, headers=headers, callback=on_delivery
                )
                if flow is not None:
                    flow.after_put()
            for dead, value in out.dead:
                await topics.deadletter.send(key=dead.dead_letter_id.encode(), value=value)

        @app.agent(topics.raw, name=f"{config.app_id}.validate")
        async def validate(stream: faust.StreamT[bytes]) -> None:
            """Every raw record ends as valid events downstream, dead letters, or both."""
            async for event in stream.events():
                msg = event.message
                record = RawRecord(
                    topic=msg.topic,
                    partition=msg.partition,
                    offset=msg.offset,
                    timestamp_ns=int((msg.timestamp or 0) * 1e9),
                    key=msg.key,
                    value=event.value,
                    headers=header_pairs(msg.headers),
                )
                await emit(self.process(record))

    def process(self, record: RawRecord) -> RecordOutputs:
        """One raw record's outputs, whoever sends them (the faust agent, ``ValidateLoop``).

        Never raises: a validator bug becomes an internal-error letter, so no record can stop
        the stage (the record stays on Kafka for a fixed worker to replay)."""
        ref = record.ref
        counters = self.counters
        result: ValidationResult
        signal = self.config.topics.otlp_signal(record.topic)
        try:
            if signal is not None:
                result = validate_otlp_message(
                    record.value,
                    ref,
                    self.config.limits,
                    signal=signal,
                    content_type=content_type_of(record.headers),
                )
            else:
                result = validate_message(record.value, ref, self.config.limits)
        except Exception as exc:
            # A validator bug, never bad input: record it and go on.
            log.exception("validator failed on %s:%d:%d", ref.topic, ref.partition, ref.offset)
            result = ValidationResult(dead=[internal_error_letter(record.value, ref, exc)])
        counters.records_in += 1
        counters.records_by_topic[record.topic] += 1
        counters.otlp_lines_ignored += result.ignored
        return self.outputs_of(record, signal, result)

    def count_outputs(self, out: RecordOutputs) -> None:
        """The counters (and so the metrics) of what one record writes, as it is sent."""
        counters = self.counters
        counters.events_valid += out.valid
        counters.events_quarantined += len(out.quarantined)
        for a, _ in out.audit:
            counters.findings_by_entity[a.entity, a.action] += a.count
        for dead, _ in out.dead:
            counters.dead_letters += 1
            counters.dead_letters_by_reason[dead.reason_code] += 1

    def outputs_of(
        self, record: RawRecord, signal: str | None, result: ValidationResult
    ) -> RecordOutputs:
        """The record's outputs, or, when preparing them fails, one internal-error letter.

        A failure here is a bug in redaction or serialisation, never bad input the validator
        passed on purpose: the record is refused whole (nothing of it was sent), so no record
        can stop the stage, and it stays on Kafka for a fixed worker to replay.
        """
        try:
            return self.prepare(record, signal, result)
        except Exception as exc:
            log.exception(
                "validate stage failed on %s:%d:%d after validation",
                record.topic, record.partition, record.offset,
            )  # fmt: skip
            letter = internal_error_letter(record.value, record.ref, exc)
            return RecordOutputs(dead=with_json([letter]))

    def prepare(
        self, msg: RawRecord, signal: str | None, result: ValidationResult
    ) -> RecordOutputs:
        """Everything one record writes, redacted and serialised before any of it is sent."""
        out = RecordOutputs(dead=with_json(result.dead))
        if result.events:
            record = f"{msg.topic}:{msg.partition}:{msg.offset}"
            redacted = self.redact(result.events, record)
            out.valid = len(result.events)
            out.quarantined = [
                (q.job_id.encode(), q.model_dump_json().encode()) for q in redacted.quarantined
            ]
            out.audit = with_json(redacted.audit)
            if signal is None:
                first = result.events[0]
                groups = {msg.key or partition_key(first.job_id, first.node): redacted.events}
            else:
                # a Collector batch mixes jobs and has no job key: one record per job
                groups = by_partition_key(redacted.events)
            for split, (key, events) in enumerate(groups.items()):
                # a raw record validated again (after a crash) is read once downstream
                headers = source_headers(msg.topic, msg.partition, msg.offset, split)
                out.events.append((key, dump_events(events), headers, events))
        return out


@dataclass(frozen=True)
class RawRecord:
    """A raw Kafka record as the stage reads it, from whichever client fetched it."""

    topic: str
    partition: int
    offset: int
    #: the record's Kafka timestamp in ns; 0 when it has none
    timestamp_ns: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def ref(self) -> RecordRef:
        """Where the record was read (what a dead letter and an events record point back to)."""
        return RecordRef(
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            timestamp_ns=self.timestamp_ns,
        )


@dataclass
class RecordOutputs:
    """What one raw record writes, serialised, so a failure while preparing it sends nothing."""

    #: each letter with its JSON
    dead: list[tuple[DeadLetter, bytes]]
    valid: int = 0
    #: (key, JSON) of each quarantined event
    quarantined: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: each audit row with its JSON
    audit: list[tuple[RedactionAudit, bytes]] = field(default_factory=list)
    #: (key, value, source headers, the parsed events for the handoff)
    events: list[tuple[bytes, bytes, list[tuple[str, bytes]], list[Event]]] = field(
        default_factory=list
    )


def with_json(models: list[M]) -> list[tuple[M, bytes]]:
    """Each model with its JSON, serialised while the record is prepared."""
    return [(m, m.model_dump_json().encode()) for m in models]


def by_partition_key(events: list[Event]) -> dict[bytes, list[Event]]:
    """Events grouped by their own partition key (job, or node for node events), in the order
    each key first appears: deterministic, so a record validated again splits the same way."""
    groups: dict[bytes, list[Event]] = {}
    for ev in events:
        groups.setdefault(partition_key(ev.job_id, ev.node), []).append(ev)
    return groups


def header_pairs(headers: object) -> list[tuple[str, bytes]]:
    """faust hands headers as a list of pairs or a mapping, depending on the driver."""
    if isinstance(headers, Mapping):
        return [(str(k), bytes(v)) for k, v in headers.items() if v is not None]
    if isinstance(headers, list | tuple):
        return [(str(k), bytes(v)) for k, v in headers if v is not None]
    return []


def build_redaction(config: RedactionConfig) -> Callable[[list[Event], str], StageResult]:
    """The redaction stage as the validate agent calls it; fail closed around the stage too.

    A failure inside one value quarantines that event (the stage handles it); a failure of the
    stage itself (a bug) quarantines the whole record the same way rather than pass it raw.
    """
    if not config.enabled:
        log.warning("redaction is disabled: raw telemetry text flows to derived topics")
        return lambda events, record: StageResult(events=list(events))
    rules = load_rules(config.rules_path)
    key = load_key(rules.settings.key_env, config.key_file, create=config.create_key)
    stage = RedactionStage(rules, key)

    def redact(events: list[Event], record: str) -> StageResult:
        try:
            return stage.process(events, record)
        except Exception as exc:
            log.exception("redaction stage failed on %s: quarantining its events", record)
            return stage.quarantine_all(events, record, f"stage failed: {type(exc).__name__}")

    return redact
