"""Issue 14 through the real broker, stream worker, sink and chDB ClickHouse: hostile
identifiers reach the Slurm and Kubernetes actuators as findings on the decider's input and are
refused with nothing run; forged, replayed and unsigned records written with a raw producer
are refused by the runner; a genuine decision still acts once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import yaml
from confluent_kafka import Consumer, Producer

from rankscope.kafka_admin import read_topic
from rankscope.pipeline import Pipeline, PipelineConfig, StageProcess
from rankscope.schemas.derived import Incident, RecoveryControl, RecoveryEvent, RecoveryInput
from rankscope.sinks.actuators.base import Actuator, ActuatorRunner, Ledger
from rankscope.sinks.actuators.cluster import KubernetesActuator, KubernetesConfig, SlurmActuator
from rankscope.sinks.actuators.loop import run_loop
from rankscope.sinks.clickhouse import connect
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.recovery.signing import Keyring, load_keyring
from tests.test_cluster_actuators import _ApiServer, _Recorder
from tests.test_recovery_security import HOSTILE

S = 1_000_000_000
VALUES = [v for v in HOSTILE if v]  # an empty id is a missing one (unit-tested)


def _wait(what: str, check: Callable[[], bool], *procs: StageProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for p in procs:
            assert p.alive, f"{p.name} exited:\n{p.log_tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@contextmanager
def _runner(cfg: PipelineConfig, actuator: Actuator, group: str, keys: Keyring) -> Iterator[None]:
    """The runner's consume loop (as `rankscope recovery run` runs it) in a thread, with the
    actuator's recorded-contract fake behind its seam."""
    stop = threading.Event()

    def loop() -> None:  # the ledger's SQLite handle belongs to the thread that uses it
        runner = ActuatorRunner(actuator, Ledger(cfg.home / f"{group}.db"), keys)
        consumer = Consumer(
            {
                "bootstrap.servers": cfg.bootstrap,
                "group.id": f"{cfg.topic_prefix}-{group}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        producer = Producer({"bootstrap.servers": cfg.bootstrap})
        try:
            run_loop(runner, consumer, producer, cfg.topics.recovery, stop.is_set, lambda r: None)
        finally:
            runner.ledger.close()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def _events(cfg: PipelineConfig) -> list[RecoveryEvent]:
    return [
        RecoveryEvent.model_validate_json(v) for v in read_topic(cfg.bootstrap, cfg.topics.recovery)
    ]


def _incident(job: str, node: str, ts: int, n: int) -> RecoveryInput:
    return RecoveryInput(
        incident=Incident(
            incident_id=f"inc{n}", revision=0, cluster="c1", job_id=job, cause_class="gpu_xid",
            node=node, rank=0, confidence=0.95, summary="XID 79", first_cause_ts=ts,
            first_symptom_ts=ts, attributed_ts=ts, emitted_ts=ts,
        )
    )  # fmt: skip


def test_hostile_identifiers_through_the_pipeline_are_refused(
    pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    """Incidents naming each hostile job id (on a valid node) and each hostile node (of a
    valid job), after an unsigned pause, go to the decider's input topic; the worker decides
    (policy mode act); a Slurm and a Kubernetes runner refuse every one (recorded on the topic
    and in recovery_actions) and their fakes see only the one genuine job's checks and
    commands. The unsigned pause is refused too, so the genuine decision acts."""
    base = load_policy()
    policy = base.model_copy(
        update={
            "mode": "act",
            "rules": [r for r in base.rules if r.name == "gpu-hardware-exclude-node"],
            "breaker": base.breaker.model_copy(update={"fleet_jobs": 10**4, "fleet_nodes": 10**4}),
        }
    )
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy.model_dump(mode="json")))
    cfg = replace(pipeline_config, env={"RANKSCOPE_RECOVERY_POLICY": str(policy_path)})
    keys = load_keyring(cfg.home / "recovery.key")  # the worker and runners share the home

    now = time.time_ns()
    records = [RecoveryInput(control=RecoveryControl(paused=True, by="mallory", ts=now))]
    for i, v in enumerate(VALUES):
        records.append(_incident(v, f"node{i:03d}", now + i * S, 2 * i))
        records.append(_incident(str(9000 + i), v, now + i * S, 2 * i + 1))
    records.append(_incident("81234", "node003", now + 100 * S, 999))  # the genuine one
    producer = Producer({"bootstrap.servers": cfg.bootstrap})
    producer.produce(
        cfg.topics.recovery_control, key=b"pause", value=records[0].control.model_dump_json()
    )  # type: ignore[union-attr]
    for r in records:
        producer.produce(cfg.topics.recovery_input, key=b"x", value=r.model_dump_json())
    assert producer.flush(30) == 0

    slurm_fake, api = _Recorder(), _ApiServer()
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    k8s = KubernetesActuator(
        KubernetesConfig(api_server=api.url, token_file=token, ca_file=None, namespace="train")
    )
    pipeline = Pipeline(cfg)
    n_decided = 2 * len(VALUES) + 1

    def outcomes() -> list[RecoveryEvent]:
        return [e for e in _events(cfg) if e.stage in ("refused", "succeeded", "failed")]

    pipeline.worker.start()
    pipeline.sink.start()
    try:
        with (
            _runner(cfg, SlurmActuator(run=slurm_fake), "slurm", keys),
            _runner(cfg, k8s, "k8s", keys),
        ):
            _wait(
                "every decision through both runners",
                lambda: (
                    len([e for e in outcomes() if e.rule != "recovery-control"]) == 2 * n_decided
                ),
                pipeline.worker,
                pipeline.sink,
                timeout=180,
            )
        events = _events(cfg)
        decided = [e for e in events if e.stage == "decided"]
        assert len(decided) == n_decided and all(e.mode == "act" for e in decided)
        assert all(keys.check(e) is None for e in decided)
        hostile = [e for e in decided if e.job_id != "81234"]
        for runner in ("slurm", "kubernetes"):
            got = {e.key: e for e in outcomes() if e.reason.startswith(f"{runner}: ")}
            for d in hostile:
                out = got[d.key]
                assert out.stage == "refused", (runner, d.job_id, d.node, out.reason)
                assert out.reason.startswith(f"{runner}: refused: "), out.reason
            (genuine,) = [e for e in decided if e.job_id == "81234"]
            assert got[genuine.key].stage == "succeeded", got[genuine.key].reason
        # the fakes saw the genuine job's checks and actions only
        assert slurm_fake.calls == [
            ["scontrol", "-o", "show", "job", "81234"],
            ["scontrol", "-o", "show", "node", "node003"],
            ["scontrol", "update", "NodeName=node003", "State=DRAIN",
             "Reason=rankscope: gpu-hardware-exclude-node"],
            ["scontrol", "requeue", "81234"],
            ["scontrol", "update", "JobId=81234", "ExcNodeList=node003"],
        ]  # fmt: skip
        assert [(r["method"], r["path"].split("?")[0]) for r in api.requests] == [
            ("GET", "/api/v1/nodes/node003"),
            ("GET", "/api/v1/namespaces/train/pods"),
            ("PATCH", "/api/v1/nodes/node003"),
            ("DELETE", "/api/v1/namespaces/train/pods"),
        ]
        (pause,) = [e for e in events if e.rule == "recovery-control"]
        assert pause.stage == "refused" and "unsigned" in pause.reason

        client = connect(cfg.clickhouse_url)

        def table() -> dict[str, tuple[str, str]]:
            rows = client.query(
                f"SELECT key, stage, reason FROM {cfg.database}.recovery_actions FINAL "
                "WHERE stage IN ('refused', 'succeeded')"
            ).result_rows
            return {k + "|" + s: (s, r) for k, s, r in rows}

        want = {f"{d.key}|refused" for d in hostile} | {f"{pause.key}|refused"}
        _wait("the refusals in ClickHouse", lambda: want <= set(table()), pipeline.sink)
    finally:
        pipeline.worker.stop()
        pipeline.sink.stop()
        api.server.shutdown()


def test_forged_replayed_unsigned_and_expired_decisions_from_a_raw_producer(
    pipeline_config: PipelineConfig,
) -> None:
    """Records written straight to <p>.recovery: the runner acts on none but the genuine
    decision (once, also after a restart that reads a replay of it), and records each refusal
    on the topic. A signed dry_run decision runs nothing."""
    cfg = pipeline_config
    keys = load_keyring(cfg.home / "recovery.key")
    now = time.time_ns()

    def decision(job: str, **kw: object) -> RecoveryEvent:
        kw = {"decided_at": now, "mode": "act", **kw}
        return RecoveryEvent(
            key=RecoveryEvent.make_key("c1", job, "raw"), stage="decided",
            action="restart_from_checkpoint", cluster="c1", job_id=job, node="node003",
            rule="r", reason="raw", trigger_id="t", attempt=1, ts=now,
            **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    genuine = keys.sign(decision("81234"))
    forged = genuine.model_copy(update={"job_id": "81235"})
    unsigned = decision("81236")
    expired = keys.sign(decision("81237", decided_at=now - 3600 * S))
    dry = keys.sign(decision("81238", mode="dry_run"))
    producer = Producer({"bootstrap.servers": cfg.bootstrap})

    def send(*ds: RecoveryEvent) -> None:
        for d in ds:  # one key: one partition, read in this order
            producer.produce(cfg.topics.recovery, key=b"k", value=d.model_dump_json())
        assert producer.flush(30) == 0

    def outcomes() -> list[RecoveryEvent]:
        return [e for e in _events(cfg) if e.stage != "decided"]

    fake = _Recorder()
    send(forged, unsigned, genuine, expired, dry)
    with _runner(cfg, SlurmActuator(run=fake), "slurm", keys):
        _wait("five outcomes", lambda: len(outcomes()) == 5)
    send(genuine)  # a replay, read by a restarted runner (same group, same ledger file)
    with _runner(cfg, SlurmActuator(run=fake), "slurm", keys):
        _wait("the replay's outcome", lambda: len(outcomes()) == 6)
    got = outcomes()
    by_job = {}
    for e in got:
        by_job.setdefault(e.job_id, []).append((e.stage, e.reason))
    assert (
        by_job["81235"] == [("refused", by_job["81235"][0][1])]
        and "forged" in by_job["81235"][0][1]
    )
    assert by_job["81236"][0][0] == "refused" and "unsigned" in by_job["81236"][0][1]
    assert by_job["81237"][0][0] == "refused" and "expired" in by_job["81237"][0][1]
    assert by_job["81238"] == [("succeeded", "slurm: dry run: would run scontrol requeue 81238")]
    stages = [s for s, _ in by_job["81234"]]
    assert stages == ["succeeded", "refused"] and "replayed" in by_job["81234"][1][1]
    assert fake.calls == [
        ["scontrol", "-o", "show", "job", "81234"],
        ["scontrol", "requeue", "81234"],
    ]  # the genuine decision acted exactly once; nothing else ran
