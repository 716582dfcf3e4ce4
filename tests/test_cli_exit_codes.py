"""Exit codes CI gates on (issue 18 point 8): ``eval`` exits 1 below ``--min-accuracy`` (or with
nothing to score), ``redaction review`` exits 1 when a gate of its rules file is not met; each
says why in one line on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.cli.evaluation import DEFAULT_MIN_ACCURACY, accuracy_failure
from rankscope.cli.options import EXIT_CHECK_FAILED, EXIT_INPUT
from rankscope.cli.redaction import REFERENCE_CORPUS
from rankscope.redaction.rules import DEFAULT_RULES_PATH
from tests.conftest import Services

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RANKSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, "COLUMNS": "200"},
        check=False,
    )


def _totals(correct: int, faulted: int) -> dict[str, object]:
    return {
        "correct": correct,
        "faulted_runs": faulted,
        "accuracy": round(correct / faulted, 4) if faulted else None,
    }


def test_the_accuracy_gate() -> None:
    assert accuracy_failure(_totals(51, 51), DEFAULT_MIN_ACCURACY) is None
    assert accuracy_failure(_totals(49, 51), DEFAULT_MIN_ACCURACY) is None  # 96.1%
    below = accuracy_failure(_totals(48, 51), DEFAULT_MIN_ACCURACY)  # 94.1%
    assert below is not None and "48/51" in below and "below --min-accuracy 95.0%" in below
    assert accuracy_failure(_totals(0, 17), 0.0) is None
    nothing = accuracy_failure(_totals(0, 0), 0.0)
    assert nothing is not None and "no faulted run" in nothing


def test_min_accuracy_is_a_share() -> None:
    result = CliRunner().invoke(app, ["eval", "--min-accuracy", "1.5"])
    assert result.exit_code == EXIT_INPUT
    assert "--min-accuracy" in result.output


def test_eval_exits_1_at_zero_accuracy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The command's wiring of the gate, with the suite's scoring replaced by a report of one
    missed fault (the real pipeline run is the next test)."""
    import rankscope.evaluate
    from rankscope.evaluate import EvalReport, RunResult

    missed = RunResult(
        name="hang/s0", scenario="hang", ranks=16, seed=0, job_id="j", outcome="hang",
        correct=False, false_positives=0, detect_s=None, found="", expected="hang",
    )  # fmt: skip
    monkeypatch.setattr(rankscope.evaluate, "run_eval", lambda *a, **k: EvalReport([missed]))
    args = ["eval", "--home", str(tmp_path), "--min-accuracy", "0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == EXIT_CHECK_FAILED, result.output
    assert "accuracy 0.0% (0/1 faulted runs) is below --min-accuracy 50.0%" in result.stderr
    hit = RunResult(**{**missed.__dict__, "correct": True})
    monkeypatch.setattr(rankscope.evaluate, "run_eval", lambda *a, **k: EvalReport([hit, missed]))
    assert CliRunner().invoke(app, args).exit_code == 0  # 50% meets 50%


def test_eval_exits_1_below_its_gate_on_a_real_run(services: Services, tmp_path: Path) -> None:
    """One tiny suite case through the real broker, worker and engine, scored twice against
    the truth: the run's own accuracy decides the exit code against --min-accuracy."""
    tag = f"t{uuid.uuid4().hex[:10]}"
    out = tmp_path / "eval.json"
    done = _cli(
        "eval", "--ranks", "16", "--seeds", "1", "--duration", "40", "--speed", "0",
        "--scenario", "hang", "--scenario", "noise", "--out", str(out),
        "--home", str(tmp_path / "home"), "--bootstrap", services.bootstrap,
        "--clickhouse-url", services.clickhouse_url, "--topic-prefix", tag, "--database", tag,
        "--min-accuracy", "1",
    )  # fmt: skip
    totals = json.loads(out.read_text())["totals"]
    assert totals["faulted_runs"] == 1 and totals["noise_runs"] == 1, done.stdout[-2000:]
    if totals["accuracy"] == 1.0:
        assert done.returncode == 0, done.stderr[-2000:]
    else:  # the one faulted run was missed: 0% < 100%
        assert done.returncode == EXIT_CHECK_FAILED
        assert "rankscope: eval: accuracy 0.0% (0/1 faulted runs) is below" in done.stderr


def _rules(tmp_path: Path, recall: float, max_fp: float) -> Path:
    rules = yaml.safe_load(DEFAULT_RULES_PATH.read_text())
    rules["thresholds"] = {
        "recall": dict.fromkeys(rules["thresholds"]["recall"], recall),
        "max_benign_false_positive_rate": max_fp,
    }
    path = tmp_path / f"rules-{recall}.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every tenth item of the packaged reference corpus: each kind, a fraction of the time."""
    lines = REFERENCE_CORPUS.read_text().splitlines()
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("\n".join(lines[::10]) + "\n")
    return path


def test_redaction_review_exits_1_below_its_gates(tmp_path: Path, small_corpus: Path) -> None:
    """Recall above 1 cannot be met: every recall gate fails; a gate of 0 always passes."""
    impossible = _rules(tmp_path, 1.01, 1.0)
    done = _cli(
        "redaction", "review", "--rules", str(impossible), "--corpus", str(small_corpus),
        "--out", str(tmp_path / "fail"),
    )  # fmt: skip
    assert done.returncode == EXIT_CHECK_FAILED, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    recall = len(yaml.safe_load(DEFAULT_RULES_PATH.read_text())["thresholds"]["recall"])
    assert lines[-1].startswith(f"rankscope: redaction review: failed {recall} gate(s): recall ")
    report = json.loads(next((tmp_path / "fail").glob("*.json")).read_text())
    assert [g["passed"] for g in report["gates"] if g["kind"] == "recall"] == [False] * recall

    lenient = _rules(tmp_path, 0.0, 1.0)
    passed = _cli(
        "redaction", "review", "--rules", str(lenient), "--corpus", str(small_corpus),
        "--out", str(tmp_path / "pass"),
    )  # fmt: skip
    assert passed.returncode == 0, passed.stderr[-2000:]
    assert "rankscope: redaction review: failed" not in passed.stderr


def test_the_demo_checks_fail_on_what_was_not_stored(services: Services) -> None:
    """``rankscope demo`` exits with 1 when one of these fails; checked here on the demo's job
    loaded into the real engine, and on a job that never arrived."""
    from collections import Counter

    from rankscope.demo import demo_checks
    from rankscope.sinks.clickhouse import connect
    from tests.demo_data import load_demo

    client = connect(services.clickhouse_url)
    db = f"dc{uuid.uuid4().hex[:10]}"
    data = load_demo(client, db)
    produced = Counter({"span": 100, "gpu_sample": 100})
    assert demo_checks(client, db, data.job_id, produced, 3, expect_incident=True) == []

    failed = demo_checks(client, db, "never-arrived", produced, 10**6, expect_incident=True)
    assert failed[:2] == [
        f"none of the 100 gpu_sample events reached {db}.gpu_samples",
        f"none of the 100 span events reached {db}.spans",
    ]
    assert failed[2].startswith("1000000 malformed records injected, ")
    assert failed[2].endswith(" dead letter(s) stored")
    assert failed[3:] == ["a fault was injected but no incident was found"]
