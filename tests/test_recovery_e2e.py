"""End to end: fault scenarios through the whole pipeline (simulated collectors -> Kafka ->
stream worker -> decider -> dry-run actuator -> ClickHouse) lead to the right recovery action,
visible in `rankscope recovery history` and ClickHouse, with the time from onset measured."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from rankscope.cli import app as cli
from rankscope.evaluate import run_eval
from rankscope.settings import Settings
from rankscope.sinks.clickhouse import connect
from tests.conftest import Services

# What an operator expects for each fault (written out here, not derived from the policy).
RIGHT_ACTION = {
    "gpu_fell_off_bus": "exclude_node_and_restart",
    "ib_link_flap": "exclude_node_and_restart",
    "host_oom": "restart_from_checkpoint",
    "preemption": "restart_from_checkpoint",
    "hang": "dump_stacks",
    "thermal_straggler": "",  # slow, not broken: reported, nothing restarted
    "noise": "",
}


def test_each_fault_gets_its_action_through_the_pipeline(
    services: Services, eval_settings: Settings, tmp_path: Path
) -> None:
    settings = eval_settings
    tag = settings.database
    report = run_eval(
        settings, [16], 1, 60.0, tmp_path / "eval.json", Console(file=io.StringIO()),
        speed=20.0, variants=list(RIGHT_ACTION),
    )  # fmt: skip
    runs = {r.scenario: r for r in report.runs}
    assert sorted(runs) == sorted(RIGHT_ACTION)
    assert sum(r.correct for r in runs.values()) >= len(runs) - 1, report.to_json()
    for scenario, want in RIGHT_ACTION.items():
        r = runs[scenario]
        assert r.expected_action == want, scenario
        if not r.correct:
            continue  # a detection miss is scored by the detection suites, not here
        assert r.action_ok, f"{scenario}: decided {r.action!r}, want {want!r}"
        if want:
            # decided from event time, within the same minute as the fault
            assert r.action_s is not None and 0 <= r.action_s < 60, (scenario, r.action_s)
        else:
            assert r.action == "" and r.action_s is None, (scenario, r.action)

    gpu = runs["gpu_fell_off_bus"]
    result = CliRunner().invoke(
        cli,
        ["recovery", "history", "--job", gpu.job_id, "--hours", "720",
         "--clickhouse-url", services.clickhouse_url, "--database", tag],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "exclude_node_and_restart" in result.output and "succeeded" in result.output
    rows = (
        connect(services.clickhouse_url)
        .query(
            f"SELECT stage, action, node, reason FROM {tag}.recovery_actions FINAL "
            "WHERE job_id = %(j)s ORDER BY ts, stage",
            parameters={"j": gpu.job_id},
        )
        .result_rows
    )
    stages = [(stage, action) for stage, action, _, _ in rows]
    assert ("decided", "exclude_node_and_restart") in stages
    assert ("succeeded", "exclude_node_and_restart") in stages
    (ran,) = [r for r in rows if r[:2] == ("succeeded", "exclude_node_and_restart")]
    assert ran[2] == "node000" and "dry-run: would run exclude_node_and_restart" in ran[3]
