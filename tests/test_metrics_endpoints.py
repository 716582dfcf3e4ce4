"""Metrics and health endpoints (issue 18 point 3).

Unit part: the declared metrics, the per-process registry and the three endpoints.
Integration part (real broker, real chDB ClickHouse): a worker and a sink, started as the CLI
starts them with ``--metrics-port 0``, scraped during a stream with bad records; ``/readyz``
follows a private broker that is stopped and started again.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from rankscope.collectors.agent.stats import AgentStats, CollectorStats
from rankscope.grafana import DASHBOARDS_DIR
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.observability.dashboard import HEALTH_UID, build_health_dashboard
from rankscope.observability.exporters import agent_samples, sink_samples, worker_samples
from rankscope.observability.metrics import METRICS, ProcessMetrics
from rankscope.observability.server import Health, serve
from rankscope.pipeline import Pipeline, PipelineConfig, StageProcess
from rankscope.schemas.events import dump_events
from rankscope.services import LocalKafka
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.kafka_sink import SinkStats
from rankscope.streams.stages.shared import StageCounters
from tests.conftest import Services
from tests.factories import NOW_NS, span

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(port: int) -> Samples:
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


# ------------------------------------------------------------------------------------ unit


def test_every_declared_metric_is_named_for_its_kind() -> None:
    for name, spec in METRICS.items():
        assert name.startswith("rankscope_") and name == spec.name
        assert not name.endswith("_total"), "the exposition adds _total to counters"
        assert spec.help.endswith("."), name
        assert bool(spec.buckets) == (spec.kind == "histogram"), name


def test_two_processes_in_one_interpreter_keep_their_own_registries() -> None:
    worker, sink = StageCounters(), SinkStats()
    worker.records_by_topic["p.raw_nccl"] += 3
    worker.dead_letters_by_reason["not_json"] += 2
    worker.lag[("p.events", 1)] = 7
    sink.rows_by_table["events_step"] = 5
    sink.decode_errors = 1
    m1, m2 = ProcessMetrics("worker"), ProcessMetrics("sink")
    m1.export(lambda: worker_samples(worker))
    m2.export(lambda: sink_samples(sink))
    # the same histogram declared in both: no "Duplicated timeseries" across registries
    m1.histogram("rankscope_sink_batch_rows").observe(10)
    m2.histogram("rankscope_sink_batch_rows").observe(20)
    h1 = m1.registry.get_sample_value("rankscope_sink_batch_rows_sum")
    h2 = m2.registry.get_sample_value("rankscope_sink_batch_rows_sum")
    assert (h1, h2) == (10, 20)
    get1 = m1.registry.get_sample_value
    assert get1("rankscope_worker_records_in_total", {"topic": "p.raw_nccl"}) == 3
    assert get1("rankscope_worker_dead_letters_total", {"reason": "not_json"}) == 2
    lag = {"role": "worker", "topic": "p.events", "partition": "1"}
    assert get1("rankscope_consumer_lag", lag) == 7
    assert get1("rankscope_sink_rows_total", {"table": "events_step"}) is None
    get2 = m2.registry.get_sample_value
    assert get2("rankscope_sink_rows_total", {"table": "events_step"}) == 5
    assert get2("rankscope_sink_dead_letters_total", {"reason": "undecodable"}) == 1
    # counted in the stats object: the next scrape sees the new value, nothing counted twice
    worker.dead_letters_by_reason["not_json"] += 1
    assert get1("rankscope_worker_dead_letters_total", {"reason": "not_json"}) == 3


def test_agent_exports_its_stats_snapshot_by_source() -> None:
    stats = AgentStats(
        sampled=12, spooled=12, published=10, delivered=9, dropped=1, rejected=0, pending=3,
        spool_bytes=4096, in_flight_batches=1, delivery_failures=2, collector_errors=0,
        broker_ok=False, last_delivery_error="", uptime_s=5.0,
        collectors=(CollectorStats("gpu", events=8), CollectorStats("heartbeat", events=4)),
    )  # fmt: skip
    metrics = ProcessMetrics("agent")
    metrics.export(lambda: agent_samples(stats))
    value = metrics.registry.get_sample_value
    assert value("rankscope_agent_events_total", {"source": "gpu"}) == 8
    assert value("rankscope_agent_events_total", {"source": "heartbeat"}) == 4
    assert value("rankscope_agent_spool_events") == 3
    assert value("rankscope_agent_delivery_failures_total") == 2
    assert value("rankscope_up", {"role": "agent"}) == 1


def test_endpoints_serve_metrics_and_flip_readiness_and_liveness() -> None:
    counters = StageCounters()
    counters.events_valid = 4
    broker_down = [False]
    beat = [time.monotonic()]
    metrics = ProcessMetrics("worker")
    metrics.export(lambda: worker_samples(counters))
    health = Health(
        [lambda: "broker unreachable" if broker_down[0] else None],
        last_beat=lambda: beat[0],
        stale_after_s=30,
        started=time.monotonic() - 100,  # started long ago: no start-up grace left
    )
    server = serve(metrics, health, 0, host="127.0.0.1")
    assert server is not None and server.port > 0
    try:
        assert total(scrape(server.port), "rankscope_worker_events_valid_total") == 4
        assert total(scrape(server.port), "rankscope_up", role="worker") == 1
        assert get(f"http://127.0.0.1:{server.port}/readyz") == (200, "ok\n")
        broker_down[0] = True
        assert get(f"http://127.0.0.1:{server.port}/readyz") == (503, "broker unreachable\n")
        assert get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200  # alive, not ready
        beat[0] -= 31  # its main loop has not turned for 31 s
        status, body = get(f"http://127.0.0.1:{server.port}/healthz")
        assert status == 503 and "main loop quiet" in body
        assert get(f"http://127.0.0.1:{server.port}/nope")[0] == 404
        # a port in use: a warning and no endpoint, the stage itself runs on
        assert serve(metrics, health, server.port, host="127.0.0.1") is None
    finally:
        server.close()


def test_the_health_dashboard_reads_only_declared_metrics_from_a_chosen_prometheus() -> None:
    doc = build_health_dashboard()
    committed = DASHBOARDS_DIR / "health" / f"{HEALTH_UID}.json"
    assert json.loads(committed.read_text()) == doc, (
        "run `rankscope grafana build --out rankscope/dashboards`"
    )
    [variable] = doc["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    titles = {p["title"] for p in doc["panels"]}
    assert {
        "Throughput per stage",
        "Dead letters by reason",
        "Consumer lag per partition",
        "ClickHouse insert latency",
        "Window close delay",
    } <= titles
    used: set[str] = set()
    for panel in doc["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            for name in re.findall(r"\brankscope_\w+", target["expr"]):
                base = re.sub(r"_(total|bucket)$", "", name)
                assert base in METRICS, (panel["title"], name)
                kind = METRICS[base].kind
                assert name.endswith("_total") == (kind == "counter"), name
                assert name.endswith("_bucket") == (kind == "histogram"), name
                used.add(base)
    # every metric a process exports is on the dashboard
    assert used == set(METRICS), set(METRICS) - used


# ----------------------------------------------------------------------------- integration


#: a real NCCL line (NVIDIA/nccl issue 963, kept with its source in tests/data/nccl_log), as a
#: misconfigured log shipper would publish it: plain text on the JSON raw topic
NCCL_LINE = json.loads(
    (Path(__file__).parent / "data" / "nccl_log" / "real_lines.json").read_text()
)["bases"][0]["line"].encode()
BAD_RECORDS = {
    "not_json": NCCL_LINE,
    "not_utf8": b"\xff\xfe GPU0 util=97%",
    "unknown_schema": json.dumps({"schema": "gpu_sample/9", "kind": "gpu_sample"}).encode(),
}


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of this test's own: stopping it disturbs no other test."""
    kafka = LocalKafka(tmp_path / "kafka", heap="384m")
    try:
        kafka.start(timeout_s=90)
        yield kafka
    finally:
        kafka.stop()


def endpoint_port(stage: StageProcess, role: str, timeout_s: float = 90) -> int:
    """The port a stage started with ``--metrics-port 0`` bound, from its log line."""
    found: list[int] = []

    def logged() -> bool:
        if not stage.alive:
            raise AssertionError(f"{stage.name} exited:\n{stage.log_tail()}")
        m = re.search(rf"{role} metrics on port (\d+)", stage.log_tail(400))
        if m:
            found.append(int(m.group(1)))
        return bool(found)

    wait_until(logged, timeout_s, f"the {role}'s metrics port in its log")
    return found[0]


class Stream:
    """Raw records on a thread until stopped: valid span batches with bad records between."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.topic = cfg.topics.raw
        self.producer = Producer({"bootstrap.servers": cfg.bootstrap, "linger.ms": 20})
        self.stop = threading.Event()
        self.records = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        batch = 0
        while not self.stop.is_set():
            batch += 1
            job = f"job-{batch % 4}"
            events = [span(r, NOW_NS + batch * 10**7 + r, job=job, step=batch) for r in range(64)]
            self.producer.produce(self.topic, key=job.encode(), value=dump_events(list(events)))
            if batch % 10 == 0:
                for value in BAD_RECORDS.values():
                    self.producer.produce(self.topic, key=job.encode(), value=value)
            self.records += 1
            self.producer.poll(0)
            if batch % 200 == 0:
                self.producer.flush(30)

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        self.producer.flush(30)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_worker_and_sink_metrics_during_a_stream_and_readiness_follows_the_broker(
    services: Services, private_kafka: LocalKafka, tmp_path: Path
) -> None:
    tag = f"t{uuid.uuid4().hex[:10]}"
    cfg = PipelineConfig(
        bootstrap=private_kafka.bootstrap,
        clickhouse_url=services.clickhouse_url,
        topic_prefix=tag,
        database=tag,
        home=tmp_path / "home",
        env={"RANKSCOPE_METRICS_PORT": "0"},  # what --metrics-port 0 sets: any free port
        actuators=False,
    )
    create_pipeline_topics(cfg.bootstrap, cfg.topics, partitions=2)
    migrate(connect(cfg.clickhouse_url), cfg.database)
    with Pipeline(cfg) as pipeline:
        worker_port = endpoint_port(pipeline.worker, "worker")
        sink_port = endpoint_port(pipeline.sink, "sink")
        pipeline.wait_ready(120)
        lag_seen = {"worker": 0.0, "sink": 0.0}

        def busy_and_counted() -> bool:
            w, s = scrape(worker_port), scrape(sink_port)
            for role, samples in (("worker", w), ("sink", s)):
                lag = [
                    v
                    for (n, ls), v in samples.items()
                    if n == "rankscope_consumer_lag" and ("role", role) in ls
                ]
                lag_seen[role] = max([lag_seen[role], *lag])
            stored_dead = total(s, "rankscope_sink_rows_total", table="deadletter")
            return (
                min(lag_seen.values()) > 0
                and all(
                    total(w, "rankscope_worker_dead_letters_total", reason=r) > 0
                    for r in BAD_RECORDS
                )
                and stored_dead > 0
            )

        with Stream(cfg) as stream:
            wait_until(busy_and_counted, 240, "lag, dead letters by reason and stored rows")
        w, s = scrape(worker_port), scrape(sink_port)
        assert total(w, "rankscope_worker_records_in_total", topic=cfg.topics.raw) > 0
        assert total(w, "rankscope_worker_events_valid_total") > 0
        assert total(w, "rankscope_worker_window_records_in_total") > 0
        assert total(s, "rankscope_sink_records_total") > 0
        assert total(s, "rankscope_sink_rows_total", table="deadletter") > 0
        assert total(s, "rankscope_sink_batch_rows_count") > 0
        assert total(s, "rankscope_sink_insert_seconds_count") > 0
        assert lag_seen["worker"] > 0 and lag_seen["sink"] > 0, lag_seen
        assert stream.records > 0
        for port in (worker_port, sink_port):
            assert get(f"http://127.0.0.1:{port}/readyz") == (200, "ok\n")
            assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200

        private_kafka.stop(timeout_s=30)
        for port in (worker_port, sink_port):
            wait_until(
                lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 503,  # noqa: B023
                60,
                "readiness to drop with the broker",
            )
            status, body = get(f"http://127.0.0.1:{port}/readyz")
            assert status == 503 and "broker unreachable" in body, body
            assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200  # alive all along
        private_kafka.start(timeout_s=90)  # same data, same port
        for port in (worker_port, sink_port):
            wait_until(
                lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200,  # noqa: B023
                120,
                "readiness to return with the broker",
            )
        print(f"lag seen during the stream: {lag_seen}; {stream.records} valid records")
