"""The simulated fleet (rankscope/simulation/fleet.py) through the fleet model in process: 64
nodes, three drifted (driver, NCCL, clocks), inventories shuffled and repeated; and the jobs on
the drifted nodes run slower."""

from __future__ import annotations

import random
import statistics

from rankscope.schemas.events import NodeInventoryEvent, SpanEvent
from rankscope.simulation.fleet import FleetScenario, fleet_inventories, fleet_jobs
from rankscope.streams.analysis.fleet import FleetView

S = 1_000_000_000
START = 1_800_000_000 * S


def test_all_three_drifted_nodes_and_no_other_in_any_arrival_order() -> None:
    s = FleetScenario(start_ns=START)
    events = fleet_inventories(s)
    assert len({e.node for e in events}) == 64
    expected = {
        "gpu00-005": ("driver_version", "550.54.15", "535.161.08"),
        "gpu02-006": ("nccl_version", "2.19.3", "2.21.5"),
        "gpu05-001": ("extra.gpu_app_clock_mhz", "1755", "1980"),
    }
    for seed in range(4):
        shuffled = events + events[: 20 * seed]  # some delivered again
        random.Random(seed).shuffle(shuffled)
        view = FleetView()
        for ev in shuffled:
            assert isinstance(ev, NodeInventoryEvent)
            view.observe(ev.cluster, ev.node, ev.ts, ev.payload)
        found, cleared = view.settle(0)
        assert cleared == []
        got = {
            d.node: (d.details["differs"], d.details[f"value.{d.details['differs']}"],
                     d.details[f"majority.{d.details['differs']}"])
            for d in found
        }  # fmt: skip
        assert got == expected
        assert {d.onset_ts for d in found} == {s.drift_ns}
        assert {d.details["pool_size"] for d in found} == {64}
    assert set(s.truth()) == set(expected)


def test_jobs_with_a_drifted_node_run_slower() -> None:
    s = FleetScenario(start_ns=START, duration_s=30)
    steps: dict[str, list[float]] = {}
    for job_id, events in fleet_jobs(s):
        if job_id not in ("fleet-job-00", "fleet-job-01"):  # node 5 is in job 0, job 1 is clean
            continue
        for ev in events:
            if isinstance(ev, SpanEvent) and ev.payload.phase == "step" and ev.rank == 0:
                steps.setdefault(job_id, []).append(ev.payload.duration_s)
    ratio = statistics.mean(steps["fleet-job-00"]) / statistics.mean(steps["fleet-job-01"])
    assert 1.02 < ratio < 1.06  # compute is 8 % slower on node 5; the job waits for it
