"""An evaluation scores its own runs only, even in a database earlier evaluations filled.

The CLI's default home and database are reused from one ``rankscope eval`` to the next and the
suite's job names repeat, so a run used to be scored on every earlier run of the same name too:
an earlier right cause hid a miss, and the findings and actions piled up (found while comparing
paced and ``--speed 0`` evaluations run one after the other). Each evaluation's jobs now carry a
token of their own (``rankscope.evaluate.own_jobs``)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from rankscope.evaluate import RunResult, own_jobs, run_eval, suite
from rankscope.settings import Settings


def test_job_ids_get_a_token_and_nothing_else_changes() -> None:
    cases = suite([16], 1, 30.0, ["gpu_fell_off_bus"])
    mine, other = own_jobs(cases, "aaaa"), own_jobs(cases, "bbbb")
    assert [c.config.job_id for c in mine] == [f"{c.config.job_id}-aaaa" for c in cases]
    assert {c.config.job_id for c in mine}.isdisjoint(c.config.job_id for c in other)
    for a, b in zip(cases, mine, strict=True):
        assert a.name == b.name and a.config.model_copy(update={"job_id": ""}) == (
            b.config.model_copy(update={"job_id": ""})
        )


def test_a_second_evaluation_on_the_same_database_scores_only_its_own_run(
    eval_settings: Settings, tmp_path: Path
) -> None:
    def evaluate() -> list[RunResult]:
        return run_eval(
            eval_settings, [16], 1, 60.0, tmp_path / "eval.json", Console(file=io.StringIO()),
            variants=["gpu_fell_off_bus"],
        ).runs  # fmt: skip

    [first] = evaluate()
    [second] = evaluate()
    assert first.correct and first.action_ok and first.action, first
    assert second.job_id != first.job_id
    # the second run's findings and actions are its own, not its own plus the first's
    assert (second.correct, second.found, second.action) == (True, first.found, first.action)
    assert second.action_s is not None and 0 <= second.action_s < 60, second.action_s
