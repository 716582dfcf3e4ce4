"""Run ids and attempts on scheduler events (issue 19): the rule (collectors/runs.py), the Slurm
collector on recorded data_parser v0.0.42 documents (requeue: same job id, restart_cnt + 1;
dependency chains; array jobs; a comment rule) and the Kubernetes collector (restartCount)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

from rankscope.collectors.runs import RunRule, dependency_job_ids
from rankscope.collectors.slurm import SlurmCollector, SlurmCollectorConfig, create_slurm_collector
from rankscope.schemas.events import SchedulerEventEvent
from tests.test_slurm_collector import (
    NOW_NS,
    SA_4242,
    SC_GPU001,
    SQ_4242,
    ScriptedRunner,
    factory,
    rec,
)


def runs(events: list[Any]) -> list[tuple[str, str, str, int]]:
    out = []
    for ev in events:
        assert isinstance(ev, SchedulerEventEvent)
        out.append((ev.payload.event_type, ev.job_id or "", ev.payload.run_id, ev.payload.attempt))
    return out


def test_rule_order_mapping_pattern_link_job() -> None:
    rule = RunRule(mapping={"7": "explicit"}, pattern=r"run=(?P<run>[\w.-]+)")
    assert rule.resolve("7", comment="run=from-comment") == "explicit"
    assert rule.resolve("8", comment="ckpt=/x run=llama-0412", linked="l") == "llama-0412"
    assert rule.resolve("9", comment="no run here", linked="chain-1") == "chain-1"
    assert rule.resolve("10") == "10"
    by_name = RunRule(pattern=r"^(?P<run>.+)-part\d+$", match_on="name")
    assert by_name.resolve("11", name="gpt-pretrain-part3", comment="run=x") == "gpt-pretrain"
    with pytest.raises(ValidationError, match="named group 'run'"):
        RunRule(pattern=r"run=(\S+)")


def test_dependency_job_ids() -> None:
    # sbatch(1) --dependency forms, as squeue --json prints them
    assert dependency_job_ids("afterany:4242(unfulfilled)") == ["4242"]
    assert dependency_job_ids("afterok:12:13,afternotok:14+60") == ["12", "13", "14"]
    assert dependency_job_ids("after:12,singleton") == []
    assert dependency_job_ids("") == []


def test_slurm_requeue_keeps_the_run_and_counts_attempts() -> None:
    """The recorded 4242 story: running, requeued after a preemption, running again, failed."""
    runner = ScriptedRunner()
    col = create_slurm_collector(
        SlurmCollectorConfig(), factory(), runner=runner, environ={"SLURM_JOB_ID": "4242"}
    )
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_running.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_mixed.json")),
    )
    got = runs(col.poll(NOW_NS))
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_requeued.json")),
        (SA_4242, rec("v0.0.42/sacct_4242_after_preemption.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_idle.json")),
    )
    got += runs(col.poll(NOW_NS))
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_running_again.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_allocated.json")),
    )
    got += runs(col.poll(NOW_NS))
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_failed.json")),
        (SA_4242, rec("v0.0.42/sacct_4242_failed.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_draining.json")),
    )
    got += runs(col.poll(NOW_NS))
    assert got == [
        ("job_started", "4242", "4242", 1),
        ("job_requeued", "4242", "4242", 1),  # the attempt that ended in the requeue
        ("preempted", "4242", "4242", 1),
        ("job_started", "4242", "4242", 2),
        ("oom_killed", "4242", "4242", 2),
        ("node_drain", "4242", "4242", 2),
        ("job_failed", "4242", "4242", 2),
    ]


def _squeue(job_id: int, **fields: Any) -> str:
    """The recorded v0.0.42 running document with another job id and run-linking fields."""
    doc = json.loads(rec("v0.0.42/squeue_4242_running.json"))
    job = copy.deepcopy(doc["jobs"][0])
    job.update(job_id=job_id, **fields)
    doc["jobs"] = [job]
    return json.dumps(doc)


def _one(col: SlurmCollector, runner: ScriptedRunner, job_id: int, doc: str) -> list[Any]:
    runner.expect((["squeue", "--json", "--states=all", f"--jobs={job_id}"], doc))
    col.job_ids = [str(job_id)]
    return runs(col.poll(NOW_NS))


def test_slurm_dependency_chain_continues_the_run() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(
        SlurmCollectorConfig(watch_node=False, use_sacct=False), factory(), runner=runner
    )
    assert _one(col, runner, 500, _squeue(500, restart_cnt=1)) == [
        ("job_started", "500", "500", 2),  # first seen after one requeue: its second attempt
        ("job_requeued", "500", "500", 1),  # (no sacct: the requeue is timed when seen)
    ]
    chained = _squeue(501, dependency="afterany:500(unfulfilled)")
    assert _one(col, runner, 501, chained) == [("job_started", "501", "500", 3)]
    # a dependency on a job this agent never saw links nothing: the job is its own run
    assert _one(col, runner, 502, _squeue(502, dependency="afterok:77")) == [
        ("job_started", "502", "502", 1)
    ]


def test_slurm_comment_rule_and_array_jobs() -> None:
    runner = ScriptedRunner()
    rule = RunRule(pattern=r"run=(?P<run>[\w.-]+)", array_is_run=True)
    col = SlurmCollector(
        SlurmCollectorConfig(watch_node=False, use_sacct=False, runs=rule), factory(), runner=runner
    )
    assert _one(col, runner, 600, _squeue(600, comment="run=llama-0412 ckpt=/ckpt")) == [
        ("job_started", "600", "llama-0412", 1)
    ]
    task = {"set": True, "infinite": False, "number": 2}
    array = _squeue(703, array_job_id={"set": True, "infinite": False, "number": 700},
                    array_task_id=task)  # fmt: skip
    assert _one(col, runner, 703, array) == [("job_started", "703", "700", 3)]


def test_training_code_sets_run_model_and_throughput(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented route: OTEL_RESOURCE_ATTRIBUTES names the run, attempt and model; the step
    span carries samples and tokens; all reach the ``span/1`` event's attributes."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rankscope.collectors.otel import RankTracer, span_to_event
    from tests.test_otel import CONFIG, RANK_ENV

    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES",
        "rankscope.run_id=llama-0412,rankscope.attempt=2,rankscope.model=llama-7b",
    )
    memory = InMemorySpanExporter()
    tracer = RankTracer.from_env(CONFIG, env=RANK_ENV, exporter=memory)
    with tracer.step(7) as span:
        span.set_attribute("rankscope.samples", 64)
        span.set_attribute("rankscope.tokens", 64 * 2048)
        with tracer.phase("checkpoint"):
            pass
    tracer.provider.force_flush()
    events = {e.payload.phase: e for e in (span_to_event(s) for s in memory.get_finished_spans())}
    step = events["step"].payload.attributes
    assert {k: step[k] for k in sorted(step) if k.startswith("rankscope.")} == {
        "rankscope.attempt": "2",
        "rankscope.model": "llama-7b",
        "rankscope.run_id": "llama-0412",
        "rankscope.samples": 64,
        "rankscope.tokens": 131072,
        "rankscope.world_size": 2,
    }
    assert events["checkpoint"].payload.step == 7  # the step a checkpoint inside step 7 saves
