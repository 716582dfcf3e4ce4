"""NCCL/PyTorch log-line parser speed: lines per second on the real failure lines behind real
prefixes (``tests/data/nccl_log/real_lines.json``, every prefix x line) and on the chatter that
makes up almost all of a training log (a plain line and an NCCL INFO line, 4:1).

Why: prefix stripping (issue 17) runs before the patterns on every line that passes the marker
pre-filter; this shows what it costs. Best of ``--repeat`` runs (the machine may be shared).

    .venv/bin/python bench/nccl_log_parse.py [--repeat 5] [--json bench/results/nccl_log_parse.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rankscope.schemas.comm_lines.parsing import _parse

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "nccl_log" / "real_lines.json"
CHATTER = ["epoch 3 step 1200 loss 2.113"] * 4 + [
    "gpu-a03:73412:73412 [2] NCCL INFO Channel 00/0 : 2[2] -> 10[2] [send] via NET/IB/2/GDRDMA"
]


def _rate(lines: list[str], repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        for line in lines:
            _parse(line)
        best = max(best, len(lines) / (time.perf_counter() - t0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    doc = json.loads(DATA.read_text())
    failures = [p["prefix"] + b["line"] for p in doc["prefixes"] for b in doc["bases"]]
    events = sum(_parse(line) not in ("ignored", "malformed") for line in failures)
    result = {
        "failure_lines": len(failures),
        "failure_lines_with_event": events,
        "failure_lines_per_s": round(_rate(failures * 20, args.repeat)),
        "chatter_lines_per_s": round(_rate(CHATTER * 5000, args.repeat)),
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
