"""What each long-running process exports: its existing stats read as metric samples, and its
endpoint started. One function per role, so each process's hook is a single call."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from rankscope.observability.metrics import ProcessMetrics, Sample
from rankscope.observability.server import BrokerProbe, Check, Health, MetricsServer, serve

if TYPE_CHECKING:
    from rankscope.collectors.agent.stats import AgentStats
    from rankscope.kafka_security import KafkaSecurity
    from rankscope.sinks.kafka_sink import SinkStats
    from rankscope.streams.stages.shared import StageCounters

__all__ = [
    "agent_samples",
    "lag_samples",
    "serve_agent",
    "serve_role",
    "serve_runner",
    "serve_sink",
    "serve_worker",
    "sink_samples",
    "worker_samples",
]


def lag_samples(role: str, lag: dict[tuple[str, int], int]) -> Iterator[Sample]:
    for (topic, partition), behind in sorted(lag.items()):
        yield "rankscope_consumer_lag", (role, topic, str(partition)), float(behind)


def worker_samples(c: StageCounters) -> Iterator[Sample]:
    for topic, n in sorted(c.records_by_topic.items()):
        yield "rankscope_worker_records_in", (topic,), n
    yield "rankscope_worker_events_valid", (), c.events_valid
    for reason, n in sorted(c.dead_letters_by_reason.items()):
        yield "rankscope_worker_dead_letters", (reason,), n
    yield "rankscope_worker_quarantined", (), c.events_quarantined
    for (entity, action), n in sorted(c.findings_by_entity.items()):
        yield "rankscope_worker_redaction_findings", (entity, action), n
    yield "rankscope_worker_window_records_in", (), c.window_records_in
    yield "rankscope_worker_windows_emitted", (), c.windows_emitted
    yield "rankscope_worker_late_events", (), c.late_events
    for kind, n in sorted(c.detections_by_type.items()):
        yield "rankscope_worker_detections", (kind,), n
    yield "rankscope_worker_incidents", (), c.incidents
    for (stage, action), n in sorted(c.recovery_by_action.items()):
        yield "rankscope_worker_recovery_events", (stage, action), n
    yield "rankscope_worker_records_held", (), c.pending_acks
    yield "rankscope_worker_raw_pauses", (), c.raw_pauses
    yield "rankscope_worker_events_parsed_again", (), c.events_records_parsed_again
    yield "rankscope_worker_handoff_not_held", (), c.handoff_not_held
    yield "rankscope_worker_handoff_held_events", (), c.handoff_held_events
    yield from lag_samples("worker", dict(c.lag))  # a copy: the timer replaces it whole


def sink_samples(s: SinkStats) -> Iterator[Sample]:
    yield "rankscope_sink_records", (), s.records
    for table, n in sorted(s.rows_by_table.items()):
        yield "rankscope_sink_rows", (table,), n
    yield "rankscope_sink_batches", (), s.batches
    yield "rankscope_sink_dead_letters", ("undecodable",), s.decode_errors
    yield "rankscope_sink_dead_letters", ("store_refused",), s.rows_refused
    yield "rankscope_sink_outages", (), s.outages
    yield "rankscope_sink_outage_seconds", (), s.outage_s
    yield "rankscope_sink_in_outage", (), float(s.in_outage)
    yield from lag_samples("sink", dict(s.lag))


def agent_samples(a: AgentStats) -> Iterator[Sample]:
    for c in a.collectors:
        yield "rankscope_agent_events", (c.name,), c.events
    yield "rankscope_agent_delivered", (), a.delivered
    yield "rankscope_agent_dropped", (), a.dropped
    yield "rankscope_agent_delivery_failures", (), a.delivery_failures
    yield "rankscope_agent_collector_errors", (), a.collector_errors
    yield "rankscope_agent_spool_events", (), a.pending
    yield "rankscope_agent_spool_bytes", (), a.spool_bytes


def serve_role(
    metrics: ProcessMetrics,
    sample: Callable[[], Iterator[Sample]],
    health: Health,
    port: int,
) -> MetricsServer | None:
    metrics.export(sample)
    return serve(metrics, health, port)


def serve_worker(
    counters: StageCounters, bootstrap: str, port: int, role: str = "worker"
) -> MetricsServer | None:
    """The worker's endpoint: alive while its one-second timer runs, ready while the broker
    answers; window close delays observed into the histogram from now on. A validator
    (``role="validator"``) serves the same counters: only the validate stage's move."""
    metrics = ProcessMetrics(role)
    delays = metrics.histogram("rankscope_worker_window_close_delay_seconds")
    counters.observe_close_delay = delays.observe
    health = Health([BrokerProbe(bootstrap)], last_beat=lambda: counters.ticked)
    return serve_role(metrics, lambda: worker_samples(counters), health, port)


def serve_sink(
    stats: SinkStats, bootstrap: str, security: KafkaSecurity | None, port: int
) -> MetricsServer | None:
    """The sink's endpoint: alive while its poll loop turns, ready while the broker answers
    and ClickHouse is not in an outage; insert durations and batch sizes observed from now."""
    metrics = ProcessMetrics("sink")
    inserts = metrics.histogram("rankscope_sink_insert_seconds")
    batches = metrics.histogram("rankscope_sink_batch_rows")
    stats.observe_insert = lambda table, seconds: inserts.labels(table).observe(seconds)
    stats.observe_batch = batches.observe

    def clickhouse() -> str | None:
        return "waiting for ClickHouse" if stats.in_outage else None

    health = Health([BrokerProbe(bootstrap, security), clickhouse], last_beat=lambda: stats.polled)
    return serve_role(metrics, lambda: sink_samples(stats), health, port)


def serve_agent(stats: Callable[[], AgentStats], port: int) -> MetricsServer | None:
    """The agent's endpoint: ready while its publisher reaches the broker (the agent's own
    view, no extra connection); its threads are watched by the agent itself."""

    def broker() -> str | None:
        return "broker unreachable" if stats().broker_ok is False else None

    checks: list[Check] = [broker]
    health = Health(checks)
    return serve_role(ProcessMetrics("agent"), lambda: agent_samples(stats()), health, port)


def serve_runner(outcomes: Counter[str], bootstrap: str, port: int) -> MetricsServer | None:
    """The recovery runner's endpoint: the decisions it handled by outcome (the stage of the
    outcome it published); ready while the broker answers."""

    def sample() -> Iterator[Sample]:
        for outcome, n in sorted(outcomes.items()):
            yield "rankscope_runner_decisions", (outcome,), n

    health = Health([BrokerProbe(bootstrap)])
    return serve_role(ProcessMetrics("runner"), sample, health, port)
