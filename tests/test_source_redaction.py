"""Redaction at the source, without Kafka (issue 16): the node agent redacts before the spool,
the OTel exporter before producing; both on by default, both can be turned off; audit rows go
to the audit topic with the stage that made them. The canary test runs the real pipeline."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from rankscope.collectors.agent import Agent, AgentConfig, env_overrides
from rankscope.collectors.base import BaseCollector, EventFactory
from rankscope.collectors.otel import KafkaSpanExporter, OtelExportConfig
from rankscope.collectors.publisher import PublisherConfig
from rankscope.redaction.rules import load_rules
from rankscope.redaction.source_audit import parse_report
from rankscope.redaction.stage import RedactionStage
from rankscope.schemas import AgentEventEvent, CommEventEvent, Event, SpanEvent
from rankscope.schemas.payloads import AgentEvent, CommEvent
from tests.test_agent import MemoryTransport, Tap, agent_config, wait_for

# Token shapes from docs/redaction-formats.md (vendors' documented prefixes and lengths); the
# values are generated for these tests. The NCCL line is NCCL's "NET/IB : Got completion from
# peer ... with error" warning, as tests/test_nccl_log.py records it.
RULES = load_rules()
STREAM_KEY = b"stream-worker-key-0123456789abcdef"
HF_TOKEN = "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"
SLACK_TOKEN = "xoxb-2048137711-8820391442871-Zq7VwX3mKp9LtR2sYb6NcD4h"
NCCL_LINE = (
    "node001:12345:12389 [3] NCCL WARN NET/IB : Got completion from peer 10.0.3.7<43210> with "
    f"error 12, opcode 0, len 0, vendor err 129; launcher env HF_TOKEN={HF_TOKEN}"
)


class LineCollector(BaseCollector):
    """Emits one comm_event per line from its own thread, as the NCCL log tailer does."""

    name = "lines"
    interval_s = None

    def __init__(self, factory: EventFactory, lines: Sequence[str]) -> None:
        self.factory = factory
        self.lines = list(lines)

    def start(self, emit: Callable[[Sequence[Event]], None]) -> None:
        for line in self.lines:
            payload = CommEvent(source="nccl", event_type="nccl_warn", message=line)
            emit([self.factory.make(CommEventEvent, payload, rank=3, gpu=3)])

    def stop(self) -> None:
        return None


def _run_agent(config: AgentConfig, lines: Sequence[str]) -> tuple[Tap, MemoryTransport]:
    tap = Tap()
    transport = MemoryTransport()
    agent = Agent(
        config,
        collectors=[lambda f: LineCollector(f, lines)],
        transport_factory=lambda _cfg: transport,
        tap=tap,
    )
    agent.start()
    try:
        wait_for(lambda: len(_delivered(transport, "unit.raw.events")) >= 1, what="delivery")
        wait_for(
            lambda: any(
                "NCCL" in e.payload.message
                for e in _events(transport)
                if isinstance(e, CommEventEvent)
            ),
            what="the NCCL line on the raw topic",
        )
    finally:
        agent.stop(timeout_s=2.0)
    return tap, transport


def _delivered(transport: MemoryTransport, topic: str) -> list[bytes]:
    with transport.lock:
        return [value for _, t, _, value in transport.delivered if t == topic]


def _events(transport: MemoryTransport) -> list[Event]:
    from rankscope.schemas import EVENT_LIST_ADAPTER

    return [
        e
        for v in _delivered(transport, "unit.raw.events")
        for e in EVENT_LIST_ADAPTER.validate_json(v)
    ]


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANKSCOPE_REDACTION_KEY", raising=False)


def test_the_agent_redacts_before_spooling_and_sends_audit_rows_to_the_audit_topic(
    tmp_path: Path,
) -> None:
    tap, transport = _run_agent(agent_config(tmp_path), [NCCL_LINE])
    raw = b"".join(_delivered(transport, "unit.raw.events"))
    assert HF_TOKEN.encode() not in raw
    (comm,) = [e for e in _events(transport) if isinstance(e, CommEventEvent)]
    assert comm.payload.message == NCCL_LINE.replace(HF_TOKEN, "[API_TOKEN]")
    # the spool on disk never held the token either
    spooled = b"".join(p.read_bytes() for p in (tmp_path / "spool").rglob("*") if p.is_file())
    assert HF_TOKEN.encode() not in spooled
    # its counts travel as a report event on the raw topic (the agent may write nothing else)
    assert {t for _, t, _, _ in transport.delivered} == {"unit.raw.events"}
    reports = [e for e in _events(transport) if parse_report(e) is not None]
    assert len(reports) == 1 and HF_TOKEN not in reports[0].model_dump_json()
    # ...which the stream stage turns into audit rows that say the agent found it
    rows = (
        RedactionStage(RULES, STREAM_KEY).process(_events(transport), "unit.raw.events:0:7").audit
    )
    found = [r for r in rows if r.action != "near_miss"]
    assert [(r.stage, r.kind, r.field, r.entity, r.rule, r.action) for r in found] == [
        # the agent has no hash key here: the stream hashes the peer address (second line)
        ("agent", "comm_event", "message", "API_TOKEN", "huggingface_token", "mask"),
        ("stream", "comm_event", "message", "IP_ADDRESS", "presidio_ip", "hash"),
    ]
    assert found[0].cluster == "c1" and found[0].job_id == comm.job_id
    # the tap sees what is spooled: the redacted line and the report
    assert [e for e in tap.events if isinstance(e, CommEventEvent)] == [comm]


def test_the_agent_switch_turns_source_redaction_off(tmp_path: Path) -> None:
    config = agent_config(tmp_path, redaction={"enabled": False})
    _, transport = _run_agent(config, [NCCL_LINE])
    (comm,) = [e for e in _events(transport) if isinstance(e, CommEventEvent)]
    assert comm.payload.message == NCCL_LINE  # raw: only the stream stage redacts now
    assert [e for e in _events(transport) if parse_report(e) is not None] == []


def test_the_switch_is_an_environment_override_too() -> None:
    over = env_overrides({"RANKSCOPE_AGENT__REDACTION__ENABLED": "false"})
    config = AgentConfig.model_validate(
        {"cluster": "c1", "kafka": {"bootstrap": "127.0.0.1:1"}, **over}
    )
    assert config.redaction.enabled is False
    assert AgentConfig.model_validate(
        {"cluster": "c1", "kafka": {"bootstrap": "127.0.0.1:1"}}
    ).redaction.enabled
    with pytest.raises(ValueError, match="redaction"):
        AgentConfig.model_validate(
            {"cluster": "c1", "kafka": {"bootstrap": "127.0.0.1:1"}, "redaction": {"enable": 1}}
        )


# ---------------------------------------------------------------------------- exporter


class RecordingPublisher:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish(self, events: Iterable[Event]) -> None:
        self.events.extend(events)

    def flush(self, timeout_s: float = 30.0) -> None:
        return None

    def close(self, timeout_s: float = 5.0) -> None:
        return None


def _export(enabled: bool) -> RecordingPublisher:
    publisher = RecordingPublisher()
    config = OtelExportConfig(
        publisher=PublisherConfig(bootstrap="127.0.0.1:1"),
        cluster="c1",
        node="node001",
        redaction={"enabled": enabled},  # type: ignore[arg-type]
    )
    exporter = KafkaSpanExporter(config, publisher=publisher, env={"RANK": "3"})
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(f"upload token={SLACK_TOKEN}") as span:
        span.set_attribute("http.request.header.authorization", f"Bearer {SLACK_TOKEN}")
        span.set_attribute("cmd", f"huggingface-cli login --token {HF_TOKEN}")
        span.set_attribute("nccl.op", "AllReduce")
        span.set_status(Status(StatusCode.ERROR, f"401 for HF_TOKEN={HF_TOKEN}"))
    provider.shutdown()
    return publisher


def test_the_exporter_redacts_span_text_before_producing() -> None:
    publisher = _export(enabled=True)
    span, report = publisher.events
    assert isinstance(span, SpanEvent)
    text = span.model_dump_json()
    assert HF_TOKEN not in text and SLACK_TOKEN not in text
    assert span.payload.attributes["nccl.op"] == "AllReduce"
    assert span.payload.attributes["http.request.header.authorization"] == "[DROPPED]"
    assert "[API_TOKEN]" in span.payload.attributes["cmd"]
    assert "[API_TOKEN]" in span.payload.error_message
    parsed = parse_report(report)
    assert parsed is not None and parsed.stage == "exporter"
    assert report.node == span.node == "node001" and report.rank == 3
    rows = RedactionStage(RULES, STREAM_KEY).process(publisher.events, "unit.raw.events:0:9").audit
    by_stage = {(r.stage, r.field) for r in rows if r.action != "near_miss"}
    assert {("exporter", "name"), ("exporter", "error_message")} <= by_stage
    assert {("exporter", "attributes.cmd")} <= by_stage
    assert ("exporter", "attributes.http.request.header.authorization") in by_stage  # dropped
    assert {r.stage for r in rows} == {"exporter"}  # the stream found nothing more


def test_the_exporter_switch_turns_it_off() -> None:
    publisher = _export(enabled=False)
    (span,) = publisher.events
    assert isinstance(span, SpanEvent) and HF_TOKEN in span.payload.error_message


def _report_event(message: str) -> AgentEventEvent:
    payload = AgentEvent(event_type="other", collector="redaction", count=1, message=message)
    return AgentEventEvent(
        event_id="report0000000001",
        schema_id="agent_event/1",
        kind="agent_event",
        cluster="c1",
        node="node001",
        ts=1_796_409_720_000_000_000,
        observed_ts=1_796_409_720_000_000_000,
        payload=payload,
    )


def test_only_a_valid_producer_report_becomes_audit_rows() -> None:
    """A report claiming the stream's stage, carrying a value-like field, or not JSON at all is
    an ordinary agent event: no audit rows from it, and its text is scanned like any other."""
    finding = {
        "window_start_ns": 1_796_409_720_000_000_000,
        "job_id": "job-1",
        "kind": "comm_event",
        "field": "message",
        "entity": "API_TOKEN",
        "rule": "huggingface_token",
        "action": "mask",
        "count": 2,
    }
    good = {"stage": "agent", "rules_version": RULES.version, "findings": [finding]}
    stage = RedactionStage(RULES, STREAM_KEY)
    rows = stage.process([_report_event(json.dumps(good))], "unit.raw.events:0:1").audit
    assert [(r.stage, r.job_id, r.count) for r in rows] == [("agent", "job-1", 2)]
    again = stage.process([_report_event(json.dumps(good))], "unit.raw.events:0:1").audit
    assert [r.audit_id for r in again] == [r.audit_id for r in rows]  # a re-read rewrites
    forged = [
        {**good, "stage": "stream"},
        {**good, "findings": [{**finding, "rule": f"token {HF_TOKEN}"}]},
        {**good, "findings": []},
    ]
    for doc in forged:
        out = stage.process([_report_event(json.dumps(doc))], "unit.raw.events:0:2")
        assert [r for r in out.audit if r.stage != "stream"] == []
        assert HF_TOKEN not in out.events[0].model_dump_json()
    assert stage.process([_report_event("not json")], "unit.raw.events:0:3").audit == []
