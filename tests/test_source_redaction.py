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
from rankscope.schemas import CommEventEvent, Event
from rankscope.schemas.derived import RedactionAudit
from rankscope.schemas.payloads import CommEvent
from tests.test_agent import MemoryTransport, Tap, agent_config, wait_for

# Token shapes from docs/redaction-formats.md (vendors' documented prefixes and lengths); the
# values are generated for these tests. The NCCL line is NCCL's "NET/IB : Got completion from
# peer ... with error" warning, as tests/test_nccl_log.py records it.
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
    rows = [
        RedactionAudit.model_validate_json(v) for v in _delivered(transport, "unit.redaction_audit")
    ]
    assert [(r.stage, r.kind, r.field, r.entity, r.action) for r in rows] == [
        ("agent", "comm_event", "message", "API_TOKEN", "mask")
    ]
    assert all(HF_TOKEN not in json.dumps(r.model_dump()) for r in rows)
    # the tap sees what is spooled; the agent counts events, not audit rows
    assert [e for e in tap.events if isinstance(e, CommEventEvent)] == [comm]


def test_the_agent_switch_turns_source_redaction_off(tmp_path: Path) -> None:
    config = agent_config(tmp_path, redaction={"enabled": False})
    _, transport = _run_agent(config, [NCCL_LINE])
    (comm,) = [e for e in _events(transport) if isinstance(e, CommEventEvent)]
    assert comm.payload.message == NCCL_LINE  # raw: only the stream stage redacts now
    assert _delivered(transport, "unit.redaction_audit") == []


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
        self.audit: list[RedactionAudit] = []

    def publish(self, events: Iterable[Event]) -> None:
        self.events.extend(events)

    def publish_audit(self, rows: Iterable[RedactionAudit]) -> None:
        self.audit.extend(rows)

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
    (span,) = publisher.events
    text = span.model_dump_json()
    assert HF_TOKEN not in text and SLACK_TOKEN not in text
    assert span.payload.attributes["nccl.op"] == "AllReduce"
    assert span.payload.attributes["http.request.header.authorization"] == "[DROPPED]"
    assert "[API_TOKEN]" in span.payload.attributes["cmd"]
    assert "[API_TOKEN]" in span.payload.error_message
    assert publisher.audit and {r.stage for r in publisher.audit} == {"exporter"}
    assert {r.field for r in publisher.audit} >= {"name", "error_message", "attributes.cmd"}


def test_the_exporter_switch_turns_it_off() -> None:
    publisher = _export(enabled=False)
    (span,) = publisher.events
    assert HF_TOKEN in span.payload.error_message and publisher.audit == []
