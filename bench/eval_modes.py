"""The labelled suite read three ways: bulk (``--speed 0``), paced, and paced with a CPU hog.

Findings are meant to be a function of the event log (issue 13), so the per-run verdicts
(right cause, right action, false positives) must agree across the three modes. Each mode is a
separate ``rankscope eval`` (own services, own worker); the hog is a busy loop in another process
for the duration of its mode. Prints the totals per mode and every run whose verdict differs,
and writes everything to ``--json``.

    .venv/bin/python bench/eval_modes.py --ranks 64 --json bench/results/eval_modes_64.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES: dict[str, tuple[float, bool]] = {  # name -> (speed, with a CPU hog)
    "bulk": (0.0, False),
    "paced": (20.0, False),
    "paced+hog": (20.0, True),
}


def _burn() -> None:
    while True:
        pass


def run_mode(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    speed, hog = MODES[name]
    out = work / f"{name}.json"
    cmd = [
        sys.executable, "-m", "rankscope", "eval",
        "--seeds", str(args.seeds), "--duration", str(args.duration),
        "--speed", str(speed), "--home", str(work / f"home-{name}"), "--out", str(out),
    ]  # fmt: skip
    for r in args.ranks:
        cmd += ["--ranks", str(r)]
    if args.validators:
        cmd += ["--validators", str(args.validators)]
    burner = mp.Process(target=_burn, daemon=True) if hog else None
    if burner is not None:
        burner.start()
    t0 = time.monotonic()
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    finally:
        if burner is not None:
            burner.terminate()
            burner.join()
    report: dict[str, Any] = json.loads(out.read_text())
    report["mode"] = name
    report["speed"] = speed
    report["cpu_hog"] = hog
    report["mode_wall_s"] = round(time.monotonic() - t0, 1)
    print(f"{name:10s} {json.dumps(report['totals'])}", flush=True)
    return report


def verdicts(report: dict[str, Any]) -> dict[str, tuple[bool, bool, int]]:
    return {r["name"]: (r["correct"], r["action_ok"], r["false_positives"]) for r in report["runs"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, action="append", help="job sizes (repeatable; 64)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--mode", action="append", choices=list(MODES), help="default: all three")
    ap.add_argument("--json", type=Path, help="write the reports and the comparison here")
    ap.add_argument(
        "--validators", type=int, default=0,
        help="`rankscope validator` processes beside the worker in every mode (0: it validates)",
    )  # fmt: skip
    args = ap.parse_args()
    args.ranks = args.ranks or [64]
    with tempfile.TemporaryDirectory(prefix="rankscope-eval-modes-") as tmp:
        reports = [run_mode(m, args, Path(tmp)) for m in (args.mode or list(MODES))]
    by_mode = {r["mode"]: verdicts(r) for r in reports}
    names = sorted(set().union(*(v.keys() for v in by_mode.values())))
    differing = {
        n: {m: by_mode[m].get(n) for m in by_mode}
        for n in names
        if len({by_mode[m].get(n) for m in by_mode}) > 1
    }
    print(f"runs whose verdict (correct, action ok, false positives) differs: {len(differing)}")
    for n, per_mode in differing.items():
        print(f"  {n}: {per_mode}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "what": "rankscope eval per mode (bench/eval_modes.py); verdict = "
                    "(correct, action_ok, false_positives) per run",
                    "ranks": args.ranks,
                    "seeds": args.seeds,
                    "duration_s": args.duration,
                    "validators": args.validators,
                    "differing_runs": differing,
                    "reports": reports,
                },
                indent=1,
            )
            + "\n"
        )
    return 0 if not differing else 1


if __name__ == "__main__":
    raise SystemExit(main())
