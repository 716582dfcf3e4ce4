"""What a stream worker costs with nothing to read, and which of its threads spends it.

A worker's CPU per event is measured on busy runs, but each worker also pays a fixed cost per
second for being there (fetch polls, timers, group heartbeats), which two workers pay twice:
`bench/scale_out.py` reads its size after each run (0.013-0.02 CPU s/s), this says where it
goes. One worker on eight partitions is started on the local services, warmed with small jobs,
drained, then left idle for ``--seconds`` while py-spy samples every thread (non-blocking, so
the worker is not paused) and /proc gives its CPU split.

    .venv/bin/python bench/idle_worker.py --json bench/results/idle_worker.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e_throughput import sampled
from bench.scale_out import CpuSplit, endpoints, git_commit, warmed_pipeline


def threads_of(folded: Path) -> tuple[Counter[str], Counter[str]]:
    """Samples per thread name, and per (thread, innermost three frames), from py-spy's raw
    output (``thread (tid): name;frame;frame count`` per line)."""
    per_thread: Counter[str] = Counter()
    per_leaf: Counter[str] = Counter()
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        name = frames[0].split(": ", 1)[-1]
        per_thread[name] += int(count)
        leaf = " <- ".join(f.split(" (")[0] for f in reversed(frames[-3:]))
        per_leaf[f"{name}: {leaf}"] += int(count)
    return per_thread, per_leaf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="idle time sampled")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument(
        "--fetch-max-wait-ms",
        type=int,
        help="the worker's fetch wait (RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS; default: the worker's)",
    )
    ap.add_argument("--bootstrap", help="a running Kafka (default: the local services)")
    ap.add_argument("--clickhouse-url", help="a running ClickHouse (with --bootstrap)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    env = {}
    if args.fetch_max_wait_ms is not None:
        env["RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS"] = str(args.fetch_max_wait_ms)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    home = Path(tempfile.mkdtemp(prefix="rankscope-idle-"))
    folded = home / "idle.folded"
    tag = f"idle{os.urandom(3).hex()}"
    with (
        endpoints(args, home) as (bootstrap, ch_url),
        warmed_pipeline(bootstrap, ch_url, home, tag, 1, args.partitions, env) as pipeline,
    ):
        time.sleep(5)  # the last commits and snapshots of the warm-up
        proc = pipeline.workers[0].proc
        assert proc is not None
        before = CpuSplit.read(proc.pid)
        with sampled(proc.pid, folded, rate=250, threads=True):
            time.sleep(args.seconds)
        split = CpuSplit.read(proc.pid).minus(before)
    per_thread, per_leaf = threads_of(folded)
    total = sum(per_thread.values()) or 1
    cpu_per_s = (split.user_s + split.system_s) / args.seconds
    print(
        f"idle {args.seconds:g} s: {cpu_per_s:.4f} CPU s/s; main thread {split.main_thread_s} s, "
        f"other threads {split.other_threads_s} s; samples by thread: "
        + ", ".join(f"{n} {c / total:.0%}" for n, c in per_thread.most_common())
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        figures = {
            "command": "bench/idle_worker.py " + " ".join(sys.argv[1:]),
            "commit": git_commit(),
            "partitions": args.partitions,
            "fetch_max_wait_ms": args.fetch_max_wait_ms,
            "seconds": args.seconds,
            "cpu_seconds_per_second": round(cpu_per_s, 4),
            "cpu_split": asdict(split),
            "samples": total,
            "share_by_thread": {n: round(c / total, 3) for n, c in per_thread.most_common()},
            "top_stacks": {k: round(c / total, 3) for k, c in per_leaf.most_common(12)},
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
