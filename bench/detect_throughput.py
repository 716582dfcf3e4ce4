"""Detection throughput: the windows agent's per-record work for one job, 512 -> 4,096 ranks.

What the stream worker does for every record of the ``events`` topic, minus Kafka I/O: parse
the batch (as the agent does), window it (``WindowAggregator``), and run the job's analysis
(``JobAnalyzer``: clock alignment, stragglers, liveness, root cause), advancing the detectors
after every record. Input is a simulated job with 1 Hz GPU samples, 5 s heartbeats, per-phase
spans, fabric counters and a GPU that falls off the bus mid-run (so the root-cause path runs
too), batched into records exactly as the collectors' publisher batches them.

Printed per size: events/s, microseconds per event, the per-event cost relative to the smallest
size (flat = scales linearly with the job), and the real-time factor: seconds of the job's event
time processed per wall second (> 1: one worker keeps up with that job live). The baseline in
the same process is parsing alone, so the analysis cost reads as a ratio.

    .venv/bin/python bench/detect_throughput.py --ranks 512 1024 2048 4096 --duration 30
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankscope.collectors.publisher import batch_events
from rankscope.schemas.events import EVENT_LIST_ADAPTER, dump_events
from rankscope.simulation.faults import GpuFellOffBus, simulate_with_faults
from rankscope.simulation.simulator import SimulationConfig
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.app import tune_gc
from rankscope.streams.config import WindowConfig
from rankscope.streams.windows import WindowAggregator


def records_for(ranks: int, duration_s: float, seed: int) -> tuple[list[bytes], int]:
    """(serialized records, events) for one simulated job."""
    cfg = SimulationConfig(
        ranks=ranks,
        duration_s=duration_s,
        seed=seed,
        job_id=f"bench-{ranks}",
        start_ns=1_800_000_000 * 10**9,
        inventory=True,
        fabric_interval_s=2.0,
    )
    events, _ = simulate_with_faults(cfg, [GpuFellOffBus()])
    batches = [batch for _, batch in batch_events(events, 200)]
    return [dump_events(b) for b in batches], sum(len(b) for b in batches)


def parse_only(records: list[bytes]) -> float:
    t0 = time.perf_counter()
    for value in records:
        EVENT_LIST_ADAPTER.validate_json(value)
    return time.perf_counter() - t0


def detect(records: list[bytes]) -> tuple[float, float, int, int]:
    """The windows agent's work: (wall seconds, of which parsing, detections, incidents)."""
    agg = WindowAggregator(WindowConfig())
    analyzer: JobAnalyzer | None = None
    detections = incidents = 0
    now = time.time()
    parsing = 0.0
    clock = time.perf_counter
    t0 = clock()
    for value in records:
        p0 = clock()
        batch = EVENT_LIST_ADAPTER.validate_json(value)
        parsing += clock() - p0
        for ev in batch:
            if analyzer is None:
                analyzer = JobAnalyzer(ev.cluster, ev.job_id, clock_ns=lambda: 0)
            analyzer.observe(ev)
            agg.add(ev, now)
        agg.close_ready(now)
        assert analyzer is not None
        d, i = analyzer.take()
        detections += len(d)
        incidents += len(i)
    assert analyzer is not None
    d, i = analyzer.flush()
    agg.close_ready(now + 3600)
    elapsed = clock() - t0
    return elapsed, parsing, detections + len(d), incidents + len(i)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--duration", type=float, default=30.0, help="Event-time seconds per job.")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--default-gc", action="store_true", help="CPython's default GC thresholds (baseline)."
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results/detect_throughput.json"))
    args = ap.parse_args()

    if not args.default_gc:
        tune_gc()  # as the stream worker does (streams.app.run_worker)
    rows = []
    base_us: float | None = None
    base_analysis_us: float | None = None
    for ranks in args.ranks:
        records, n_events = records_for(ranks, args.duration, args.seed)
        gc.collect()
        if not args.default_gc:
            gc.freeze()  # the records under test are input, not the worker's live set
        parse_s = parse_only(records)
        detect_s, parsing_s, dets, incs = detect(records)
        us = detect_s / n_events * 1e6
        analysis_us = (detect_s - parsing_s) / n_events * 1e6
        base_us = base_us or us
        base_analysis_us = base_analysis_us or analysis_us
        row = {
            "ranks": ranks,
            "events": n_events,
            "records": len(records),
            "event_time_s": args.duration,
            "events_per_s": round(n_events / detect_s),
            "us_per_event": round(us, 2),
            "per_event_cost_vs_first": round(us / base_us, 3),
            "analysis_us_per_event": round(analysis_us, 2),
            "analysis_cost_vs_first": round(analysis_us / base_analysis_us, 3),
            "parse_us_per_event_in_worker": round(parsing_s / n_events * 1e6, 2),
            "realtime_factor": round(args.duration / detect_s, 2),
            "parse_only_events_per_s": round(n_events / parse_s),
            "analysis_cost_vs_parse": round(detect_s / parse_s, 2),
            "detections": dets,
            "incidents": incs,
        }
        rows.append(row)
        print(
            f"{ranks:>5} ranks  {n_events:>9,} events  {row['events_per_s']:>8,} ev/s  "
            f"{us:6.2f} us/ev  x{row['per_event_cost_vs_first']:.2f} per-event cost "
            f"(analysis {analysis_us:.2f} us/ev, x{row['analysis_cost_vs_first']:.2f}; "
            f"parsing {row['parse_us_per_event_in_worker']:.2f} us/ev)  "
            f"real time x{row['realtime_factor']:.1f}  "
            f"(parse only {row['parse_only_events_per_s']:,} ev/s; "
            f"analysis x{row['analysis_cost_vs_parse']:.1f} parse)  "
            f"{dets} detections, {incs} incident emissions",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": rows}, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
