"""Hostile inputs from a raw producer into the running pipeline (issue 15 acceptance).

Deep nesting, 5,000 digits, a mebibyte of bad elements, ``rank=2**40``,
``observed_ts=2**63+5`` and events stamped across 200 days (with a forged producer timestamp)
each end as dead letters with a readable reason; the worker and the sink stay up; the valid
events sent before and after are stored exactly once.
"""

from __future__ import annotations

import json

from confluent_kafka import Producer

from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import dump_event, dump_events
from rankscope.sinks.clickhouse import connect
from tests.factories import NOW_NS, gpu_sample, span

DAY_NS = 86_400 * 10**9


def _with(doc: dict[str, object], key: str, value: int) -> bytes:
    doc = dict(doc)
    doc[key] = value
    return json.dumps(doc).encode()


def test_hostile_records_are_dead_letters_and_the_pipeline_goes_on(
    pipeline_config: PipelineConfig,
) -> None:
    cfg = pipeline_config
    raw_topic = cfg.topics.raw
    before = [span(r, NOW_NS + r, job="hostile") for r in range(20)]
    after = [gpu_sample(r, NOW_NS + 100 + r, job="hostile") for r in range(20)]
    base = json.loads(dump_event(span(1, NOW_NS, job="hostile")))
    hostile = {
        "deep": b"[" * 2_000,
        "digits": b"9" * 5_000,
        "mebibyte": b"[" + b",".join([b'{"schema":1}'] * 80_000) + b"]",
        "rank": _with(base, "rank", 2**40),
        "observed_ts": _with(base, "observed_ts", 2**63 + 5),
    }
    assert 2**20 * 0.9 < len(hostile["mebibyte"]) <= 2**20
    old_days = [
        span(r % 8, NOW_NS - d * DAY_NS, job="hostile-old", step=d)
        for r, d in enumerate(range(10, 210))
    ]
    producer = Producer({"bootstrap.servers": cfg.bootstrap, "message.max.bytes": 4 * 2**20})
    producer.produce(raw_topic, key=b"hostile", value=dump_events(before))
    for value in hostile.values():
        producer.produce(raw_topic, key=b"hostile", value=value)
    for ev in old_days:  # each claims (CreateTime) to be as old as its event: the broker's
        # append time is what the raw topics keep, so the claim does not count
        producer.produce(
            raw_topic, key=b"hostile-old", value=dump_event(ev), timestamp=ev.ts // 10**6
        )
    producer.produce(raw_topic, key=b"hostile", value=dump_events(after))
    assert producer.flush(30) == 0
    del producer  # freed while the broker answers (else it logs "connection refused" at exit)

    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(120)
        pipeline.wait_drained(180)
        assert pipeline.worker.alive, pipeline.worker.log_tail()
        assert pipeline.sink.alive, pipeline.sink.log_tail()

    client = connect(cfg.clickhouse_url)
    db = cfg.database
    rows = client.query(
        f"SELECT reason_code, reason, index_in_batch, job_id FROM {db}.deadletter FINAL "
        "ORDER BY offset, index_in_batch"
    ).result_rows
    codes = [r[0] for r in rows]
    assert codes.count("too_deep") == 1
    assert codes.count("too_large") == 1  # 80,000 elements: over the per-batch limit
    assert codes.count("ts_out_of_range") == len(old_days)
    invalid = [r for r in rows if r[0] == "invalid_event"]
    assert len(invalid) == 2
    assert any("rank" in r[1] for r in invalid) and any("observed_ts" in r[1] for r in invalid)
    assert "not_an_event" in codes  # the bare 5,000-digit number
    assert len(rows) == 5 + len(old_days)
    assert all(r[1] for r in rows), "every dead letter says why"

    def stored(table: str) -> tuple[int, int]:
        return client.query(
            f"SELECT uniqExact(event_id), (SELECT count() FROM {db}.{table} FINAL "
            f"WHERE job_id = 'hostile') FROM {db}.{table} WHERE job_id = 'hostile'"
        ).result_rows[0]

    assert stored("spans") == (len(before), len(before))
    assert stored("gpu_samples") == (len(after), len(after))
