"""Issue 14: the pipeline on a broker that only speaks SASL_SSL (SCRAM-SHA-512, mTLS) and
enforces the ACL plan. One broker per module: certificates and users are made at test time."""

from __future__ import annotations

import gc
import logging
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from rankscope.collectors.agent.transport import KafkaTransport
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_acls import Principals, apply_acls
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.kafka_security import (
    ENV_PREFIX,
    KafkaAuthError,
    KafkaSecurity,
    check_access,
    kafka_config,
)
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.derived import RecoveryEvent
from rankscope.schemas.topics import Topics
from rankscope.services.clickhouse_local import LocalClickHouse
from rankscope.services.kafka import LocalKafka
from rankscope.services.kafka_secure import SecureListener
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.streams.config import RedactionConfig, StreamsConfig
from rankscope.streams.recovery.replay import read_partition
from rankscope.streams.validate_loop import ValidateLoop
from tests.factories import NOW_NS, gpu_sample, span
from tests.kafka_pki import Pki, make_pki

PRINCIPALS = Principals()


@dataclass(frozen=True)
class SecureStack:
    kafka: LocalKafka
    listener: SecureListener
    pki: Pki
    clickhouse_url: str
    topics: Topics

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def login(self, user: str, password: str | None = None) -> KafkaSecurity:
        """``user``'s block, with the client certificate the listener requires (mTLS)."""
        return self.listener.client(
            user, password, cert_file=self.pki.client_cert_file, key_file=self.pki.client_key_file
        )

    def role(self, role: str) -> KafkaSecurity:
        return self.login(getattr(PRINCIPALS, role))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    root = tmp_path_factory.mktemp("secure")
    pki = make_pki(root / "pki")
    users = {"admin": secrets.token_urlsafe(16)}
    users |= {getattr(PRINCIPALS, r): secrets.token_urlsafe(16) for r in Principals.model_fields}
    listener = SecureListener(
        ca_file=pki.ca_file,
        server_cert_file=pki.server_cert_file,
        server_key_file=pki.server_key_file,
        users=users,
        client_auth="required",
    )
    kafka = LocalKafka(root / "kafka", secure=listener)
    clickhouse = LocalClickHouse(root / "clickhouse")
    kafka.start(timeout_s=120)
    try:
        clickhouse.start(timeout_s=60)
        tag = f"s{uuid.uuid4().hex[:8]}"
        s = SecureStack(kafka, listener, pki, clickhouse.url, Topics(tag))
        admin = s.login("admin")
        create_pipeline_topics(s.bootstrap, s.topics, partitions=2, security=admin)
        apply_acls(s.bootstrap, s.topics, PRINCIPALS, security=admin)
        migrate(connect(s.clickhouse_url), tag)
        yield s
    finally:
        gc.collect()  # clients the tests dropped close while the broker still answers
        clickhouse.stop()
        kafka.stop()


def _count(url: str, database: str, table: str) -> int:
    rows = connect(url).query(f"SELECT count() FROM {database}.{table} FINAL").result_rows
    return int(rows[0][0])


def test_the_pipeline_runs_end_to_end_with_one_principal_per_stage(
    stack: SecureStack, tmp_path: Path
) -> None:
    t = stack.topics
    cfg = PipelineConfig(
        bootstrap=stack.bootstrap,
        clickhouse_url=stack.clickhouse_url,
        topic_prefix=t.prefix,
        database=t.prefix,
        home=tmp_path / "home",
        security=stack.login("admin"),
        # a validator reads the raw topics (in its own group, as the worker principal) and the
        # worker the rest: every group and topic of both is exercised under the ACL plan
        validators=1,
        stage_security={
            "worker": stack.role("worker"),
            "sink": stack.role("sink"),
            "actuators": stack.role("runner"),
        },
    )
    spans = [span(r, NOW_NS + r) for r in range(12)]
    samples = [gpu_sample(r, NOW_NS + 50 + r) for r in range(12)]
    agent = PublisherConfig(
        bootstrap=stack.bootstrap, topic_prefix=t.prefix, security=stack.role("agent")
    )
    with Publisher(agent) as pub:
        pub.check_connection()
        pub.publish([*spans, *samples])
        pub.flush(30)
    assert pub.stats.events_delivered == len(spans) + len(samples)

    # a decision on the recovery topic, written as the worker (whose topic it is), for the
    # runner to act on and answer with an outcome under its own principal
    decision = RecoveryEvent(
        key=RecoveryEvent.make_key("c1", "job-sasl", "inc1", "rule", "1"),
        stage="decided",
        action="escalate",
        cluster="c1",
        job_id="job-sasl",
        rule="test-rule",
        reason="written by the SASL test",
        trigger_id="inc1",
        attempt=1,
        ts=NOW_NS,
    )
    worker = Producer(kafka_config(stack.bootstrap, stack.role("worker")))
    worker.produce(t.recovery, key=b"job-sasl", value=decision.model_dump_json())
    assert worker.flush(30) == 0

    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(120)
        deadline = time.monotonic() + 120
        while True:
            stored = (
                _count(cfg.clickhouse_url, cfg.database, "spans"),
                _count(cfg.clickhouse_url, cfg.database, "gpu_samples"),
                _count(cfg.clickhouse_url, cfg.database, "recovery_actions"),
            )
            if stored == (len(spans), len(samples), 2):  # the decision and the runner's outcome
                break
            for stage in (*pipeline.validators, pipeline.worker, pipeline.sink, pipeline.actuators):
                assert stage.alive, f"{stage.name} exited:\n{stage.log_tail()}"
            assert time.monotonic() < deadline, (
                f"stored {stored}; sink log:\n{pipeline.sink.log_tail(15)}\n"
                f"actuators log:\n{pipeline.actuators.log_tail(15)}"
            )
            time.sleep(0.5)
        pipeline.wait_drained(120)
    stages = {
        r[0]
        for r in connect(cfg.clickhouse_url)
        .query(f"SELECT stage FROM {cfg.database}.recovery_actions FINAL")
        .result_rows
    }
    assert "decided" in stages and len(stages) == 2, stages
    # the decider's read-back path, as the worker: both records, in order
    read_back = [
        RecoveryEvent.model_validate_json(v).stage
        for p in range(2)
        for _, v in read_partition(stack.bootstrap, t.recovery, p, security=stack.role("worker"))
    ]
    assert read_back[:1] == ["decided"] and len(read_back) == 2, read_back

    # an operator pauses recovery and reads the status with the CLI, as its own principal
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env |= stack.role("operator").to_env()
    where = ["--bootstrap", stack.bootstrap, "--topic-prefix", t.prefix]
    for argv in (["pause", "--reason", "sasl test"], ["status"]):
        done = subprocess.run(
            [sys.executable, "-m", "rankscope", "recovery", *argv, *where],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, (argv, done.stdout[-1000:], done.stderr[-2000:])
    assert "recovery is paused" in done.stdout, done.stdout


def test_a_wrong_password_is_one_clear_line_and_a_nonzero_exit(
    stack: SecureStack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = stack.login(PRINCIPALS.sink, "not-the-password")
    with pytest.raises(KafkaAuthError) as caught:
        check_access(stack.bootstrap, wrong)
    assert f"user '{PRINCIPALS.sink}'" in str(caught.value)
    assert "SASL_SSL/SCRAM-SHA-512" in str(caught.value)

    pub = Publisher(
        PublisherConfig(bootstrap=stack.bootstrap, topic_prefix=stack.topics.prefix, security=wrong)
    )
    with pytest.raises(KafkaAuthError):
        pub.check_connection(timeout_s=10)
    pub.close(0)

    # the agent keeps spooling (nothing is lost) but says once, clearly, why nothing is sent
    transport = KafkaTransport(
        PublisherConfig(bootstrap=stack.bootstrap, topic_prefix=stack.topics.prefix, security=wrong)
    )
    with caplog.at_level(logging.ERROR, logger="rankscope.collectors.agent.transport"):
        deadline = time.monotonic() + 30
        while not [r for r in caplog.records if "authentication failed" in r.getMessage()]:
            assert time.monotonic() < deadline, "the agent's transport never reported the login"
            transport.poll(0.2)
        transport.poll(1.0)  # later refusals are not repeated
    transport.close(0)
    said = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(said) == 1 and f"user '{PRINCIPALS.sink}'" in said[0], said

    # the sink and the worker as an operator starts them: security from RANKSCOPE_KAFKA_* only
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env |= wrong.to_env()
    common = ["--bootstrap", stack.bootstrap, "--topic-prefix", stack.topics.prefix]
    for argv in (
        ["sink", *common, "--clickhouse-url", stack.clickhouse_url],
        ["worker", *common, "--home", str(tmp_path)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "rankscope", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 3, (argv[0], done.returncode, done.stderr[-2000:])
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, (argv[0], done.stderr)
        assert lines[0].startswith(
            f"rankscope: error: Kafka authentication failed for user '{PRINCIPALS.sink}' "
            f"(SASL_SSL/SCRAM-SHA-512) at {stack.bootstrap}:"
        ), lines[0]
        assert "not-the-password" not in done.stderr


def _read_one(consumer: Consumer, seconds: float) -> bytes | None:
    """The first record of the assigned partition, or None if none came in ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg: Message | None = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            return msg.value() or b""
    return None


def test_the_agent_cannot_read_derived_topics_and_the_sink_cannot_write_raw(
    stack: SecureStack,
) -> None:
    t = stack.topics
    marker = f"[] marker {uuid.uuid4().hex}".encode()
    worker = Producer(kafka_config(stack.bootstrap, stack.role("worker")))
    worker.produce(t.windows, value=marker, partition=0)
    assert worker.flush(30) == 0

    def reader(role: str) -> Consumer:
        conf = kafka_config(
            stack.bootstrap,
            stack.role(role),
            # never joins or commits; the agent has no right on this group either
            **{"group.id": f"{t.prefix}-sink", "enable.auto.commit": False},
        )
        consumer = Consumer(conf)
        consumer.assign([TopicPartition(t.windows, 0, 0)])
        return consumer

    sink = reader("sink")  # the read the agent is refused, allowed to the sink
    try:
        seen = _read_one(sink, 30)
        assert seen is not None
    finally:
        sink.close()
    agent = reader("agent")
    try:
        topic = agent.list_topics(t.windows, timeout=10).topics[t.windows]
        assert topic.error is not None
        assert topic.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _read_one(agent, 3) is None
    finally:
        agent.close()

    def write_raw(role: str) -> KafkaError | None:
        reports: list[KafkaError | None] = []
        producer = Producer(kafka_config(stack.bootstrap, stack.role(role)))
        producer.produce(t.raw, key=b"k", value=b"[]", on_delivery=lambda e, _m: reports.append(e))
        producer.flush(30)
        assert len(reports) == 1
        return reports[0]

    refused = write_raw("sink")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert write_raw("agent") is None


def test_a_validator_outside_the_acl_plan_stops_with_one_line(
    stack: SecureStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group the plan does not grant (here: another app id) is refused for as long as nobody
    changes the ACLs: the validator stops with the refusal and where to look, instead of
    logging it every poll while validating nothing."""
    t = stack.topics
    with Publisher(
        PublisherConfig(
            bootstrap=stack.bootstrap, topic_prefix=t.prefix, security=stack.role("agent")
        )
    ) as pub:
        pub.publish([span(0, NOW_NS)])
        pub.flush(30)
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)  # the worker's login below, nothing else
    for name, value in stack.role("worker").to_env().items():
        monkeypatch.setenv(name, value)
    config = StreamsConfig(
        bootstrap=stack.bootstrap,
        topic_prefix=t.prefix,
        app_id="not-in-the-plan",
        validate_in_worker=False,
        redaction=RedactionConfig(key_file=tmp_path / "redaction.key"),
    )
    loop = ValidateLoop(config)
    with pytest.raises(KafkaAuthError, match=r"Group authorization failed.*kafka-acls"):
        loop.run(max_seconds=60)
    assert loop.counters.records_in == 0
