"""CPU cost of the node agent per sampling cycle: 8 GPUs + 4 HCA ports, as % of one core.

The goal is 1% of one core at 1 s intervals (10 ms of CPU per cycle, all threads included).
Sources are the real collectors over injected fakes: ``rankscope.collectors.gpu`` on the fake NVML
function table (``tests/fakes/nvml.py``) and ``rankscope.collectors.fabric`` on a fake IB sysfs tree
(``tests/fakes/sysfs.py``); ``--synthetic`` (or a missing module) falls back to small stand-ins
producing the same number of events. Two measurements:

1. **back-to-back**: the real agent (scheduler, serialisation, spool append, delivery thread,
   producer) with every interval scaled down so that N cycles run in seconds; process CPU
   (``time.process_time``: every thread, librdkafka's included) / N = CPU per cycle. Per-source
   figures are the agent's own per-task thread-CPU counters (poll + serialise + spool append).
2. **real time** (``--realtime S``): the same agent at the real 1 s interval for S seconds;
   process CPU / S is the steady-state share of a core, idle overhead (librdkafka's threads,
   the delivery loop's wake-ups) included.

Publishing goes to a real broker with ``--bootstrap HOST:PORT`` (topics under a fresh prefix);
without it batches are spooled, read back and acknowledged by a local stand-in that discards
them, so everything but the network is measured.

    .venv/bin/python bench/agent_cpu.py --cycles 300 --realtime 20 [--bootstrap 127.0.0.1:9092]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rankscope.collectors.agent import (  # noqa: E402
    Agent,
    AgentConfig,
    AgentStats,
    DeliveryCallback,
    KafkaTransport,
    Transport,
)
from rankscope.collectors.base import BaseCollector, Collector, EventFactory, JobBinding  # noqa: E402
from rankscope.collectors.publisher import PublisherConfig  # noqa: E402
from rankscope.schemas import Event, FabricCountersEvent, GpuSampleEvent  # noqa: E402
from rankscope.schemas.payloads import FabricCounters, GpuSample  # noqa: E402

GOAL_CORE_FRACTION = 0.01


class DiscardTransport:
    """Confirms every batch at the next poll: spool write, read back and ack, no network."""

    broken: str | None = None

    def __init__(self) -> None:
        self._queued: list[tuple[int, DeliveryCallback]] = []

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: DeliveryCallback
    ) -> None:
        self._queued.append((seq, on_done))

    def poll(self, timeout_s: float) -> None:
        queued, self._queued = self._queued, []
        for seq, on_done in queued:
            on_done(seq, None)

    def close(self, timeout_s: float) -> None:
        self.poll(0)


class SyntheticGpu(BaseCollector):
    name = "gpu"

    def __init__(self, factory: EventFactory, gpus: int, interval_s: float) -> None:
        self.factory, self.gpus, self.interval_s = factory, gpus, interval_s

    def poll(self, now_ns: int) -> list[Event]:
        return [
            self.factory.make(
                GpuSampleEvent,
                GpuSample(
                    gpu_uuid=f"GPU-{g:08x}",
                    sm_util_pct=93.0,
                    mem_util_pct=41.0,
                    mem_used_bytes=60 << 30,
                    mem_total_bytes=141 << 30,
                    sm_clock_mhz=1980,
                    mem_clock_mhz=2619,
                    power_w=650.0,
                    energy_mj=10_000_000,
                    temperature_c=55,
                    throttle_reasons=0,
                    pcie_replay_count=0,
                    ecc_sbe_total=0,
                    ecc_dbe_total=0,
                    remapped_rows=0,
                    nvlink_errors_total=0,
                ),
                now_ns,
                gpu=g,
            )
            for g in range(self.gpus)
        ]


class SyntheticFabric(BaseCollector):
    name = "fabric"

    def __init__(self, factory: EventFactory, ports: int, interval_s: float) -> None:
        self.factory, self.ports, self.interval_s = factory, ports, interval_s

    def poll(self, now_ns: int) -> list[Event]:
        names = ["port_xmit_data", "port_rcv_data", "symbol_error", "link_downed"]
        return [
            self.factory.make(
                FabricCountersEvent,
                FabricCounters(
                    device=f"mlx5_{p}",
                    port=1,
                    link_layer="InfiniBand",
                    state="4: ACTIVE",
                    phys_state="5: LinkUp",
                    rate="400 Gb/sec (4X NDR)",
                    counters={n: 1000 for n in names * 6},
                    rates_per_s={n: 1.0 for n in names},
                    interval_s=self.interval_s,
                ),
                now_ns,
            )
            for p in range(self.ports)
        ]


def build_sources(
    args: argparse.Namespace, factory: EventFactory, interval_s: float, tmp: Path
) -> tuple[list[Collector], str]:
    """The real collectors over fakes when available, else synthetic stand-ins."""
    if not args.synthetic:
        try:
            from rankscope.collectors.fabric import FabricCollectorConfig, create_fabric_collector
            from rankscope.collectors.gpu import GpuCollectorConfig, create_gpu_collector
            from tests.fakes.nvml import FakeNvml
            from tests.fakes.sysfs import FakeIbSysfs
        except ImportError as exc:
            print(f"note: real collectors/fakes not importable ({exc}); using synthetic sources")
        else:
            nvml = FakeNvml(args.gpus)
            gpu = create_gpu_collector(
                GpuCollectorConfig(interval_s=interval_s, events=True, map_processes=True),
                factory,
                nvml=nvml,
            )
            fs = FakeIbSysfs(tmp / "sysfs", devices=args.hcas)
            fabric = create_fabric_collector(
                FabricCollectorConfig(interval_s=interval_s, sysfs_root=fs.root), factory
            )
            return [
                gpu,
                fabric,
            ], "rankscope.collectors.gpu on FakeNvml + collectors.fabric on FakeIbSysfs"
    return [
        SyntheticGpu(factory, args.gpus, interval_s),
        SyntheticFabric(factory, args.hcas, interval_s),
    ], "synthetic sources (same event counts)"


def make_agent(
    args: argparse.Namespace, interval_s: float, tmp: Path, tag: str
) -> tuple[Agent, list[Collector], str]:
    config = AgentConfig.model_validate(
        {
            "cluster": "bench",
            "node": "bench-node",
            "kafka": {
                "bootstrap": args.bootstrap or "127.0.0.1:1",
                "topic_prefix": f"bench{uuid.uuid4().hex[:8]}",
            },
            "spool": {
                "dir": str(tmp / f"spool-{tag}"),
                "fsync": "interval",
                "fsync_interval_s": interval_s,  # once per (scaled) second, as in production
            },
            "heartbeat_interval_s": 5 * interval_s,
            "inventory_interval_s": 300 * interval_s,
            "shutdown_timeout_s": 10,
        }
    )
    factory = EventFactory(config.cluster, config.node)
    for g in range(args.gpus):  # a job on every GPU, as on a busy training node
        factory.jobs.bind_gpu(g, JobBinding("bench-job", rank=g, local_rank=g, world_size=64))
    sources, what = build_sources(args, factory, interval_s, tmp / tag)
    transport: Callable[[PublisherConfig], Transport] = (
        KafkaTransport if args.bootstrap else (lambda cfg: DiscardTransport())
    )
    agent = Agent(config, collectors=sources, transport_factory=transport, event_factory=factory)
    return agent, sources, what


def polls_of(stats: AgentStats, name: str) -> int:
    return next((c.polls for c in stats.collectors if c.name == name), 0)


def wait_polls(agent: Agent, names: Sequence[str], target: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while min(polls_of(agent.stats(), n) for n in names) < target:
        if time.monotonic() > deadline:
            raise TimeoutError(f"agent did not reach {target} polls in {timeout_s}s")
        time.sleep(0.005)


def back_to_back(args: argparse.Namespace, tmp: Path) -> None:
    interval = args.fast_interval
    agent, sources, what = make_agent(args, interval, tmp, "fast")
    names = [s.name for s in sources]
    print(f"sources: {what}; publish: {args.bootstrap or 'spool + local discard (no network)'}")
    agent.start()
    try:
        wait_polls(agent, names, 20, 60)  # warm-up: imports, first inventory, producer connect
        before = agent.stats()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        start_polls = min(polls_of(before, n) for n in names)
        wait_polls(agent, names, start_polls + args.cycles, 600)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        after = agent.stats()
    finally:
        final = agent.stop()
    cycles = min(polls_of(after, n) for n in names) - start_polls
    per_cycle = cpu / cycles
    print(f"\nback-to-back: {cycles} cycles in {wall:.1f}s wall (interval scaled to {interval}s)")
    print(f"  {'source':<11}{'polls':>7}{'events/poll':>13}{'CPU ms/poll':>13}{'ms/1s-cycle':>13}")
    b = {c.name: c for c in before.collectors}
    total_sources = 0.0
    for c in after.collectors:
        polls = c.polls - b[c.name].polls
        if polls <= 0:
            continue
        ms = (c.cpu_s - b[c.name].cpu_s) / polls * 1e3
        per_1s = ms * polls / cycles  # heartbeat every 5 cycles, inventory every 300
        total_sources += per_1s
        events = (c.events - b[c.name].events) / polls
        print(f"  {c.name:<11}{polls:>7}{events:>13.1f}{ms:>13.3f}{per_1s:>13.3f}")
    print(f"  {'sources':<44}{total_sources:>13.3f}  (poll + serialise + spool append)")
    print(
        f"  {'process, all threads':<44}{per_cycle * 1e3:>13.3f}  "
        "(+ delivery: spool read, produce, acks; librdkafka)"
    )
    share = per_cycle / 1.0
    print(
        f"  => {share * 100:.3f}% of one core at 1 s intervals; goal {GOAL_CORE_FRACTION:.0%}: "
        f"{share / GOAL_CORE_FRACTION:.2f}x of the budget"
    )
    print(
        f"  events: sampled {final.sampled}, delivered {final.delivered}, "
        f"pending {final.pending}, dropped {final.dropped}"
    )


def real_time(args: argparse.Namespace, tmp: Path) -> None:
    agent, _, _ = make_agent(args, 1.0, tmp, "rt")
    agent.start()
    try:
        time.sleep(2.5)  # warm-up
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(args.realtime)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        final = agent.stop()
    share = cpu / wall
    print(
        f"\nreal time at 1 s intervals: {cpu * 1e3:.1f} ms CPU over {wall:.1f}s "
        f"=> {share * 100:.3f}% of one core (goal {GOAL_CORE_FRACTION:.0%}: "
        f"{share / GOAL_CORE_FRACTION:.2f}x of the budget); "
        f"delivered {final.delivered}/{final.sampled} events"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--fast-interval", type=float, default=0.01)
    parser.add_argument("--realtime", type=float, default=0.0, help="seconds; 0 = skip")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hcas", type=int, default=4)
    parser.add_argument("--bootstrap", default=None, help="Kafka to publish to; omit: spool only")
    parser.add_argument("--synthetic", action="store_true", help="skip the real collectors")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rankscope-agent-bench-") as tmp:
        back_to_back(args, Path(tmp))
        if args.realtime > 0:
            real_time(args, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
