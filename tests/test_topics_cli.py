"""`rankscope topics create|check` (issue 18 point 2) against the real local broker.

Each test has its own prefix and its own OTLP topic names (RANKSCOPE_OTLP_*_TOPICS), so the
unprefixed Collector defaults other tests create with other partition counts are not in view.
What the cluster holds is read back with confluent-kafka's AdminClient directly, not through the
code under test. Config names and values are Kafka's own topic configs (kafka.apache.org,
"Topic Configs": cleanup.policy, retention.ms, message.timestamp.type).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.schemas.topics import RAW_RETENTION_MS, Topics, topic_specs
from tests.conftest import Services


def _env(prefix: str, bootstrap: str = "") -> dict[str, str]:
    return {
        "RANKSCOPE_BOOTSTRAP": bootstrap,
        "RANKSCOPE_TOPIC_PREFIX": prefix,
        "RANKSCOPE_OTLP_TRACES_TOPICS": json.dumps([f"{prefix}.otlp_spans"]),
        "RANKSCOPE_OTLP_LOGS_TOPICS": json.dumps([f"{prefix}.otlp_logs"]),
    }


def _topics(prefix: str) -> Topics:
    return Topics(prefix, None, (f"{prefix}.otlp_spans",), (f"{prefix}.otlp_logs",))


def _run(env: dict[str, str], *args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(app, ["topics", *args, "--format", "json"], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def cluster(services: Services) -> tuple[str, str, AdminClient]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    return services.bootstrap, prefix, AdminClient({"bootstrap.servers": services.bootstrap})


def _configs(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {k: e.value for k, e in entries.items()}


def _partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


# -- the table ---------------------------------------------------------------------------------
def test_table_covers_every_topic_once_with_its_rules() -> None:
    topics = _topics("p")
    specs = {s.name: s for s in topic_specs(topics, partitions=6)}
    assert list(specs) == topics.all
    assert specs[topics.recovery_input].partitions == 1
    assert specs[topics.recovery_control].partitions == 1
    assert specs[topics.recovery_control].cleanup_policy == "compact"
    for name in topics.all_raw:  # configured OTLP topics are raw topics too
        assert specs[name].role == "raw"
        assert specs[name].retention_ms == RAW_RETENTION_MS
        assert specs[name].timestamp_type == "LogAppendTime"
    assert "p.otlp_logs" in specs and specs["p.otlp_logs"].role == "raw"
    assert specs[topics.events].retention_ms is None  # derived: the broker's default
    assert all(s.why for s in specs.values())
    assert all(s.min_insync_replicas is None for s in specs.values())
    replicated = topic_specs(topics, partitions=6, replication_factor=3)
    assert {s.min_insync_replicas for s in replicated} == {2}


def test_dry_run_prints_the_table_without_a_cluster() -> None:
    code, rows = _run(_env("dry"), "create", "--dry-run", "--raw-retention-ms", "3600000")
    assert code == 0
    by_name = {r["name"]: r for r in rows}
    assert by_name["dry.recovery_input"]["partitions"] == 1
    assert by_name["dry.raw.events"]["retention_ms"] == 3600000
    assert by_name["dry.otlp_spans"]["timestamp_type"] == "LogAppendTime"


# -- against the broker ------------------------------------------------------------------------
def test_create_then_check_reports_no_drift_and_create_is_idempotent(
    cluster: tuple[str, str, AdminClient],
) -> None:
    bootstrap, prefix, _ = cluster
    env = _env(prefix, bootstrap)
    code, rows = _run(env, "create")
    assert code == 0
    assert {r["status"] for r in rows} == {"created"}
    code, report = _run(env, "check")
    assert (code, report["drift"]) == (0, [])
    assert report["topics"] == len(_topics(prefix).all)
    code, rows = _run(env, "create")  # again: nothing created, nothing changed
    assert code == 0
    assert {r["status"] for r in rows} == {"exists"}
    assert _run(env, "check") == (0, report)


def test_created_topics_have_the_table_settings_on_the_broker(
    cluster: tuple[str, str, AdminClient],
) -> None:
    bootstrap, prefix, admin = cluster
    code, _ = _run(_env(prefix, bootstrap), "create", "--partitions", "3")
    assert code == 0
    topics = _topics(prefix)
    assert _partitions(admin, topics.recovery_input) == 1
    assert _partitions(admin, topics.events) == 3
    assert _configs(admin, topics.recovery_control)["cleanup.policy"] == "compact"
    for raw in topics.all_raw:
        configs = _configs(admin, raw)
        assert configs["retention.ms"] == str(RAW_RETENTION_MS)
        assert configs["message.timestamp.type"] == "LogAppendTime"
    assert _configs(admin, topics.events)["message.timestamp.type"] == "CreateTime"


def _wait_gone(admin: AdminClient, topic: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed after {timeout_s} s"
        time.sleep(0.2)


def _set_retention(admin: AdminClient, topic: str, value: str, timeout_s: float = 30) -> None:
    """Set retention.ms by hand, then wait until the broker describes it (the controller's
    change reaches the broker a moment after the alter call answers)."""
    entry = ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    deadline = time.monotonic() + timeout_s
    while _configs(admin, topic)["retention.ms"] != value:
        assert time.monotonic() < deadline, f"retention.ms of {topic} not {value} in time"
        time.sleep(0.2)


def test_check_reports_exactly_a_changed_config_and_a_deleted_topic(
    cluster: tuple[str, str, AdminClient],
) -> None:
    bootstrap, prefix, admin = cluster
    env = _env(prefix, bootstrap)
    assert _run(env, "create")[0] == 0
    topics = _topics(prefix)
    _set_retention(admin, topics.raw, "60000")
    admin.delete_topics([topics.windows])[topics.windows].result(timeout=30)
    _wait_gone(admin, topics.windows)

    code, report = _run(env, "check")
    assert code == 1
    found = {(d["topic"], d["field"], d["expected"], d["actual"]) for d in report["drift"]}
    assert found == {
        (topics.raw, "retention.ms", str(RAW_RETENTION_MS), "60000"),
        (topics.windows, "missing", "present", None),
    }


def test_create_fix_applies_configs_and_grows_partitions_but_never_shrinks(
    cluster: tuple[str, str, AdminClient],
) -> None:
    bootstrap, prefix, admin = cluster
    env = _env(prefix, bootstrap)
    topics = _topics(prefix)
    assert _run(env, "create", "--partitions", "2")[0] == 0
    _set_retention(admin, topics.events, "60000")  # the table leaves it to the broker

    code, report = _run(env, "check", "--partitions", "3")
    assert code == 1
    found = {(d["topic"], d["field"]): d["fixable"] for d in report["drift"]}
    assert found[(topics.events, "retention.ms")] is True
    assert found[(topics.events, "partitions")] is True
    assert (topics.recovery_input, "partitions") not in found  # always 1

    code, _ = _run(env, "create", "--partitions", "3")  # without --fix: reported, not applied
    assert code == 0 and _partitions(admin, topics.events) == 2
    code, _ = _run(env, "create", "--partitions", "3", "--fix")
    assert code == 0
    assert _partitions(admin, topics.events) == 3
    assert _configs(admin, topics.events)["retention.ms"] != "60000"  # back to the broker's
    assert _run(env, "check", "--partitions", "3") == (0, {"topics": len(topics.all), "drift": []})

    code, report = _run(env, "check", "--partitions", "2")  # fewer: drift, not fixable
    assert code == 1
    shrink = [d for d in report["drift"] if d["field"] == "partitions"]
    assert shrink and not any(d["fixable"] for d in shrink)


# -- compose uses the same tool ----------------------------------------------------------------
def test_compose_creates_the_topics_with_the_tool_before_any_kafka_client() -> None:
    """The one-shot topics service runs `rankscope topics create` with the stack's environment;
    the broker auto-creates nothing; every Kafka client waits for the job to succeed."""
    import yaml

    compose = Path(__file__).resolve().parents[1] / "compose" / "docker-compose.yml"
    services = yaml.safe_load(compose.read_text())["services"]
    kafka_env = services["kafka"]["environment"]
    assert str(kafka_env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"]) == "false"
    assert "KAFKA_NUM_PARTITIONS" not in kafka_env  # partitions come from the table only
    job = services["topics"]
    assert job["command"][:2] == ["topics", "create"]
    assert job["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    assert job.get("restart", "no") == "no"
    for name in ("worker", "sink", "simulator"):
        assert services[name]["depends_on"]["topics"] == {
            "condition": "service_completed_successfully"
        }, name
    # its command with its environment is a valid invocation whose table is the code's
    env = {k: str(v) for k, v in job["environment"].items()}
    result = CliRunner().invoke(app, [*job["command"], "--dry-run", "--format", "json"], env=env)
    assert result.exit_code == 0, result.output
    prefix = env["RANKSCOPE_TOPIC_PREFIX"]
    assert [r["name"] for r in json.loads(result.stdout)] == [
        s.name for s in topic_specs(Topics(prefix))
    ]


def test_readme_topic_table_says_what_the_code_does() -> None:
    """The README's hand-written table (rows per group of topics) agrees with the table in code
    on the facts an operator acts on."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### Topics\n", 1)[1].split("\n### ", 1)[0]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in section.splitlines()
        if line.startswith("| `")
    }
    specs = {s.name: s for s in topic_specs(Topics("<p>"))}
    for first, cells in rows.items():
        name = first.split("`")[1]
        spec = specs[name]
        partitions, cleanup, retention, timestamp = cells[:4]
        assert partitions == ("N" if spec.partitions != 1 else "1"), name
        assert cleanup == spec.cleanup_policy, name
        assert timestamp == spec.timestamp_type, name
        if spec.retention_ms is not None:
            assert retention.startswith(f"{spec.retention_ms // (24 * 3600 * 1000)} days"), name
    covered = {n for first in rows for n in first.split("`")[1::2]}
    covered |= {f"<p>{n}" for n in covered if n.startswith(".")}
    assert {s.name for s in specs.values()} <= covered


# -- bad input ---------------------------------------------------------------------------------
def test_without_a_cluster_create_refuses_with_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["topics", "create"], env=_env("nocluster"))
    assert result.exit_code == 2
    assert "--bootstrap" in result.output


def test_an_unreachable_broker_is_one_line_and_exit_3() -> None:
    """Through the console entry point, as an operator runs it (main turns the error into one
    line); port 1 on loopback refuses connections."""
    import subprocess
    import sys

    argv = ["topics", "check", "--bootstrap", "127.0.0.1:1", "--timeout", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "rankscope", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rankscope: error: Kafka at 127.0.0.1:1"), lines


def test_the_acl_plan_covers_every_topic_of_the_table_by_its_role() -> None:
    """Agents write raw topics, the sink reads derived ones, the worker writes every topic it
    produces: a topic added to the table without the plan knowing it would be refused."""
    from rankscope.kafka_acls import acl_plan

    topics = _topics("acl")
    allowed: dict[tuple[str, str], set[str]] = {}
    for rule in acl_plan(topics):
        if rule.resource == "topic":
            allowed.setdefault((rule.role, rule.name), set()).update(rule.operations)
    for spec in topic_specs(topics):
        if spec.role == "raw":
            assert "WRITE" in allowed[("agent", spec.name)], spec.name
            assert "READ" in allowed[("worker", spec.name)], spec.name
        else:
            assert "WRITE" in allowed[("worker", spec.name)], spec.name
        if spec.role == "derived":
            assert "READ" in allowed[("sink", spec.name)], spec.name
        if spec.role == "internal":
            assert "READ" in allowed[("worker", spec.name)], spec.name
