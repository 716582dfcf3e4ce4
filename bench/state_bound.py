"""Worker state under a hostile producer: 100,000 distinct job ids vs one job (issue 15).

    python bench/state_bound.py [--jobs 100000] [--records 100000] [--json out.json]

Feeds the worker's per-record path for windows and analysis (``WindowAggregator.add`` and
``close_ready`` for the record's job, ``AnalysisStage.observe`` and the analyzer's ``take``,
the stage's probation for new jobs included), in process, with
the same number of one-event records twice: every record from one job (the baseline), then every
record from a new job id (the hostile producer). Reports per-record time (median of 5 passes,
each in a fresh process state) and resident memory growth, and the ratio of the two runs; the
retention sweep (``evict_idle``) then runs as the worker's timer would after the retention, and
the memory it leaves is reported too. Without the sweep, memory grows with job ids until the
retention (an hour by default) passes: the bound is per-job state times the job ids a producer
can send within it. The worker's garbage-collector settings (``tune_gc``) apply, as in the worker.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankscope.streams.app import tune_gc
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.shared import StageCounters
from rankscope.streams.windows import WindowAggregator
from tests.factories import NOW_NS, span


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _run(n_records: int, n_jobs: int) -> dict[str, Any]:
    events = [
        span(i % 8, NOW_NS + i * 1000, step=i // 8, job=f"job-{i % n_jobs}")
        for i in range(n_records)
    ]
    gc.collect()
    rss0 = _rss_bytes()
    config = StreamsConfig(bootstrap="unused:9092")  # nothing is sent: no broker needed
    windows = WindowAggregator(config.windows)
    analysis = AnalysisStage(config, None, StageCounters(), None)  # type: ignore[arg-type]
    analyzers = analysis.analyzers
    wall = 0.0
    t0 = time.perf_counter()
    for ev in events:
        windows.add(ev, wall)
        windows.close_ready(wall, (ev.job_id,))
        analysis.observe(ev, wall)
        analyzer = analyzers.get(ev.job_id)
        if analyzer is not None:
            analyzer.take()  # what publish() does for the record's job
    elapsed = time.perf_counter() - t0
    gc.collect()
    rss1 = _rss_bytes()
    # the timer's sweeps after the retention: windows idle-close, then quiet jobs are forgotten
    later = wall + 3_700.0
    windows.close_ready(later)
    windows.evict_idle(later, 3_600.0)
    analyzers.clear()  # what AnalysisStage.tick does past analysis_retention_s (once flushed)
    analysis.probation.clear()
    analysis.analyzer_seen.clear()
    gc.collect()
    rss2 = _rss_bytes()
    return {
        "us_per_record": elapsed / n_records * 1e6,
        "rss_growth_mib": (rss1 - rss0) / 2**20,
        "rss_after_retention_mib": (rss2 - rss0) / 2**20,
        "jobs_tracked": windows.jobs(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    tune_gc()  # the worker's garbage-collector settings (streams/app.py)
    runs: dict[str, list[dict[str, Any]]] = {"one_job": [], "many_jobs": []}
    for p in range(args.passes):  # interleaved: the machine's noise hits both alike
        for name, jobs in (("one_job", 1), ("many_jobs", args.jobs)):
            runs[name].append(_run(args.records, jobs))
            print(f"pass {p + 1}/{args.passes} {name}: {runs[name][-1]}", file=sys.stderr)
    out: dict[str, Any] = {"records": args.records, "jobs": args.jobs}
    for name, rs in runs.items():
        out[name] = {
            "us_per_record_median": statistics.median(r["us_per_record"] for r in rs),
            "rss_growth_mib_max": max(r["rss_growth_mib"] for r in rs),
            "rss_after_retention_mib_max": max(r["rss_after_retention_mib"] for r in rs),
        }
    out["per_record_ratio"] = (
        out["many_jobs"]["us_per_record_median"] / out["one_job"]["us_per_record_median"]
    )
    out["kib_per_job"] = out["many_jobs"]["rss_growth_mib_max"] * 1024 / args.jobs
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
