"""The measured inputs of the capacity model (docs/capacity.md, issue 21).

One run measures, on this checkout's code, with the local Kafka broker and chDB engine:

* Kafka bytes per event on disk (= on the wire from the producer: the broker stores the
  producer's compressed record batches as they are), per raw event kind with the publisher's
  configured compression, batched as a replay publishes (a job's events per second of event time)
  and as a node agent does (one node's events per poll: ``--agent-batch`` events);
* the whole pipeline on two data sets (the demo's job; an eval-like 512-rank job with a fault,
  inventory and fabric counters): bytes per event on every topic, worker events per worker CPU
  second, sink rows per sink CPU second, and ClickHouse bytes per event after compression per
  table (``system.parts``, after ``OPTIMIZE ... FINAL`` so each table is in merged parts as it
  would be after a day of merges);
* the event mix per GPU per second from the simulator's defaults and from the agent's defaults.

docs/capacity.md is generated from the JSON (``bench/capacity_doc.py``), so re-running this after
a change to the worker updates the doc's figures.

    .venv/bin/python bench/capacity_inputs.py --json bench/results/capacity_inputs.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scale_out import EVENT_TABLES, cpu_seconds, endpoints, git_commit, stored, worker_counter
from rankscope.collectors.agent.config import AgentConfig
from rankscope.collectors.fabric_counters import FabricCollectorConfig
from rankscope.collectors.gpu.config import GpuCollectorConfig
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.demo import DemoOptions
from rankscope.demo import _events as demo_events
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event
from rankscope.services.kafka import ensure_topics
from rankscope.simulation.fault_suite import scenario_suite
from rankscope.simulation.faults import simulate_with_faults
from rankscope.simulation.simulator import SimulationConfig, simulate
from rankscope.sinks.clickhouse import connect, migrate, storage_tables

NS = 1_000_000_000
EVENT_TABLES_ALL = set(EVENT_TABLES)


def topic_bytes(services: Path, topic: str) -> int:
    """Bytes of a topic's log segments on the local broker (every partition)."""
    return sum(
        seg.stat().st_size
        for part in services.rglob(f"{topic}-*")
        if part.is_dir() and part.name.rsplit("-", 1)[1].isdigit()
        if part.name.rsplit("-", 1)[0] == topic
        for seg in part.glob("*.log")
    )


def publish(bootstrap: str, prefix: str, events: list[Event], **config: Any) -> None:
    cfg = PublisherConfig(bootstrap=bootstrap, topic_prefix=prefix, **config)
    with Publisher(cfg) as pub:
        pub.publish(events)
        pub.flush(120)


def kafka_per_kind(
    bootstrap: str, services: Path, events: list[Event], agent_batch: int
) -> dict[str, Any]:
    """Raw-topic bytes per event of each kind, alone on a topic of its own."""
    by_kind: dict[str, list[Event]] = {}
    for ev in events:
        by_kind.setdefault(ev.kind, []).append(ev)
    batchings = {
        "replay": {"max_batch_event_span_s": 1.0},
        "agent": {"max_batch_event_span_s": 1.0, "max_batch_events": agent_batch},
    }
    out: dict[str, Any] = {"compression": PublisherConfig(bootstrap="x").compression}
    for batching, extra in batchings.items():
        per_kind = {}
        for kind, evs in sorted(by_kind.items()):
            prefix = f"ck{uuid.uuid4().hex[:6]}"
            topic = f"{prefix}.raw.events"
            ensure_topics(bootstrap, {topic: 1})
            publish(bootstrap, prefix, evs, **extra)
            size = topic_bytes(services, topic)
            per_kind[kind] = {"events": len(evs), "bytes_per_event": round(size / len(evs), 1)}
        out[batching] = per_kind
    return out


def clickhouse_bytes(client: Any, db: str, events: int) -> dict[str, Any]:
    """Compressed bytes per table (merged parts), per row and per raw event."""
    tables = [t for t in storage_tables(client, db) if t != "schema_migrations"]
    for t in tables:
        client.command(f"OPTIMIZE TABLE {db}.{t} FINAL")
    rows = client.query(
        "SELECT table, sum(rows), sum(data_compressed_bytes), sum(data_uncompressed_bytes) "
        "FROM system.parts WHERE database = %(d)s AND active GROUP BY table ORDER BY table",
        parameters={"d": db},
    ).result_rows
    per_table = {
        str(t): {
            "rows": int(r),
            "compressed_bytes": int(c),
            "uncompressed_bytes": int(u),
            "bytes_per_row": round(c / r, 1) if r else None,
            "bytes_per_event": round(c / events, 2),
        }
        for t, r, c, u in rows
    }
    rollups = {"gpu_minute", "node_hour"}
    raw = sum(v["compressed_bytes"] for k, v in per_table.items() if k in EVENT_TABLES_ALL)
    roll = sum(v["compressed_bytes"] for k, v in per_table.items() if k in rollups)
    total = sum(v["compressed_bytes"] for v in per_table.values())
    return {
        "tables": per_table,
        "raw_event_tables_bytes_per_event": round(raw / events, 2),
        "rollups_bytes_per_event": round(roll / events, 3),
        "derived_bytes_per_event": round((total - raw - roll) / events, 3),
        "total_bytes_per_event": round(total / events, 2),
    }


def pipeline_run(
    bootstrap: str, ch_url: str, home: Path, services: Path, name: str, events: list[Event]
) -> dict[str, Any]:
    """The whole pipeline over ``events`` (one worker): CPU per stage, bytes per topic and table."""
    tag = f"cap{name[:4]}{uuid.uuid4().hex[:6]}"
    cfg = PipelineConfig(
        bootstrap=bootstrap,
        clickhouse_url=ch_url,
        topic_prefix=tag,
        database=tag,
        home=home / tag,
        actuators=False,
        env={"RANKSCOPE_METRICS_PORT": "0"},
    )
    create_pipeline_topics(bootstrap, cfg.topics, partitions=4)
    client = connect(ch_url)
    migrate(client, cfg.database)
    n = len(events)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(timeout_s=180)
        assert pipeline.worker.proc is not None and pipeline.sink.proc is not None
        wpid, spid = pipeline.worker.proc.pid, pipeline.sink.proc.pid
        w0, s0 = cpu_seconds(wpid), cpu_seconds(spid)
        t0 = time.perf_counter()
        publish(bootstrap, tag, events, max_batch_event_span_s=1.0)
        deadline = time.monotonic() + 900
        while stored(client, cfg.database) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: not all {n} events stored in 900 s")
            time.sleep(0.2)
        e2e_s = time.perf_counter() - t0
        pipeline.wait_drained(timeout_s=300)
        worker_cpu, sink_cpu = cpu_seconds(wpid) - w0, cpu_seconds(spid) - s0
        valid = worker_counter(pipeline.worker.log_path, "rankscope_worker_events_valid")
    sink_tables = [
        t
        for t in storage_tables(client, cfg.database)
        if t not in {"gpu_minute", "node_hour", "schema_migrations"}
    ]
    sink_rows = sum(
        int(client.query(f"SELECT count() FROM {cfg.database}.{t}").result_rows[0][0])
        for t in sink_tables
    )
    kafka = {
        t: round(topic_bytes(services, t) / n, 2)
        for t in [
            cfg.topics.raw,
            cfg.topics.events,
            *cfg.topics.worker_outputs,
            cfg.topics.worker_state,
        ]
    }
    return {
        "events": n,
        "events_valid": int(valid),
        "kinds": dict(Counter(e.kind for e in events).most_common()),
        "e2e_seconds": round(e2e_s, 2),
        "worker_cpu_seconds": round(worker_cpu, 2),
        "events_per_worker_cpu_second": round(n / worker_cpu),
        "sink_cpu_seconds": round(sink_cpu, 2),
        "sink_rows": sink_rows,
        "sink_rows_per_sink_cpu_second": round(sink_rows / sink_cpu),
        "kafka_bytes_per_event_by_topic": {k.removeprefix(tag + "."): v for k, v in kafka.items()},
        "kafka_bytes_per_event_total": round(sum(kafka.values()), 2),
        "clickhouse": clickhouse_bytes(client, cfg.database, n),
    }


def per_gpu_second(events: list[Event], gpus: int, seconds: float) -> dict[str, float]:
    counts = Counter(e.kind for e in events)
    mix = {k: round(v / gpus / seconds, 4) for k, v in counts.most_common()}
    mix["total"] = round(sum(counts.values()) / gpus / seconds, 4)
    return mix


def event_mix(eval_config: SimulationConfig) -> dict[str, Any]:
    """Events per GPU per second: the simulator's defaults, the eval job, the agent's defaults."""
    sim = SimulationConfig(ranks=64, duration_s=120.0, start_ns=1_767_225_600 * NS)

    def default(model: Any, field: str) -> float:
        return float(model.model_fields[field].default)

    gpus_per_node = sim.gpus_per_node
    hcas = sim.hcas_per_node
    node_per_gpu = 1 / gpus_per_node
    agent_mix = {
        # one sample per GPU per poll (collectors/gpu/config.py)
        "gpu_sample": 1 / default(GpuCollectorConfig, "interval_s"),
        # per node (collectors/agent/config.py)
        "heartbeat": node_per_gpu / default(AgentConfig, "heartbeat_interval_s"),
        "node_inventory": node_per_gpu / default(AgentConfig, "inventory_interval_s"),
        # one record per HCA port per poll (collectors/fabric_counters.py), rail-optimised nodes
        "fabric_counters": hcas * node_per_gpu / default(FabricCollectorConfig, "interval_s"),
    }
    agent_mix["total_without_spans"] = sum(agent_mix.values())
    sim_events = list(simulate(sim))
    eval_events = list(simulate_with_faults(eval_config, [])[0])
    return {
        "simulator_defaults": {
            "config": "SimulationConfig(ranks=64, duration_s=120) defaults",
            "per_gpu_per_s": per_gpu_second(sim_events, sim.ranks, sim.duration_s),
        },
        "eval_like": {
            "config": "eval suite job, no fault: inventory, fabric counters every 2 s",
            "per_gpu_per_s": per_gpu_second(eval_events, eval_config.ranks, eval_config.duration_s),
        },
        "agent_defaults": {
            "assumes": f"{gpus_per_node} GPUs and {hcas} HCA ports per node; spans come from "
            "the training process (OTel), one per phase per step: see the simulator's span rate",
            "per_gpu_per_s": {k: round(v, 4) for k, v in agent_mix.items()},
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512, help="the eval-like job's ranks")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--agent-batch", type=int, default=8, help="events per message, agent-like")
    ap.add_argument("--e2e-json", type=Path, default=Path("bench/results/e2e_throughput.json"))
    ap.add_argument("--bootstrap")
    ap.add_argument("--clickhouse-url")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if args.bootstrap or args.clickhouse_url:
        ap.error(
            "bytes on the broker are read from the local broker's log directory: run it "
            "with the local services (no --bootstrap / --clickhouse-url)"
        )

    home = Path(tempfile.mkdtemp(prefix="rankscope-capacity-"))
    services = home / "services"
    base = next(
        c
        for c in scenario_suite(args.ranks, [0], duration_s=args.duration)
        if c.name.startswith("gpu_fell_off_bus/")
    )
    start = (time.time_ns() // NS - 600) * NS
    eval_cfg = base.config.model_copy(
        update={"job_id": f"cap-eval-{uuid.uuid4().hex[:6]}", "start_ns": start}
    )
    eval_events = list(simulate_with_faults(eval_cfg, base.faults)[0])
    opts = DemoOptions()
    demo_cfg = SimulationConfig(
        ranks=opts.ranks, duration_s=opts.duration_s, seed=opts.seed,
        job_id=f"cap-demo-{uuid.uuid4().hex[:6]}", start_ns=start,
    )  # fmt: skip
    demo, _ = demo_events(demo_cfg, opts)
    figures: dict[str, Any] = {
        "command": "bench/capacity_inputs.py " + " ".join(sys.argv[1:]),
        "commit": git_commit(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with endpoints(args, home) as (bootstrap, ch_url):
        figures["kafka_raw_per_kind"] = kafka_per_kind(
            bootstrap, services, eval_events, args.agent_batch
        )
        figures["pipeline"] = {
            "demo": {
                "data": f"rankscope demo's job: {opts.ranks} ranks x {opts.duration_s:g} s, "
                f"{opts.fault}",
                **pipeline_run(bootstrap, ch_url, home, services, "demo", demo),
            },
            "eval": {
                "data": f"eval-like: {args.ranks} ranks x {args.duration:g} s, {base.name}",
                **pipeline_run(bootstrap, ch_url, home, services, "eval", eval_events),
            },
        }
    figures["event_mix"] = event_mix(eval_cfg)
    if args.e2e_json.exists():
        figures["e2e_bench"] = {"file": str(args.e2e_json), **json.loads(args.e2e_json.read_text())}
    text = json.dumps(figures, indent=2) + "\n"
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
