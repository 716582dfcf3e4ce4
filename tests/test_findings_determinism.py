"""Findings are a function of the event log (issue 13), on a real broker and ClickHouse engine.

A job's events share one raw partition in the order its collectors emitted them, and the
analysis runs its detectors at points fixed by that sequence, so the worker's detections and
incidents must equal the in-process analysis of the same sequence however the worker read it:
live and paced, or started after everything was published (a restart, a replay) with a
different fetch size. Compared: ids, types and causes, nodes, ranks and event times.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from rankscope.evaluate import publish_suite, rebase
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.derived import Detection, Incident
from rankscope.simulation.faults import SuiteCase, scenario_suite, simulate_with_faults
from rankscope.sinks.clickhouse import connect
from rankscope.sinks.event_tables import EVENT_TABLES
from rankscope.streams.analysis.job import JobAnalyzer

#: the demo's cascade, a link flap on a node whose clock runs 5 s ahead, a straggler and a
#: healthy job, on one log
SCENARIOS = (
    "gpu_fell_off_bus/s0",
    "ib_link_flap+clock_skew/s0",
    "thermal_straggler/s0",
    "noise/s0",
)

DetectionKey = tuple[str, str, str, int, int, int]
IncidentKey = tuple[str, str, str, int, int, int, int]


def _suite() -> list[SuiteCase]:
    by_name = {c.name: c for c in scenario_suite(16, [0], duration_s=40)}
    # moved to just before now: the validate stage refuses events older than a week
    return rebase([by_name[n] for n in SCENARIOS], time.time_ns())


#: one suite for the module, so every test publishes the same log
CASES = _suite()


def _det_key(d: dict[str, Any]) -> DetectionKey:
    rank = d["rank"]
    return (
        d["detection_id"],
        d["detection_type"],
        d["node"],
        -1 if rank is None else rank,
        d["onset_ts"],
        d["detected_ts"],
    )


def _inc_key(i: dict[str, Any]) -> IncidentKey:
    rank = i["rank"]
    return (
        i["incident_id"],
        i["cause_class"],
        i["node"],
        -1 if rank is None else rank,
        i["first_cause_ts"],
        i["first_symptom_ts"],
        i["attributed_ts"],
    )


def in_process(
    cases: list[SuiteCase], flush: bool = True
) -> tuple[set[DetectionKey], set[IncidentKey]]:
    """The analysis of each job's event sequence, in this process, no Kafka involved; ``flush``:
    attribute what is still settling at the end, as the worker does once a job went quiet."""
    dets: dict[str, Detection] = {}
    incs: dict[str, Incident] = {}
    for case in cases:
        events, _ = simulate_with_faults(case.config, case.faults)
        analyzer = JobAnalyzer(case.config.cluster, case.config.job_id)
        for ev in events:
            analyzer.observe(ev)
        d, i = analyzer.flush() if flush else analyzer.take()
        dets.update((x.detection_id, x) for x in d)
        incs.update((x.incident_id, x) for x in i)  # a revision replaces, as in ClickHouse
    return (
        {_det_key(x.model_dump()) for x in dets.values()},
        {_inc_key(x.model_dump()) for x in incs.values()},
    )


def stored(cfg: PipelineConfig) -> tuple[set[DetectionKey], set[IncidentKey]]:
    client = connect(cfg.clickhouse_url)
    db = cfg.database
    dets = client.query(
        f"SELECT detection_id, detection_type, node, rank, onset_ts_ns AS onset_ts, "
        f"detected_ts_ns AS detected_ts FROM {db}.detections FINAL"
    ).named_results()
    incs = client.query(
        f"SELECT incident_id, cause_class, node, rank, first_cause_ts_ns AS first_cause_ts, "
        f"first_symptom_ts_ns AS first_symptom_ts, attributed_ts_ns AS attributed_ts "
        f"FROM {db}.incidents FINAL"
    ).named_results()
    return {_det_key(d) for d in dets}, {_inc_key(i) for i in incs}


@pytest.fixture(scope="module")
def expected() -> tuple[set[DetectionKey], set[IncidentKey]]:
    dets, incs = in_process(CASES)
    causes = {i[1] for i in incs}
    # the comparison is about real findings: each fault found, once, and nothing on noise
    assert {"gpu_xid", "ib_link"} <= causes, incs
    # the demo's job (a GPU falls off the bus): one incident naming the labelled GPU's node and
    # rank, and no finding about anything else
    demo = CASES[0]
    _, (label,) = simulate_with_faults(demo.config, demo.faults)
    demo_incs = [i for i in incs if f"/{demo.config.job_id}/" in i[0]]
    assert [(i[1], i[2], i[3]) for i in demo_incs] == [("gpu_xid", label.node, label.rank)]
    demo_dets = [d for d in dets if d[0].startswith(f"{demo.config.job_id}/")]
    assert all((d[2], d[3]) == (label.node, label.rank) for d in demo_dets), demo_dets
    assert any(d[1] == "straggler" for d in dets), dets
    assert not [d for d in dets if d[0].startswith("noise-")], dets
    return dets, incs


def test_a_late_worker_with_small_fetches_finds_what_the_log_says(
    pipeline_config: PipelineConfig,
    expected: tuple[set[DetectionKey], set[IncidentKey]],
) -> None:
    """Everything is published before the worker starts (a restart or a replay catching up),
    and the worker fetches 16 KiB per partition instead of 256 KiB."""
    cfg = replace(pipeline_config, env={"RANKSCOPE_WORKER_FETCH_MAX_BYTES": "16384"})
    publish_suite(cfg.bootstrap, cfg.topic_prefix, CASES, speed=0)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_drained(timeout_s=300)
    assert stored(cfg) == expected


def _burn() -> None:
    while True:
        pass


@pytest.mark.parametrize("cpu_hog", [False, True], ids=["idle", "cpu-hog"])
def test_a_live_paced_worker_finds_what_the_log_says(
    pipeline_config: PipelineConfig,
    expected: tuple[set[DetectionKey], set[IncidentKey]],
    cpu_hog: bool,
) -> None:
    """The worker is caught up and the jobs are played at 10x real time, as collectors deliver
    them; once with a busy loop in another process taking one of the machine's cores."""
    cfg = pipeline_config
    burner = mp.get_context("spawn").Process(target=_burn, daemon=True) if cpu_hog else None
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready()
        if burner is not None:
            burner.start()
        try:
            publish_suite(cfg.bootstrap, cfg.topic_prefix, CASES, speed=10)
            pipeline.wait_drained(timeout_s=300)
        finally:
            if burner is not None:
                burner.terminate()
                burner.join()
    assert stored(cfg) == expected


def test_a_worker_held_back_by_its_own_windows_agent_loses_and_repeats_nothing(
    pipeline_config: PipelineConfig,
    expected: tuple[set[DetectionKey], set[IncidentKey]],
) -> None:
    """Back-pressure (streams/stages/handoff.py): with a tiny bound the raw topics pause and
    resume hundreds of times while a backlog is read. Pausing must not drop a fetched record
    (faust's pause_partitions did, and committed past it), nor repeat one: every published
    event is stored exactly once and the findings are the log's."""
    cfg = replace(pipeline_config, env={"RANKSCOPE_WORKER_BACKPRESSURE_EVENTS": "300"})
    runs = publish_suite(cfg.bootstrap, cfg.topic_prefix, CASES, speed=0)
    published = sum(n for _, _, n in runs.values())
    with Pipeline(cfg) as pipeline:
        pipeline.wait_drained(timeout_s=300)
        log = pipeline.worker.log_path.read_text(errors="replace")
    assert "back-pressure:" in log  # it did pause
    client = connect(cfg.clickhouse_url)
    tables = sorted({spec.table for spec in EVENT_TABLES.values()})
    count = " + ".join(f"(SELECT count() FROM {cfg.database}.{t})" for t in tables)
    distinct = " + ".join(f"(SELECT uniqExact(event_id) FROM {cfg.database}.{t})" for t in tables)
    stored_rows, stored_ids = client.query(f"SELECT {count}, {distinct}").result_rows[0]
    assert (stored_rows, stored_ids) == (published, published)
    assert stored(cfg) == expected


def test_validators_beside_the_worker_lose_nothing_and_find_what_the_log_says(
    pipeline_config: PipelineConfig,
    expected: tuple[set[DetectionKey], set[IncidentKey]],
) -> None:
    """`rankscope validator` (two, in their own group) validates the raw topics while the worker
    reads only the events topic; one validator is SIGKILLed mid-stream and started again. Every
    published event is stored once and the findings are the log's, as with the worker alone."""
    cfg = replace(pipeline_config, validators=2, env={"RANKSCOPE_WORKER_SESSION_TIMEOUT_S": "8"})
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready()
        runs: dict[str, Any] = {}
        player = threading.Thread(
            target=lambda: runs.update(publish_suite(cfg.bootstrap, cfg.topic_prefix, CASES, 10))
        )
        player.start()
        deadline = time.monotonic() + 120
        while events_written(cfg) < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert player.is_alive(), "the suite was published before the kill"
        pipeline.validators[0].kill()
        pipeline.validators[0].start()
        player.join()
        pipeline.wait_drained(timeout_s=300)
    published = sum(n for _, _, n in runs.values())
    client = connect(cfg.clickhouse_url)
    tables = sorted({spec.table for spec in EVENT_TABLES.values()})
    visible = " + ".join(f"(SELECT count() FROM {cfg.database}.{t} FINAL)" for t in tables)
    distinct = " + ".join(f"(SELECT uniqExact(event_id) FROM {cfg.database}.{t})" for t in tables)
    assert tuple(client.query(f"SELECT {visible}, {distinct}").result_rows[0]) == (
        published,
        published,
    )
    # the validators did the raw topics, not the worker: its group committed none of them
    assert _raw_committed(cfg, cfg.streams_group) == []
    assert len(_raw_committed(cfg, cfg.validate_group)) == 2
    assert stored(cfg) == expected


def events_written(cfg: PipelineConfig, partitions: int = 2) -> int:
    """Records on the events topic so far (the validate stage's output), over its
    ``partitions``: how far the play has got while the pipeline runs."""
    consumer = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": "test-watermarks"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(cfg.topics.events, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def _raw_committed(cfg: PipelineConfig, group: str) -> list[int]:
    """The raw partitions' offsets ``group`` committed (those it has not are left out)."""
    consumer = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(cfg.topics.raw, p) for p in range(2)]
        return [tp.offset for tp in consumer.committed(tps, timeout=10) if tp.offset >= 0]
    finally:
        consumer.close()
