"""What the validate stage costs outside faust: the measurement behind issue 21's redesign plan.

The worker spends ~38% of its samples in faust/aiokafka consume, commit and produce
(bench/results/worker_profile_r3.json). Before rewriting the validate stage as a plain
confluent-kafka loop, this measures what such a loop would cost per event, on one broker, in one
run, on the same records (a 512-rank simulated job on the raw topics):

- ``ceiling``: a bare consumer that parses each record's JSON (the e2e benchmark's ceiling);
- ``stage``: the same consumer plus the validator's own stage (``ValidateStage.process``:
  pydantic validation, redaction, serialisation), nothing produced;
- ``loop``: ``stage`` plus producing every output with a confluent-kafka producer (acks=all,
  ``send_outputs``) and committing a batch's offsets (``next_offsets``) only after its outputs
  were delivered (flush, then commit): what ``rankscope validator`` does per batch;
- ``worker``: ``loop`` plus the windows agent's work on the parsed events handed over in
  process (``WindowAggregator``, ``JobAnalyzer``; closed windows and findings produced): what a
  whole worker rebuilt on this loop would cost, minus the snapshots and the recovery decider.

CPU is this process's (librdkafka's threads included), per event. Compare ``worker`` with the
faust worker's per-event CPU from ``bench/e2e_throughput.py`` (a different run: compare the
ratios to each run's bare-consumer ceiling).

    .venv/bin/python bench/validate_loop.py --ranks 512 --duration 30 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, Message, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.kafka_security import kafka_config
from rankscope.schemas.topics import Topics
from rankscope.services.kafka import LocalKafka
from rankscope.simulation.simulator import SimulationConfig, simulate
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.app import tune_gc
from rankscope.streams.config import RedactionConfig, StreamsConfig, WindowConfig
from rankscope.streams.stages.shared import StageCounters
from rankscope.streams.stages.validate import RecordOutputs, ValidateStage
from rankscope.streams.validate_loop import next_offsets, raw_record, send_outputs
from rankscope.streams.windows import WindowAggregator


class Outputs:
    """The loop's producer: every output of a record (``send_outputs``, as ``ValidateLoop``),
    committed only after delivery."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.topics = topics
        self.failed: list[str] = []
        self.producer: Producer | None = Producer(
            {**kafka_config(bootstrap), "acks": "all", "linger.ms": 5, "enable.idempotence": True}
        )

    def on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))

    def send(self, out: RecordOutputs) -> None:
        assert self.producer is not None
        send_outputs(self.producer, self.topics, out, self.on_delivery)
        self.producer.poll(0)

    def commit_after_delivery(self, c: Consumer, batch: list[Message]) -> None:
        assert self.producer is not None
        if self.producer.flush(30) or self.failed:
            raise RuntimeError(f"outputs not delivered: {self.failed[:3]}")
        c.commit(offsets=next_offsets(batch), asynchronous=False)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(30)
            self.producer = None


class Analysis:
    """The windows agent's work on the parsed events the stage hands over (no second parse):
    windows per rank, the job's analyzer, and every closed window and finding produced."""

    def __init__(self, outputs: Outputs) -> None:
        self.outputs = outputs
        self.windows = WindowAggregator(WindowConfig())
        self.jobs: dict[str, JobAnalyzer] = {}

    def observe(self, out: RecordOutputs) -> None:
        producer = self.outputs.producer
        topics = self.outputs.topics
        assert producer is not None
        now = time.time()
        seen: set[str] = set()
        for _key, _value, _headers, events in out.events:
            for ev in events:
                analyzer = self.jobs.get(ev.job_id)
                if analyzer is None:
                    analyzer = self.jobs[ev.job_id] = JobAnalyzer(ev.cluster, ev.job_id)
                analyzer.observe(ev)
                self.windows.add(ev, now)
                seen.add(ev.job_id)
        for w in self.windows.close_ready(now, seen):
            producer.produce(topics.windows, w.model_dump_json().encode(), w.job_id.encode())
        for job in seen:
            detections, incidents = self.jobs[job].take()
            for d in detections:
                producer.produce(topics.detections, d.model_dump_json().encode(), job.encode())
            for i in incidents:
                producer.produce(topics.incidents, i.model_dump_json().encode(), job.encode())


def consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            **kafka_config(bootstrap),
            "group.id": f"bench-loop-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )


def run(
    bootstrap: str,
    topics: Topics,
    expected: int,
    per_record: Callable[[Message], int],
    after_batch: Callable[[Consumer, list[Message]], None] | None = None,
) -> dict[str, float]:
    """Consume every raw record once, ``per_record`` returning its event count."""
    c = consumer(bootstrap)
    c.subscribe(topics.all_raw)
    n = 0
    t0 = cpu0 = None
    deadline = time.monotonic() + 300
    while n < expected and time.monotonic() < deadline:
        batch = [m for m in c.consume(num_messages=2000, timeout=0.5) if not m.error()]
        if not batch:
            continue
        if t0 is None:
            t0, cpu0 = time.perf_counter(), time.process_time()
        for m in batch:
            n += per_record(m)
        if after_batch is not None:
            after_batch(c, batch)
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    cpu = time.process_time() - (cpu0 or time.process_time())
    c.close()
    if n < expected:
        raise RuntimeError(f"saw {n} of {expected} events")
    return {
        "events": n,
        "events_per_s": round(n / elapsed),
        "events_per_cpu_s": round(n / cpu),
        "us_per_event": round(cpu / n * 1e6, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2, help="each mode this many times, alternated")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="rankscope-bench-loop-"))
    with LocalKafka(home / "kafka") as kafka:
        bootstrap = kafka.bootstrap
        tag = f"loop{uuid.uuid4().hex[:8]}"
        topics = Topics(prefix=tag)
        create_pipeline_topics(bootstrap, topics, partitions=4)
        sim = SimulationConfig(ranks=args.ranks, duration_s=args.duration, job_id=tag, seed=2)
        events = list(simulate(sim))
        with Publisher(PublisherConfig(bootstrap=bootstrap, topic_prefix=tag)) as p:
            p.publish(events)
            p.flush(120)
        expected = len(events)
        print(f"{expected:,} events on the raw topics ({args.ranks} ranks, {args.duration:.0f} s)")

        config = StreamsConfig(
            bootstrap=bootstrap,
            topic_prefix=tag,
            redaction=RedactionConfig(key_file=home / "redaction.key"),
        )
        stage = ValidateStage(config, topics=cast(Any, None), counters=StageCounters())

        def ceiling(m: Message) -> int:
            return len(json.loads(m.value() or b"[]"))

        def prepared(m: Message) -> RecordOutputs:
            return stage.process(raw_record(m))

        def stage_only(m: Message) -> int:
            return int(prepared(m).valid)

        outputs = Outputs(bootstrap, topics)

        def produced(m: Message) -> int:
            out = prepared(m)
            outputs.send(out)
            return int(out.valid)

        analyses: list[Analysis] = []

        def analysed(m: Message) -> int:
            out = prepared(m)
            outputs.send(out)
            analyses[-1].observe(out)
            return int(out.valid)

        modes: dict[str, tuple[Callable[[Message], int], Any]] = {
            "ceiling": (ceiling, None),
            "stage": (stage_only, None),
            "loop": (produced, outputs.commit_after_delivery),
            "worker": (analysed, outputs.commit_after_delivery),
        }
        figures: dict[str, list[dict[str, float]]] = {k: [] for k in modes}
        tune_gc()  # as the worker does at start-up
        for r in range(args.rounds):
            for name, (per_record, after) in modes.items():
                analyses.append(Analysis(outputs))  # each pass starts with a fresh state
                f = run(bootstrap, topics, expected, per_record, after)
                figures[name].append(f)
                print(
                    f"round {r + 1} {name:8s} {f['events_per_s']:>9,.0f} events/s  "
                    f"{f['events_per_cpu_s']:>9,.0f} events/CPU s  "
                    f"{f['us_per_event']:6.2f} us/event",
                    flush=True,
                )
        outputs.close()  # before the broker stops: no reconnect noise

    best = {k: max(v, key=lambda f: f["events_per_cpu_s"]) for k, v in figures.items()}
    summary = {
        "ranks": args.ranks,
        "duration_s": args.duration,
        "events": expected,
        "rounds": figures,
        "best": best,
        "loop_over_ceiling_cpu": round(
            best["loop"]["us_per_event"] / best["ceiling"]["us_per_event"], 2
        ),
    }
    print(
        f"best: ceiling {best['ceiling']['us_per_event']} us/event, stage "
        f"{best['stage']['us_per_event']}, loop {best['loop']['us_per_event']} "
        f"({best['loop']['events_per_cpu_s']:,.0f} events per CPU s)"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
