"""Redaction at the source through the real pipeline (issue 16): secrets planted in NCCL log
lines that the real agent tails and in spans of the in-process OTel exporter are on no raw
topic, no derived topic and in no ClickHouse table; the lines' other parts (rank, NCCL op, GPU
UUID) arrive; the audit says the agent and the exporter made the findings.

Real broker, real worker and sink, real chDB engine (tests/conftest.py); nothing is mocked.

Line shapes: NCCL ``src/debug.cc`` WARN lines and PyTorch ``ProcessGroupNCCL.cpp`` watchdog
lines, as recorded in tests/test_nccl_log.py; the text appended to them is the kind of thing a
launcher or an exception prints next to them (a command line, an HTTP header, an environment
variable). Token values are generated here in the vendors' documented formats (prefix and
length, docs/redaction-formats.md lists each with its source); the card number is a generated
Luhn-valid Visa number; the phone number is in Ofcom's range reserved for drama (020 7946 0xxx).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from rankscope.collectors.agent import Agent, AgentConfig
from rankscope.collectors.base import BaseCollector, EventFactory, JobRegistry, binding_from_environ
from rankscope.collectors.otel import KafkaSpanExporter, OtelExportConfig
from rankscope.collectors.publisher import PublisherConfig
from rankscope.kafka_admin import read_topic
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas import Event, GpuSampleEvent
from rankscope.schemas.payloads import GpuSample
from rankscope.sinks.clickhouse import connect, storage_tables
from tests.test_agent import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

JOB = "77123"
NODE = "gpu-a03"
GPU_UUID = "GPU-5c9f1b2e-7d3a-4e8b-9f60-2a1c3d4e5f67"
SECRETS = {
    "github": "ghp_R8vKq2LmX7tZp4WnY9cBd3HfJs6GaE1uQo5V",
    "slack": "xoxb-2048137711-8820391442871-Zq7VwX3mKp9LtR2sYb6NcD4h",
    "stripe": "sk_live_51Mx9QpLr7TzVb2WnK4cYd8HfJ",
    "huggingface": "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",
    "gitlab": "glpat-Xq7vW2mKp9LtR2sYb6Nc",
    "npm": "npm_Zq7VwX3mKp9LtR2sYb6NcD4hJ8fG1aE5uQo2",
    "curl_password": "Vq7pL2xR9tKw",
    "basic_auth": "bWx1c2VyOlZxN3BMMnhSOXRLdw==",  # base64 of mluser:Vq7pL2xR9tKw
    "password": "Tz4kP8wQm2Rx",
    "card": "4929 3817 0456 2218",
    "phone": "+44 20 7946 0958",
}
NCCL_LINES = [
    # PyTorch watchdog (c10 prefix without a time stamp): rank 2, ALLREDUCE
    "[rank2]:[E ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=500045, OpType=ALLREDUCE, NumelIn=67108864, NumelOut=8388608, "
    "Timeout(ms)=600000) ran for 600038 milliseconds before timing out. "
    f"HF_TOKEN={SECRETS['huggingface']} GITHUB_TOKEN={SECRETS['github']}",
    f"{NODE}:73412:73630 [2] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by "
    f"remote peer gpu-a07<41022> after curl -u mluser:{SECRETS['curl_password']} "
    "https://artifacts.example.com/ckpt",
    f"{NODE}:73412:73412 [2] enqueue.cc:1556 NCCL WARN Cuda failure 'an illegal memory access "
    f"was encountered' Authorization: Basic {SECRETS['basic_auth']}",
    f"{NODE}:73412:73630 [2] proxy.cc:1478 NCCL WARN [Proxy Service 2] Failed to execute "
    f"operation Connect from rank 10, retcode 6 password={SECRETS['password']} "
    f"card {SECRETS['card']} call {SECRETS['phone']} slack {SECRETS['slack']}",
    f"{NODE}:73412:73590 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
    f"peer 10.40.2.17<53818> with error 12, opcode 0, len 0, vendor err 129 STRIPE_KEY="
    f"{SECRETS['stripe']} NPM_TOKEN={SECRETS['npm']} CI_JOB_TOKEN={SECRETS['gitlab']}",
]


class OneGpu(BaseCollector):
    """One GPU's samples in NVML's UUID format (the GPU the NCCL lines' [2] names)."""

    name = "gpu_fixture"
    interval_s = 0.2

    def __init__(self, factory: EventFactory) -> None:
        self.factory = factory
        self.polls = 0

    def poll(self, now_ns: int) -> list[Event]:
        self.polls += 1
        payload = GpuSample(gpu_uuid=GPU_UUID, sm_util_pct=97.0, power_w=650.0)
        return [self.factory.make(GpuSampleEvent, payload, now_ns, gpu=2)]


def _factory() -> EventFactory:
    jobs = JobRegistry()
    for gpu in range(4):
        env = {"SLURM_JOB_ID": JOB, "SLURM_PROCID": str(gpu), "SLURM_LOCALID": str(gpu)}
        jobs.bind_gpu(gpu, binding_from_environ({**env, "SLURM_NTASKS": "4"}))
    return EventFactory("canary", NODE, jobs)


@pytest.fixture
def no_source_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The agent has no hash key (the default): it masks credentials and leaves addresses to
    the stream, which hashes them with the worker's key."""
    monkeypatch.delenv("RANKSCOPE_REDACTION_KEY", raising=False)
    yield


def _run_agent(cfg: PipelineConfig, tmp_path: Path) -> None:
    log = tmp_path / "nccl" / f"nccl.{NODE}.73412.log"
    log.parent.mkdir()
    log.write_text("\n".join(NCCL_LINES) + "\n")
    config = AgentConfig.model_validate(
        {
            "cluster": "canary",
            "node": NODE,
            "kafka": {"bootstrap": cfg.bootstrap, "topic_prefix": cfg.topic_prefix},
            "spool": {
                "dir": str(tmp_path / "spool"),
                "max_bytes": 8 << 20,
                "segment_bytes": 1 << 20,
            },
            "heartbeat_interval_s": 0.5,
            "inventory_interval_s": 60,
            "nccl_log": {"paths": [str(log)], "from_start": True, "interval_s": 0.2},
        }
    )
    factory = _factory()
    gpu = OneGpu(factory)
    agent = Agent(config, collectors=[gpu], event_factory=factory)
    agent.start()
    try:
        wait_for(
            lambda: agent.stats().delivered >= len(NCCL_LINES) + 3 and gpu.polls >= 3,
            60,
            "the NCCL lines and GPU samples delivered",
        )
    finally:
        stats = agent.stop()
    assert stats.pending == 0 and stats.collector_errors == 0, stats


def _export_spans(cfg: PipelineConfig) -> None:
    config = OtelExportConfig(
        publisher=PublisherConfig(bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix),
        cluster="canary",
        node=NODE,
        job_id=JOB,
    )
    exporter = KafkaSpanExporter(config, env={"RANK": "2", "LOCAL_RANK": "2"})
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("canary")
    with tracer.start_as_current_span("checkpoint_upload") as span:
        span.set_attribute("gpu.uuid", GPU_UUID)
        span.set_attribute("nccl.op", "ALLREDUCE")
        span.set_attribute("cmd", f"curl -u mluser:{SECRETS['curl_password']} -T ckpt.pt")
        span.set_attribute("http.headers", f"Authorization: Basic {SECRETS['basic_auth']}")
        span.set_attribute("env", f"SLACK_BOT_TOKEN={SECRETS['slack']}")
        span.set_status(Status(StatusCode.ERROR, f"upload failed for token {SECRETS['github']}"))
    with tracer.start_as_current_span(f"login --password {SECRETS['password']}") as span:
        span.set_attribute("billing", f"card {SECRETS['card']} phone {SECRETS['phone']}")
        span.set_attribute("stripe", SECRETS["stripe"])
    assert exporter.force_flush(30_000)
    provider.shutdown()
    assert exporter.stats.spans_published == 2 and exporter.stats.export_failures == 0


def _needles() -> list[str]:
    # each secret, and the parts of it a partial redaction could leave (card/phone groups)
    out = list(SECRETS.values())
    out += [SECRETS["card"].replace(" ", ""), "3817 0456", "7946 0958"]
    return out


def test_no_planted_secret_is_on_any_topic_or_in_any_table(
    pipeline_config: PipelineConfig, tmp_path: Path, no_source_key: None
) -> None:
    cfg = pipeline_config
    _run_agent(cfg, tmp_path)
    _export_spans(cfg)
    with Pipeline(cfg) as pipeline:
        deadline = time.monotonic() + 180
        pipeline.wait_drained(max(1.0, deadline - time.monotonic()))
        logs = pipeline.worker.log_tail() + pipeline.sink.log_tail()

    needles = [n.lower().encode() for n in _needles()]
    topics = cfg.topics
    raw = {t: read_topic(cfg.bootstrap, t) for t in topics.all_raw}
    assert raw[topics.raw], "the agent and the exporter published"
    for topic in [*topics.all_raw, topics.events, *topics.worker_outputs]:
        records = raw.get(topic) or read_topic(cfg.bootstrap, topic)
        for value in records:
            low = value.lower()
            leaked = [n for n in needles if n in low]
            assert not leaked, f"{leaked} readable on {topic}"

    client = connect(cfg.clickhouse_url)
    db = cfg.database
    tables = storage_tables(client, db)
    assert {"comm_events", "spans", "gpu_samples", "redaction_audit"} <= set(tables)
    for table in tables:
        leaked = client.query(
            f"SELECT count() FROM {db}.{table} "
            "WHERE multiSearchAnyCaseInsensitive(formatRow('TSVRaw', *), {n:Array(String)})",
            parameters={"n": _needles()},
        ).result_rows[0][0]
        assert leaked == 0, f"a planted secret is readable in {table}"

    # what is not secret arrives: ranks, the NCCL op, the lines around the secrets, the GPU
    comm = client.query(
        f"SELECT rank, op, message FROM {db}.comm_events FINAL WHERE job_id = %(j)s",
        parameters={"j": JOB},
    ).result_rows
    assert len(comm) == len(NCCL_LINES), (comm, logs)
    assert {r[0] for r in comm} == {2}
    assert "ALLREDUCE" in {r[1] for r in comm}
    messages = " ".join(r[2] for r in comm)
    for kept in ("Watchdog caught collective operation timeout", "Cuda failure", "NET/IB"):
        assert kept in messages
    assert "HF_TOKEN=[API_TOKEN]" in messages and "curl -u mluser:[PASSWORD]" in messages
    assert "[IP_ADDRESS:" in messages  # hashed by the stream (no key at the agent)
    uuids = client.query(f"SELECT DISTINCT gpu_uuid FROM {db}.gpu_samples").result_rows
    assert uuids == [(GPU_UUID,)]
    spans = client.query(
        f"SELECT name, attributes['gpu.uuid'], attributes['nccl.op'], rank FROM {db}.spans "
        "FINAL ORDER BY name"
    ).result_rows
    assert spans == [
        ("checkpoint_upload", GPU_UUID, "ALLREDUCE", 2),
        ("login --password [PASSWORD]", "", "", 2),
    ]

    # the audit says where each finding was made
    audit = client.query(
        f"SELECT stage, kind, entity, sum(count) FROM {db}.redaction_audit FINAL "
        "WHERE action != 'near_miss' GROUP BY stage, kind, entity"
    ).result_rows
    by = {(s, k, e): int(c) for s, k, e, c in audit}
    assert by.get(("agent", "comm_event", "API_TOKEN"), 0) >= 5, by
    assert by.get(("agent", "comm_event", "PASSWORD"), 0) >= 3, by
    assert by.get(("agent", "comm_event", "CREDIT_CARD"), 0) >= 1, by
    # (>= 1: how many findings one number makes is the PII rules' business)
    assert by.get(("agent", "comm_event", "PHONE_NUMBER"), 0) >= 1, by
    assert by.get(("exporter", "span", "API_TOKEN"), 0) >= 3, by
    assert by.get(("exporter", "span", "CREDIT_CARD"), 0) >= 1, by
    assert by.get(("stream", "comm_event", "IP_ADDRESS"), 0) >= 1, by
    credential_rows = {k for k in by if k[2] in ("API_TOKEN", "PASSWORD", "CREDIT_CARD")}
    assert all(stage != "stream" for stage, _, _ in credential_rows), by
