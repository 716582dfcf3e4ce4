"""The full ``rankscope eval --sweep`` on a small shared machine: one axis at a time (each its
own ``rankscope eval --sweep --sweep-axis A`` into ``<dir>/<axis>.json``), the job-size axis
last, then one merged report. Why in parts: a part that finishes is kept when time runs out (the
2,048-rank runs cost 16-32x a 64-rank run), and a part can be rerun alone.

    .venv/bin/python bench/eval_sweep.py --seeds 1 --out bench/results/eval_sweep_baseline.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankscope.evaluation_sweep import AXES
from rankscope.evaluation_sweep_report import report_from_json


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--large-seeds", type=int, default=1)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--axis", action="append", help="only these axes (default: all, ranks last)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/eval_sweep.json"))
    args = ap.parse_args()
    parts_dir = args.out.with_suffix("")
    parts_dir.mkdir(parents=True, exist_ok=True)
    axes = args.axis or sorted(AXES, key=lambda a: a == "ranks")
    for axis in axes:
        t0 = time.monotonic()
        cmd = [
            sys.executable, "-m", "rankscope", "eval", "--sweep", "--sweep-axis", axis,
            "--seeds", str(args.seeds), "--large-seeds", str(args.large_seeds),
            "--processes", str(args.processes), "--min-accuracy", "0",
            "--out", str(parts_dir / f"{axis}.json"),
        ]  # fmt: skip
        subprocess.run(cmd, check=True)
        print(f"part {axis}: {time.monotonic() - t0:.0f} s", flush=True)
        parts = sorted(parts_dir.glob("*.json"))
        report_from_json(parts, args.out)  # merged after every part: a stop keeps what is done
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
