"""The simulated multi-attempt run (rankscope/simulation/runs.py) through the real path: the
collectors' publisher -> Kafka -> stream worker -> sink -> ClickHouse, then ``run_cost`` and
``run_losses`` against the truth the scenario computes (issue 19)."""

from __future__ import annotations

import pytest

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.simulation.runs import AttemptSpec, RunScenario, run_truth, simulate_run
from rankscope.sinks.clickhouse import connect
from rankscope.sinks.named_queries import run_query


def test_the_scenario_knows_its_truth() -> None:
    s = RunScenario(start_ns=0)
    truth = run_truth(s)
    # 4 GPUs; attempt 1 saves step 100 and fails after 120, attempt 2 resumes at 101, saves 150
    # and is preempted after 180, attempt 3 resumes at 151 and completes at 300
    assert (truth.attempts, truth.failed_attempts, truth.completed_job_id) == (3, 2, "sim-run-1-b")
    assert truth.recomputed_steps == 20 + 30
    events = simulate_run(s)
    assert events == simulate_run(s)  # deterministic: a rerun publishes the same events
    steps = {e.payload.step for e in events if e.kind == "span" and e.payload.phase == "step"}
    assert steps == set(range(1, 301)) | {121}  # and attempt 1's failed step
    one = RunScenario(
        start_ns=0, attempts=[AttemptSpec(job_id="j", steps=10, outcome="job_completed")]
    )
    assert run_truth(one).lost_gpu_hours == 0


def test_simulated_run_through_the_pipeline(pipeline_config: PipelineConfig) -> None:
    cfg = pipeline_config
    scenario = RunScenario()
    truth = run_truth(scenario)
    with Publisher(PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix)) as pub:
        pub.publish(simulate_run(scenario))
        pub.flush(30)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(120)
        pipeline.wait_drained(240)
    client = connect(cfg.clickhouse_url)
    (row,) = run_query(
        client,
        "run_cost",
        cfg.database,
        {"run_id": scenario.run_id, "price_per_gpu_hour": "2.5"},
    ).named_results()
    assert (row["attempts"], row["failed_attempts"], row["completed_job_id"]) == (
        truth.attempts,
        truth.failed_attempts,
        truth.completed_job_id,
    )
    assert row["recomputed_steps"] == truth.recomputed_steps
    for key in ("gpu_hours", "energy_kwh", "lost_gpu_hours", "lost_energy_kwh"):
        assert row[key] == pytest.approx(getattr(truth, key), abs=1e-4), key
    assert row["cost"] == pytest.approx(round(truth.gpu_hours * 2.5, 2), abs=0.011)
    losses = {
        r["cause_class"]: r["recomputed_steps"]
        for r in run_query(
            client,
            "run_losses",
            cfg.database,
            {"run_id": scenario.run_id, "price_per_gpu_hour": "2"},
        ).named_results()
    }
    # the worker attributes attempt 1's failed step (an incident, joined by time); the
    # preemption is the scheduler's word
    assert losses == {"application": 20, "scheduler_preemption": 30}
