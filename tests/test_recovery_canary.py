"""Issue 14: a webhook URL (a secret: its path and query carry a token) used for escalations
never reaches a topic, a ClickHouse table, the runner's log or the CLI's output."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from rankscope.cli import app as cli
from rankscope.kafka_admin import read_topic
from rankscope.pipeline import Pipeline, PipelineConfig, StageProcess
from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.webhook import redact_url
from rankscope.sinks.clickhouse import connect
from rankscope.streams.recovery.signing import load_keyring
from tests.test_actuators import SECRET, _Receiver, receiver  # noqa: F401 (fixture)

CANARY = "CANARY7f3a9c2e51d4"


def test_the_webhook_url_appears_nowhere_after_a_recovery_run(
    receiver: _Receiver,  # noqa: F811
    pipeline_config: PipelineConfig,
) -> None:
    cfg = pipeline_config
    url = receiver.url.replace("/hook", f"/hook/{CANARY}/x?token={CANARY}")
    keys = load_keyring(cfg.home / "recovery.key")
    now = time.time_ns()

    def escalation(job: str) -> RecoveryEvent:
        return keys.sign(
            RecoveryEvent(
                key=RecoveryEvent.make_key("c1", job, "esc"), stage="decided", action="escalate",
                cluster="c1", job_id=job, node="node003", rule="r", reason="3 recoveries",
                trigger_id="t", attempt=1, ts=now, decided_at=now, mode="act",
            )
        )  # fmt: skip

    failing, working = escalation("81234"), escalation("81235")
    producer = Producer({"bootstrap.servers": cfg.bootstrap})
    for d in (failing, working):  # one key: read in this order
        producer.produce(cfg.topics.recovery, key=b"k", value=d.model_dump_json())
    assert producer.flush(30) == 0
    receiver.script = ["500"] * 4  # the first escalation fails on every attempt (error path)

    run = StageProcess(
        "actuators",
        [sys.executable, "-m", "rankscope", "recovery", "run", *cfg.common_args(),
         "--actuator", "webhook"],
        cfg.home / "logs" / "actuators.log",
        env={"RANKSCOPE_WEBHOOK_SECRET": SECRET.decode(), "RANKSCOPE_WEBHOOK_URL": url},
    )  # fmt: skip
    pipeline = Pipeline(cfg)
    client = connect(cfg.clickhouse_url)

    def outcomes() -> dict[str, tuple[str, str]]:
        rows = client.query(
            f"SELECT key, stage, reason FROM {cfg.database}.recovery_actions FINAL "
            "WHERE stage != 'decided'"
        ).result_rows
        return {k: (s, r) for k, s, r in rows}

    run.start()
    pipeline.sink.start()
    try:
        deadline = time.monotonic() + 120
        while len(outcomes()) < 2:
            assert run.alive and pipeline.sink.alive, run.log_tail() + pipeline.sink.log_tail()
            assert time.monotonic() < deadline, "timed out waiting for both outcomes"
            time.sleep(0.3)
    finally:
        run.stop()
        pipeline.sink.stop()

    # the URL was used (the receiver got 5 signed POSTs: 4 failed attempts and 1 success) ...
    assert len(receiver.received) == 5 and all(r["signed"] for r in receiver.received)
    done = outcomes()
    where = redact_url(url)
    assert done[failing.key] == ("failed", f"webhook: POST {where}: HTTP 500 after 4 attempt(s)")
    assert done[working.key] == ("succeeded", f"webhook: POST {where}: 200")

    # ... and it is in no topic of the deployment,
    admin = AdminClient({"bootstrap.servers": cfg.bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(cfg.topic_prefix)]
    assert cfg.topics.recovery in topics and len(topics) > 5
    for topic in topics:
        for value in read_topic(cfg.bootstrap, topic):
            assert CANARY.encode() not in value, topic
    # no table of its database,
    tables = [  # every table that holds data (a plain view holds none: its tables are here)
        name
        for name, engine in client.query(
            "SELECT name, engine FROM system.tables WHERE database = %(d)s",
            parameters={"d": cfg.database},
        ).result_rows
        if engine != "View"
    ]
    assert "recovery_actions" in tables and len(tables) > 5
    for name in tables:
        dump = client.raw_query(f"SELECT * FROM `{cfg.database}`.`{name}`", fmt="TabSeparated")
        assert CANARY.encode() not in dump, name
        if name == "recovery_actions":
            assert where.encode() in dump  # the redacted form is what was recorded
    # no log line of the runner or the sink,
    for proc in (run, pipeline.sink):
        assert CANARY not in proc.log_path.read_text(errors="replace"), proc.name
    assert f"POST {where}" in run.log_path.read_text()
    # and no CLI output
    for argv in (
        ["recovery", "history", "--hours", "720", "--clickhouse-url", cfg.clickhouse_url,
         "--database", cfg.database],
        ["recovery", "status", "--bootstrap", cfg.bootstrap, "--topic-prefix", cfg.topic_prefix],
    ):  # fmt: skip
        result = CliRunner().invoke(cli, argv, env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.output
        assert CANARY not in result.output
    assert "failed" in result.output and "succeeded" in result.output
