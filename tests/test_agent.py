"""The node agent without Kafka: scheduling, error streaks, heartbeat, inventory, config, and the
spool -> delivery path through an in-memory transport that can go down and come back.

The helpers here (``FakeGpuCollector``, ``MemoryTransport``, ``wait_for``, ``agent_config``) are
also used by the integration tests and the CPU benchmark.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rankscope.collectors import agent as agent_mod
from rankscope.collectors.agent import (
    Agent,
    AgentConfig,
    AgentConfigError,
    DefaultInventorySource,
    DeliveryCallback,
    DeliveryError,
    Scheduler,
    env_overrides,
)
from rankscope.collectors.base import BaseCollector, CollectorConfig, EventFactory, JobRegistry
from rankscope.collectors.spool import Spool
from rankscope.schemas import EVENT_LIST_ADAPTER, AgentEventEvent, Event, GpuSampleEvent
from rankscope.schemas.payloads import GpuSample, inventory_fingerprint

# ----------------------------------------------------------------------------- helpers


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}")
        time.sleep(0.01)


class FakeGpuCollector(BaseCollector):
    """Polls ``gpus`` fake GPUs: one GpuSampleEvent each per poll, job/rank from the registry.

    ``fail`` holds poll numbers (1-based) that raise; ``sleep_s`` makes a poll slow.
    """

    def __init__(
        self,
        factory: EventFactory,
        gpus: Sequence[int] = (0, 1, 2, 3),
        interval_s: float = 0.05,
        name: str = "fake_gpu",
        fail: set[int] | None = None,
        sleep_s: float = 0.0,
    ) -> None:
        self.factory = factory
        self.gpus = list(gpus)
        self.interval_s = interval_s
        self.name = name
        self.fail = fail or set()
        self.sleep_s = sleep_s
        self.polls = 0
        self.poll_times: list[float] = []
        self.sampled: list[str] = []

    def poll(self, now_ns: int) -> list[Event]:
        self.polls += 1
        self.poll_times.append(time.monotonic())
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.polls in self.fail:
            raise RuntimeError(f"NVML said no on poll {self.polls}")
        out: list[Event] = []
        for gpu in self.gpus:
            payload = GpuSample(
                gpu_uuid=f"GPU-{gpu:04d}",
                sm_util_pct=float((self.polls * 7 + gpu) % 100),
                power_w=500.0 + gpu,
                temperature_c=60.0,
            )
            event = self.factory.make(GpuSampleEvent, payload, now_ns, gpu=gpu)
            out.append(event)
            self.sampled.append(event.event_id)
        return out


class ThreadedCollector(BaseCollector):
    """Event-driven: emits ``count`` events from its own thread after ``start``."""

    name = "threaded"
    interval_s = None

    def __init__(self, factory: EventFactory, count: int = 50) -> None:
        self.factory = factory
        self.count = count
        self.sampled: list[str] = []
        self._thread: threading.Thread | None = None

    def start(self, emit: Callable[[Sequence[Event]], None]) -> None:
        def run() -> None:
            for i in range(self.count):
                ev = self.factory.make(
                    GpuSampleEvent, GpuSample(gpu_uuid="GPU-T", sm_util_pct=float(i % 100)), gpu=7
                )
                self.sampled.append(ev.event_id)
                emit([ev])

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.join()


class StaticInventory:
    """An InventorySource whose answer a test changes."""

    def __init__(self, **fields: Any) -> None:
        self.fields: dict[str, Any] = {"kernel": "6.8.0", "driver_version": "550.54.15", **fields}
        self.reads = 0

    def read(self) -> Mapping[str, Any]:
        self.reads += 1
        return dict(self.fields)


class MemoryTransport:
    """An in-memory Kafka stand-in: while ``up`` every send is confirmed at the next poll, while
    down every queued send fails at the next poll (as a delivery timeout would)."""

    def __init__(self, up: bool = True, confirm: bool = True) -> None:
        self.up = up
        self.confirm = confirm  # False: never answer (a broker that hangs)
        self.queued: list[tuple[int, str, bytes, bytes, DeliveryCallback]] = []
        self.delivered: list[tuple[int, str, bytes, bytes]] = []
        self.failed_sends = 0
        self.lock = threading.Lock()
        self.broken: str | None = None
        self.closed = False

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: DeliveryCallback
    ) -> None:
        with self.lock:
            self.queued.append((seq, topic, key, value, on_done))

    def poll(self, timeout_s: float) -> None:
        if not self.confirm:
            time.sleep(min(timeout_s, 0.01))
            return
        with self.lock:
            queued, self.queued = self.queued, []
            if self.up:
                self.delivered.extend(q[:4] for q in queued)
            else:
                self.failed_sends += len(queued)
        for seq, *_, on_done in queued:
            on_done(seq, None if self.up else DeliveryError("_MSG_TIMED_OUT: broker down"))
        if not queued:
            time.sleep(min(timeout_s, 0.005))

    def close(self, timeout_s: float) -> None:
        self.closed = True
        if self.up and self.confirm:
            self.poll(0)

    def events(self) -> list[Event]:
        with self.lock:
            values = [d[3] for d in self.delivered]
        return [e for v in values for e in EVENT_LIST_ADAPTER.validate_json(v)]


def agent_config(tmp_path: Path, **overrides: Any) -> AgentConfig:
    raw: dict[str, Any] = {
        "cluster": "c1",
        "node": "node001",
        "kafka": {"bootstrap": "127.0.0.1:1", "topic_prefix": "unit", "linger_ms": 5},
        "spool": {"dir": str(tmp_path / "spool"), "max_bytes": 4 << 20, "segment_bytes": 1 << 20},
        "heartbeat_interval_s": 0.05,
        "inventory_interval_s": 0.05,
        "shutdown_timeout_s": 2.0,
        "retry_backoff_s": 0.02,
        "retry_backoff_max_s": 0.1,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return AgentConfig.model_validate(raw)


def agent_events(events: Sequence[Event], event_type: str) -> list[AgentEventEvent]:
    return [
        e for e in events if isinstance(e, AgentEventEvent) and e.payload.event_type == event_type
    ]


class Tap:
    """Collects every event the agent ingests (thread-safe)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lock = threading.Lock()

    def __call__(self, events: Sequence[Event]) -> None:
        with self.lock:
            self.events.extend(events)

    def of(self, kind: str) -> list[Event]:
        with self.lock:
            return [e for e in self.events if e.kind == kind]

    def agent(self, event_type: str) -> list[AgentEventEvent]:
        with self.lock:
            return agent_events(self.events, event_type)


@pytest.fixture
def factory() -> EventFactory:
    jobs = JobRegistry()
    return EventFactory("c1", "node001", jobs)


@pytest.fixture
def running() -> Iterator[list[Agent]]:
    """Agents a test started; stopped even when the test fails."""
    agents: list[Agent] = []
    yield agents
    for a in agents:
        a.stop(timeout_s=0.5)


# ----------------------------------------------------------------------------- scheduler


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_scheduler_keeps_a_grid_without_drift() -> None:
    clock = FakeClock()
    sched = Scheduler(clock)
    runs: dict[str, list[float]] = {"a": [], "b": []}

    def task(name: str, cost: float) -> Callable[[], None]:
        def fn() -> None:
            runs[name].append(clock.now)
            clock.now += cost  # each run takes some time

        return fn

    sched.add("a", 1.0, task("a", 0.013))
    sched.add("b", 0.25, task("b", 0.002))
    while clock.now < 110.0:
        nxt = sched.run_due()
        clock.now = max(clock.now, nxt)
    # Every start lies on its grid (within the cost of the tasks run before it in the same
    # tick), whatever the per-run cost: errors do not accumulate over 40 periods.
    for t in runs["a"]:
        assert (t - 100.0) % 1.0 < 0.02
    for t in runs["b"]:
        assert (t - 100.0) % 0.25 < 0.02
    assert len(runs["a"]) == 10
    assert len(runs["b"]) == 40


def test_slow_task_skips_missed_ticks_and_does_not_starve_the_others() -> None:
    clock = FakeClock()
    sched = Scheduler(clock)
    fast: list[float] = []
    slow: list[float] = []

    def slow_fn() -> None:
        slow.append(clock.now)
        clock.now += 2.5  # overruns its 1 s interval by far

    def fast_fn() -> None:
        fast.append(clock.now)
        clock.now += 0.001

    sched.add("slow", 1.0, slow_fn)
    sched.add("fast", 0.5, fast_fn)
    while clock.now < 130.0:
        nxt = sched.run_due()
        clock.now = max(clock.now, nxt)
    (slow_task,) = [t for t in sched.tasks if t.name == "slow"]
    # No catch-up burst: slow runs about every 3 s (its next grid point), skipping the rest.
    assert all(b - a >= 2.5 for a, b in itertools.pairwise(slow))
    assert slow_task.skipped > 0
    # Its starts stay on its own grid (plus the fast task's cost in the same tick).
    assert all((t - 100.0) % 1.0 < 0.01 for t in slow)
    # The fast task runs between every two slow runs (earliest deadline first).
    for a, b in itertools.pairwise(slow):
        assert any(a < t < b for t in fast), (a, b)
    assert len(fast) >= len(slow)


# ----------------------------------------------------------------------------- agent runtime


def test_collector_error_once_per_streak_then_recovered(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    gpu = FakeGpuCollector(factory, fail={2, 3, 4}, interval_s=0.02)
    tap = Tap()
    transport = MemoryTransport()
    agent = Agent(
        agent_config(tmp_path),
        collectors=[gpu],
        inventory=StaticInventory(),
        transport_factory=lambda cfg: transport,
        event_factory=factory,
        tap=tap,
    )
    running.append(agent)
    agent.start()
    wait_for(lambda: gpu.polls >= 8, what="8 polls")
    agent.stop()

    errors = tap.agent("collector_error")
    recovered = tap.agent("collector_recovered")
    assert len(errors) == 1, errors
    assert errors[0].payload.collector == "fake_gpu"
    assert "RuntimeError: NVML said no on poll 2" in errors[0].payload.message
    assert len(recovered) == 1
    assert recovered[0].payload.count == 3
    assert tap.events.index(errors[0]) < tap.events.index(recovered[0])
    stats = agent.stats()
    (gs,) = [c for c in stats.collectors if c.name == "fake_gpu"]
    assert gs.errors == 3 and not gs.failing and gs.cpu_s > 0
    assert stats.collector_errors == 1


def test_heartbeat_seq_and_inventory_only_on_change(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    inventory = StaticInventory()
    tap = Tap()
    transport = MemoryTransport()
    agent = Agent(
        agent_config(tmp_path),
        inventory=inventory,
        transport_factory=lambda cfg: transport,
        event_factory=factory,
        tap=tap,
    )
    running.append(agent)
    agent.start()
    wait_for(lambda: inventory.reads >= 4, what="inventory re-checks")
    assert len(tap.of("node_inventory")) == 1  # once at start, unchanged since
    inventory.fields["driver_version"] = "560.28.03"  # driver upgraded under us
    reads = inventory.reads
    wait_for(lambda: inventory.reads >= reads + 3, what="more inventory re-checks")
    wait_for(lambda: len(tap.of("heartbeat")) >= 5, what="heartbeats")
    agent.stop()

    inv = tap.of("node_inventory")
    assert len(inv) == 2
    first, second = (e.payload for e in inv)  # type: ignore[union-attr]
    assert first.driver_version == "550.54.15" and second.driver_version == "560.28.03"
    assert first.fingerprint != second.fingerprint
    assert first.fingerprint == inventory_fingerprint(
        {"kernel": "6.8.0", "driver_version": "550.54.15"}
    )
    seqs = [e.payload.seq for e in tap.of("heartbeat")]  # type: ignore[union-attr]
    assert seqs == list(range(len(seqs)))
    hb = tap.of("heartbeat")[0].payload
    assert hb.agent == "rankscope-agent" and hb.interval_s == 0.05  # type: ignore[union-attr]
    # Everything ingested was delivered (in-memory transport) and the spool is empty.
    delivered_ids = {e.event_id for e in transport.events()}
    assert {e.event_id for e in tap.events} <= delivered_ids
    assert agent.stats().pending == 0


def test_event_driven_collector_emits_from_its_thread(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    threaded = ThreadedCollector(factory, count=200)
    gpu = FakeGpuCollector(factory, interval_s=0.01)
    transport = MemoryTransport()
    agent = Agent(
        agent_config(tmp_path),
        collectors=[threaded, gpu],
        inventory=StaticInventory(),
        transport_factory=lambda cfg: transport,
        event_factory=factory,
    )
    running.append(agent)
    agent.start()
    wait_for(lambda: len(threaded.sampled) == 200 and gpu.polls > 5, what="samples")
    agent.stop()
    ids = {e.event_id for e in transport.events()}
    assert set(threaded.sampled) <= ids
    assert set(gpu.sampled) <= ids


def test_outage_spools_then_replays_in_order(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    gpu = FakeGpuCollector(factory, interval_s=0.01)
    transport = MemoryTransport(up=True)
    tap = Tap()
    agent = Agent(
        agent_config(tmp_path),
        collectors=[gpu],
        inventory=StaticInventory(),
        transport_factory=lambda cfg: transport,
        event_factory=factory,
        tap=tap,
    )
    running.append(agent)
    agent.start()
    wait_for(lambda: agent.stats().delivered > 20, what="first deliveries")
    transport.up = False
    wait_for(lambda: transport.failed_sends > 0, what="a failed delivery")
    polls_at_outage = gpu.polls
    wait_for(lambda: gpu.polls > polls_at_outage + 20, what="sampling during the outage")
    during = agent.stats()
    assert during.broker_ok is False
    assert during.pending > 40  # kept sampling into the spool
    assert during.delivery_failures > 0
    transport.up = True
    wait_for(lambda: agent.stats().pending == 0, what="spool drained")
    wait_for(lambda: bool(tap.agent("spool_replayed")), what="spool_replayed")
    agent.stop()

    # Every sampled event was delivered; the spool replays in sequence order, so each batch's
    # first delivery happens in sequence order.
    delivered = transport.events()
    assert set(gpu.sampled) <= {e.event_id for e in delivered}
    first_seen: dict[int, int] = {}
    for i, (seq, *_) in enumerate(transport.delivered):
        first_seen.setdefault(seq, i)
    order = sorted(first_seen, key=first_seen.__getitem__)
    assert order == sorted(order)
    samples = [e for e in delivered if isinstance(e, GpuSampleEvent)]
    seen: set[str] = set()
    unique = [e for e in samples if not (e.event_id in seen or seen.add(e.event_id))]
    assert [e.event_id for e in unique] == gpu.sampled
    replayed = tap.agent("spool_replayed")[0]
    assert replayed.payload.count > 0
    stats = agent.stats()
    assert stats.broker_ok is True and stats.dropped == 0


def test_acked_only_after_confirmation_and_replayed_after_restart(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    cfg = agent_config(tmp_path)
    gpu = FakeGpuCollector(factory, interval_s=0.01)
    hanging = MemoryTransport(confirm=False)  # sends are accepted, never confirmed
    first = Agent(
        cfg,
        collectors=[gpu],
        inventory=StaticInventory(),
        transport_factory=lambda c: hanging,
        event_factory=factory,
    )
    running.append(first)
    first.start()
    wait_for(lambda: gpu.polls >= 10, what="polls")
    stats = first.stop(timeout_s=0.2)
    assert stats.delivered == 0
    assert stats.pending == stats.spooled  # nothing acknowledged, everything kept
    with Spool(cfg.spool.dir, cfg.spool.max_bytes, cfg.spool.segment_bytes) as spool:
        assert spool.pending_events == stats.spooled

    # Restart with a broker that works: the previous run's events go out first.
    transport = MemoryTransport()
    tap = Tap()
    second = Agent(
        cfg,
        inventory=StaticInventory(),
        transport_factory=lambda c: transport,
        event_factory=factory,
        tap=tap,
    )
    running.append(second)
    second.start()
    wait_for(lambda: second.stats().pending == 0, what="replay")
    second.stop()
    delivered = transport.events()
    ids = [e.event_id for e in delivered]
    assert set(gpu.sampled) <= set(ids)
    # The backlog (lower spool sequence numbers) goes out before the new run's first event.
    first_index = {i: n for n, i in reversed(list(enumerate(ids)))}
    assert (
        max(first_index[i] for i in gpu.sampled)
        < first_index[tap.agent("agent_started")[0].event_id]
    )
    started = tap.agent("agent_started")[0]
    assert started.payload.count == stats.pending


def test_spool_overflow_is_reported_with_the_dropped_count(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    cfg = agent_config(
        tmp_path, spool={"max_bytes": 64 * 1024, "segment_bytes": 16 * 1024}, max_inflight_batches=4
    )
    gpu = FakeGpuCollector(factory, gpus=range(8), interval_s=0.005)
    transport = MemoryTransport(up=False)
    tap = Tap()
    agent = Agent(
        cfg,
        collectors=[gpu],
        inventory=StaticInventory(),
        transport_factory=lambda c: transport,
        event_factory=factory,
        tap=tap,
    )
    running.append(agent)
    agent.start()
    wait_for(lambda: agent.stats().dropped > 100, what="overflow")
    wait_for(lambda: bool(tap.agent("spool_overflow")), what="spool_overflow event")
    transport.up = True
    wait_for(lambda: agent.stats().pending == 0, what="drain")
    stats = agent.stop()
    overflow = tap.agent("spool_overflow")
    reported = sum(e.payload.count for e in overflow)
    assert 0 < reported <= stats.dropped
    assert stats.spool_bytes <= 64 * 1024
    # The overflow reports themselves reached the broker (newest data is kept).
    ids = {e.event_id for e in transport.events()}
    assert overflow[-1].event_id in ids
    # Books balance: every sampled GPU event was delivered or counted as dropped.
    delivered = set(gpu.sampled) & ids
    assert len(delivered) + stats.dropped >= len(gpu.sampled)


def test_stuck_poll_is_reported_and_recovers(
    tmp_path: Path, factory: EventFactory, running: list[Agent]
) -> None:
    slow = FakeGpuCollector(factory, interval_s=0.05, sleep_s=0.0, name="slow")
    tap = Tap()
    agent = Agent(
        agent_config(tmp_path, stuck_poll_s=0.15),
        collectors=[slow],
        inventory=StaticInventory(),
        transport_factory=lambda c: MemoryTransport(),
        event_factory=factory,
        tap=tap,
    )
    running.append(agent)
    agent.start()
    wait_for(lambda: slow.polls >= 2, what="polls")
    slow.sleep_s = 0.5
    wait_for(lambda: bool(tap.agent("collector_error")), what="stuck report")
    slow.sleep_s = 0.0
    wait_for(lambda: bool(tap.agent("collector_recovered")), what="recovery")
    agent.stop()
    (err,) = tap.agent("collector_error")
    assert err.payload.collector == "slow"
    assert "still running" in err.payload.message


# ----------------------------------------------------------------------------- config


def test_config_from_yaml_with_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "cluster: prod\n"
        "kafka:\n  bootstrap: kafka-1:9092\n  extra: {security.protocol: SASL_SSL}\n"
        "spool:\n  dir: /var/spool/x\n"
        "heartbeat_interval_s: 5\n"
    )
    env = {
        "RANKSCOPE_AGENT__KAFKA__BOOTSTRAP": "kafka-2:9092,kafka-3:9092",
        "RANKSCOPE_AGENT__SPOOL__MAX_BYTES": "1048576",
        "RANKSCOPE_AGENT__SPOOL__SEGMENT_BYTES": "65536",
        "rankscope_agent__node": "gpu-node-17",
        "RANKSCOPE_AGENT__KAFKA__EXTRA": '{"security.protocol": "SSL"}',
        "UNRELATED": "x",
    }
    cfg = AgentConfig.load(path, env=env)
    assert cfg.cluster == "prod"
    assert cfg.node == "gpu-node-17"
    assert cfg.kafka.bootstrap == "kafka-2:9092,kafka-3:9092"
    assert cfg.kafka.extra == {"security.protocol": "SSL"}
    assert cfg.spool.max_bytes == 1 << 20 and cfg.spool.dir == Path("/var/spool/x")
    assert cfg.heartbeat_interval_s == 5.0 and cfg.inventory_interval_s == 300.0
    assert env_overrides({"RANKSCOPE_AGENT__GPU__INTERVAL_S": "2"}) == {"gpu": {"interval_s": "2"}}
    # Defaults: node = hostname, 256 MiB spool.
    minimal = tmp_path / "min.yaml"
    minimal.write_text("cluster: c\nkafka: {bootstrap: 'k:9092'}\n")
    cfg = AgentConfig.load(minimal, env={})
    assert cfg.node and cfg.spool.max_bytes == 256 * 1024 * 1024


def test_config_rejects_typos_and_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("cluster: c\nkafka: {bootstrap: 'k:9092'}\ngpus: {}\n")
    with pytest.raises(AgentConfigError, match="unknown agent config key 'gpus'"):
        AgentConfig.load(path, env={})
    path.write_text("cluster: c\nkafka: {bootstrap: 'k:9092'}\nheartbeat_interval_s: 0\n")
    with pytest.raises(AgentConfigError, match="heartbeat_interval_s"):
        AgentConfig.load(path, env={})
    with pytest.raises(AgentConfigError, match="does not exist"):
        AgentConfig.load(tmp_path / "missing.yaml", env={})


# A collector module for the registry test: this very module plays "rankscope.collectors.toy".
class ToyCollectorConfig(CollectorConfig):
    interval_s: float = 0.02
    label: str = "toy"


def create_toy_collector(config: ToyCollectorConfig, event_factory: EventFactory) -> Any:
    return FakeGpuCollector(event_factory, gpus=[0], interval_s=config.interval_s, name="toy")


def create_broken_collector(config: ToyCollectorConfig, event_factory: EventFactory) -> Any:
    raise OSError("no such device")


def test_registry_builds_configured_sections_lazily(
    tmp_path: Path,
    factory: EventFactory,
    running: list[Agent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        agent_mod.COLLECTORS, "toy", (__name__, "ToyCollectorConfig", "create_toy_collector")
    )
    monkeypatch.setitem(
        agent_mod.COLLECTORS, "broken", (__name__, "ToyCollectorConfig", "create_broken_collector")
    )
    monkeypatch.setitem(
        agent_mod.COLLECTORS, "missing", ("rankscope.collectors.does_not_exist", "X", "create_x")
    )
    with pytest.raises(AgentConfigError, match="label"):
        agent_config(tmp_path, toy={"label": 3}).collector_configs()
    with pytest.raises(AgentConfigError, match="does_not_exist"):
        Agent(agent_config(tmp_path, missing={}))

    tap = Tap()
    cfg = agent_config(tmp_path, toy={"interval_s": 0.01}, broken={})
    assert set(cfg.collector_sections()) == {"toy", "broken"}
    agent = Agent(
        cfg,
        inventory=StaticInventory(),
        transport_factory=lambda c: MemoryTransport(),
        event_factory=factory,
        tap=tap,
    )
    running.append(agent)
    assert [c.name for c in agent.collectors] == ["toy"]
    agent.start()
    wait_for(lambda: len(tap.of("gpu_sample")) >= 3, what="toy samples")
    agent.stop()
    (err,) = tap.agent("collector_error")
    assert err.payload.collector == "broken" and "OSError: no such device" in err.payload.message


def test_default_inventory_reads_a_node_tree(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text("5.15.0-105-generic\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
    )
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    for dev, fw in (("mlx5_0", "28.39.1002"), ("mlx5_1", "28.39.1002")):
        (root / f"sys/class/infiniband/{dev}").mkdir(parents=True)
        (root / f"sys/class/infiniband/{dev}/fw_ver").write_text(fw + "\n")
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    for name in ("libnccl.so.2", "libnccl.so.2.18.1", "libnccl.so.2.21.5"):
        (libdir / name).write_text("")

    fields = DefaultInventorySource(root, environ={}, nvml=False).read()
    assert fields == {
        "kernel": "5.15.0-105-generic",
        "os": "Ubuntu 22.04.4 LTS",
        "driver_version": "550.54.15",
        "nccl_version": "2.21.5",
        "hca_firmware": {"mlx5_0": "28.39.1002", "mlx5_1": "28.39.1002"},
    }
    env_fields = DefaultInventorySource(root, environ={"NCCL_VERSION": "2.23.4"}, nvml=False).read()
    assert env_fields["nccl_version"] == "2.23.4"
    # On this machine (no GPU driver) the real source still answers, without raising.
    real = DefaultInventorySource().read()
    assert real["kernel"]
    json.dumps(real)


# ----------------------------------------------------------------------------- entry points


def _unreachable_config(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "cluster: c1\nnode: n1\n"
        "kafka: {bootstrap: '127.0.0.1:1', delivery_timeout_ms: 500, linger_ms: 5}\n"
        f"spool: {{dir: '{tmp_path / 'spool'}', max_bytes: 1048576, segment_bytes: 65536}}\n"
        "heartbeat_interval_s: 0.05\nshutdown_timeout_s: 0.5\n"
    )
    return path


def test_run_agent_with_no_broker_spools_and_stops_cleanly(tmp_path: Path) -> None:
    """The real Kafka transport against a port nobody listens on: deliveries fail, the agent
    keeps sampling into the spool, and a stop keeps everything for the next start."""
    path = _unreachable_config(tmp_path)
    stop = threading.Event()
    seen: list[Any] = []
    result: list[Any] = []

    def status(stats: Any) -> None:
        seen.append(stats)
        if len(seen) >= 3 and stats.delivery_failures > 0:
            stop.set()

    thread = threading.Thread(
        target=lambda: result.append(
            agent_mod.run_agent(
                path,
                env={},
                status=status,
                status_interval_s=0.1,
                stop_event=stop,
                install_signal_handlers=False,
            )
        )
    )
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    (final,) = result
    assert final.delivered == 0 and final.delivery_failures > 0 and final.broker_ok is False
    assert final.pending == final.sampled > 0
    with Spool(tmp_path / "spool", 1 << 20, 1 << 16) as spool:
        assert spool.pending_events == final.sampled


def test_cli_command_exits_0_on_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    path = _unreachable_config(tmp_path)
    code = "import typer; from rankscope.cli.agent import agent; typer.run(agent)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--config", str(path), "--status-interval", "0.2"],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: any((tmp_path / "spool").glob("*.seg")), 20, "the spool in use")
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "running on node 'n1'" in err
    assert "stopped: sampled=" in err
    assert "stay in the spool" in err

    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c1\nkafka: {bootstrap: 'k:1'}\nheartbeat_interval_s: -1\n")
    done = subprocess.run(
        [sys.executable, "-c", code, "--config", str(bad)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "invalid config" in done.stderr


def test_sigkilled_agent_loses_nothing_it_spooled(tmp_path: Path) -> None:
    """A crash (SIGKILL: no handler, no flush) keeps every appended batch: frames go to the
    file with one write(2) each, so the page cache has them; the next start replays them."""
    import signal
    import subprocess
    import sys

    path = _unreachable_config(tmp_path)
    code = "import typer; from rankscope.cli.agent import agent; typer.run(agent)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--config", str(path), "--status-interval", "0"],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: any((tmp_path / "spool").glob("*.seg")), 20, "the spool in use")
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with Spool(tmp_path / "spool", 1 << 20, 1 << 16) as spool:
        records = list(spool.pending())
        assert spool.pending_events == sum(r.n_events for r in records) > 5
    events = [e for r in records for e in EVENT_LIST_ADAPTER.validate_json(r.data)]
    assert any(e.kind == "heartbeat" for e in events)
    assert agent_events(events, "agent_started")
