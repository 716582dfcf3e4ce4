"""End-to-end throughput: publisher -> Kafka -> faust worker -> Kafka -> sink -> ClickHouse rows.

Prints events/s end to end and, in the same run against the same broker, the ceiling: a bare
confluent-kafka consumer reading the same raw topics (parsing each record's JSON, nothing else).
The ratio is the number to watch; absolute figures move with the machine.

    .venv/bin/python bench/e2e_throughput.py --ranks 512 --duration 60

``--profile FILE`` samples the worker with py-spy during the measured run (folded stacks, which
``bench/worker_profile.py`` sorts into the worker's stages).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer

from rankscope.kafka_security import kafka_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event
from rankscope.services._common import pid_cmdline, pids_with
from rankscope.simulation.simulator import SimulationConfig, simulate
from rankscope.sinks.clickhouse import connect, migrate

EVENT_TABLES = ["spans", "gpu_samples", "gpu_events", "heartbeats", "scheduler_events"]


@contextlib.contextmanager
def endpoints(args: argparse.Namespace, home: Path) -> Iterator[tuple[str, str]]:
    if args.bootstrap and args.clickhouse_url:
        yield args.bootstrap, args.clickhouse_url
        return
    from rankscope.services import local_services

    with local_services(home / "services", args.bootstrap, args.clickhouse_url) as eps:
        yield eps.kafka_bootstrap, eps.clickhouse_url


def stored(client, db: str, job_id: str) -> int:  # type: ignore[no-untyped-def]
    q = " + ".join(f"(SELECT count() FROM {db}.{t} WHERE job_id = %(j)s)" for t in EVENT_TABLES)
    return int(client.query(f"SELECT {q}", parameters={"j": job_id}).result_rows[0][0])


def publish(cfg: PipelineConfig, events: list[Event]) -> tuple[int, float]:
    t0 = time.perf_counter()
    with Publisher(PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix)) as p:
        p.publish(events)
        p.flush(120)
    return len(events), time.perf_counter() - t0


def ceiling(cfg: PipelineConfig, expected_events: int) -> float:
    """A bare consumer over the raw topics: read every record, parse its JSON, count events."""
    c = Consumer(
        {
            **kafka_config(cfg.bootstrap),
            "group.id": f"bench-ceiling-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    c.subscribe(cfg.topics.all_raw)
    n = 0
    t0 = None
    deadline = time.monotonic() + 120
    while n < expected_events and time.monotonic() < deadline:
        for m in c.consume(num_messages=5000, timeout=0.5):
            if m.error():
                continue
            if t0 is None:
                t0 = time.perf_counter()
            n += len(json.loads(m.value()))
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    if n < expected_events:
        raise RuntimeError(f"ceiling consumer saw {n} of {expected_events} events")
    return n / elapsed


def find_pid(*needles: str) -> int | None:
    """The newest process whose command line holds every needle (the local services)."""
    found = [p for p in pids_with(*needles) if "e2e_throughput" not in pid_cmdline(p)]
    return max(found) if found else None


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process (Linux /proc), to show where the CPU goes."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def sampled(
    pid: int | None, out: Path | None, *, rate: int = 100, threads: bool = False
) -> Iterator[None]:
    """py-spy samples ``pid`` while the block runs (nothing when ``out`` is None). Non-blocking
    sampling: the worker is never paused, so the profile costs it (almost) no time. ``threads``:
    each stack starts with its thread's id and name."""
    if out is None or pid is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate), "--nonblocking",
         "--output", str(out), *(["--threads"] if threads else [])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        proc.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--bootstrap")
    ap.add_argument("--clickhouse-url")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--profile", type=Path, help="py-spy folded stacks of the worker, here")
    ap.add_argument(
        "--validators",
        type=int,
        default=0,
        help="run this many `rankscope validator` processes and a worker that reads only the "
        "events topic (0: the worker validates); worker CPU then counts them all",
    )
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="rankscope-bench-"))
    with endpoints(args, home) as (bootstrap, ch_url):
        tag = f"bench{uuid.uuid4().hex[:8]}"
        cfg = PipelineConfig(
            bootstrap=bootstrap,
            clickhouse_url=ch_url,
            topic_prefix=tag,
            database=tag,
            home=home,
            validators=args.validators,
        )
        create_pipeline_topics(bootstrap, cfg.topics, partitions=4)
        client = connect(ch_url)
        migrate(client, cfg.database)

        with Pipeline(cfg) as pipeline:
            # Warm up: workers joined their groups, the broker's JIT is warm, and one job of
            # ~13k events went all the way through before the clock starts.
            warm = SimulationConfig(ranks=64, duration_s=30, job_id=f"{tag}-warm", seed=1)
            n_warm, _ = publish(cfg, list(simulate(warm)))
            deadline = time.monotonic() + 120
            while stored(client, cfg.database, warm.job_id) < n_warm:
                if time.monotonic() > deadline or not (
                    pipeline.worker.alive
                    and pipeline.sink.alive
                    and all(v.alive for v in pipeline.validators)
                ):
                    raise RuntimeError(
                        f"warm-up failed:\n{pipeline.worker.log_tail()}\n{pipeline.sink.log_tail()}"
                    )
                time.sleep(0.1)

            sim = SimulationConfig(
                ranks=args.ranks, duration_s=args.duration, job_id=f"{tag}-main", seed=2
            )
            pids = {
                "worker": pipeline.worker.proc.pid if pipeline.worker.proc else None,
                "sink": pipeline.sink.proc.pid if pipeline.sink.proc else None,
                "kafka": find_pid("kafka.Kafka", str(home)),
                "clickhouse": find_pid("chdb_server", str(home)),
                "bench (publisher)": os.getpid(),
            }
            for v in pipeline.validators:
                pids[v.name] = v.proc.pid if v.proc else None
            stream_stage = ["worker", *(v.name for v in pipeline.validators)]
            cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
            events = list(simulate(sim))  # generated before the clock starts
            with sampled(pids["worker"], args.profile):
                t0 = time.perf_counter()
                n, publish_s = publish(cfg, events)
                while (have := stored(client, cfg.database, sim.job_id)) < n:
                    if time.perf_counter() - t0 > 600:
                        raise RuntimeError(f"only {have} of {n} rows after 600 s")
                    time.sleep(0.2)
                e2e_s = time.perf_counter() - t0
                cpu = {k: round(cpu_seconds(v) - cpu0[k], 2) for k, v in pids.items()}
                # Rows stored is not the worker done: its windows and analysis may still be
                # behind. The per-event cost counts all of its work on these events.
                pipeline.wait_drained(300)
                # Drained, not stored, is when the findings are complete: a worker whose windows
                # agent keeps pace stores rows later but may finish sooner.
                drained_s = time.perf_counter() - t0
                # the stream stage's CPU: the worker, and the validators when they validate
                worker_cpu = sum(cpu_seconds(pids[k]) - cpu0[k] for k in stream_stage)

        ceil = ceiling(cfg, n + n_warm)
    # ~200 MB of broker and ClickHouse data a run; kept (with the logs) only when a run fails
    shutil.rmtree(home, ignore_errors=True)
    e2e = n / e2e_s
    figures = {
        "events": n,
        "validators": args.validators,
        "publish_events_per_s": round(n / publish_s),
        "e2e_events_per_s": round(e2e),
        "ceiling_events_per_s": round(ceil),
        "ratio_to_ceiling": round(e2e / ceil, 3),
        "goal_events_per_s": 20_000,
        "cpu_seconds": cpu,
        # the second figure: what one worker core handles, whatever the machine's load
        "worker_cpu_s_until_drained": round(worker_cpu, 2),
        "drained_s": round(drained_s, 2),
        "events_per_worker_cpu_s": round(n / worker_cpu) if worker_cpu else None,
    }
    print(
        f"events: {n:,}  publish: {n / publish_s:,.0f}/s  end-to-end: {e2e:,.0f}/s "
        f"({e2e_s:.2f}s)  ceiling (bare consumer): {ceil:,.0f}/s  ratio: {e2e / ceil:.3f}  "
        f"goal: 20,000/s -> {'MET' if e2e >= 20_000 else 'NOT MET'}"
    )
    print(f"CPU seconds during the measured run: {cpu}")
    print(f"events per worker CPU second: {figures['events_per_worker_cpu_s']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
