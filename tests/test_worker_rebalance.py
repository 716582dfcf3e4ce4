"""Many workers in one group (issue 13): partitions move between them and findings do not change.

Three workers share six partitions; while the suite is being played, one is SIGKILLed and a
fourth joins. Every partition changes hands at least once (faust's rebalances are eager: all
partitions are revoked and handed out again), so each job's analysis is restored from its
snapshot on another worker, and the findings must still equal the in-process analysis of the
log, and every window be written with the log's events, once.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace

from rankscope.evaluate import publish_suite
from rankscope.kafka_admin import create_pipeline_topics
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.sinks.clickhouse import connect, migrate
from tests.test_findings_determinism import CASES, events_written, in_process, stored
from tests.test_worker_state import case_windows, stored_windows

PARTITIONS = 6


def test_workers_that_come_and_go_find_what_one_worker_finds(
    pipeline_config: PipelineConfig,
) -> None:
    tag = f"r{uuid.uuid4().hex[:8]}"
    cfg = replace(
        pipeline_config,
        topic_prefix=tag,
        database=tag,
        workers=3,
        env={"RANKSCOPE_WORKER_SESSION_TIMEOUT_S": "8"},
    )
    create_pipeline_topics(cfg.bootstrap, cfg.topics, partitions=PARTITIONS)
    migrate(connect(cfg.clickhouse_url), cfg.database)
    expected = in_process(CASES)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready()
        player = threading.Thread(
            target=publish_suite,
            args=(cfg.bootstrap, cfg.topic_prefix, CASES),
            kwargs={"speed": 10},
        )
        player.start()
        # mid-run: the first job's records are being validated (the suite plays for ~16 s)
        deadline = time.monotonic() + 120
        while events_written(cfg, PARTITIONS) < 40 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert player.is_alive(), "the suite was published before the workers changed"
        pipeline.workers[1].kill()
        pipeline.add_worker()
        player.join()
        pipeline.wait_drained(timeout_s=300)
        logs = [w.log_path.read_text() for w in pipeline.workers]
    assert sum("restored the analysis of partition" in log for log in logs) >= 1
    assert stored(cfg) == expected
    # every window once, with every event of the log, none written twice with other contents
    for case in CASES:
        windows, conflicting = stored_windows(cfg, case.config.job_id)
        assert windows == case_windows(case), case.name
        assert conflicting == 0, case.name
