"""The recovery decider in a real stream worker on a real broker: one decider for the whole
fleet (its input has one partition, whichever worker produced the findings), rebuilt from its
input after a crash so a restart decides exactly what an uninterrupted run would."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from rankscope.cli import app as cli
from rankscope.kafka_admin import read_topic
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.derived import Incident, RecoveryEvent, RecoveryInput, StepProgress
from rankscope.services.kafka import ensure_topics
from rankscope.streams.recovery.decider import Decider
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.recovery.replay import committed_offset

S = 1_000_000_000
# the killed worker's partitions move after 10 s of silence, not the production default's 60
FAST_FAILOVER = {"RANKSCOPE_WORKER_SESSION_TIMEOUT_S": "10"}


def _incident(job: str, ts: int) -> RecoveryInput:
    return RecoveryInput(
        incident=Incident(
            incident_id=f"{job}/inc0",
            revision=0,
            cluster="c1",
            job_id=job,
            cause_class="application",
            node=f"{job}-node0",
            rank=0,
            confidence=0.9,
            summary="OSError: [Errno 5] Input/output error: '/mnt/ckpt/step_4000'",
            first_cause_ts=ts,
            first_symptom_ts=ts,
            attributed_ts=ts,
            emitted_ts=ts,
        )
    )


def _progress(job: str, ts: int) -> RecoveryInput:
    nodes = [f"{job}-node{k}" for k in range(2)]
    return RecoveryInput(
        progress=StepProgress(cluster="c1", job_id=job, step=40, ts=ts, nodes=nodes)
    )


def _send(cfg: PipelineConfig, records: list[RecoveryInput], worker: int) -> None:
    """As the stream worker ``worker`` of several would: its own producer, its jobs' keys."""
    producer = Producer({"bootstrap.servers": cfg.bootstrap, "client.id": f"worker-{worker}"})
    for r in records:
        job = (r.incident or r.progress or r).job_id  # type: ignore[union-attr]
        producer.produce(cfg.topics.recovery_input, key=job.encode(), value=r.model_dump_json())
    assert producer.flush(30) == 0


def _decisions(cfg: PipelineConfig) -> list[RecoveryEvent]:
    return [
        RecoveryEvent.model_validate_json(v) for v in read_topic(cfg.bootstrap, cfg.topics.recovery)
    ]


def _wait(
    pipeline: Pipeline, what: str, check: object, timeout: float = 120
) -> list[RecoveryEvent]:
    deadline = time.monotonic() + timeout
    while True:
        got = _decisions(pipeline.config)
        if check(got):  # type: ignore[operator]
            return got
        assert pipeline.worker.alive, pipeline.worker.log_tail()
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {got}"
        time.sleep(0.5)


def test_one_decider_for_the_fleet_survives_a_crash(pipeline_config: PipelineConfig) -> None:
    """20 jobs report progress through two workers; a storage outage then fails job after job.
    The worker is SIGKILLed after the first four decisions; after the restart, the breaker
    still counts them (5 restarts, then it trips on the 6th of 20 jobs: 3 held back), and the
    decisions equal an uninterrupted in-process run's, key for key. Then an operator pauses
    recovery with the CLI, and the next finding is held back by the pause."""
    cfg = pipeline_config
    t0 = time.time_ns() - 60 * S
    progress = [_progress(f"job{j}", t0) for j in range(20)]
    first = [_incident(f"job{j}", t0 + (10 + j) * S) for j in range(4)]
    second = [_incident(f"job{j}", t0 + (10 + j) * S) for j in range(4, 8)]
    _send(cfg, progress[:10], worker=1)
    _send(cfg, progress[10:], worker=2)
    _send(cfg, first[:2], worker=1)
    _send(cfg, first[2:], worker=2)

    # the breaker's denominator: a configured fleet of 20 jobs (not the ids seen)
    policy = load_policy()
    policy = policy.model_copy(
        update={"breaker": policy.breaker.model_copy(update={"fleet_jobs": 20})}
    )
    policy_path = cfg.home / "policy.yaml"
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text(yaml.safe_dump(policy.model_dump(mode="json")))
    cfg = replace(cfg, env={**FAST_FAILOVER, "RANKSCOPE_RECOVERY_POLICY": str(policy_path)})
    pipeline = Pipeline(cfg)
    pipeline.worker.start()
    try:
        _wait(pipeline, "four decisions", lambda got: len(got) == 4)
        pipeline.worker.kill()
        _send(cfg, second, worker=2)
        pipeline.worker.start()
        got = _wait(
            pipeline, "the breaker", lambda got: any(e.rule == "circuit-breaker" for e in got)
        )
        assert "rebuilt from" in pipeline.worker.log_tail(200)

        result = CliRunner().invoke(
            cli,
            ["recovery", "pause", "--bootstrap", cfg.bootstrap, "--topic-prefix", cfg.topic_prefix,
             "--reason", "storage maintenance", "--home", str(cfg.home)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        _send(cfg, [_incident("job9", t0 + 40 * S)], worker=1)
        got = _wait(pipeline, "the paused one", lambda got: any(e.job_id == "job9" for e in got))
    finally:
        pipeline.worker.stop()

    expected = Decider(policy)
    want: list[RecoveryEvent] = []
    for r in [*progress, *first, *second]:
        want += expected.feed(r)
    distinct = {(e.key, e.stage, e.action, e.job_id) for e in got if e.job_id != "job9"}
    assert distinct == {(e.key, e.stage, e.action, e.job_id) for e in want}
    decided = [e for e in want if e.stage == "decided" and e.action != "escalate"]
    assert [e.job_id for e in decided] == [f"job{j}" for j in range(5)]
    (breaker,) = [e for e in got if e.rule == "circuit-breaker"]
    assert "6 of 20 jobs needed recovery" in breaker.reason
    assert sorted(e.job_id for e in got if e.stage == "suppressed" and e.job_id != "job9") == [
        "job5", "job6", "job7",
    ]  # fmt: skip
    (paused,) = [e for e in got if e.job_id == "job9"]
    assert paused.stage == "suppressed" and paused.reason.startswith("recovery is paused")


def test_a_restarted_decider_fires_overdue_deadlines_without_new_input(
    pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    """A job is restarted and then says nothing (its steps never resume). The worker dies
    before the progress deadline; after the restart no input arrives at all, yet the new
    decider rebuilds from the committed offset and fails the recovery at its deadline, once."""
    policy = load_policy()
    short = policy.model_copy(
        update={"limits": policy.limits.model_copy(update={"progress_deadline_s": 20.0})}
    )
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(short.model_dump(mode="json")))
    cfg = replace(
        pipeline_config, env={"RANKSCOPE_RECOVERY_POLICY": str(policy_file), **FAST_FAILOVER}
    )
    t0 = time.time_ns() - 60 * S
    _send(cfg, [_progress("job0", t0), _incident("job0", t0 + 10 * S)], worker=1)

    pipeline = Pipeline(cfg)
    pipeline.worker.start()
    try:
        _wait(pipeline, "the decision", lambda got: len(got) == 1)
        # both inputs committed: after the restart, nothing is left to read (a quiet fleet)
        deadline = time.monotonic() + 60
        while committed_offset(cfg.bootstrap, cfg.streams_group, cfg.topics.recovery_input, 0) < 2:
            assert time.monotonic() < deadline, "the worker never committed its input"
            time.sleep(0.2)
        pipeline.worker.kill()
        pipeline.worker.start()
        got = _wait(
            pipeline,
            "the failed recovery",
            lambda got: any(e.stage == "progress_not_resumed" for e in got),
            timeout=180,
        )
    finally:
        pipeline.worker.stop()
    got = _decisions(cfg)
    first = got[0]
    assert (first.stage, first.action) == ("decided", "restart_from_checkpoint")
    failed = [e for e in got if e.stage == "progress_not_resumed"]
    assert [e.key for e in failed] == [first.key]
    assert "no step after restart_from_checkpoint within 20 s" in failed[0].reason
    retry = [e for e in got if e.stage == "decided" and e.rule.endswith(":no-progress")]
    assert len({e.key for e in retry}) == 1 and retry[0].attempt == 2


def test_a_decider_that_cannot_read_its_history_acts_on_nothing(
    pipeline_config: PipelineConfig,
) -> None:
    """Fail closed: when the read-back fails (here the commands topic is gone), the decider
    does not guess; it starts paused, alerts once (an escalate for the fleet) and records
    findings as held back. A later retry that reads the history resumes it (issue 15)."""
    cfg = replace(pipeline_config, env=FAST_FAILOVER)
    admin = AdminClient({"bootstrap.servers": cfg.bootstrap})
    for future in admin.delete_topics([cfg.topics.recovery_control]).values():
        future.result(30)
    _send(cfg, [_incident("job0", time.time_ns())], worker=1)
    pipeline = Pipeline(cfg)
    pipeline.worker.start()
    try:
        got = _wait(pipeline, "the alert and the held-back decision", lambda got: len(got) == 2)
        alert, held = sorted(got, key=lambda e: e.rule != "decider-history")
        assert (alert.stage, alert.action, alert.rule) == ("decided", "escalate", "decider-history")
        assert "could not read its history back" in alert.reason
        assert held.stage == "suppressed" and held.reason.startswith("recovery is paused")
        assert "automated recovery is PAUSED" in pipeline.worker.log_tail(400)
        # the commands topic is back: the retry (15 s after the first failure) reads the
        # history, recovery follows the operators' latest command again (none: acting)
        ensure_topics(cfg.bootstrap, {cfg.topics.recovery_control: 1})
        time.sleep(1)  # the topic's metadata settles on the broker
        deadline = time.monotonic() + 90
        while "read its history after" not in pipeline.worker.log_tail(400):
            assert time.monotonic() < deadline, pipeline.worker.log_tail(60)
            time.sleep(0.5)
        _send(cfg, [_incident("job1", time.time_ns())], worker=1)
        got = _wait(pipeline, "a decision after the retry", lambda got: len(got) == 3)
    finally:
        pipeline.worker.stop()
    acted = [e for e in got if e.job_id == "job1"]
    assert [(e.stage, e.action) for e in acted] == [("decided", "restart_from_checkpoint")]
    assert len([e for e in got if e.rule == "decider-history"]) == 1  # one alert, not per retry
