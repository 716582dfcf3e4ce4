"""What compiling the windows and analysis with mypyc would buy: an experiment, not a build mode.

Issue 21's goal (50,000 events per worker CPU second, 20 us an event) is below the floor of the
interpreted path (``bench/per_event_floor.py``), and windows + analysis are a third of that
floor. Both are typed Python (mypy strict), which mypyc compiles to C extensions. This copies
the installed package to a temporary directory, compiles ``MODULES`` there, and times
``per_event_floor.py``'s windows and analysis stages with each build in alternation (same input,
same process setup), after checking that both builds yield the same windows and findings (a
SHA-256 of them, ``per_event_floor.py --digest``).

``MODULES`` are those that compile as they are. ``--all`` adds the modules that define pydantic
config models (``CONFIG_MODULES``: the job analyzer and most detectors), which compile only
after edits made to the copy, never to the source (``config_edits``): mypyc checks a model's
``Field(...)`` default against the field's type at import (``Field`` is typed as returning its
default), so the copy calls ``Field`` through an alias typed ``Any``; its C for a class deriving
from ``BaseModel`` needs ``pydantic.main`` imported by name; and one
``Detection(detection_type=...)`` argument that mypy accepts through pydantic's plugin (mypyc
runs without it) is told to pass. Neither build is pickled here: mypyc classes do not pickle by
default, and the worker's snapshots pickle the analyzers, so a build mode needs the config
models moved out and the analyzers' snapshot made explicit first (docs/decisions.md).

    .venv/bin/python bench/compiled_analysis.py --rounds 3 [--all] --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rankscope

REPO = Path(__file__).resolve().parents[1]
#: relative to the package; what mypyc compiles (see the docstring for what it leaves out)
MODULES = [
    "streams/windows.py",
    "streams/analysis/reorder.py",
    "streams/analysis/steps.py",
    "streams/analysis/rootcause/attribution.py",
    "streams/analysis/rootcause/inference.py",
    "streams/analysis/rootcause/narrative.py",
    "streams/analysis/rootcause/scoring.py",
    "streams/analysis/rootcause/signals.py",
    "streams/analysis/rootcause/xid.py",
]
#: the modules that define pydantic config models: compiled with ``--all``, after config_edits
CONFIG_MODULES = [
    "streams/analysis/baseline.py",
    "streams/analysis/fleet.py",
    "streams/analysis/job.py",
    "streams/analysis/liveness.py",
    "streams/analysis/node_slowdown.py",
    "streams/analysis/stragglers.py",
    "streams/analysis/rootcause/config.py",
    "streams/analysis/rootcause/records.py",
]
STAGES = ("windows", "analysis")
FUTURE = "from __future__ import annotations\n"


def config_edits(path: Path) -> None:
    """The edits ``--all`` makes to a copied config module (see the docstring)."""
    text = path.read_text()
    if "= Field(" in text:
        text = text.replace("= Field(", "= _FIELD(")
        text = re.sub(r"^(from pydantic import [^\n]*\n)", r"\1_FIELD: Any = Field\n", text,
                      count=1, flags=re.M)  # fmt: skip
        text = text.replace(FUTURE, FUTURE + "from typing import Any\n", 1)
    # mypyc's C for a class deriving from BaseModel uses the module pydantic.main: imported
    text = text.replace(FUTURE, FUTURE + "import pydantic.main  # noqa: F401\n", 1)
    text = text.replace("detection_type=state,", "detection_type=state,  # type: ignore[arg-type]")
    path.write_text(text)


def build(workdir: Path, modules: list[str]) -> float:
    """The package (symlinks followed) and the benches under ``workdir``, ``modules`` compiled."""
    package = Path(rankscope.__file__).resolve().parent
    shutil.copytree(
        package, workdir / "rankscope", symlinks=False, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "bench", workdir / "bench", ignore=shutil.ignore_patterns("results"))
    for m in modules:
        if m in CONFIG_MODULES:
            config_edits(workdir / "rankscope" / m)
    mypyc = Path(sys.executable).with_name("mypyc")
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(mypyc), *(f"rankscope/{m}" for m in modules)],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"mypyc failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def loaded_from(cwd: Path, modules: list[str]) -> list[str]:
    """Which of ``modules`` the build in ``cwd`` imports as compiled extensions."""
    names = [m.removesuffix(".py").replace("/", ".") for m in modules]
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}:\n"
        "    m = importlib.import_module('rankscope.' + n)\n"
        "    print(n, m.__file__.endswith('.so'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[0] for line in out.splitlines() if line.endswith("True")]


def floor(cwd: Path, rounds: int, ranks: int) -> dict[str, object]:
    """One run of per_event_floor's windows and analysis stages from the build in ``cwd``."""
    out = subprocess.run(
        [sys.executable, "bench/per_event_floor.py", "--ranks", str(ranks), "--rounds",
         str(rounds), "--only", *STAGES, "--digest"],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    row: dict[str, object] = {}
    for stage in STAGES:
        m = re.search(rf"^{stage}\s+([\d.]+) us/event", out, re.M)
        assert m is not None, out
        row[stage] = float(m.group(1))
    digest = re.search(r"^digest: (\w+)", out, re.M)
    assert digest is not None, out
    row["digest"] = digest.group(1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3, help="alternated pairs of runs")
    ap.add_argument("--all", action="store_true", help="compile CONFIG_MODULES too (edited copy)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    modules = MODULES + (CONFIG_MODULES if args.all else [])
    with tempfile.TemporaryDirectory(prefix="rankscope-mypyc-") as tmp:
        workdir = Path(tmp)
        print(f"compiling {len(modules)} modules with mypyc ...", flush=True)
        compile_s = build(workdir, modules)
        compiled = loaded_from(workdir, modules)
        print(f"compiled in {compile_s:.0f} s; loaded compiled: {len(compiled)}/{len(modules)}")
        runs: dict[str, list[dict[str, object]]] = {"interpreted": [], "compiled": []}
        for i in range(args.rounds):
            for name, cwd in (("interpreted", REPO), ("compiled", workdir)):
                row = floor(cwd, 3, args.ranks)
                runs[name].append(row)
                print(f"round {i + 1} {name:11s} windows {row['windows']:5.2f} us/event  "
                      f"analysis {row['analysis']:5.2f} us/event", flush=True)  # fmt: skip
    digests = {str(r["digest"]) for rows in runs.values() for r in rows}
    same = len(digests) == 1
    ratios = {
        stage: round(
            statistics.median(float(str(r[stage])) for r in runs["compiled"])
            / statistics.median(float(str(r[stage])) for r in runs["interpreted"]),
            3,
        )
        for stage in STAGES
    }
    print(f"compiled / interpreted, median time per event: {ratios}; "
          f"same windows and findings in every run: {same}")  # fmt: skip
    if args.json:
        summary = {
            "note": "issue 21: the windows and analysis compiled with mypyc (see the docstring)",
            "ranks": args.ranks,
            "modules": modules,
            "config_modules_edited_in_the_copy": args.all,
            "loaded_compiled": compiled,
            "compile_s": round(compile_s, 1),
            "runs": runs,
            "compiled_over_interpreted": ratios,
            "same_outputs": same,
        }
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if same and len(compiled) == len(modules) else 1


if __name__ == "__main__":
    raise SystemExit(main())
