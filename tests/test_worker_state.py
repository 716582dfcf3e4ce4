"""Durable analysis state (issue 13): snapshots on a real broker, and a worker killed mid-cascade.

The snapshot format is signed and chunked (``streams/state.py``); the worker acknowledges
events only up to a snapshot and restores it when it gets a partition
(``streams/stages/snapshots.py``). The kill test SIGKILLs the worker after the XID of a cascade
was read and before the other ranks' timeouts, restarts it, and expects the incident an
uninterrupted analysis of the same log gives, and every window once.
"""

from __future__ import annotations

import time
from dataclasses import replace

from confluent_kafka import Consumer, Producer, TopicPartition

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.evaluate import rebase
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event
from rankscope.simulation.faults import SuiteCase, scenario_suite, simulate_with_faults
from rankscope.sinks.clickhouse import connect
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.config import WindowConfig
from rankscope.streams.state import (
    PartitionState,
    encode_chunks,
    encode_manifest,
    load_latest,
    parse_record,
)
from rankscope.streams.windows import WindowAggregator
from tests.test_findings_determinism import in_process, stored

KEY = b"k" * 32


def _analyzer_state(n_events: int, partition: int = 0) -> PartitionState:
    case = next(c for c in scenario_suite(16, [0], duration_s=20) if c.name == "hang/s0")
    events, _ = simulate_with_faults(case.config, case.faults)
    analyzer = JobAnalyzer(case.config.cluster, case.config.job_id)
    for ev in list(events)[:n_events]:
        analyzer.observe(ev)
    return PartitionState(partition, n_events, {case.config.job_id: analyzer}, set())


def _write(bootstrap: str, topic: str, records: list[bytes], partition: int = 0) -> list[int]:
    offsets: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap})
    for value in records:
        p.produce(
            topic,
            value,
            b"0",
            partition=partition,
            on_delivery=lambda err, msg: offsets.append(msg.offset()),
        )
        p.flush(30)
    return offsets


def _snapshot(bootstrap: str, topic: str, state: PartitionState, key: bytes = KEY) -> None:
    _, chunks, fields = encode_chunks(state, key, chunk_bytes=4096)
    assert len(chunks) > 1  # the test covers reassembly
    first = _write(bootstrap, topic, chunks)[0]
    _write(bootstrap, topic, [encode_manifest(fields, first)])


def test_chunk_and_manifest_records_parse_back() -> None:
    state = _analyzer_state(300)
    snapshot_id, chunks, fields = encode_chunks(state, KEY, chunk_bytes=1024)
    parsed = [parse_record(c) for c in chunks]
    assert [p[:2] for p in parsed if isinstance(p, tuple)] == [
        (snapshot_id, i) for i in range(len(chunks))
    ]
    manifest = parse_record(encode_manifest(fields, 7))
    assert manifest is not None and not isinstance(manifest, tuple)
    assert (manifest.first_chunk_offset, manifest.chunks, manifest.offset) == (7, len(chunks), 300)
    assert parse_record(b"not a snapshot") is None
    assert parse_record(b"RSS1M{broken json") is None


def test_the_newest_complete_signed_snapshot_is_loaded(
    pipeline_config: PipelineConfig,
) -> None:
    cfg = pipeline_config
    topic = cfg.topics.worker_state
    assert load_latest(cfg.bootstrap, topic, 0, KEY) is None  # nothing written yet
    older, newer = _analyzer_state(200), _analyzer_state(600)
    _snapshot(cfg.bootstrap, topic, older)
    _snapshot(cfg.bootstrap, topic, newer)
    loaded = load_latest(cfg.bootstrap, topic, 0, KEY)
    assert loaded is not None and loaded.offset == 600
    (job,) = loaded.analyzers
    assert loaded.analyzers[job].event_time == newer.analyzers[job].event_time
    assert loaded.analyzers[job].buffer.stats == newer.analyzers[job].buffer.stats
    # a worker died half-way through writing a snapshot: chunks without their manifest
    _, chunks, _ = encode_chunks(_analyzer_state(900), KEY, chunk_bytes=4096)
    _write(cfg.bootstrap, topic, chunks[:2])
    after_crash = load_latest(cfg.bootstrap, topic, 0, KEY)
    assert after_crash is not None and after_crash.offset == 600
    # another key (or anyone who can write the topic): never unpickled, the older one is used
    _snapshot(cfg.bootstrap, topic, _analyzer_state(1200), key=b"x" * 32)
    forged = load_latest(cfg.bootstrap, topic, 0, KEY)
    assert forged is not None and forged.offset == 600
    # a stalled worker's older state written after the next owner's: the one that includes the
    # most records wins
    _snapshot(cfg.bootstrap, topic, _analyzer_state(300))
    stale = load_latest(cfg.bootstrap, topic, 0, KEY)
    assert stale is not None and stale.offset == 600
    # other partitions are separate
    assert load_latest(cfg.bootstrap, topic, 1, KEY) is None


def _cascade() -> SuiteCase:
    case = next(
        c for c in scenario_suite(16, [0], duration_s=40) if c.name == "gpu_fell_off_bus/s0"
    )
    (rebased,) = rebase([case], time.time_ns())
    return rebased


def _publish(cfg: PipelineConfig, events: list[Event]) -> None:
    """As the eval publishes a run (``rankscope.evaluate.publish_suite``), given events."""
    config = PublisherConfig(
        bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix, max_batch_event_span_s=1.0
    )
    with Publisher(config) as pub:
        pub.publish(events)
        pub.flush(60)


def expected_windows(events: list[Event]) -> dict[tuple[int, int], int]:
    """(rank, window start) -> events, every window closed once at the end of the log."""
    agg = WindowAggregator(WindowConfig())
    for ev in events:
        agg.add(ev, 0.0)
    return {(w.rank, w.window_start_ns): w.event_count for w in agg.close_ready(1e9)}


def case_windows(case: SuiteCase) -> dict[tuple[int, int], int]:
    """``expected_windows`` of one case's simulated log."""
    events, _ = simulate_with_faults(case.config, case.faults)
    return expected_windows(list(events))


def stored_windows(cfg: PipelineConfig, job_id: str) -> tuple[dict[tuple[int, int], int], int]:
    """The table's windows of a job, and how many were inserted with two different counts."""
    client = connect(cfg.clickhouse_url)
    rows = client.query(
        f"SELECT rank, window_start_ns, event_count FROM {cfg.database}.rank_windows FINAL "
        "WHERE job_id = %(j)s",
        parameters={"j": job_id},
    ).result_rows
    conflicting = client.query(
        f"SELECT count() FROM (SELECT window_id FROM {cfg.database}.rank_windows "
        "WHERE job_id = %(j)s GROUP BY window_id HAVING uniqExact(event_count) > 1)",
        parameters={"j": job_id},
    ).result_rows[0][0]
    return {(r, start): n for r, start, n in rows}, int(conflicting)


def _wait_for_snapshot(cfg: PipelineConfig, job_id: str) -> None:
    """Until the worker wrote a snapshot of ``job_id`` that includes every record of its
    events partition so far."""
    deadline = time.monotonic() + 90
    consumer = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": "test-watermarks"})
    try:
        while time.monotonic() < deadline:
            key_file = cfg.home / "state.key"
            for partition in range(2) if key_file.exists() else ():  # the test has two
                key = key_file.read_bytes().strip()
                state = load_latest(cfg.bootstrap, cfg.topics.worker_state, partition, key)
                _, end = consumer.get_watermark_offsets(
                    TopicPartition(cfg.topics.events, partition), timeout=10
                )
                if state is not None and job_id in state.analyzers and state.offset + 1 == end:
                    return
            time.sleep(0.2)
    finally:
        consumer.close()
    raise TimeoutError(f"no snapshot of all of {job_id}'s events in 90 s")


def test_a_worker_killed_mid_cascade_resumes_from_its_snapshot(
    pipeline_config: PipelineConfig,
) -> None:
    case = _cascade()
    events_, labels = simulate_with_faults(case.config, case.faults)
    events = list(events_)
    onset = labels[0].onset_ns
    assert onset is not None
    # the XID has been read (it comes within a second of the onset) and the other ranks' NCCL
    # timeouts (10 s watchdog) are still ahead
    split = next(i for i, ev in enumerate(events) if ev.ts > onset + 3 * 10**9)
    assert any(ev.kind == "gpu_event" for ev in events[:split])
    cfg = replace(
        pipeline_config,
        env={
            "RANKSCOPE_WORKER_SESSION_TIMEOUT_S": "8",
            # snapshots only once a partition is read to its end: the kill falls between two
            "RANKSCOPE_WORKER_SNAPSHOT_INTERVAL_S": "600",
            # the pause until the snapshot is seen is not the job going quiet (a flush is a
            # processing-time decision; the uninterrupted run has no pause)
            "RANKSCOPE_WORKER_FLUSH_IDLE_S": "600",
        },
    )
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready()
        _publish(cfg, events[:split])
        # kill once a snapshot includes the XID (the job is still mid-cascade)
        _wait_for_snapshot(cfg, case.config.job_id)
        _publish(cfg, events[split:])
        pipeline.worker.kill()
        pipeline.worker.start()
        pipeline.wait_drained(timeout_s=300)
    log = (cfg.home / "logs" / "worker.log").read_text()
    assert "restored the analysis of partition" in log, log[-3000:]
    dets, incs = stored(cfg)
    want_dets, want_incs = in_process([case], flush=False)
    assert incs == want_incs and dets == want_dets
    assert [i[1] for i in incs] == ["gpu_xid"]
    windows, conflicting = stored_windows(cfg, case.config.job_id)
    assert windows == expected_windows(events)
    assert conflicting == 0
