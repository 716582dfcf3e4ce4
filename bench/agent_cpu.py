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

3. **light redaction** (``--redaction-compare S``, issue 16): two agents at the real 1 s
   interval, one with source redaction on (the default) and one with it off, each for S
   seconds, alternating ``--rounds`` times, each also tailing NCCL logs (the real ``nccl_log``
   collector) and the kernel log (the real ``kernel_log`` collector on a file source). The lines
   are appended by a separate writer process (its CPU is not the agent's) at
   ``--nccl-lines-per-rank-s`` per rank (one log file per rank, as ``NCCL_DEBUG_FILE`` with
   ``%p`` makes) and ``--kernel-lines-s``. The share of a core with redaction on, off, and
   their ratio go to ``--json``.

    .venv/bin/python bench/agent_cpu.py --cycles 0 --redaction-compare 60 --rounds 2 \
        --json bench/results/agent_cpu_light_redaction.json
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
    args: argparse.Namespace,
    interval_s: float,
    tmp: Path,
    tag: str,
    *,
    redaction: bool = True,
    logs: Path | None = None,
) -> tuple[Agent, list[Collector], str]:
    sections: dict[str, object] = {}
    if logs is not None:  # the log readers: NCCL files per rank, the kernel log as a file
        sections = {
            "nccl_log": {"paths": [str(logs / "nccl.*.log")], "interval_s": interval_s},
            "kernel_log": {
                "source": "file",
                "paths": [str(logs / "kern.log")],
                "interval_s": interval_s,
                "use_nvml": False,
            },
        }
    config = AgentConfig.model_validate(
        {
            **sections,
            "redaction": {"enabled": redaction},
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


# -- issue 16: light redaction on vs off, with the log readers --------------------------------

#: NCCL and PyTorch line shapes as tests/test_nccl_log.py records them (NCCL src/debug.cc,
#: ProcessGroupNCCL.cpp); INFO lines are read and parsed but make no event, WARN lines do
_INFO = (
    "{host}:{pid}:{pid} [{gpu}] NCCL INFO Channel {ch:02d}/0 : {gpu}[{gpu}] -> {peer}[{gpu}] "
    "[send] via NET/IB/{gpu}/GDRDMA"
)
_WARN = (
    "{host}:{pid}:{tid} [{gpu}] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
    "peer 10.40.2.{peer}<53818> with error 12, opcode 0, len 0, vendor err 129"
)
#: one WARN in 20 carries a credential (a launcher's environment next to the error), so the
#: analysis path runs, not only the pre-filter
_WARN_SECRET = _WARN + " HF_TOKEN=hf_{tok}"
_KERNEL = "Dec  4 15:00:00 bench-node kernel: [ {t:.3f}] {msg}"
_KERNEL_MSGS = (
    "mlx5_core 0000:3b:00.0: mlx5_fw_tracer_handle_traces:736:(pid 0): FW Tracer on",
    "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=python3, Graphics Exception",
    'audit: type=1400 audit(1733324400.123:42): apparmor="STATUS" operation="profile_load"',
)


def write_logs(logs: Path, ranks: int, nccl_per_rank_s: float, kernel_s: float) -> int:
    """The writer process: append lines at the given rates until killed."""
    import random

    rnd = random.Random(7)
    files = [open(logs / f"nccl.bench-node.{4000 + r}.log", "a") for r in range(ranks)]  # noqa: SIM115
    kern = open(logs / "kern.log", "a")  # noqa: SIM115
    start = time.monotonic()
    written_nccl = written_kern = n = 0
    while True:
        now = time.monotonic() - start
        while written_nccl < now * nccl_per_rank_s * ranks:
            r = written_nccl % ranks
            n += 1
            fields = {"host": "bench-node", "pid": 4000 + r, "tid": 4100 + r, "gpu": r}
            if n % 10 == 0:  # 10% WARN (pessimistic: WARN is ~0/s on a healthy job)
                tok = "".join(
                    rnd.choices("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", k=34)
                )
                line = (_WARN_SECRET if n % 200 == 0 else _WARN).format(
                    peer=rnd.randrange(1, 250), tok=tok, **fields
                )
            else:
                line = _INFO.format(ch=n % 32, peer=(r + 8) % 64, **fields)
            files[r].write(line + "\n")
            files[r].flush()
            written_nccl += 1
        while written_kern < now * kernel_s:
            # one Xid in 10 lines (pessimistic: a healthy node logs none)
            msg = _KERNEL_MSGS[1 if written_kern % 10 == 5 else 2 * (written_kern % 2)]
            kern.write(_KERNEL.format(t=1000 + now, msg=msg) + "\n")
            kern.flush()
            written_kern += 1
        time.sleep(0.05)


def _share(args: argparse.Namespace, tmp: Path, tag: str, redaction: bool) -> dict[str, float]:
    """One agent with the log readers at the real 1 s interval: process CPU / wall."""
    import subprocess

    logs = tmp / f"logs-{tag}"
    logs.mkdir()
    writer = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--write-logs",
            str(logs),
            "--gpus",
            str(args.gpus),
            "--nccl-lines-per-rank-s",
            str(args.nccl_lines_per_rank_s),
            "--kernel-lines-s",
            str(args.kernel_lines_s),
        ]
    )
    try:
        time.sleep(1.0)  # the files exist before the agent's first poll
        agent, _, _ = make_agent(args, 1.0, tmp, tag, redaction=redaction, logs=logs)
        agent.start()
        try:
            time.sleep(3.0)  # warm-up: first inventory, first reads, caches
            before = agent.stats()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            time.sleep(args.redaction_compare)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            after = agent.stats()
        finally:
            final = agent.stop()
    finally:
        writer.kill()
        writer.wait()
    by = {c.name: c.events for c in after.collectors}
    was = {c.name: c.events for c in before.collectors}
    events = {name: (by[name] - was.get(name, 0)) / wall for name in by}
    return {
        "core_share": cpu / wall,
        "cpu_s": cpu,
        "wall_s": wall,
        "events_per_s": sum(events.values()),
        "nccl_events_per_s": events.get("nccl_log", 0.0),
        "kernel_events_per_s": events.get("kernel_log", 0.0),
        "delivered": float(final.delivered),
        "sampled": float(final.sampled),
    }


def redaction_compare(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for i in range(args.rounds):  # alternate, so drift in the machine's load hits both
        for mode in ("off", "on") if i % 2 else ("on", "off"):
            r = _share(args, tmp, f"{mode}{i}", redaction=mode == "on")
            runs[mode].append(r)
            print(
                f"  redaction {mode:<3} round {i}: {r['core_share'] * 100:.3f}% of a core, "
                f"{r['events_per_s']:.1f} events/s ({r['nccl_events_per_s']:.1f} from NCCL logs, "
                f"{r['kernel_events_per_s']:.1f} from the kernel log)"
            )
    on = sum(r["cpu_s"] for r in runs["on"]) / sum(r["wall_s"] for r in runs["on"])
    off = sum(r["cpu_s"] for r in runs["off"]) / sum(r["wall_s"] for r in runs["off"])
    print(
        f"\nlight redaction on: {on * 100:.3f}% of one core, off: {off * 100:.3f}%, "
        f"ratio {on / off:.2f}; goal < {GOAL_CORE_FRACTION:.0%}"
    )
    return {
        "core_share_redaction_on": on,
        "core_share_redaction_off": off,
        "ratio_on_off": on / off,
        "goal_core_share": GOAL_CORE_FRACTION,
        "meets_goal": on < GOAL_CORE_FRACTION,
        "runs": runs,
    }


def light_throughput(duration_s: float, seed: int = 11) -> dict[str, object]:
    """Fields/s on one core, light mode against the stream stage's mode, on the realistic
    telemetry mix of bench/redaction_throughput.py (same events, same process, in turn)."""
    import importlib.util

    from rankscope.redaction.light import LightRedactor
    from rankscope.redaction.rules import load_rules
    from rankscope.redaction.stage import RedactionStage

    spec = importlib.util.spec_from_file_location(
        "redaction_throughput", ROOT / "bench" / "redaction_throughput.py"
    )
    assert spec is not None and spec.loader is not None
    mix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mix)
    rules = load_rules()
    events = mix.build_events(duration_s, seed)
    records = mix.batches(events, 200)
    out: dict[str, object] = {"events": len(events)}
    results: dict[str, list[Event]] = {}
    modes = {
        "stream": lambda: RedactionStage(rules, mix.KEY),
        "light_with_key": lambda: RedactionStage(
            rules, mix.KEY, LightRedactor(rules, mix.KEY), stage="agent"
        ),
        "light_no_key": lambda: RedactionStage(
            rules, None, LightRedactor(rules, None), stage="agent"
        ),
    }
    for name, build in modes.items():
        stage = build()
        t0 = time.process_time()
        done = [stage.process(b, f"bench:0:{i}") for i, b in enumerate(records)]
        spent = time.process_time() - t0
        results[name] = [ev for r in done for ev in r.events]
        out[name] = {
            "fields": stage.stats.values_seen,
            "cpu_s": round(spent, 3),
            "fields_per_s": round(stage.stats.values_seen / spent),
            "analysed": stage.redactor.analyzed,
            "prefiltered": stage.redactor.prefiltered,
            "cache_hits": stage.stats.cache_hits,
        }
        print(f"  {name:<15} {stage.stats.values_seen / spent:>10,.0f} fields/s ({spent:.2f}s CPU)")
    out["light_equals_stream"] = results["light_with_key"] == results["stream"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--fast-interval", type=float, default=0.01)
    parser.add_argument("--realtime", type=float, default=0.0, help="seconds; 0 = skip")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hcas", type=int, default=4)
    parser.add_argument("--bootstrap", default=None, help="Kafka to publish to; omit: spool only")
    parser.add_argument("--synthetic", action="store_true", help="skip the real collectors")
    parser.add_argument(
        "--redaction-compare", type=float, default=0.0, help="seconds per agent; 0 = skip"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--nccl-lines-per-rank-s",
        type=float,
        default=5.0,
        help="NCCL log lines per rank per second (10%% WARN)",
    )
    parser.add_argument("--kernel-lines-s", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None, help="write the comparison here")
    parser.add_argument(
        "--throughput", type=float, default=0.0, help="simulated seconds of the telemetry mix"
    )
    parser.add_argument("--write-logs", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_logs is not None:
        return write_logs(
            args.write_logs, args.gpus, args.nccl_lines_per_rank_s, args.kernel_lines_s
        )
    with tempfile.TemporaryDirectory(prefix="rankscope-agent-bench-") as tmp:
        if args.cycles > 0:
            back_to_back(args, Path(tmp))
        if args.realtime > 0:
            real_time(args, Path(tmp))
        if args.redaction_compare > 0:
            result = redaction_compare(args, Path(tmp))
            if args.throughput > 0:
                print("\nredaction throughput on one core (bench/redaction_throughput.py mix):")
                result["throughput"] = light_throughput(args.throughput)
            if args.json is not None:
                import json
                import platform

                result = {
                    "bench": "agent_cpu light redaction (issue 16)",
                    "command": " ".join(["bench/agent_cpu.py", *(argv or sys.argv[1:])]),
                    "gpus": args.gpus,
                    "hcas": args.hcas,
                    "interval_s": 1.0,
                    "nccl_lines_per_rank_s": args.nccl_lines_per_rank_s,
                    "nccl_warn_fraction": 0.1,
                    "kernel_lines_s": args.kernel_lines_s,
                    "seconds_per_run": args.redaction_compare,
                    "rounds": args.rounds,
                    "python": platform.python_version(),
                    **result,
                }
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(result, indent=2) + "\n")
                print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
