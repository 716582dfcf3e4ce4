"""The per-event CPU floor of the stream path, stage by stage, in one process, on one input.

Issue 21 asks for 50,000 events per worker CPU second (20 us per event, validation to findings).
Before more plumbing is rewritten, this measures what each unavoidable piece of work costs per
event when nothing else runs: no Kafka, no faust, no asyncio. Their sum is the least any worker
with today's event format and analysis can spend, whatever carries the records between them.

Input: a simulated job (1 Hz GPU samples, 5 s heartbeats, per-phase spans, fabric counters, a GPU
that falls off the bus), batched into raw records exactly as the collectors' publisher batches
them (``bench/detect_throughput.py``'s records). Each stage runs over all of them, best of
``--rounds``:

- ``json floor``: orjson parsing the records to Python objects, nothing validated (what any
  JSON-in-Python reader pays at least);
- ``validate``: ``validate_message`` (pydantic, limits, plausibility, dead letters);
- ``redact``: the validate stage's redaction on the validated events;
- ``serialise``: ``dump_events`` of the redacted events (the ``<p>.events`` record);
- ``parse events``: the windows agent's parse of that record (a worker that is not the
  validator's process pays it again);
- ``windows``: ``WindowAggregator.add`` and the close per record;
- ``analysis``: ``JobAnalyzer.observe`` per event and ``take`` per record.

For scale, ``bench/validate_loop.py`` measures a bare confluent-kafka consumer of the same kind
of records at 5-9 us per event (JSON parsing included).

    .venv/bin/python bench/per_event_floor.py --ranks 512 --duration 30 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.detect_throughput import records_for
from rankscope.schemas.events import EVENT_LIST_ADAPTER, Event, dump_events
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.app import tune_gc
from rankscope.streams.config import RedactionConfig, StreamsConfig, WindowConfig
from rankscope.streams.stages.shared import StageCounters
from rankscope.streams.stages.validate import ValidateStage
from rankscope.streams.validate import RecordRef, validate_message
from rankscope.streams.windows import WindowAggregator

#: the issue's goal, per event: 50,000 events per worker CPU second
GOAL_US = 1e6 / 50_000


def best_of(rounds: int, work: Callable[[], object]) -> float:
    """Least CPU seconds of ``rounds`` runs of ``work``."""
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        t0 = time.process_time()
        work()
        best = min(best, time.process_time() - t0)
    return best


def outputs_digest(records: list[list[Event]]) -> str:
    """What the windows and the analysis make of ``records``: one hash, on a fixed wall clock."""
    h = hashlib.sha256()
    agg = WindowAggregator(WindowConfig())
    analyzer: JobAnalyzer | None = None
    for events in records:
        for ev in events:
            agg.add(ev, 0.0)
            if analyzer is None:
                analyzer = JobAnalyzer(ev.cluster, ev.job_id, clock_ns=lambda: 0)
            analyzer.observe(ev)
        for w in agg.close_ready(0.0):
            h.update(w.model_dump_json().encode())
        if analyzer is not None:
            for finding in (f for found in analyzer.take() for f in found):
                h.update(finding.model_dump_json().encode())
    if analyzer is not None:
        for finding in (f for found in analyzer.flush() for f in found):
            h.update(finding.model_dump_json().encode())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--duration", type=float, default=30.0, help="event-time seconds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--only", nargs="+", metavar="WORD", help="time only the stages whose name has a WORD"
    )
    ap.add_argument(
        "--digest",
        action="store_true",
        help="also print a SHA-256 of the windows and findings the input yields (to compare "
        "builds of the same code, bench/compiled_analysis.py)",
    )
    args = ap.parse_args()

    tune_gc()  # as the worker does
    records, n = records_for(args.ranks, args.duration, seed=1)
    now_ns = (1_800_000_000 + int(args.duration) + 60) * 10**9  # the simulation's clock
    config = StreamsConfig(
        bootstrap="unused:9092",
        redaction=RedactionConfig(key_file=Path(".rankscope") / "bench-floor-redaction.key"),
    )
    stage = ValidateStage(config, cast(Any, None), StageCounters())
    limits = config.limits
    refs = [
        RecordRef(topic="raw", partition=0, offset=i, timestamp_ns=0) for i, _ in enumerate(records)
    ]

    validated: list[list[Event]] = []
    redacted: list[list[Event]] = []
    serialised: list[bytes] = []

    def validate() -> None:
        validated.clear()
        for value, ref in zip(records, refs, strict=True):
            result = validate_message(value, ref, limits, now_ns=now_ns)
            assert not result.dead, result.dead[:1]
            validated.append(result.events)

    def redact() -> None:
        redacted.clear()
        for i, events in enumerate(validated):
            redacted.append(stage.redact(events, f"raw:0:{i}").events)

    def serialise() -> None:
        serialised.clear()
        serialised.extend(dump_events(events) for events in redacted)

    def parse_events() -> None:
        for value in serialised:
            EVENT_LIST_ADAPTER.validate_json(value)

    def windows() -> None:
        agg = WindowAggregator(WindowConfig())
        wall = time.time()
        for events in redacted:
            for ev in events:
                agg.add(ev, wall)
            agg.close_ready(wall)

    def analysis() -> None:
        analyzer: JobAnalyzer | None = None
        for events in redacted:
            for ev in events:
                if analyzer is None:
                    analyzer = JobAnalyzer(ev.cluster, ev.job_id, clock_ns=lambda: 0)
                analyzer.observe(ev)
            analyzer.take() if analyzer is not None else None

    def json_floor() -> None:
        for value in records:
            orjson.loads(value)

    stages: list[tuple[str, Callable[[], None]]] = [
        ("json floor (orjson, nothing validated)", json_floor),
        ("validate (pydantic, limits, plausibility)", validate),
        ("redact", redact),
        ("serialise (dump_events)", serialise),
        ("parse events (2nd parse, another process)", parse_events),
        ("windows", windows),
        ("analysis", analysis),
    ]
    validate()  # the later stages' input
    redact()
    serialise()
    rows: dict[str, float] = {}
    for name, work in stages:
        if args.only and not any(word in name for word in args.only):
            continue
        rows[name] = round(best_of(args.rounds, work) / n * 1e6, 2)
        print(f"{name:45s} {rows[name]:6.2f} us/event", flush=True)
    if args.digest:
        print(f"digest: {outputs_digest(redacted)}", flush=True)
    if args.only:
        return 0  # a part: no floor to sum
    in_one_process = sum(v for k, v in rows.items() if not k.startswith(("json", "parse")))
    split = in_one_process + rows["parse events (2nd parse, another process)"]
    summary = {
        "ranks": args.ranks,
        "event_time_s": args.duration,
        "events": n,
        "records": len(records),
        "bytes_per_event": round(sum(len(r) for r in records) / n),
        "us_per_event": rows,
        "floor_one_process_us": round(in_one_process, 2),
        "floor_validator_and_worker_us": round(split, 2),
        "goal_us": GOAL_US,
        "floor_events_per_cpu_s": round(1e6 / in_one_process),
    }
    print(
        f"floor: {in_one_process:.1f} us/event in one process ({1e6 / in_one_process:,.0f} events "
        f"per CPU s), {split:.1f} split over a validator and a worker; the goal is {GOAL_US:.0f} "
        "us, before any Kafka client's cost"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
