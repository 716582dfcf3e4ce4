"""bench/scale_out_pool.py: the acceptance reading of issue 21's scale-out rounds (pairs in
either order, the pooled ratio from CPU totals, an interval that decides "established")."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "scale_out_pool", ROOT / "bench/scale_out_pool.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_out_pool"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _run(workers: int, cpu_s: float, events: int = 100_000) -> dict[str, Any]:
    return {
        "workers": workers,
        "topic_prefix": f"so{workers}w{cpu_s}",
        "events": events,
        "worker_cpu_seconds_total": cpu_s,
    }


def _file(tmp_path: Path, name: str, runs: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"commit": "abc1234", "runs": runs}))
    return path


def test_pairs_are_read_in_either_order_and_pooled_from_totals(
    pool: ModuleType, tmp_path: Path
) -> None:
    # round one 1 then 2 workers, round two 2 then 1 (the bench alternates the order)
    path = _file(tmp_path, "a.json", [_run(1, 4.0), _run(2, 5.0), _run(2, 6.0), _run(1, 6.0)])
    pairs = pool.pairs_of(path)
    assert [(p.one_cpu_s, p.two_cpu_s) for p in pairs] == [(4.0, 5.0), (6.0, 6.0)]
    assert [p.ratio for p in pairs] == [1.25, 1.0]
    # totals, not the mean of the ratios (1.125): a slow round weighs by its CPU
    assert pool.pooled(pairs) == pytest.approx(11.0 / 10.0)


def test_a_file_whose_runs_are_not_pairs_is_refused(pool: ModuleType, tmp_path: Path) -> None:
    path = _file(tmp_path, "b.json", [_run(1, 4.0), _run(1, 4.0)])
    with pytest.raises(SystemExit, match="not a pair"):
        pool.pairs_of(path)


def test_the_interval_decides_established(pool: ModuleType, tmp_path: Path) -> None:
    steady = pool.pairs_of(
        _file(tmp_path, "c.json", [r for _ in range(8) for r in (_run(1, 10.0), _run(2, 10.3))])
    )
    lo, hi = pool.interval(steady)
    assert lo == pytest.approx(1.03) and hi == pytest.approx(1.03)  # every resample the same
    noisy_runs = [
        r
        for one, two in [(10, 8), (10, 13), (10, 9), (10, 12.5)]
        for r in (_run(1, one), _run(2, two))
    ]
    noisy = pool.pairs_of(_file(tmp_path, "d.json", noisy_runs))
    lo, hi = pool.interval(noisy)
    assert pool.pooled(noisy) == pytest.approx(1.0625)
    assert lo < pool.pooled(noisy) < hi and hi > pool.BOUND  # on average only


def test_the_command_line_writes_the_verdict(
    pool: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, "e.json", [_run(1, 10.0), _run(2, 10.5), _run(2, 9.5), _run(1, 10.0)])
    out = tmp_path / "pool.json"
    monkeypatch.setattr(sys, "argv", ["scale_out_pool.py", str(path), "--json", str(out)])
    assert pool.main() == 0
    figures = json.loads(out.read_text())
    assert figures["pooled_ratio_2_to_1"] == 1.0
    assert figures["verdict"] == "established"
    assert [r["ratio"] for r in figures["rounds"]] == [1.05, 0.95]


def test_net_of_idle_only_when_every_round_has_it(pool: ModuleType, tmp_path: Path) -> None:
    runs = [_run(1, 4.0), _run(2, 5.0)]
    runs[0]["worker_cpu_us_per_event_net_of_idle"] = 38.0
    runs[1]["worker_cpu_us_per_event_net_of_idle"] = 39.9
    with_net = pool.pairs_of(_file(tmp_path, "f.json", runs))
    assert pool.pooled_net_of_idle(with_net) == pytest.approx(39.9 / 38.0)
    without = pool.pairs_of(_file(tmp_path, "g.json", [_run(1, 4.0), _run(2, 5.0)]))
    assert pool.pooled_net_of_idle(with_net + without) is None
