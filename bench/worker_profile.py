"""Sort a py-spy profile of the stream worker into its stages: where its CPU goes per event.

Input: py-spy's folded stacks (``--format raw``: ``frame;frame;... count`` a line), as
``bench/e2e_throughput.py --profile FILE`` writes them. Each sample is given to one stage: the
first rule (in the order of ``RULES``) that matches any frame of its stack, so a pydantic call
made by the redaction stage counts as redaction, and only what no stage claims is plumbing.
Shares are of samples, not of CPU: on a busy machine a runnable thread waiting for a core is
sampled too, so read them as where the worker's time goes, and the e2e CPU figures beside them.

    .venv/bin/python bench/worker_profile.py stacks.folded --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

#: (stage, pattern on one frame "function (file:line)"), first match wins: nested work first
RULES: list[tuple[str, str]] = [
    ("snapshots (analysis state per partition)", r"stages/snapshots\.py|streams/state\.py"),
    ("redaction", r"redaction/"),
    ("analysis (detectors, incidents)", r"streams/analysis/|stages/analysis\.py"),
    ("recovery decider + progress notes", r"stages/recovery\.py|streams/recovery/"),
    # special-cased in classify: pydantic called from the windows agent
    ("events decode in the windows agent (2nd parse)", r"stages/windows\.py"),
    ("JSON decode + pydantic validation (raw)", r"streams/validate\.py|streams/otlp/"),
    ("windows (event-time aggregation)", r"streams/windows\.py"),
    ("serialisation (JSON dump)", r"dump_json|model_dump_json|dump_events|dump_event\b"),
    ("log records built and dropped (logging)", r"^Logger\.(_log|debug|info) \(logging"),
    ("produce (faust/aiokafka producer)", r"producer|Producer|\bsend \(|send_soon|_send"),
    # the windows agent's own per-record loop (what it calls is claimed above)
    ("windows (event-time aggregation)", r"stages/windows\.py"),
    ("consume + commit (faust/aiokafka plumbing)", r"aiokafka/|faust/|mode/"),
    ("asyncio loop", r"asyncio/|uvloop"),
]  # fmt: skip


def classify(stack: str) -> str:
    frames = stack.split(";")
    if re.match(r"\S*\.select \(selectors\.py", frames[-1]):
        return IDLE
    if re.match(r"(ServiceThread\._start_thread|Worker\.execute_from_commandline) ", frames[-1]):
        # on uvloop the loop runs in C: its I/O and its waits have no Python frame of their own
        return UVLOOP
    for stage, pattern in _COMPILED:
        if stage.startswith("events decode"):
            # the second parse: pydantic called from the windows agent itself
            if any("stages/windows.py" in f for f in frames) and any(
                "validate_json" in f for f in frames
            ):
                return stage
            continue
        if any(pattern.search(f) for f in frames):
            return stage
    return "other (gc, interpreter, logging)"


IDLE = "idle (waiting in select; py-spy counts it when the sampler cannot tell)"
UVLOOP = "event loop in C (uvloop: libuv's socket work and its waits, not told apart)"
_COMPILED = [(s, re.compile(p)) for s, p in RULES]


def _short(frame: str) -> str:
    """``f (path/to/mod.py:12)`` -> ``f (mod.py)``: one name per function, whatever the line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':', 1)[0]})"


def breakdown(lines: list[str], top: int = 25) -> dict[str, object]:
    by_stage: Counter[str] = Counter()
    leaves: Counter[str] = Counter()  # the last two frames: what the time was spent in
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        by_stage[classify(stack)] += n
        leaves[" <- ".join(_short(f) for f in reversed(stack.split(";")[-2:]))] += n
    return {
        "samples": total,
        "share_by_stage": {s: round(n / total, 3) for s, n in by_stage.most_common()}
        if total
        else {},
        "top_leaf_frames": {f: round(n / total, 3) for f, n in leaves.most_common(top)}
        if total
        else {},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("folded", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--e2e", type=Path, help="the e2e figures of the same run, kept beside it")
    args = ap.parse_args()
    result = breakdown(args.folded.read_text().splitlines())
    if args.e2e:
        result = {"e2e": json.loads(args.e2e.read_text()), **result}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
