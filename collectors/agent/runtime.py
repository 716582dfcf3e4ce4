"""The node agent runtime: builds the collectors, starts and stops the scheduler and delivery
threads, and reports stats. What runs on those threads lives in the modules it builds on
(:mod:`~rankscope.collectors.agent.ingest`, :mod:`~rankscope.collectors.agent.scheduling`,
:mod:`~rankscope.collectors.agent.delivery`); see the package docstring for the whole picture.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Self

from rankscope.collectors.agent.config import AgentConfig, agent_version
from rankscope.collectors.agent.delivery import DeliveryThread, _Delivery
from rankscope.collectors.agent.inventory import DefaultInventorySource, InventorySource
from rankscope.collectors.agent.registry import AgentConfigError, CollectorSpec, load_collector
from rankscope.collectors.agent.scheduling import Scheduler
from rankscope.collectors.agent.stats import AgentStats, CollectorStats
from rankscope.collectors.agent.transport import KafkaTransport, TransportFactory
from rankscope.collectors.base import Collector, EventFactory, JobRegistry
from rankscope.collectors.spool import Spool
from rankscope.schemas import Event, Topics

__all__ = ["Agent"]

log = logging.getLogger(__name__)


class Agent(DeliveryThread):
    """The node agent runtime (see the package docstring). ``start()``, then ``stop()``."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        collectors: Iterable[CollectorSpec] = (),
        inventory: InventorySource | None = None,
        transport_factory: TransportFactory | None = None,
        event_factory: EventFactory | None = None,
        tap: Callable[[Sequence[Event]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        if event_factory is None:
            self.jobs = JobRegistry(default_job_id=config.job_id)
            self.factory = EventFactory(config.cluster, config.node, self.jobs)
        else:
            self.factory = event_factory
            self.jobs = event_factory.jobs
        self.inventory: InventorySource = inventory or DefaultInventorySource()
        self._transport_factory: TransportFactory = transport_factory or KafkaTransport
        self._tap = tap
        self._clock = clock
        self.version = agent_version()
        self.collectors: list[Collector] = []
        self._build_errors: list[tuple[str, BaseException]] = []
        self._build_configured()
        for spec in collectors:
            self.collectors.append(spec if isinstance(spec, Collector) else spec(self.factory))
        names = [c.name for c in self.collectors]
        if len(set(names)) != len(names) or {"heartbeat", "inventory"} & set(names):
            raise AgentConfigError(
                f"collector names must be unique and not heartbeat/inventory, got {names}"
            )

        self._stats: dict[str, CollectorStats] = {
            c.name: CollectorStats(c.name, c.interval_s) for c in self.collectors
        }
        for name in ("heartbeat", "inventory"):
            self._stats.setdefault(name, CollectorStats(name))
        self._stats["heartbeat"].interval_s = config.heartbeat_interval_s
        self._stats["inventory"].interval_s = config.inventory_interval_s
        self._state_lock = threading.Lock()
        self._ingest_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._delivery_stop = threading.Event()
        self._current: tuple[str, float, bool] | None = None  # (task, started, reported stuck)
        self.scheduler = Scheduler(clock)
        self.spool: Spool | None = None
        self._delivery: _Delivery | None = None
        self._sampled = 0
        self._spooled = 0
        self._lost = 0  # could not be spooled at all (too large, spool closed)
        self._collector_errors = 0
        self._reported_dropped = 0
        self._hb_seq = 0
        self._inventory_fp: str | None = None
        self._started_at: float | None = None
        self._running = False
        #: events the spool held from a previous run when this one started
        self.pending_at_start = 0
        self._delivery_deadline = 0.0
        self._scheduler_thread: threading.Thread | None = None
        self._delivery_thread: threading.Thread | None = None

    # ----------------------------------------------------------------- construction

    def _build_configured(self) -> None:
        """Configured sections -> collectors. A section that does not validate, or whose module
        cannot be imported, is a deployment error (raised); a factory that fails at runtime (no
        NVML on this node, API unreachable) is reported as collector_error and skipped."""
        for name, config in self.config.collector_configs().items():
            if not config.enabled:
                continue
            _, factory = load_collector(name)
            try:
                self.collectors.append(factory(config, self.factory))
            except Exception as exc:
                log.error(
                    "collector %s could not be created: %s: %s", name, type(exc).__name__, exc
                )
                self._build_errors.append((name, exc))

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._running:
            return
        cfg = self.config
        self.spool = Spool(
            cfg.spool.dir,
            cfg.spool.max_bytes,
            cfg.spool.segment_bytes,
            fsync=cfg.spool.fsync,
            fsync_interval_s=cfg.spool.fsync_interval_s,
        )
        pending = self.pending_at_start = self.spool.pending_events
        try:
            self._delivery = _Delivery(
                self.spool,
                lambda: self._transport_factory(cfg.kafka),
                Topics(cfg.kafka.topic_prefix),
                max_inflight=cfg.max_inflight_batches,
                backoff_s=cfg.retry_backoff_s,
                backoff_max_s=cfg.retry_backoff_max_s,
                clock=self._clock,
            )
        except BaseException:  # e.g. a bad librdkafka setting in kafka.extra
            self.spool.close()
            raise
        self._started_at = self._clock()
        self._running = True
        self._stop.clear()
        self._delivery_stop.clear()
        self._delivery_thread = threading.Thread(
            target=self._delivery_loop, name="agent-delivery", daemon=True
        )
        self._delivery_thread.start()

        self._agent_event(
            "agent_started",
            message=(
                f"{cfg.agent_name} {self.version} on {cfg.node}: "
                f"{len(self.collectors)} collector(s) "
                f"[{', '.join(c.name for c in self.collectors)}]; "
                f"{pending} event(s) pending in the spool from a previous run"
            ),
            count=pending,
        )
        for name, exc in self._build_errors:
            self._stats.setdefault(name, CollectorStats(name))
            self._failed(name, exc, during="create")
        for collector in self.collectors:
            try:
                collector.start(partial(self._emit_from, collector.name))
            except Exception as exc:
                self._failed(collector.name, exc, during="start")

        now = self._clock()
        self.scheduler = Scheduler(self._clock)
        self.scheduler.add("heartbeat", cfg.heartbeat_interval_s, self._heartbeat_task, now)
        self.scheduler.add("inventory", cfg.inventory_interval_s, self._inventory_task, now)
        for collector in self.collectors:
            if collector.interval_s:
                self.scheduler.add(
                    collector.name,
                    collector.interval_s,
                    partial(self._poll_task, collector),
                    now,
                )
        self._scheduler_thread = threading.Thread(
            target=self._scheduler_loop, name="agent-scheduler", daemon=True
        )
        self._scheduler_thread.start()

    def stop(self, timeout_s: float | None = None) -> AgentStats:
        """Stop sampling, deliver what can be delivered within ``timeout_s`` (default
        ``shutdown_timeout_s``), persist the spool. Idempotent."""
        if not self._running:
            return self.stats()
        deadline = self._clock() + (
            self.config.shutdown_timeout_s if timeout_s is None else timeout_s
        )
        self._stop.set()
        sched = self._scheduler_thread
        if sched is not None:
            sched.join(max(1.0, deadline - self._clock()))
            if sched.is_alive():
                log.error("a collector poll is still running at shutdown; not waiting for it")
        for collector in self.collectors:
            try:
                collector.stop()
            except Exception as exc:
                log.warning(
                    "collector %s failed to stop: %s: %s", collector.name, type(exc).__name__, exc
                )
        self._agent_event("agent_stopped", message="shutdown requested", count=self._sampled)
        self._delivery_deadline = deadline
        self._delivery_stop.set()
        self._wake.set()
        if self._delivery_thread is not None:
            self._delivery_thread.join(max(1.0, deadline - self._clock()) + 5.0)
        self._running = False
        stats = self.stats()
        with self._ingest_lock:
            if self.spool is not None:
                self.spool.close()
        if stats.pending:
            log.warning("%d event(s) left in the spool for the next start", stats.pending)
        return stats

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- introspection

    def stats(self) -> AgentStats:
        spool = self.spool
        delivery = self._delivery
        spool_stats = spool.stats() if spool is not None and not spool.closed else None
        skipped = {t.name: t.skipped for t in self.scheduler.tasks}
        with self._state_lock:
            collectors = tuple(
                replace(s, skipped_ticks=skipped.get(s.name, 0)) for s in self._stats.values()
            )
        return AgentStats(
            sampled=self._sampled,
            spooled=self._spooled,
            published=delivery.published if delivery else 0,
            delivered=delivery.delivered if delivery else 0,
            dropped=(spool_stats.dropped_events if spool_stats else self._reported_dropped)
            + self._lost,
            rejected=delivery.rejected if delivery else 0,
            pending=spool_stats.pending_events if spool_stats else 0,
            spool_bytes=spool_stats.size_bytes if spool_stats else 0,
            in_flight_batches=len(delivery.inflight) if delivery else 0,
            delivery_failures=delivery.failures if delivery else 0,
            collector_errors=self._collector_errors,
            broker_ok=delivery.broker_ok if delivery else None,
            last_delivery_error=delivery.last_error if delivery else "",
            uptime_s=(self._clock() - self._started_at) if self._started_at is not None else 0.0,
            collectors=collectors,
        )
