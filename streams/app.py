"""The faust-streaming application: builds the app and its topics, and wires the stages.

validate (+ redaction) -> events topic -> windows (event-time rank windows), analysis (detections,
incidents) -> the recovery decider host; each stage lives in ``rankscope.streams.stages``.

Delivery is at-least-once. faust flushes its producer before it commits offsets, so a record's
outputs are on Kafka before its offset is. The window agent acknowledges a record only once every
window it contributed to has been emitted, so a crash re-reads the records of open windows and
recomputes them; re-emitted windows carry the same id and collapse in ClickHouse.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import faust

from rankscope.extras import missing_extra
from rankscope.kafka_security import check_access, faust_credentials
from rankscope.observability.exporters import serve_worker
from rankscope.streams.config import EventLoop, StreamsConfig
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.baselines import BaselineBook, BaselineFeed
from rankscope.streams.stages.fleet import FleetStage
from rankscope.streams.stages.handoff import ParsedHandoff, RawFlow
from rankscope.streams.stages.recovery import DeciderHost
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.stages.snapshots import SnapshotKeeper
from rankscope.streams.stages.validate import ValidateStage, build_redaction
from rankscope.streams.stages.windows import WindowsStage
from rankscope.streams.transport import transport_class
from rankscope.streams.upstream import RawProgress

__all__ = [
    "StageCounters",
    "build_redaction",
    "create_app",
    "faust_broker_url",
    "install_event_loop",
    "run_worker",
    "tune_gc",
]

_MAX_BYTES = 8 * 1024 * 1024
#: The worker's producer when output compression is on (docs/decisions.md, "Worker performance
#: (issue 21)"): a few ms of linger and 1 MiB batches put the small records (windows, progress
#: notes) of several agents' sends into one compressed produce request. zstd rather than lz4:
#: aiokafka compresses lz4 at level 9 (~0.9 ms per 180 KB events record, zstd level 3 ~0.2 ms).
PRODUCER_LINGER_S = 0.005
PRODUCER_BATCH_BYTES = 1024 * 1024
#: how often the worker and its state are summarised in the log
STATUS_EVERY_S = 60.0
log = logging.getLogger("rankscope.streams")


def faust_broker_url(bootstrap: str) -> str:
    """``host1:9092,host2:9092`` -> faust's ``kafka://host1:9092;kafka://host2:9092``."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    return ";".join(h if "://" in h else f"kafka://{h}" for h in hosts)


def _producer_compression(codec: str) -> dict[str, Any]:
    """faust producer settings for the output topics' compression: none by default (opt-in)."""
    if codec == "none":
        return {}
    return {
        "producer_compression_type": codec,
        "producer_linger": PRODUCER_LINGER_S,
        "producer_max_batch_size": PRODUCER_BATCH_BYTES,
    }


def create_app(config: StreamsConfig) -> tuple[faust.App, StageCounters]:
    app = faust.App(
        config.app_id,
        broker=faust_broker_url(config.bootstrap),
        broker_credentials=faust_credentials(),  # TLS/SASL from RANKSCOPE_KAFKA_*
        store="memory://",
        datadir=str(config.data_dir),
        web_enabled=False,
        autodiscover=False,
        producer_acks=-1,
        producer_max_request_size=_MAX_BYTES,
        **_producer_compression(config.output_compression),
        consumer_max_fetch_size=config.fetch_max_bytes,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        broker_commit_interval=1.0,
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=min(3.0, config.session_timeout_s / 3),
        topic_allow_declare=False,
        topic_disable_leader=True,
    )
    # before anything reaches app.transport (the topics below do): faust offers no setting
    app.transport = transport_class(config.fetch_max_wait_ms)(app.conf.broker_consumer, app)
    counters = StageCounters()
    topics = StageTopics.create(app, config.topics)

    # Built in this order (the recovery policy is loaded before the redaction rules and key);
    # the decider host is the analysis' way to the decider, and the windows stage's events
    # agent feeds both.
    recovery = DeciderHost(config, topics, counters)
    handoff = ParsedHandoff()  # validate's parsed events, so the windows agent parses them once
    # back-pressure is opt-in (docs/decisions.md): without it, no flow
    flow = raw_flow(app, config, handoff, counters) if config.backpressure_events else None
    validate = ValidateStage(
        config,
        topics,
        counters,
        handoff=handoff,
        flow=flow,
        local_events_partition=lambda p: (config.topics.events, p) in app.consumer.assignment(),
    )

    def highwater(tp: Any) -> int | None:
        return app.consumer.highwater(tp)  # looked up late: the consumer starts with the worker

    analysis = AnalysisStage(
        config,
        topics,
        counters,
        to_decider=recovery.to_decider,
        highwater=highwater,
        upstream=RawProgress(config.bootstrap, config.validate_group_id),
        baselines=BaselineBook(BaselineFeed(config.bootstrap, config.topics.baselines)),
    )

    fleet = FleetStage(config, topics, counters, recovery.to_decider, highwater)

    async def flush_outputs() -> None:
        await app.producer.flush()

    snapshots = SnapshotKeeper(config, topics, counters, analysis, flush_outputs=flush_outputs)
    windows = WindowsStage(
        config,
        topics,
        counters,
        analysis=analysis,
        recovery=recovery,
        snapshots=snapshots,
        # without the validate agent nothing is handed over: every events record is parsed
        handoff=handoff if config.validate_in_worker else None,
        flow=flow,
    )

    # Registered in this order: the validate agent, the decider's agent and its revoke
    # handler, the windows agent and the one-second timer.
    if config.validate_in_worker:  # else `rankscope validator` processes do it
        validate.register(app)
    recovery.register(app)
    windows.register(app)
    fleet.register(app)  # fleet drift: inventories forwarded to one partition, one view

    status_due = [time.time() + STATUS_EVERY_S]

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def tick() -> None:
        """Event time moves on in a quiet fleet too: the decider's deadlines, idle windows and
        the analysis' flush and retention run once a second whether records arrive or not."""
        now = time.time()
        counters.ticked = time.monotonic()
        counters.lag = consumer_lag(app.consumer)
        handoff.report(counters)
        await recovery.tick(now)
        await windows.close_ready(now)
        await analysis.tick(now)
        await fleet.tick(now)
        windows.evict_idle(now)
        if flow is not None:
            flow.tick()
        if now >= status_due[0]:  # health in the log, once a minute
            status_due[0] = now + STATUS_EVERY_S
            log.warning(
                "worker status: %s; state: %d jobs windowed, %d analyzed, %d on probation",
                counters.summary(), windows.agg.jobs(), len(analysis.analyzers),
                len(analysis.probation),
            )  # fmt: skip
        if await snapshots.tick(now):
            windows.ack_settled()  # records the new snapshots include may be acknowledged

    def release_handoff() -> None:
        """Partitions moved: what the handoff holds may belong to another worker now, and a
        pause waiting on it ends."""
        handoff.clear()
        if flow is not None:
            flow.reset()

    @app.on_partitions_revoked.connect
    async def events_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        """Partitions moved away: their analysis and windows belong to the next owner."""
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        snapshots.forget(revoked)
        windows.forget(revoked)
        release_handoff()

    @app.on_partitions_assigned.connect
    async def events_assigned(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        """Partitions handed (back) to this worker: whatever it did with their records since
        they were revoked (records still buffered then) is dropped, so the first record after
        the assignment restores the newest snapshot and nothing is counted twice."""
        assigned: set[Any] = args[0] if args else kwargs.get("assigned", set())
        snapshots.forget(assigned)
        windows.forget(assigned)
        release_handoff()

    return app, counters


def raw_flow(
    app: faust.App, config: StreamsConfig, handoff: ParsedHandoff, counters: StageCounters
) -> RawFlow:
    """The back-pressure on this worker's raw partitions (``stages/handoff.py``).

    Through faust's own buffer-full switch (``Consumer.on_buffer_full``/``on_buffer_drop``, what
    a stream with a full buffer calls), not ``pause_partitions``: faust drops the records of a
    batch already fetched for a partition paused that way while they are handed out (its
    ``getmany`` keeps only active or buffer-full partitions), and commits past them; a bench
    run lost records so. A buffer-full partition's fetched records are still delivered, and
    nothing more is fetched for it until the drop.
    """
    raw_topics = set(config.topics.all_raw)
    held: set[Any] = set()

    def pause() -> None:
        if not counters.raw_pauses:
            log.warning(
                "back-pressure: %d validated events wait for the windows agent; fetching the "
                "raw topics pauses until it catches up (logged once; counted in "
                "rankscope_worker_raw_pauses)", handoff.held_events,
            )  # fmt: skip
        counters.raw_pauses += 1
        consumer = app.consumer
        for tp in consumer.assignment():
            if tp.topic in raw_topics:
                held.add(tp)
                consumer.on_buffer_full(tp)

    def resume() -> None:
        consumer = app.consumer
        assigned = consumer.assignment()
        for tp in held:
            if tp in assigned:
                consumer.on_buffer_drop(tp)
        held.clear()

    return RawFlow(
        handoff,
        pause,
        resume,
        pause_at=config.backpressure_events,
        resume_at=config.backpressure_events * 4 // 5,
    )


def consumer_lag(consumer: Any) -> dict[tuple[str, int], int]:
    """Records behind per assigned partition: the high watermark the consumer last fetched
    minus the next offset it will hand to an agent (faust's read offsets: no broker request)."""
    read: dict[Any, int | None] = getattr(consumer, "_read_offset", {})
    lag: dict[tuple[str, int], int] = {}
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        last = read.get(tp)
        if high is not None and last is not None:
            lag[tp.topic, tp.partition] = max(0, high - (last + 1))
    return lag


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


def install_event_loop(kind: EventLoop) -> None:
    """Make every event loop the worker creates from now on of ``kind``: faust's main loop and
    the one its consumer thread runs aiokafka on both come from the loop policy (mode's own
    ``mode.loop.use``, what ``faust -L uvloop`` does). Before the app: nothing is built yet."""
    if kind == "asyncio":
        return
    try:
        import uvloop  # noqa: F401 - mode imports it again; this names what is missing
    except ModuleNotFoundError as exc:
        hint = " (or RANKSCOPE_WORKER_EVENT_LOOP=asyncio)"
        raise missing_extra(exc, "the worker's event loop", hint) or exc from exc
    import mode.loop

    mode.loop.use(kind)


def run_worker(config: StreamsConfig, metrics_port: int | None = None) -> None:
    """Run one worker in the foreground until SIGTERM/SIGINT (what ``rankscope worker`` does);
    ``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_port`` unless it is None."""
    install_event_loop(config.event_loop)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    check_access(config.bootstrap)  # a refused login: one line and an exit, not endless retries
    app, counters = create_app(config)
    if metrics_port is not None:
        serve_worker(counters, config.bootstrap, metrics_port)
    tune_gc()
    worker = faust.Worker(app, loglevel=config.log_level, quiet=True, redirect_stdouts=False)
    # No terminal spinner: to spin on every log record, faust puts the root logger at DEBUG, so
    # each faust/aiokafka debug call built a record nobody printed (3% of the worker's time).
    worker.spinner = None
    worker.execute_from_commandline()
