"""The node agent runtime: builds the collectors, starts and stops the scheduler and delivery
threads, and reports stats. :class:`Agent` composes three collaborators and wires them:

* :class:`~rankscope.collectors.agent.ingest.SpoolIngest`: events -> spool (owns the spool, the
  per-source stats, the ingest counters, lock and wake event);
* :class:`~rankscope.collectors.agent.scheduling.CollectorTasks`: what the scheduler thread runs;
* :class:`~rankscope.collectors.agent.delivery.DeliveryThread`: spool -> Kafka.

See the package docstring for the whole picture.
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
from rankscope.collectors.agent.delivery import DeliveryThread
from rankscope.collectors.agent.ingest import SpoolIngest
from rankscope.collectors.agent.inventory import DefaultInventorySource, InventorySource
from rankscope.collectors.agent.registry import AgentConfigError, CollectorSpec, load_collector
from rankscope.collectors.agent.scheduling import CollectorTasks, Scheduler
from rankscope.collectors.agent.stats import AgentStats, CollectorStats
from rankscope.collectors.agent.transport import KafkaTransport, TransportFactory
from rankscope.collectors.agent.xid_dedup import XID_DEDUP_TICK_S, xid_dedup_for
from rankscope.collectors.base import Collector, EventFactory, JobRegistry
from rankscope.collectors.spool import Spool
from rankscope.schemas import Event

__all__ = ["Agent"]

log = logging.getLogger(__name__)


class Agent:
    """The node agent runtime (see the package docstring). ``start()``, then ``stop()``.

    Owns the collectors, the lifecycle (threads, stop event, state lock) and composes
    ``_ingest`` (:class:`SpoolIngest`), ``_tasks`` (:class:`CollectorTasks`) and ``_delivery``
    (:class:`DeliveryThread`)."""

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
            factory = EventFactory(config.cluster, config.node, self.jobs)
        else:
            factory = event_factory
            self.jobs = event_factory.jobs
        inventory_source: InventorySource = inventory or DefaultInventorySource()
        self._clock = clock
        version = agent_version()
        self.collectors: list[Collector] = []
        self._build_errors: list[tuple[str, BaseException]] = []
        self._build_configured(factory)
        for spec in collectors:
            self.collectors.append(spec if isinstance(spec, Collector) else spec(factory))
        names = [c.name for c in self.collectors]
        if len(set(names)) != len(names) or {"heartbeat", "inventory"} & set(names):
            raise AgentConfigError(
                f"collector names must be unique and not heartbeat/inventory, got {names}"
            )

        stats: dict[str, CollectorStats] = {
            c.name: CollectorStats(c.name, c.interval_s) for c in self.collectors
        }
        for name in ("heartbeat", "inventory"):
            stats.setdefault(name, CollectorStats(name))
        stats["heartbeat"].interval_s = config.heartbeat_interval_s
        stats["inventory"].interval_s = config.inventory_interval_s
        self._state_lock = threading.Lock()
        self._stop = threading.Event()
        self._ingest = SpoolIngest(config, factory, stats, tap=tap)
        self._ingest.xid_dedup = xid_dedup_for(self.collectors, clock)
        self._tasks = CollectorTasks(
            config,
            self._ingest,
            Scheduler(clock),
            inventory_source,
            version=version,
            clock=clock,
            stop=self._stop,
            state_lock=self._state_lock,
        )
        self._delivery = DeliveryThread(
            config,
            self._ingest,
            self._tasks.check_stuck,
            transport_factory or KafkaTransport,
            clock=clock,
        )
        self._started_at: float | None = None
        self._running = False
        #: events the spool held from a previous run when this one started
        self.pending_at_start = 0
        self._scheduler_thread: threading.Thread | None = None
        self._delivery_thread: threading.Thread | None = None

    # ----------------------------------------------------------------- collaborators' state

    @property
    def factory(self) -> EventFactory:
        return self._ingest.factory

    @property
    def spool(self) -> Spool | None:
        return self._ingest.spool

    @property
    def scheduler(self) -> Scheduler:
        return self._tasks.scheduler

    @property
    def inventory(self) -> InventorySource:
        return self._tasks.inventory

    @property
    def version(self) -> str:
        return self._tasks.version

    # ----------------------------------------------------------------- construction

    def _build_configured(self, factory: EventFactory) -> None:
        """Configured sections -> collectors. A section that does not validate, or whose module
        cannot be imported, is a deployment error (raised); a factory that fails at runtime (no
        NVML on this node, API unreachable) is reported as collector_error and skipped."""
        for name, config in self.config.collector_configs().items():
            if not config.enabled:
                continue
            _, create = load_collector(name)
            try:
                self.collectors.append(create(config, factory))
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
        ingest, tasks = self._ingest, self._tasks
        spool = ingest.spool = Spool(
            cfg.spool.dir,
            cfg.spool.max_bytes,
            cfg.spool.segment_bytes,
            fsync=cfg.spool.fsync,
            fsync_interval_s=cfg.spool.fsync_interval_s,
        )
        pending = self.pending_at_start = spool.pending_events
        try:
            self._delivery.open(spool)
        except BaseException:  # e.g. a bad librdkafka setting in kafka.extra
            spool.close()
            raise
        self._started_at = self._clock()
        self._running = True
        self._stop.clear()
        self._delivery.stop.clear()
        self._delivery_thread = threading.Thread(
            target=self._delivery.loop, name="agent-delivery", daemon=True
        )
        self._delivery_thread.start()

        ingest.agent_event(
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
            ingest.stats.setdefault(name, CollectorStats(name))
            tasks.failed(name, exc, during="create")
        for collector in self.collectors:
            try:
                collector.start(partial(ingest.emit_from, collector.name))
            except Exception as exc:
                tasks.failed(collector.name, exc, during="start")

        now = self._clock()
        scheduler = tasks.scheduler = Scheduler(self._clock)
        scheduler.add("heartbeat", cfg.heartbeat_interval_s, tasks.heartbeat_task, now)
        scheduler.add("inventory", cfg.inventory_interval_s, tasks.inventory_task, now)
        for collector in self.collectors:
            if collector.interval_s:
                scheduler.add(
                    collector.name,
                    collector.interval_s,
                    partial(tasks.poll_task, collector),
                    now,
                )
        if ingest.xid_dedup is not None:  # releases held NVML XIDs when their wait is over
            scheduler.add("xid-dedup", XID_DEDUP_TICK_S, partial(ingest.ingest, ()), now)
        self._scheduler_thread = threading.Thread(
            target=tasks.scheduler_loop, name="agent-scheduler", daemon=True
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
        if self._ingest.xid_dedup is not None:
            with self._ingest.lock:
                held = self._ingest.xid_dedup.release_all()
            self._ingest.ingest(held)
        self._ingest.agent_event(
            "agent_stopped", message="shutdown requested", count=self._ingest.sampled
        )
        self._delivery.deadline = deadline
        self._delivery.stop.set()
        self._ingest.wake.set()
        if self._delivery_thread is not None:
            self._delivery_thread.join(max(1.0, deadline - self._clock()) + 5.0)
        self._running = False
        stats = self.stats()
        self._ingest.close_spool()
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
        ingest = self._ingest
        spool = ingest.spool
        delivery = self._delivery.state
        spool_stats = spool.stats() if spool is not None and not spool.closed else None
        skipped = {t.name: t.skipped for t in self.scheduler.tasks}
        with self._state_lock:
            collectors = tuple(
                replace(s, skipped_ticks=skipped.get(s.name, 0)) for s in ingest.stats.values()
            )
        return AgentStats(
            sampled=ingest.sampled,
            spooled=ingest.spooled,
            published=delivery.published if delivery else 0,
            delivered=delivery.delivered if delivery else 0,
            dropped=(spool_stats.dropped_events if spool_stats else ingest.reported_dropped)
            + ingest.lost,
            rejected=delivery.rejected if delivery else 0,
            pending=spool_stats.pending_events if spool_stats else 0,
            spool_bytes=spool_stats.size_bytes if spool_stats else 0,
            in_flight_batches=len(delivery.inflight) if delivery else 0,
            delivery_failures=delivery.failures if delivery else 0,
            collector_errors=self._tasks.collector_errors,
            broker_ok=delivery.broker_ok if delivery else None,
            last_delivery_error=delivery.last_error if delivery else "",
            uptime_s=(self._clock() - self._started_at) if self._started_at is not None else 0.0,
            collectors=collectors,
        )
