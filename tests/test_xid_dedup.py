"""One XID occurrence, one event (issue 17): the agent drops NVML's copy of an XID the kernel log
also reported, in either order of arrival, and keeps genuinely separate occurrences."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rankscope.collectors.agent import Agent
from rankscope.collectors.agent.xid_dedup import XidDedup, xid_dedup_for
from rankscope.collectors.base import BaseCollector, Emit, EventFactory
from rankscope.schemas.events import Event, GpuEventEvent
from rankscope.schemas.payloads import GpuEvent
from tests.test_agent import MemoryTransport, StaticInventory, Tap, agent_config, wait_for

MS = 1_000_000
S = 1_000_000_000
T0 = 1_800_000_000 * S
#: the kernel line's shape (NVIDIA's documented Xid 79 form; tests/data/kernel_log/README.md)
LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2210, name=python3, GPU has fallen off the bus."

_factory = EventFactory("c1", "node001", clock_ns=lambda: T0)


def nvml(ts: int, xid: int = 79, gpu: int = 3) -> GpuEventEvent:
    """What NVML's event thread emits: no PCI id, no text, no source."""
    payload = GpuEvent(event_type="xid", xid=xid, message=f"XID {xid}", gpu_uuid="GPU-a")
    return _factory.make(GpuEventEvent, payload, ts, gpu=gpu)


def kernel(ts: int, xid: int = 79, gpu: int = 3) -> GpuEventEvent:
    payload = GpuEvent(
        event_type="xid",
        xid=xid,
        message=LINE.replace(": 79,", f": {xid},"),
        gpu_uuid="GPU-a",
        pci_bus_id="0000:3b:00.0",
        source="kmsg",
        pattern="xid",
    )
    return _factory.make(GpuEventEvent, payload, ts, gpu=gpu)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _dedup(clock: Clock) -> XidDedup:
    return XidDedup(window_s=1.0, hold_s=2.0, clock=clock)


def _sources(events: list[Event]) -> list[str]:
    return [e.payload.source or "nvml" for e in events if isinstance(e, GpuEventEvent)]


def test_nvml_first_is_held_then_dropped_when_the_kernel_line_comes() -> None:
    clock = Clock()
    d = _dedup(clock)
    assert d.filter([nvml(T0)]) == []  # held, not shipped yet
    clock.now += 0.9  # the kernel-log collector's next poll
    out = d.filter([kernel(T0 + 92 * MS)])  # 92 ms later in event time (the H200 measurement)
    assert _sources(out) == ["kmsg"]
    clock.now += 5
    assert d.filter([]) == [] and d.holding == 0
    assert (d.stats.held, d.stats.dropped, d.stats.released) == (1, 1, 0)


def test_kernel_first_then_nvml_is_dropped_at_once() -> None:
    clock = Clock()
    d = _dedup(clock)
    assert _sources(d.filter([kernel(T0 + 92 * MS)])) == ["kmsg"]
    clock.now += 0.01
    assert d.filter([nvml(T0)]) == []
    assert d.holding == 0 and d.stats.dropped == 1


def test_window_edge_pairs_at_the_edge_and_not_past_it() -> None:
    clock = Clock()
    d = _dedup(clock)
    d.filter([kernel(T0)])
    assert d.filter([nvml(T0 + 1 * S)]) == []  # exactly window_s apart: the same occurrence
    d2 = _dedup(clock)
    d2.filter([kernel(T0)])
    assert d2.filter([nvml(T0 + 1 * S + 1)]) == []  # 1 ns past: not a twin, held
    assert d2.stats.dropped == 0 and d2.holding == 1
    clock.now += 1.99
    assert d2.filter([]) == []  # still waiting
    clock.now += 0.01
    assert _sources(d2.filter([])) == ["nvml"]  # released after hold_s, unmatched
    # the other order, past the window: both kept
    d3 = _dedup(clock)
    assert d3.filter([nvml(T0)]) == []
    assert _sources(d3.filter([kernel(T0 - 1 * S - 1)])) == ["kmsg"]
    clock.now += 2
    assert _sources(d3.filter([])) == ["nvml"]


def test_separate_occurrences_are_all_kept() -> None:
    clock = Clock()
    d = _dedup(clock)
    shipped: list[Event] = []
    # two occurrences 5 s apart, each through both paths
    for k, t in enumerate((T0, T0 + 5 * S)):
        shipped += d.filter([nvml(t)])
        clock.now += 0.5
        shipped += d.filter([kernel(t + 50 * MS)])
        clock.now += 4.5 + k
    # a burst: two occurrences 200 ms apart reach both paths; pairing is one to one
    burst = T0 + 20 * S
    shipped += d.filter([kernel(burst), kernel(burst + 200 * MS)])
    shipped += d.filter([nvml(burst + 10 * MS), nvml(burst + 210 * MS)])
    # another GPU and another code at the same time are not twins
    shipped += d.filter([kernel(burst, gpu=4), nvml(burst, xid=48)])
    clock.now += 10
    shipped += d.filter([])
    assert [(e.gpu, e.payload.xid, e.payload.source) for e in shipped] == [  # type: ignore[union-attr]
        (3, 79, "kmsg"),
        (3, 79, "kmsg"),
        (3, 79, "kmsg"),
        (3, 79, "kmsg"),
        (4, 79, "kmsg"),
        (3, 48, ""),  # NVML's XID 48 with no kernel twin, released after the hold
    ]


def test_other_events_pass_and_the_hold_is_bounded() -> None:
    clock = Clock()
    d = XidDedup(hold_s=60.0, max_held=2, clock=clock)
    ecc = _factory.make(GpuEventEvent, GpuEvent(event_type="ecc", message="double"), T0, gpu=3)
    assert d.filter([ecc]) == [ecc]
    # dcgm-exporter's XID is neither source: it passes and is nobody's twin
    dcgm = _factory.make(
        GpuEventEvent,
        GpuEvent(event_type="xid", xid=79, message="dcgm", source="dcgm-exporter"),
        T0,
        gpu=3,
    )
    assert d.filter([dcgm]) == [dcgm] and d.filter([nvml(T0)]) == [] and d.holding == 1
    d.release_all()
    out = d.filter([nvml(T0 + k * S, xid=13) for k in range(3)])
    assert len(out) == 1 and d.holding == 2  # the oldest released, not dropped
    assert len(d.release_all()) == 2 and d.holding == 0


class FakeNvmlThread(BaseCollector):
    """The ``gpu`` collector's event side: XIDs pushed from the test through ``emit``."""

    name = "gpu"

    def __init__(self) -> None:
        self.emit: Emit | None = None

    def start(self, emit: Emit) -> None:
        self.emit = emit


def test_the_agent_ships_one_event_per_xid_when_both_sources_run(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    cfg = agent_config(
        tmp_path,
        kernel_log={
            "source": "file",
            "paths": [str(log)],
            "interval_s": 0.05,
            "use_nvml": False,
            "inventory": [{"pci_bus_id": "0000:3b:00.0", "index": 3}],
        },
    )
    factory = EventFactory("c1", "node001")
    nvml_thread = FakeNvmlThread()
    tap = Tap()
    agent = Agent(
        cfg,
        collectors=[nvml_thread],
        inventory=StaticInventory(),
        transport_factory=lambda c: MemoryTransport(),
        event_factory=factory,
        tap=tap,
    )

    def xids() -> list[GpuEventEvent]:
        return [e for e in tap.of("gpu_event") if isinstance(e, GpuEventEvent)]

    emit: Callable[[list[Event]], None]
    try:
        assert sorted(c.name for c in agent.collectors) == ["gpu", "kernel_log"]
        agent.start()
        wait_for(lambda: nvml_thread.emit is not None, what="the NVML thread's start")
        assert nvml_thread.emit is not None
        emit = nvml_thread.emit
        time.sleep(0.1)  # the file's (empty) history is read
        # occurrence 1: NVML first, the kernel line on the next poll
        emit([nvml(factory.clock_ns())])
        with log.open("a") as f:
            f.write(f"Dec  4 15:00:00 node001 kernel: [ 812.5] {LINE}\n")
        wait_for(lambda: len(xids()) >= 1, what="the kernel-log gpu_event")
        # occurrence 2: an XID 13 only NVML reports: shipped after the hold
        emit([nvml(factory.clock_ns(), xid=13)])
        wait_for(lambda: len(xids()) >= 2, timeout_s=5.0, what="the unmatched NVML XID")
    finally:
        agent.stop(timeout_s=1.0)
    got = [(e.gpu, e.payload.xid, e.payload.source) for e in xids()]
    assert got == [(3, 79, "file"), (3, 13, "")]


def test_dedup_runs_only_with_both_sources() -> None:
    class Named(BaseCollector):
        def __init__(self, name: str, interval_s: float | None) -> None:
            self.name, self.interval_s = name, interval_s

    assert xid_dedup_for([Named("gpu", 1.0)], time.monotonic) is None
    assert xid_dedup_for([Named("kernel_log", 1.0)], time.monotonic) is None
    both = xid_dedup_for([Named("gpu", 1.0), Named("kernel_log", 0.5)], time.monotonic)
    assert both is not None and both.hold_s == 1.5
