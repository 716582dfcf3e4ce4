"""Scale-out: worker CPU seconds per event with 1 and with 2 stream worker processes (issue 21).

The same load (512 ranks, as eight 64-rank jobs of the evaluation suite, one job per raw
partition so both workers get work) is published to a fresh deployment twice: once read by one
worker, once by two workers in one consumer group. Each run measures every worker's CPU seconds
(utime + stime from /proc) from a drained, warmed-up pipeline until everything is stored, and
each worker's events (its ``rankscope_worker_events_valid`` counter, scraped from /metrics).
On a 2-core machine shared with other work the events/s move with the machine; CPU seconds per
event is the figure that must stay flat (acceptance: 2 workers within 10% of 1). The findings
(detections and incidents rows) of the two runs are compared and must be equal.

After each run every worker's CPU is read again over ``IDLE_S`` seconds with nothing to do: what
a worker costs per second for being there (timers, fetch polls, heartbeats). Over a run of ~30 s
that cost is counted once per worker, so two workers pay it twice; the figures also give CPU per
event net of it, the per-event part alone. The acceptance reads the plain figure.

A job's events share one partition (they are keyed by job), so a worker's parallelism is jobs,
not ranks: a single 512-rank job would leave the second worker idle.

    .venv/bin/python bench/scale_out.py --json bench/results/scale_out_issue21.json
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import asdict, astuple, dataclass, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import Consumer, TopicPartition

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.kafka_security import kafka_config
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event
from rankscope.simulation.fault_suite import SuiteCase, scenario_suite
from rankscope.simulation.faults import simulate_with_faults
from rankscope.sinks.clickhouse import connect, migrate

#: the tables the sink writes raw events to, one per kind (every event is one row)
EVENT_TABLES = [
    "spans",
    "gpu_samples",
    "gpu_events",
    "heartbeats",
    "scheduler_events",
    "fabric_counters",
    "fabric_events",
    "comm_events",
    "node_inventory",
    "agent_events",
]
#: suite variants with something to find (and one with nothing), one job each
VARIANTS = [
    "gpu_fell_off_bus",
    "ecc_dbe",
    "nvlink_error",
    "ib_link_flap",
    "thermal_straggler",
    "input_straggler",
    "hang",
    "noise",
]
NS = 1_000_000_000
#: seconds each worker's CPU is read with nothing to do, after a run (its per-process cost)
IDLE_S = 10.0


@dataclass
class Load:
    cases: list[SuiteCase]
    events: list[Event]
    partitions: int


def job_ids(n: int, partitions: int, tag: str) -> list[str]:
    """``n`` job ids that land on ``n`` different partitions under the publisher's partitioner
    (murmur2, as Kafka's Java client and aiokafka: ``DefaultPartitioner``)."""
    taken: dict[int, str] = {}
    everything = list(range(partitions))
    i = 0
    while len(taken) < n:
        jid = f"{tag}-{i}"
        taken.setdefault(DefaultPartitioner()(jid.encode(), everything, everything), jid)
        i += 1
    return [taken[p] for p in sorted(taken)]


def build_load(ranks: int, jobs: int, duration_s: float, partitions: int, tag: str) -> Load:
    """The suite's cases for VARIANTS at ``ranks // jobs`` ranks, job ids spread over the
    partitions, starting a few minutes ago; events of all jobs merged in event-time order (as a
    fleet's agents would deliver them)."""
    per_job = ranks // jobs
    suite = {c.name.split("/")[0]: c for c in scenario_suite(per_job, [0], duration_s=duration_s)}
    start = (time.time_ns() // NS - 600) * NS
    ids = job_ids(jobs, partitions, tag)
    cases = []
    for i in range(jobs):
        base = suite[VARIANTS[i % len(VARIANTS)]]
        config = base.config.model_copy(update={"job_id": ids[i], "start_ns": start})
        cases.append(base._replace(config=config, name=f"{base.name}->{ids[i]}"))
    streams = [simulate_with_faults(c.config, c.faults)[0] for c in cases]
    events = list(heapq.merge(*streams, key=lambda e: e.ts))
    return Load(cases, events, partitions)


@dataclass(frozen=True)
class CpuSplit:
    """Where a process's CPU went: user or kernel, its main thread or the others (faust runs
    the consumer on a thread of its own), and how often it was switched out. Two workers that
    cost more per event than one must pay it somewhere; this says where."""

    user_s: float
    system_s: float
    main_thread_s: float
    other_threads_s: float
    voluntary_switches: int
    involuntary_switches: int

    @classmethod
    def read(cls, pid: int) -> CpuSplit:
        tick = os.sysconf("SC_CLK_TCK")
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        main = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        user, system = int(stat[11]) / tick, int(stat[12]) / tick
        main_s = (int(main[11]) + int(main[12])) / tick
        return cls(
            user_s=user,
            system_s=system,
            main_thread_s=main_s,
            other_threads_s=user + system - main_s,
            voluntary_switches=int(status["voluntary_ctxt_switches"]),
            involuntary_switches=int(status["nonvoluntary_ctxt_switches"]),
        )

    def minus(self, before: CpuSplit) -> CpuSplit:
        return CpuSplit(
            *(round(a - b, 2) for a, b in zip(astuple(self), astuple(before), strict=True))
        )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    split = CpuSplit.read(pid)
    return split.user_s + split.system_s


_PORT = re.compile(r"worker metrics on port (\d+)")


def worker_counter(log: Path, name: str) -> float:
    """One counter of a worker, from the /metrics endpoint its log names."""
    ports = _PORT.findall(log.read_text(errors="replace"))
    if not ports:
        raise RuntimeError(f"no metrics port in {log}")
    with urllib.request.urlopen(f"http://127.0.0.1:{ports[-1]}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f"{name}_total") or line.startswith(f"{name}_total{{")
    )


def stored(client: Any, db: str) -> int:
    q = " + ".join(f"(SELECT count() FROM {db}.{t})" for t in EVENT_TABLES)
    return int(client.query(f"SELECT {q}").result_rows[0][0])


def findings(client: Any, db: str) -> dict[str, list[list[Any]]]:
    """Detections and incidents as sorted rows of the columns the analysis decides (event
    time; no wall-clock insert times)."""
    dets = client.query(
        f"SELECT detection_id, detection_type, job_id, node, rank, onset_ts_ns, detected_ts_ns "
        f"FROM {db}.detections FINAL ORDER BY detection_id"
    ).result_rows
    incs = client.query(
        f"SELECT incident_id, cause_class, job_id, node, rank, first_cause_ts_ns, "
        f"first_symptom_ts_ns, attributed_ts_ns FROM {db}.incidents FINAL ORDER BY incident_id"
    ).result_rows
    return {"detections": [list(r) for r in dets], "incidents": [list(r) for r in incs]}


def partition_records(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({**kafka_config(bootstrap), "group.id": f"bench-wm-{uuid.uuid4().hex[:6]}"})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        c.close()


def publish(bootstrap: str, prefix: str, events: list[Event]) -> None:
    config = PublisherConfig(bootstrap=bootstrap, topic_prefix=prefix, max_batch_event_span_s=1.0)
    with Publisher(config) as pub:
        pub.publish(events)
        pub.flush(120)


def warm_events(tag: str, jobs: int) -> list[Event]:
    """Small jobs on every partition: each worker imports, compiles and allocates before the
    measured run (the warm-up's CPU is not counted)."""
    from rankscope.simulation.simulator import SimulationConfig, simulate

    start = (time.time_ns() // NS - 1200) * NS
    streams = [
        simulate(SimulationConfig(job_id=jid, ranks=8, duration_s=20, seed=3, start_ns=start))
        for jid in job_ids(jobs, jobs, f"{tag}w")
    ]
    return list(heapq.merge(*streams, key=lambda e: e.ts))


@contextlib.contextmanager
def warmed_pipeline(
    bootstrap: str,
    ch_url: str,
    home: Path,
    tag: str,
    workers: int,
    partitions: int,
    env: dict[str, str] | None = None,
) -> Iterator[Pipeline]:
    """A fresh deployment (its own topics and database) with ``workers`` stream workers, warmed
    with small jobs on every partition and drained: what a measurement starts from."""
    cfg = PipelineConfig(
        bootstrap=bootstrap,
        clickhouse_url=ch_url,
        topic_prefix=tag,
        database=tag,
        home=home / tag,
        workers=workers,
        actuators=False,
        env={"RANKSCOPE_METRICS_PORT": "0", **(env or {})},
    )
    create_pipeline_topics(bootstrap, cfg.topics, partitions=partitions)
    migrate(connect(ch_url), cfg.database)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(timeout_s=180)
        publish(bootstrap, tag, warm_events(tag, partitions))
        pipeline.wait_drained(timeout_s=300)
        yield pipeline


def run(bootstrap: str, ch_url: str, home: Path, load: Load, workers: int) -> dict[str, Any]:
    tag = f"so{workers}w{uuid.uuid4().hex[:6]}"
    client = connect(ch_url)
    n = len(load.events)
    with warmed_pipeline(bootstrap, ch_url, home, tag, workers, load.partitions) as pipeline:
        db, raw_topic = pipeline.config.database, pipeline.config.topics.raw
        pids = [w.proc.pid for w in pipeline.workers if w.proc is not None]
        logs = [w.log_path for w in pipeline.workers]
        log_marks = [p.stat().st_size for p in logs]
        valid0 = [worker_counter(p, "rankscope_worker_events_valid") for p in logs]
        windows0 = [worker_counter(p, "rankscope_worker_window_records_in") for p in logs]
        again0 = [worker_counter(p, "rankscope_worker_events_parsed_again") for p in logs]
        base = stored(client, db)
        split0 = [CpuSplit.read(p) for p in pids]
        sink0 = cpu_seconds(pipeline.sink.proc.pid) if pipeline.sink.proc else 0.0
        t0 = time.perf_counter()
        publish(bootstrap, tag, load.events)
        deadline = time.monotonic() + 900
        while stored(client, db) - base < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} worker(s): not all {n} events stored in 900 s")
            time.sleep(0.2)
        e2e_s = time.perf_counter() - t0
        pipeline.wait_drained(timeout_s=300)
        split = [CpuSplit.read(p).minus(b) for p, b in zip(pids, split0, strict=True)]
        cpu = [s.user_s + s.system_s for s in split]
        window_s = time.perf_counter() - t0
        sink_cpu = (cpu_seconds(pipeline.sink.proc.pid) if pipeline.sink.proc else 0.0) - sink0
        # what each worker costs with nothing to read (timers, fetch polls, heartbeats): a
        # per-process cost, not a per-event one, counted over the whole window above
        idle0 = [cpu_seconds(p) for p in pids]
        time.sleep(IDLE_S)
        idle = [(cpu_seconds(p) - c) / IDLE_S for p, c in zip(pids, idle0, strict=True)]
        valid = [
            worker_counter(p, "rankscope_worker_events_valid") - v
            for p, v in zip(logs, valid0, strict=True)
        ]
        windows = [
            worker_counter(p, "rankscope_worker_window_records_in") - v
            for p, v in zip(logs, windows0, strict=True)
        ]
        # events records the windows agent parsed because its own validate agent's handoff did
        # not hold them (another worker validated them, or the handoff was full)
        again = [
            worker_counter(p, "rankscope_worker_events_parsed_again") - v
            for p, v in zip(logs, again0, strict=True)
        ]
        tails = [p.read_text(errors="replace")[m:] for p, m in zip(logs, log_marks, strict=True)]
        found = findings(client, db)
    raw_per_partition = partition_records(bootstrap, raw_topic, load.partitions)
    total_cpu = sum(cpu)
    return {
        "workers": workers,
        "topic_prefix": tag,
        "events": n,
        "e2e_seconds": round(e2e_s, 2),
        "events_per_s": round(n / e2e_s),
        "worker_cpu_seconds": [round(c, 2) for c in cpu],
        "worker_cpu_seconds_total": round(total_cpu, 2),
        "worker_cpu_us_per_event": round(total_cpu / n * 1e6, 2),
        "worker_cpu_split": [asdict(s) for s in split],
        "events_per_worker_cpu_second": round(n / total_cpu),
        "cpu_window_seconds": round(window_s, 2),
        "worker_idle_cpu_per_second": [round(r, 4) for r in idle],
        "worker_cpu_us_per_event_net_of_idle": round(
            (total_cpu - sum(idle) * window_s) / n * 1e6, 2
        ),
        "sink_cpu_seconds": round(sink_cpu, 2),
        "events_valid_per_worker": [int(v) for v in valid],
        "window_records_in_per_worker": [int(w) for w in windows],
        "events_records_parsed_again_per_worker": [int(a) for a in again],
        "raw_records_per_partition_incl_warmup": raw_per_partition,
        "restores_during_run": sum(t.count("restored the analysis of partition") for t in tails),
        "rebalances_during_run": sum(t.count("Rebalance") for t in tails),
        "detections": len(found["detections"]),
        "incidents": len(found["incidents"]),
        "_findings": found,
    }


@contextlib.contextmanager
def endpoints(args: argparse.Namespace, home: Path) -> Iterator[tuple[str, str]]:
    if args.bootstrap and args.clickhouse_url:
        yield args.bootstrap, args.clickhouse_url
        return
    from rankscope.services import local_services

    with local_services(home / "services", args.bootstrap, args.clickhouse_url) as eps:
        yield eps.kafka_bootstrap, eps.clickhouse_url


def git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def summarise(
    runs: list[dict[str, Any]], args: argparse.Namespace, load: Load, complete: bool
) -> dict[str, Any]:
    """The figures of the pairs run so far (``complete`` once every round has run)."""
    one = [r for r in runs if r["workers"] == 1]
    two = [r for r in runs if r["workers"] == 2]
    identical = all(r["_findings"] == one[0]["_findings"] for r in runs)
    per_event = {
        w: sum(r["worker_cpu_seconds_total"] for r in rs) / sum(r["events"] for r in rs)
        for w, rs in ((1, one), (2, two))
    }
    ratio = per_event[2] / per_event[1]
    net = {
        w: sum(r["worker_cpu_us_per_event_net_of_idle"] * r["events"] for r in rs)
        / sum(r["events"] for r in rs)
        for w, rs in ((1, one), (2, two))
    }
    net_ratio = net[2] / net[1]
    # the same CPU, split: which part grows when the events are shared by two workers
    split_per_event = {
        w: {
            key: round(
                sum(sp[key] for r in rs for sp in r["worker_cpu_split"])
                / sum(r["events"] for r in rs)
                * (1e6 if key.endswith("_s") else 1e3),
                2,
            )
            for key in (f.name for f in fields(CpuSplit))
        }
        for w, rs in ((1, one), (2, two))
    }
    figures = {
        "command": "bench/scale_out.py " + " ".join(sys.argv[1:]),
        "commit": git_commit(),
        "cpus": os.cpu_count(),
        "load": {
            "ranks": args.ranks,
            "jobs": [c.name for c in load.cases],
            "duration_s": args.duration,
            "partitions": args.partitions,
            "events": len(load.events),
        },
        "runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs],
        "cpu_per_event_ratio_2_to_1": round(ratio, 3),
        "acceptance_within_10_percent": ratio <= 1.10,
        # each worker's idle cost over its window taken out: the per-event part alone
        "cpu_per_event_ratio_2_to_1_net_of_idle": round(net_ratio, 3),
        # us per event for the seconds, per 1,000 events for the context switches
        "worker_cpu_split_per_event": split_per_event,
        "findings_identical": identical,
        "detections": one[0]["detections"],
        "incidents": one[0]["incidents"],
        "complete": complete,
    }
    return figures


def write(path: Path | None, figures: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument(
        "--rounds", type=int, default=1, help="1-worker/2-worker pairs, in the order 1-2, 2-1, ..."
    )
    ap.add_argument("--bootstrap")
    ap.add_argument("--clickhouse-url")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the stage processes and local services are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.jobs > args.partitions:
        ap.error("--jobs must not exceed --partitions (one job per partition)")

    home = Path(tempfile.mkdtemp(prefix="rankscope-scaleout-"))
    load = build_load(args.ranks, args.jobs, args.duration, args.partitions, "so")
    print(f"load: {len(load.events):,} events, {args.jobs} jobs x {args.ranks // args.jobs} ranks")
    runs: list[dict[str, Any]] = []
    with endpoints(args, home) as (bootstrap, ch_url):
        for i in range(args.rounds):
            # 1, 2 then 2, 1: a machine that speeds up or slows down over the session (it does,
            # by 15% over five rounds here) would otherwise favour whichever count runs second
            for workers in (1, 2) if i % 2 == 0 else (2, 1):
                r = run(bootstrap, ch_url, home, load, workers)
                print(
                    f"{workers} worker(s): {r['events_per_s']:,} events/s, worker CPU "
                    f"{r['worker_cpu_seconds']} s = {r['worker_cpu_us_per_event']} us/event "
                    f"({r['worker_cpu_us_per_event_net_of_idle']} net of idle at "
                    f"{r['worker_idle_cpu_per_second']} CPU s/s), "
                    f"events per worker {r['events_valid_per_worker']}, "
                    f"{r['detections']} detections, {r['incidents']} incidents"
                )
                for w, sp in enumerate(r["worker_cpu_split"]):
                    print(
                        f"  worker {w}: user {sp['user_s']} s, system {sp['system_s']} s; main "
                        f"thread {sp['main_thread_s']} s, other threads {sp['other_threads_s']} "
                        f"s; switches {sp['voluntary_switches']:,} voluntary, "
                        f"{sp['involuntary_switches']:,} involuntary"
                    )
                runs.append(r)
            # each finished pair on disk: a run that fails later loses no round
            write(args.json, summarise(runs, args, load, complete=False))
    figures = summarise(runs, args, load, complete=True)
    write(args.json, figures)
    ratio = figures["cpu_per_event_ratio_2_to_1"]
    net_ratio = figures["cpu_per_event_ratio_2_to_1_net_of_idle"]
    identical = figures["findings_identical"]
    split_per_event = figures["worker_cpu_split_per_event"]
    print(
        f"CPU per event, 2 workers / 1 worker: {ratio:.3f} "
        f"({'MET' if ratio <= 1.10 else 'NOT MET'}: within 10%); net of each worker's idle "
        f"cost: {net_ratio:.3f}; findings identical: {identical}"
    )
    for w in (1, 2):
        print(f"  {w} worker(s), per event (us; switches per 1,000 events): {split_per_event[w]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
