"""Redaction through the real broker, worker, sink and ClickHouse engine.

Canaries (unique fake secrets) go into every free-text field the simulator produces; afterwards
no canary may be readable in any ClickHouse table or any derived topic, and the audit table
must count each one. A second test makes a rule time out on one event: fail closed.
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.kafka_admin import read_topic
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.redaction.policy import FieldPolicy
from rankscope.redaction.rules import DEFAULT_RULES_PATH, load_rules
from rankscope.schemas.events import Event
from rankscope.simulation.faults import scenario_suite, simulate_with_faults
from rankscope.sinks.clickhouse import connect, storage_tables
from tests.factories import NOW_NS, comm

MARKERS = ["canary", "192.0.2."]  # every canary holds one of these (case-insensitive)


def _jwt(n: int) -> str:
    def seg(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    sig = base64.urlsafe_b64encode(random.Random(n).randbytes(32)).rstrip(b"=").decode()
    return f"{seg({'alg': 'HS256', 'typ': 'JWT'})}.{seg({'sub': f'user-{n}', 'n': n})}.{sig}"


def _canary(n: int, long_field: bool) -> tuple[str, str, str]:
    """(entity, text to append, value that must never be readable)."""
    kinds: list[tuple[str, str, str]] = [
        ("CLOUD_ACCESS_KEY", f"key AKIACANARY{n:06d}QZXW denied", f"AKIACANARY{n:06d}QZXW"),
        ("API_TOKEN", f"--hf-token hf_Canary{n:06d}TokenAbCdEfGhIjKlMn", f"hf_Canary{n:06d}"),
        ("EMAIL_ADDRESS", f"mail canary{n}@example.com", f"canary{n}@example.com"),
        ("PASSWORD", f"dsn postgresql://ml:Canary{n}Pw@db.internal:5432/runs", f"Canary{n}Pw"),
        ("JWT", f"token {_jwt(n)}", _jwt(n)),
        ("IP_ADDRESS", f"peer 192.0.2.{n % 250 + 1}<4321>", f"192.0.2.{n % 250 + 1}"),
        ("BEARER_TOKEN", f"Authorization: Bearer CanaryBearer{n:06d}xyzXYZ", f"Bearer{n:06d}"),
    ]
    if long_field:
        body = f"MIIEvQIBADANCanary{n:06d}KeyBodyAbCdEf0123456789"
        kinds.append(
            (
                "PRIVATE_KEY",
                f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----",
                body,
            )
        )
    return kinds[n % len(kinds)]


def _inject(
    events: list[Event], policy: FieldPolicy
) -> tuple[list[Event], Counter[tuple[str, str, str]], list[str]]:
    """Append a canary to the first three non-empty values of every scanned field."""
    injected: Counter[tuple[str, str, str]] = Counter()
    per_field: Counter[tuple[str, str]] = Counter()
    secrets: list[str] = []
    out = []
    n = 0
    for ev in events:
        changes: dict[str, Any] = {}
        for rule in policy.active(ev.kind):
            if rule.action != "scan" or rule.on_envelope:
                continue
            value = getattr(ev.payload, rule.attr)
            targets: list[tuple[str | None, str]] = []
            if rule.shape == "dict":
                targets = [(k, v) for k, v in (value or {}).items() if isinstance(v, str) and v]
            elif isinstance(value, str) and value:
                targets = [(None, value)]
            for key, text in targets:
                path = rule.path if key is None else f"{rule.path}.{key}"
                if per_field[(ev.kind, path)] >= 3:
                    continue
                per_field[(ev.kind, path)] += 1
                n += 1
                long_field = rule.max_length is None or rule.max_length > 4096
                entity, snippet, secret = _canary(n, long_field)
                new = f"{text} {snippet}"
                if key is None:
                    changes[rule.attr] = new
                else:
                    d = changes.setdefault(rule.attr, dict(value))
                    d[key] = new
                injected[(ev.kind, path, entity)] += 1
                secrets.append(secret)
        payload = ev.payload.model_copy(update=changes)
        out.append(ev.model_copy(update={"payload": payload}) if changes else ev)
    return out, injected, secrets


def test_no_canary_reaches_any_table_or_derived_topic(pipeline_config: PipelineConfig) -> None:
    cfg = pipeline_config
    policy = FieldPolicy(load_rules())
    events: list[Event] = []
    for case in scenario_suite(16, 1, duration_s=20):
        if case.name.split("/")[0] in ("gpu_fell_off_bus", "ib_link_flap"):
            config = case.config.model_copy(update={"start_ns": NOW_NS - 60 * 10**9})
            evs, _ = simulate_with_faults(config, case.faults)
            events.extend(evs)
    events, injected, secrets = _inject(events, policy)
    fields = {(k, p) for k, p, _ in injected}
    assert len(fields) >= 10, fields  # every free-text field the simulator produces
    assert {e for _, _, e in injected} >= {"PRIVATE_KEY", "JWT", "IP_ADDRESS", "API_TOKEN"}

    with Publisher(PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix)) as pub:
        pub.publish(events)
        assert pub.flush(60).events_delivered == len(events)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_drained(300)
        logs = pipeline.worker.log_tail() + pipeline.sink.log_tail()

    client = connect(cfg.clickhouse_url)
    db = cfg.database
    counts = {
        t: client.query(f"SELECT count() FROM {db}.{t}").result_rows[0][0]
        for t in ("spans", "deadletter", "redaction_quarantine", "comm_events")
    }
    assert counts["spans"] > 1000, (counts, logs)
    tables = storage_tables(client, db)
    assert {"spans", "comm_events", "incidents", "redaction_audit"} <= set(tables)
    needles = [*MARKERS, *secrets]
    for table in tables:
        leaked = client.query(
            f"SELECT count() FROM {db}.{table} "
            "WHERE multiSearchAnyCaseInsensitive(formatRow('TSVRaw', *), {n:Array(String)})",
            parameters={"n": needles},
        ).result_rows[0][0]
        assert leaked == 0, f"a canary is readable in {table}"

    topics = cfg.topics
    derived = [topics.events, *topics.worker_outputs]
    lowered = [s.lower().encode() for s in needles]
    for topic in derived:
        for value in read_topic(cfg.bootstrap, topic):
            low = value.lower()
            assert not any(n in low for n in lowered), f"a canary is readable on {topic}"
    assert read_topic(cfg.bootstrap, topics.incidents), "the faulted jobs produce incidents"

    rows = client.query(
        f"SELECT kind, field, entity, sum(count) FROM {db}.redaction_audit FINAL "
        "GROUP BY kind, field, entity"
    ).result_rows
    audited = {(k, f, e): int(c) for k, f, e, c in rows}
    for (kind, path, entity), count in injected.items():
        seen = audited.get((kind, path, entity), 0)
        if entity == "IP_ADDRESS":  # the simulator's own NCCL lines name peers too
            assert seen >= count, (kind, path, entity, seen, count)
        else:
            assert seen == count, (kind, path, entity, seen, count)

    # the same counts, as an operator reads them
    result = CliRunner().invoke(
        app,
        [
            "redaction",
            "audit",
            "--clickhouse-url",
            cfg.clickhouse_url,
            "--database",
            db,
            "--by",
            "entity",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    total = sum(audited.values())
    assert f"{total:,} findings in" in result.output
    for entity in ("PRIVATE_KEY", "JWT", "API_TOKEN", "PASSWORD"):
        assert entity in result.output


def test_an_event_that_cannot_be_redacted_is_quarantined_and_the_rest_flow(
    pipeline_config: PipelineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule with catastrophic backtracking meets adversarial input in one event."""
    doc = yaml.safe_load(DEFAULT_RULES_PATH.read_text())
    doc["settings"]["regex_timeout_ms"] = 50
    doc["recognizers"].append(
        {
            "name": "backtracking_probe",
            "entity": "API_TOKEN",
            "description": "catastrophic backtracking on long runs of a",
            "patterns": [{"name": "probe", "regex": "(a|aa)+c", "score": 0.9}],
            "keywords": ["aaaa"],
        }
    )
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("RANKSCOPE_REDACTION_RULES", str(rules))
    cfg = pipeline_config
    secret = "AKIAQUARANTINE00TEST"
    first = [comm(f"NET/IB warning {i} at 10.0.0.{i}", NOW_NS + i, job="fc-job") for i in range(30)]
    poison = comm(f"{'a' * 64}! {secret}", NOW_NS + 100, job="fc-job")
    later = [
        comm(f"late warning {i} key {secret}", NOW_NS + 200 + i, job="fc-job") for i in range(10)
    ]
    pub_cfg = PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix)
    pipeline = Pipeline(cfg)
    pipeline.start()
    try:
        with Publisher(pub_cfg) as pub:
            pub.publish([*first[:15], poison, *first[15:]])
            pub.flush(30)
        pipeline.wait_drained(180)
        assert pipeline.worker.alive, pipeline.worker.log_tail()
        with Publisher(pub_cfg) as pub:  # the worker goes on after the failure
            pub.publish(later)
            pub.flush(30)
        pipeline.wait_drained(180)
        assert pipeline.worker.alive, pipeline.worker.log_tail()
    finally:
        pipeline.stop()

    client = connect(cfg.clickhouse_url)
    db = cfg.database
    q = client.query(
        f"SELECT quarantine_id, reason_code, reason, fields_removed, event_json "
        f"FROM {db}.redaction_quarantine FINAL"
    ).result_rows
    assert len(q) == 1
    qid, code, reason, removed, event_json = q[0]
    assert qid == poison.event_id and code == "redaction_timeout"
    assert reason.startswith("message: ") and "regex_timeout_ms" in reason
    assert removed == ["message"]
    assert secret not in event_json and "aaaa" not in event_json
    messages = dict(
        client.query(f"SELECT event_id, message FROM {db}.comm_events FINAL").result_rows
    )
    assert len(messages) == len(first) + 1 + len(later)
    assert messages[poison.event_id] == "[QUARANTINED]"
    assert all(
        "[IP_ADDRESS:" in messages[e.event_id] and "10.0.0." not in messages[e.event_id]
        for e in first
    )
    assert all(messages[e.event_id].endswith("key [CLOUD_ACCESS_KEY]") for e in later)
    assert not any(secret in m for m in messages.values())
