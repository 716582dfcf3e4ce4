"""What the fleet stage publishes (streams/analysis/fleet.FleetView, streams/stages/fleet.py)
and what the shipped recovery policy does with ``node_drift``: drain once per node, under the
fleet pseudo-job, also when the findings are published again after a restart."""

from __future__ import annotations

from pathlib import Path

from rankscope.schemas.derived import RecoveryInput
from rankscope.schemas.events import NodeInventoryEvent, dump_events
from rankscope.sinks.actuators.base import ActuatorRunner, Ledger
from rankscope.sinks.actuators.dryrun import DryRunActuator
from rankscope.streams.analysis.fleet import FleetView
from rankscope.streams.recovery.decider import Decider
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.stages.fleet import fleet_key, inventories
from tests.test_fleet_model import S, inv

DRIFTED = {3: {"driver_version": "550.54.15"}, 9: {"nccl_version": "2.19.3"}}


def view_of_fleet(n: int = 16) -> FleetView:
    view = FleetView()
    for k in range(n):
        view.observe("c1", f"n{k:02d}", 100 * S, inv(**DRIFTED.get(k, {})))
    return view


def test_findings_are_published_once_then_only_changes() -> None:
    view = view_of_fleet()
    fresh, cleared = view.settle(1)
    assert [d.node for d in fresh] == ["n03", "n09"] and cleared == []
    view.observe("c1", "n03", 200 * S, inv(driver_version="550.54.15"))  # re-sent: no change
    assert view.settle(2) == ([], [])
    view.observe("c1", "n09", 300 * S, inv())  # back with the pool
    fresh, cleared = view.settle(3)
    assert fresh == [] and [d.node for d in cleared] == ["n09"]
    assert cleared[0].details["cleared_ts"] == 300 * S
    assert cleared[0].detection_id == view_of_fleet().settle(0)[0][1].detection_id


def test_a_reset_view_publishes_the_same_ids_again() -> None:
    first, _ = view_of_fleet().settle(1)
    again, _ = view_of_fleet().settle(2)
    assert [d.detection_id for d in again] == [d.detection_id for d in first]
    assert [d.model_copy(update={"emitted_ts": 0}) for d in again] == [
        d.model_copy(update={"emitted_ts": 0}) for d in first
    ]


def test_the_shipped_policy_drains_each_drifted_node_once(tmp_path: Path) -> None:
    policy = load_policy()
    rule = next(r for r in policy.rules if "node_drift" in r.when.detection)
    assert rule.action == "drain_node" and policy.mode == "dry_run"
    findings, _ = view_of_fleet().settle(1)
    decider = Decider(policy)
    events = [e for d in findings for e in decider.feed(RecoveryInput(detection=d), 1)]
    decided = [e for e in events if e.stage == "decided"]
    assert [(e.action, e.node, e.job_id) for e in decided] == [
        ("drain_node", "n03", "fleet:n03"),
        ("drain_node", "n09", "fleet:n09"),
    ]
    # the same findings again (the agent re-sent, the stage restarted): nothing new
    assert [e for d in findings for e in decider.feed(RecoveryInput(detection=d), 2)] == []
    # a decider rebuilt without that history decides the same keys: the ledger runs each once
    fresh = Decider(policy)
    again = [e for d in findings for e in fresh.feed(RecoveryInput(detection=d), 3)]
    assert [e.key for e in again] == [e.key for e in decided]
    runner = ActuatorRunner(DryRunActuator(), Ledger(tmp_path / "ledger.db"))
    outcomes = [runner.run(e, now_ns=1000 * S) for e in decided + again]
    assert [o.stage for o in outcomes if o is not None] == ["succeeded"] * 4
    actuator = runner.actuator
    assert isinstance(actuator, DryRunActuator) and len(actuator.would) == 2  # once per node


def test_inventories_are_forwarded_with_a_compaction_key_per_configuration() -> None:
    ev = NodeInventoryEvent(
        event_id="e" * 32, schema_id="node_inventory/1", kind="node_inventory", cluster="c1",
        node="n03", ts=100 * S, observed_ts=100 * S, payload=inv(),
    )  # fmt: skip
    value = dump_events([ev])
    (back,) = inventories(value)
    assert back == ev
    assert fleet_key(ev) == f"c1|n03|{ev.payload.fingerprint}".encode()
    assert inventories(b'[{"kind": "span"}]') == []  # not parsed: no inventory in it
