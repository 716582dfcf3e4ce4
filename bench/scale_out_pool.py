"""Scale-out rounds from several ``bench/scale_out.py`` result files, pooled, with a confidence
interval: is "2 workers within 10% of 1" (issue 21) established, or only met on average?

On a shared 2-core machine one worker's CPU per event moves by 10-15% between runs of the same
input, as much as the bound being tested, so a single round proves nothing either way. Each
round is a pair (one run with 1 worker, one with 2, back to back); this takes every pair from
the files given, reports the ratio of each, the pooled ratio (total worker CPU per event with 2
workers over the same with 1) and a bootstrap interval over the pairs (resampled with
replacement, fixed seed). The bound is established when the interval's upper end is under 1.10.

Pairs from different commits can be pooled when the stream code between them is unchanged (the
files name their commits; this prints them).

    .venv/bin/python bench/scale_out_pool.py bench/results/perf11/scale_out_*.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: issue 21: per-event worker CPU with 2 workers within 10% of 1 worker
BOUND = 1.10
RESAMPLES = 10_000


@dataclass(frozen=True)
class Pair:
    source: str
    commit: str
    one_cpu_s: float
    two_cpu_s: float
    events: int
    #: CPU per event net of each worker's idle cost (us), where the file has it (round ten on)
    one_net_us: float | None = None
    two_net_us: float | None = None

    @property
    def ratio(self) -> float:
        return self.two_cpu_s / self.one_cpu_s


def pairs_of(path: Path) -> list[Pair]:
    """A file's rounds: consecutive runs, one with each worker count, in either order."""
    doc: dict[str, Any] = json.loads(path.read_text())
    runs = doc["runs"]
    out = []
    for a, b in zip(runs[0::2], runs[1::2], strict=True):
        one, two = (a, b) if a["workers"] == 1 else (b, a)
        if (one["workers"], two["workers"]) != (1, 2) or one["events"] != two["events"]:
            raise SystemExit(f"{path}: runs {a['topic_prefix']}, {b['topic_prefix']} not a pair")
        out.append(
            Pair(
                path.name,
                doc.get("commit", "?"),
                one["worker_cpu_seconds_total"],
                two["worker_cpu_seconds_total"],
                one["events"],
                one.get("worker_cpu_us_per_event_net_of_idle"),
                two.get("worker_cpu_us_per_event_net_of_idle"),
            )
        )
    return out


def pooled(pairs: list[Pair]) -> float:
    return sum(p.two_cpu_s for p in pairs) / sum(p.one_cpu_s for p in pairs)


def pooled_net_of_idle(pairs: list[Pair]) -> float | None:
    """The same ratio with each worker's idle cost taken out (the per-event part alone)."""
    if any(p.one_net_us is None or p.two_net_us is None for p in pairs):
        return None
    one = sum((p.one_net_us or 0) * p.events for p in pairs)
    return sum((p.two_net_us or 0) * p.events for p in pairs) / one


def interval(pairs: list[Pair], level: float = 0.90) -> tuple[float, float]:
    rng = random.Random(21)
    stats = sorted(pooled(rng.choices(pairs, k=len(pairs))) for _ in range(RESAMPLES))
    lo = stats[int((1 - level) / 2 * RESAMPLES)]
    hi = stats[int((1 + level) / 2 * RESAMPLES) - 1]
    return lo, hi


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path, help="bench/scale_out.py --json outputs")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    pairs = [p for f in args.files for p in pairs_of(f)]
    if len(pairs) < 2:
        ap.error("need at least two rounds")
    for p in pairs:
        print(
            f"{p.source} ({p.commit}): 1 worker {p.one_cpu_s / p.events * 1e6:.2f} us/event, "
            f"2 workers {p.two_cpu_s / p.events * 1e6:.2f}: {p.ratio:.3f}"
        )
    ratio = pooled(pairs)
    median = statistics.median(p.ratio for p in pairs)
    lo, hi = interval(pairs)
    verdict = (
        "established"
        if hi <= BOUND
        else "met on average, not established"
        if ratio <= BOUND
        else "not met"
    )
    print(
        f"{len(pairs)} rounds, commits {sorted({p.commit for p in pairs})}: pooled 2/1 ratio "
        f"{ratio:.3f}, 90% bootstrap interval {lo:.3f}-{hi:.3f}, median round "
        f"{median:.3f}; within {BOUND - 1:.0%}: {verdict}"
    )
    net = pooled_net_of_idle(pairs)
    if net is not None:
        print(f"net of each worker's idle cost: {net:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        figures = {
            "command": "bench/scale_out_pool.py " + " ".join(str(f) for f in args.files),
            "rounds": [
                {"file": p.source, "commit": p.commit, "ratio": round(p.ratio, 3)} for p in pairs
            ],
            "pooled_ratio_2_to_1": round(ratio, 3),
            "interval_90": [round(lo, 3), round(hi, 3)],
            "median_round_ratio": round(median, 3),
            "pooled_ratio_2_to_1_net_of_idle": None if net is None else round(net, 3),
            "verdict": verdict,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
