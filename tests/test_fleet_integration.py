"""Fleet drift end to end (issue 19 acceptance): a simulated fleet of 64 nodes with three drifted
nodes (driver, NCCL, clocks) through a real broker, the stream worker, the sink, the dry-run
actuator and ClickHouse. All three are found with what differs and since when, no other node is
named, the slowdown of their jobs is reported, and the policy's drain is recorded once per node,
also after the agents re-send their inventories and the worker is replaced (a rebuild)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event
from rankscope.simulation.fleet import FleetScenario, fleet_inventories, fleet_jobs
from rankscope.sinks.clickhouse import connect
from rankscope.sinks.named_queries import run_query

S = 1_000_000_000


def _publish(cfg: PipelineConfig, events: list[Event]) -> None:
    config = PublisherConfig(
        bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix, max_batch_event_span_s=1.0
    )
    with Publisher(config) as pub:
        for i in range(0, len(events), 5000):
            pub.publish(events[i : i + 5000])
        pub.flush(120)


def _until(what: str, check: Callable[[], Any], timeout_s: float = 240) -> Any:
    """Poll ``check`` until it returns something true, within a deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached in {timeout_s:g} s (last: {got!r})")
        time.sleep(1.0)


def test_a_fleet_with_three_drifted_nodes(pipeline_config: PipelineConfig) -> None:
    cfg = pipeline_config
    s = FleetScenario(start_ns=(time.time_ns() // S - 600) * S, duration_s=30)
    inventories = fleet_inventories(s)
    jobs = [ev for _, events in fleet_jobs(s) for ev in events]
    client = connect(cfg.clickhouse_url)
    db = cfg.database

    def query(name: str, **params: str) -> list[dict[str, Any]]:
        return list(run_query(client, name, db, params).named_results())

    def drains() -> list[tuple[str, str, str]]:
        rows = client.query(
            f"SELECT stage, node, key FROM {db}.recovery_actions FINAL "
            "WHERE action = 'drain_node' ORDER BY node, stage"
        ).result_rows
        return [(str(a), str(b), str(c)) for a, b, c in rows]

    with Pipeline(cfg) as pipeline:
        pipeline.wait_ready(120)
        _publish(cfg, inventories + jobs)
        _until("three drifted nodes", lambda: len(query("fleet_drift")) == 3)
        pipeline.wait_drained(240)
        acted = _until("three drains succeeded", lambda: [
            d for d in drains() if d[0] == "succeeded"
        ] if len([d for d in drains() if d[0] == "succeeded"]) == 3 else None)  # fmt: skip

        # the worker crashes, a new one takes over and the agents re-send what they run: the
        # fleet view is rebuilt from its input, the findings published again under the same ids
        pipeline.worker.kill()
        pipeline.add_worker()
        pipeline.wait_ready(120)
        _publish(cfg, inventories)
        pipeline.wait_drained(240)
        _until("the new worker's fleet view", lambda: "fleet view rebuilt" in
               pipeline.workers[-1].log_tail(400))  # fmt: skip
        pipeline.wait_drained(240)

    # read once everything settled: the findings published while the pool was still filling
    # named the same nodes under the same ids, with a smaller pool_size (rows rewritten since)
    drifted = query("fleet_drift")
    truth = {
        s.node_name(5): ("driver_version", "550.54.15"),
        s.node_name(22): ("nccl_version", "2.19.3"),
        s.node_name(41): ("extra.gpu_app_clock_mhz", "1755"),
    }
    assert {r["node"]: r["differs"] for r in drifted} == {n: a for n, (a, _) in truth.items()}
    for r in drifted:
        _, value = truth[r["node"]]
        assert value in r["what"] and r["pool_size"] == 64
        assert r["since"].replace(tzinfo=None) == _naive_ts(s.drift_ns)
    rows = client.query(
        f"SELECT node, count() FROM {db}.detections FINAL "
        "WHERE detection_type = 'node_drift' GROUP BY node ORDER BY node"
    ).result_rows
    assert rows == [(n, 1) for n in sorted(truth)]  # one row per node, rewritten not added

    slow = query("drift_slowdown")
    assert {r["drifted_node"]: r["job_id"] for r in slow} == {n: s.job_of_node(n) for n in truth}
    for r in slow:
        assert r["clean_jobs"] == 5 and r["drifted_ranks"] == 1
        assert 1.0 < r["slowdown_pct"] < 8.0, r  # ranks 7-10 % slower, the jobs wait for them

    # the drain: decided and run once per node, whatever was re-sent or rebuilt
    final = drains()
    assert sorted(n for stage, n, _ in final if stage == "decided") == sorted(truth)
    assert sorted(n for stage, n, _ in final if stage == "succeeded") == sorted(truth)
    assert len({k for _, _, k in final}) == 3
    assert {k for _, _, k in acted} == {k for _, _, k in final}


def _naive_ts(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / S, tz=dt.UTC).replace(tzinfo=None)
