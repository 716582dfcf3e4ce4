"""Metrics and health endpoints (issue 18 point 3).

Unit part: the declared metrics, the per-process registry and the three endpoints.
Integration part (real broker, real chDB ClickHouse): a worker and a sink, started as the CLI
starts them with ``--metrics-port 0``, scraped during a stream with bad records; ``/readyz``
follows a private broker that is stopped and started again.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from rankscope.observability.exporters import sink_samples, worker_samples
from rankscope.observability.metrics import METRICS, ProcessMetrics
from rankscope.observability.server import Health, serve
from rankscope.sinks.kafka_sink import SinkStats
from rankscope.streams.stages.shared import StageCounters

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


# ----------------------------------------------------------------------------- integration
