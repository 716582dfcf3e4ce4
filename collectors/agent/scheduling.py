"""When each source runs: the poll scheduler, and the scheduler thread's tasks and error streaks.

Scheduling: one thread, earliest-deadline-first over a fixed grid per task (``start + k *
interval`` on the monotonic clock), so timing errors never accumulate. A poll that overruns its
interval skips the grid points it missed instead of running back-to-back (no catch-up bursts),
and because the earliest *deadline* runs first, with ties going to the task that ran least
recently, a slow collector delays the others by at most one of its polls and never starves them.
A poll that is still running after ``stuck_poll_s`` is reported as a ``collector_error``
(from the delivery thread, which is independent of the scheduler). Event-driven collectors
(log tailers, watches) get a thread-safe ``emit`` from ``start(emit)``.

Errors: any exception from ``poll`` (or from ``start``, or from a collector's factory) becomes
one ``agent_event`` ``collector_error`` per error *streak* (exception type and message), and a
``collector_recovered`` (with the number of failed polls) when it polls fine again. The agent
never dies because a collector did.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rankscope.collectors.agent.config import AgentConfig
from rankscope.collectors.agent.ingest import SpoolIngest
from rankscope.collectors.agent.inventory import InventorySource
from rankscope.collectors.agent.stats import CollectorStats
from rankscope.collectors.base import Collector
from rankscope.schemas import HeartbeatEvent, NodeInventoryEvent
from rankscope.schemas.payloads import Heartbeat, NodeInventory, inventory_fingerprint

__all__ = ["CollectorTasks", "Scheduler"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Task:
    name: str
    interval_s: float
    fn: Callable[[], None]
    next_due: float
    last_run: float = float("-inf")
    runs: int = 0
    skipped: int = 0


class Scheduler:
    """Earliest-deadline-first over fixed per-task grids (see the module docstring).

    Pure logic over an injectable monotonic clock: :meth:`run_due` runs every task due at
    ``now`` once and returns when the next one is due, so tests drive it with a fake clock and
    the agent's thread just sleeps until that time.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._tasks: list[_Task] = []

    def add(
        self, name: str, interval_s: float, fn: Callable[[], None], first_due: float | None = None
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: interval must be positive")
        due = self.clock() if first_due is None else first_due
        self._tasks.append(_Task(name, interval_s, fn, due))

    @property
    def tasks(self) -> list[_Task]:
        return list(self._tasks)

    def next_due(self) -> float:
        return min((t.next_due for t in self._tasks), default=float("inf"))

    def run_due(self, now: float | None = None) -> float:
        """Run each task that is due, once, earliest deadline first (ties: least recently run
        first); returns the monotonic time the next task is due."""
        now = self.clock() if now is None else now
        due = [
            (t.next_due, t.last_run, i, t) for i, t in enumerate(self._tasks) if t.next_due <= now
        ]
        heapq.heapify(due)
        while due:
            _, _, _, task = heapq.heappop(due)
            started = self.clock()
            try:
                task.fn()
            finally:
                task.runs += 1
                task.last_run = started
                self._advance(task, self.clock())
        return self.next_due()

    @staticmethod
    def _advance(task: _Task, now: float) -> None:
        """Next grid point after ``now``: no drift, and missed points are skipped, not queued."""
        task.next_due += task.interval_s
        if task.next_due <= now:
            missed = int((now - task.next_due) // task.interval_s) + 1
            task.skipped += missed
            task.next_due += missed * task.interval_s


class CollectorTasks:
    """The agent's scheduler thread and the sources it runs (collector polls, heartbeat,
    inventory), each under the error-streak logic. Events go through the shared
    :class:`~rankscope.collectors.agent.ingest.SpoolIngest`; the stop event and the state lock
    (which guards the per-source stats and :attr:`current`) are the agent's, passed in."""

    def __init__(
        self,
        config: AgentConfig,
        ingest: SpoolIngest,
        scheduler: Scheduler,
        inventory: InventorySource,
        *,
        version: str,
        clock: Callable[[], float],
        stop: threading.Event,
        state_lock: threading.Lock,
    ) -> None:
        self.config = config
        self._ingest = ingest
        #: replaced by the agent at each start
        self.scheduler = scheduler
        self.inventory = inventory
        self.version = version
        self._clock = clock
        self._stop = stop
        self._state_lock = state_lock
        self.current: tuple[str, float, bool] | None = None  # (task, started, reported stuck)
        self.collector_errors = 0
        self._hb_seq = 0
        self._inventory_fp: str | None = None

    # ----------------------------------------------------------------- thread

    def scheduler_loop(self) -> None:
        while not self._stop.is_set():
            next_due = self.scheduler.run_due()
            delay = next_due - self._clock()
            if delay > 0:
                self._stop.wait(min(delay, 3600.0))

    # ----------------------------------------------------------------- tasks

    def run_task(self, name: str, fn: Callable[[], int]) -> None:
        """Run one source under the error-streak logic, timing its thread CPU."""
        stats = self._ingest.stats[name]
        started_cpu = time.thread_time()
        with self._state_lock:
            self.current = (name, self._clock(), False)
        try:
            events = fn()
        except Exception as exc:
            self.failed(name, exc, during="poll")
        else:
            stats.events += events
            self.succeeded(name)
        finally:
            with self._state_lock:
                self.current = None
            stats.polls += 1
            stats.cpu_s += time.thread_time() - started_cpu

    def poll_task(self, collector: Collector) -> None:
        def poll() -> int:
            events = collector.poll(self._ingest.factory.clock_ns())
            self._ingest.ingest(events)
            return len(events)

        self.run_task(collector.name, poll)

    def heartbeat_task(self) -> None:
        def beat() -> int:
            payload = Heartbeat(
                agent=self.config.agent_name,
                agent_version=self.version,
                seq=self._hb_seq,
                interval_s=self.config.heartbeat_interval_s,
            )
            self._hb_seq += 1
            self._ingest.ingest([self._ingest.factory.make(HeartbeatEvent, payload)])
            return 1

        self.run_task("heartbeat", beat)

    def inventory_task(self) -> None:
        def check() -> int:
            fields = dict(self.inventory.read())
            fields.pop("fingerprint", None)
            fingerprint = inventory_fingerprint(fields)
            if fingerprint == self._inventory_fp:
                return 0
            payload = NodeInventory.model_validate({**fields, "fingerprint": fingerprint})
            self._ingest.ingest([self._ingest.factory.make(NodeInventoryEvent, payload)])
            if self._inventory_fp is not None:
                log.info(
                    "node inventory changed: fingerprint %s -> %s", self._inventory_fp, fingerprint
                )
            self._inventory_fp = fingerprint
            return 1

        self.run_task("inventory", check)

    # ----------------------------------------------------------------- error streaks

    def failed(self, name: str, exc: BaseException, during: str) -> None:
        message = f"{type(exc).__name__}: {exc}"
        with self._state_lock:
            stats = self._ingest.stats.setdefault(name, CollectorStats(name))
            stats.errors += 1
            stats.streak += 1
            stats.last_error = message
            first = not stats.failing
            stats.failing = True
        if first:
            self.collector_errors += 1
            log.warning("collector %s failed during %s: %s", name, during, message)
            self._ingest.agent_event(
                "collector_error",
                collector=name,
                count=1,
                message=f"{during}: {message}"[:16_000],
            )
        else:
            log.debug("collector %s still failing: %s", name, message)

    def succeeded(self, name: str) -> None:
        with self._state_lock:
            stats = self._ingest.stats[name]
            if not stats.failing:
                return
            streak, stats.streak, stats.failing = stats.streak, 0, False
        log.info("collector %s recovered after %d failed poll(s)", name, streak)
        self._ingest.agent_event(
            "collector_recovered",
            collector=name,
            count=streak,
            message=f"recovered after {streak} failed poll(s)",
        )

    def check_stuck(self) -> None:
        with self._state_lock:
            current = self.current
            if current is None:
                return
            name, started, reported = current
            elapsed = self._clock() - started
            if reported or elapsed < self.config.stuck_poll_s:
                return
            self.current = (name, started, True)
        self.failed(name, TimeoutError(f"poll still running after {elapsed:.0f}s"), during="poll")
