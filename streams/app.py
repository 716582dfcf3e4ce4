"""The faust-streaming application: validate -> events topic, and event-time rank windows.

Delivery is at-least-once. faust flushes its producer before it commits offsets, so a record's
outputs are on Kafka before its offset is. The window agent acknowledges a record only once every
window it contributed to has been emitted, so a crash re-reads the records of open windows and
recomputes them; re-emitted windows carry the same id and collapse in ClickHouse.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import faust

from rankscope.redaction.keys import load_key
from rankscope.redaction.rules import load_rules
from rankscope.redaction.stage import RedactionStage, StageResult
from rankscope.schemas.derived import (
    RankWindow,
    RecoveryControl,
    RecoveryEvent,
    RecoveryInput,
    StepProgress,
)
from rankscope.schemas.events import EVENT_LIST_ADAPTER, Event, SpanEvent, dump_events
from rankscope.schemas.topics import partition_key
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.config import RedactionConfig, StreamsConfig
from rankscope.streams.recovery.decider import Decider, replay_horizon_s
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.recovery.progress import ProgressNotes
from rankscope.streams.recovery.replay import committed_offset, read_partition
from rankscope.streams.validate import (
    RecordRef,
    ValidationResult,
    validate_message,
    validate_otlp_message,
)
from rankscope.streams.windows import WindowAggregator, corrected_ts

log = logging.getLogger("rankscope.streams")

_MAX_BYTES = 8 * 1024 * 1024
_FETCH_BYTES = 256 * 1024


def faust_broker_url(bootstrap: str) -> str:
    """``host1:9092,host2:9092`` -> faust's ``kafka://host1:9092;kafka://host2:9092``."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    return ";".join(h if "://" in h else f"kafka://{h}" for h in hosts)


@dataclass
class StageCounters:
    """Exposed for tests and the CLI; the faust web view is disabled to keep workers light."""

    records_in: int = 0
    events_valid: int = 0
    dead_letters: int = 0
    window_records_in: int = 0
    windows_emitted: int = 0
    late_events: int = 0
    detections: int = 0
    incidents: int = 0
    pending_acks: int = 0
    recovery_events: int = 0
    values_redacted: int = 0
    events_quarantined: int = 0
    started_wall: float = field(default_factory=time.time)


def create_app(config: StreamsConfig) -> tuple[faust.App, StageCounters]:
    topics = config.topics
    app = faust.App(
        config.app_id,
        broker=faust_broker_url(config.bootstrap),
        store="memory://",
        datadir=str(config.data_dir),
        web_enabled=False,
        autodiscover=False,
        producer_acks=-1,
        producer_max_request_size=_MAX_BYTES,
        # Small per-partition fetches keep the raw topics of one job in step (a fetch of 8 MiB
        # of spans is tens of seconds of event time ahead of the heartbeats); the broker still
        # returns a larger first batch, so oversized records are not stuck.
        consumer_max_fetch_size=_FETCH_BYTES,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        broker_commit_interval=1.0,
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=min(3.0, config.session_timeout_s / 3),
        topic_allow_declare=False,
        topic_disable_leader=True,
    )
    counters = StageCounters()

    raw_topic = app.topic(
        *topics.all_raw, topics.otlp_spans, key_type=bytes, value_type=bytes, value_serializer="raw"
    )
    events_topic = app.topic(
        topics.events, key_type=bytes, value_type=bytes, value_serializer="raw"
    )
    windows_topic = app.topic(topics.windows, value_serializer="raw")
    late_topic = app.topic(topics.late, value_serializer="raw")
    deadletter_topic = app.topic(topics.deadletter, value_serializer="raw")
    quarantine_topic = app.topic(topics.quarantine, value_serializer="raw")
    audit_topic = app.topic(topics.redaction_audit, value_serializer="raw")
    recovery_topic = app.topic(topics.recovery, value_serializer="raw")
    recovery_input = app.topic(topics.recovery_input, value_serializer="raw")
    decider = Decider(load_policy(config.recovery.policy_path)) if config.recovery.enabled else None
    notes = ProgressNotes(config.recovery.progress_note_s)
    redact = build_redaction(config.redaction)
    detections_topic = app.topic(topics.detections, value_serializer="raw")
    incidents_topic = app.topic(topics.incidents, value_serializer="raw")
    limits = config.limits

    @app.agent(raw_topic, name=f"{config.app_id}.validate")
    async def validate(stream: faust.StreamT[bytes]) -> None:
        """Every raw record ends as valid events downstream, dead letters, or both."""
        async for event in stream.events():
            msg = event.message
            ref = RecordRef(
                topic=msg.topic,
                partition=msg.partition,
                offset=msg.offset,
                timestamp_ns=int((msg.timestamp or 0) * 1e9),
            )
            result: ValidationResult
            if msg.topic == topics.otlp_spans:
                result = validate_otlp_message(event.value, ref, limits)
            else:
                result = validate_message(event.value, ref, limits)
            counters.records_in += 1
            if result.events:
                counters.events_valid += len(result.events)
                record = f"{msg.topic}:{msg.partition}:{msg.offset}"
                redacted = redact(result.events, record)
                for q in redacted.quarantined:
                    counters.events_quarantined += 1
                    await quarantine_topic.send(
                        key=q.job_id.encode(), value=q.model_dump_json().encode()
                    )
                for a in redacted.audit:
                    await audit_topic.send(
                        key=a.job_id.encode(), value=a.model_dump_json().encode()
                    )
                key = msg.key or partition_key(result.events[0].job_id, result.events[0].node)
                await events_topic.send(key=key, value=dump_events(redacted.events))
            for dead in result.dead:
                counters.dead_letters += 1
                await deadletter_topic.send(
                    key=dead.dead_letter_id.encode(), value=dead.model_dump_json().encode()
                )

    agg = WindowAggregator(config.windows)
    # (job_id, last window end the record touched, faust event) in arrival order
    pending: deque[tuple[str, int, Any]] = deque()

    async def emit(windows: list[RankWindow]) -> None:
        for w in windows:
            counters.windows_emitted += 1
            await windows_topic.send(key=w.job_id.encode(), value=w.model_dump_json().encode())

    def ack_settled() -> None:
        """Ack records whose windows have all been emitted (pending is scanned, not popped
        in order, because several jobs interleave on one partition)."""
        keep: deque[tuple[str, int, Any]] = deque()
        while pending:
            job_id, last_end, ev = pending.popleft()
            if last_end <= agg.closed_until(job_id):
                ev.ack()
            else:
                keep.append((job_id, last_end, ev))
        pending.extend(keep)
        counters.pending_acks = len(pending)

    size_ns = agg.size_ns

    analyzers: dict[str, JobAnalyzer] = {}
    analyzer_seen: dict[str, float] = {}  # job -> worker wall clock of its last event
    flushed: set[str] = set()

    async def to_decider(record: RecoveryInput, job_id: str) -> None:
        if decider is not None:
            await recovery_input.send(key=job_id.encode(), value=record.model_dump_json().encode())

    async def publish_findings(analyzer: JobAnalyzer, flush: bool = False) -> None:
        detections, incidents = analyzer.flush() if flush else analyzer.advance()
        for d in detections:
            counters.detections += 1
            await detections_topic.send(key=d.job_id.encode(), value=d.model_dump_json().encode())
            await to_decider(RecoveryInput(detection=d), d.job_id)
        for i in incidents:
            counters.incidents += 1
            await incidents_topic.send(key=i.job_id.encode(), value=i.model_dump_json().encode())
            await to_decider(RecoveryInput(incident=i), i.job_id)

    async def publish_recovery(events: list[RecoveryEvent]) -> None:
        for r in events:
            counters.recovery_events += 1
            await recovery_topic.send(key=r.job_id.encode(), value=r.model_dump_json().encode())

    next_offset = [-1]  # the decider's next input offset; anything else: rebuild first
    decider_lock = asyncio.Lock()  # a rebuild and the records or ticks around it never interleave

    @app.agent(recovery_input, name=f"{config.app_id}.recovery-decider")
    async def decide(stream: faust.StreamT[bytes]) -> None:
        """The fleet's one decider (its input has one partition): findings, progress notes and
        operators' commands in, recovery events out."""
        async for event in stream.events():
            if decider is None:
                continue
            msg = event.message
            async with decider_lock:
                if msg.offset != next_offset[0]:  # first record since start or a partition move
                    await rebuild_decider(
                        msg.partition, msg.offset, int((msg.timestamp or 0) * 1000)
                    )
                next_offset[0] = msg.offset + 1
                try:
                    record = RecoveryInput.model_validate_json(event.value)
                except ValueError:
                    log.warning("ignoring a malformed recovery input at offset %d", msg.offset)
                    continue
                if record.control is not None:
                    log.warning(
                        "recovery %s by %s",
                        "paused" if record.control.paused else "resumed",
                        record.control.by,
                    )
                await publish_recovery(decider.feed(record))

    async def adopt_decider() -> None:
        """Holding the decider's partition with nothing new to read (a quiet fleet after a
        restart): rebuild up to the group's committed offset now, so overdue progress deadlines
        fire without waiting for the next input record."""
        if not any(tp.topic == topics.recovery_input for tp in app.consumer.assignment()):
            return
        start = await asyncio.get_running_loop().run_in_executor(
            None, committed_offset, config.bootstrap, config.app_id, topics.recovery_input, 0
        )
        await rebuild_decider(0, start, int(time.time() * 1000))
        next_offset[0] = start

    @app.on_partitions_revoked.connect
    async def decider_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        """Another worker may own the decider now: stop ticking; rebuild if it comes back."""
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        if any(tp.topic == topics.recovery_input for tp in revoked):
            next_offset[0] = -1

    async def rebuild_decider(partition: int, offset: int, record_ms: int) -> None:
        assert decider is not None
        findings_s, _ = replay_horizon_s(decider.policy)
        since_ms = record_ms - int(findings_s * 1000)

        def read() -> tuple[list[RecoveryInput], bool]:
            commands = [
                RecoveryControl.model_validate_json(v)
                for _, v in read_partition(config.bootstrap, topics.recovery_control, 0)
            ]
            earlier = []
            for _, value in read_partition(
                config.bootstrap, topics.recovery_input, partition, since_ms, offset
            ):
                try:
                    earlier.append(RecoveryInput.model_validate_json(value))
                except ValueError:
                    continue
            return earlier, bool(commands and commands[-1].paused)

        started = time.monotonic()
        try:
            earlier, paused = await asyncio.get_running_loop().run_in_executor(None, read)
        except Exception:  # the broker did not answer the read-back: act on nothing unknown
            log.exception(
                "the recovery decider could not read its history back; automated recovery is "
                "PAUSED until an operator resumes it (rankscope recovery resume)"
            )
            decider.rebuild([], paused=True)
            return
        n = decider.rebuild(earlier, paused)
        log.warning(
            "recovery decider rebuilt from %d earlier input record(s) in %.1f s (paused: %s)",
            n, time.monotonic() - started, paused,
        )  # fmt: skip

    @app.agent(events_topic, name=f"{config.app_id}.windows")
    async def windows(stream: faust.StreamT[bytes]) -> None:
        # Acks are manual: a record is acked once all the windows it touched are emitted.
        async for event in cast(Any, stream).noack().events():
            counters.window_records_in += 1
            now = time.time()
            last_end = -1
            job_id = ""
            touched: set[str] = set()
            progress: list[StepProgress] = []
            for ev in EVENT_LIST_ADAPTER.validate_json(event.value):
                job_id = ev.job_id
                if decider is not None and isinstance(ev, SpanEvent):
                    p = ev.payload
                    if p.phase == "step" and p.status == "ok" and p.step is not None:
                        note = notes.observe(ev.cluster, job_id, p.step, ev.ts, ev.node, now)
                        if note is not None:
                            progress.append(note)
                if job_id and config.analysis_enabled:
                    analyzer = analyzers.get(job_id)
                    if analyzer is None:
                        analyzer = analyzers[job_id] = JobAnalyzer(
                            ev.cluster, job_id, config.analysis
                        )
                    analyzer.observe(ev)
                    touched.add(job_id)
                    analyzer_seen[job_id] = now
                    flushed.discard(job_id)
                late = agg.add(ev, now)
                if late is not None:
                    counters.late_events += 1
                    await late_topic.send(
                        key=late.job_id.encode(), value=late.model_dump_json().encode()
                    )
                elif ev.rank is not None:
                    t = corrected_ts(ev)
                    last_end = max(last_end, t - t % size_ns + size_ns)
            if last_end < 0:
                event.ack()
            else:
                pending.append((job_id, last_end, event))
            closed = agg.close_ready(now)
            await emit(closed)
            if closed:  # a held record can only settle when one of its windows is emitted
                ack_settled()
            for jid in touched:
                await publish_findings(analyzers[jid])
            for note in progress:
                await to_decider(RecoveryInput(progress=note), note.job_id)

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def close_idle_windows() -> None:
        now = time.time()
        if decider is not None:
            async with decider_lock:
                if next_offset[0] < 0:
                    await adopt_decider()
                if next_offset[0] >= 0:  # this worker holds the decider's partition
                    await publish_recovery(decider.tick())  # progress deadlines
            for note in notes.flush_idle(now, idle_s=1.0):
                await to_decider(RecoveryInput(progress=note), note.job_id)
        closed = agg.close_ready(now)
        await emit(closed)
        if closed:
            ack_settled()
        # A job whose events stopped (it died, or the stream ended) has no more event time to
        # push its analysis forward: attribute what is still settling, once.
        for jid, seen in list(analyzer_seen.items()):
            idle = now - seen
            # before the windows' idle close, so findings are on Kafka before the job's
            # records are fully acknowledged (what "drained" means to callers)
            if idle >= config.windows.idle_close_s / 2 and jid not in flushed:
                flushed.add(jid)
                await publish_findings(analyzers[jid], flush=True)
            if idle >= config.analysis_retention_s:
                analyzers.pop(jid, None)
                analyzer_seen.pop(jid, None)
                flushed.discard(jid)

    return app, counters


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


def tune_gc() -> None:
    """Fewer, cheaper garbage collections for a worker that holds a large live set.

    A job's analysis keeps a few seconds of parsed events buffered (hundreds of thousands of
    objects at 4,096 ranks), and CPython's default thresholds then run full collections that
    scan them all, over and over: at 4,096 ranks this was 40% of the per-event cost, growing
    with the job. The events hold no reference cycles, so collecting rarely loses nothing;
    objects alive at start-up (modules, the app) are frozen out of the scans entirely.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def run_worker(config: StreamsConfig) -> None:
    """Run one worker in the foreground until SIGTERM/SIGINT (what ``rankscope worker`` does)."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    app, _ = create_app(config)
    tune_gc()
    worker = faust.Worker(app, loglevel=config.log_level, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
