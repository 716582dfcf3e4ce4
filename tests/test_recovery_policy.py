"""The recovery decider driven by sequences of findings: the exact actions, and every bound."""

from __future__ import annotations

import itertools
from time import time_ns as now_ns

import pytest

from rankscope.schemas.derived import CauseClass, Detection, Incident, RecoveryEvent, RecoveryInput
from rankscope.streams.recovery.decider import Decider, replay_horizon_s
from rankscope.streams.recovery.engine import RecoveryEngine
from rankscope.streams.recovery.policy import JobLimits, Policy, load_policy
from rankscope.streams.recovery.progress import ProgressNotes

S = 1_000_000_000
T0 = 1_800_000_000 * S


def _policy(node_rules: bool = False, **limits: float) -> Policy:
    """The shipped policy with short bounds; without its node rules unless asked (the job
    tests repeat incidents on one node, which a node rule would also answer)."""
    base = load_policy()
    lim = base.limits.model_copy(
        update={"cooldown_s": 60, "backoff_base_s": 100, "backoff_factor": 2.0, **limits}
    )
    rules = [r for r in base.rules if node_rules or not r.per_node]
    # the breaker's denominators: a fleet of 20 jobs on 40 nodes (configured, not seen)
    breaker = base.breaker.model_copy(update={"fleet_jobs": 20, "fleet_nodes": 40})
    return base.model_copy(
        update={
            "limits": JobLimits.model_validate(lim.model_dump()),
            "rules": rules,
            "breaker": breaker,
        }
    )


def _incident(
    job: str,
    at_s: float,
    cause: CauseClass = "gpu_xid",
    n: int = 0,
    confidence: float = 0.95,
    revision: int = 0,
    node: str = "node003",
) -> Incident:
    ts = T0 + int(at_s * S)
    return Incident(
        incident_id=f"{job}/inc{n}",
        revision=revision,
        cluster="c1",
        job_id=job,
        cause_class=cause,
        node=node,
        gpu=2,
        rank=26,
        confidence=confidence,
        summary=f"{cause} on {node}",
        first_cause_ts=ts,
        first_symptom_ts=ts,
        attributed_ts=ts,
        emitted_ts=ts,
    )


def _hang(job: str, at_s: float) -> Detection:
    ts = T0 + int(at_s * S)
    return Detection(
        detection_id=f"{job}/hang@{at_s}",
        detection_type="hang",
        cluster="c1",
        job_id=job,
        node="node001",
        rank=9,
        score=3.0,
        onset_ts=ts,
        detected_ts=ts,
        emitted_ts=ts,
        summary="rank 9 never entered ALLREDUCE seq 812",
    )


def _brief(events: list[RecoveryEvent]) -> list[tuple[str, str, str]]:
    return [(e.stage, e.action, e.job_id) for e in events]


def test_each_cause_gets_its_action_once_per_incident() -> None:
    engine = RecoveryEngine(load_policy())
    (gpu,) = engine.on_incident(_incident("j-gpu", 0))
    assert (gpu.stage, gpu.action, gpu.node, gpu.rank) == (
        "decided",
        "exclude_node_and_restart",
        "node003",
        26,
    )
    assert (
        gpu.rule == "gpu-hardware-exclude-node" and gpu.attempt == 1 and gpu.not_before_ts == gpu.ts
    )
    # a revision of the same incident does not act again
    assert engine.on_incident(_incident("j-gpu", 5, revision=1)) == []
    assert _brief(engine.on_incident(_incident("j-oom", 0, "host_oom"))) == [
        ("decided", "restart_from_checkpoint", "j-oom")
    ]
    assert _brief(engine.on_detection(_hang("j-hang", 0))) == [("decided", "dump_stacks", "j-hang")]
    # below the rule's confidence, or a cause no rule names: nothing
    assert engine.on_incident(_incident("j-weak", 0, confidence=0.5)) == []
    assert engine.on_incident(_incident("j-unknown", 0, "unknown")) == []


def test_the_per_job_bound_backoff_and_escalation() -> None:
    engine = RecoveryEngine(_policy(max_actions=3, window_s=3600))
    out: list[RecoveryEvent] = []
    for n, at in enumerate((0, 200, 500, 900, 1000)):
        out += engine.on_incident(_incident("j1", at, n=n))
    assert _brief(out) == [
        ("decided", "exclude_node_and_restart", "j1"),
        ("decided", "exclude_node_and_restart", "j1"),
        ("decided", "exclude_node_and_restart", "j1"),
        ("decided", "escalate", "j1"),  # the 4th within the hour
        ("suppressed", "exclude_node_and_restart", "j1"),  # escalated once, not again
    ]
    first, second, third = out[:3]
    # backoff grows: the 2nd waits 100 s after the 1st ran, the 3rd 200 s after the 2nd
    assert (second.not_before_ts - first.not_before_ts) / S == 200  # its trigger came later
    assert (third.not_before_ts - second.not_before_ts) / S == 300  # trigger at 500 > 200 + 200
    engine2 = RecoveryEngine(_policy(max_actions=5, cooldown_s=0))
    # each failure comes right after the previous recovery ran: the waits double
    at_s = (0, 1, 101, 301)
    runs = [engine2.on_incident(_incident("j2", at, n=n))[0] for n, at in enumerate(at_s)]
    gaps = [(b.not_before_ts - a.not_before_ts) / S for a, b in itertools.pairwise(runs)]
    assert gaps == [100, 200, 400]
    # a failure while the next recovery still waits for its backoff does not add another
    (pending,) = engine2.on_incident(_incident("j2", 302, n=9))
    assert pending.stage == "suppressed" and "still waits for its backoff" in pending.reason
    assert [r.attempt for r in runs] == [1, 2, 3, 4]
    assert len({r.key for r in runs}) == 4


def test_a_cascade_within_the_cool_down_is_not_a_new_failure() -> None:
    engine = RecoveryEngine(_policy(cooldown_s=60))
    engine.on_incident(_incident("j1", 0))
    (held,) = engine.on_incident(_incident("j1", 30, "communication", n=1))
    assert held.stage == "suppressed" and held.reason.startswith(
        "cool-down: exclude_node_and_restart"
    )
    (later,) = engine.on_incident(_incident("j1", 90, "communication", n=2))
    assert later.stage == "decided" and later.action == "restart_from_checkpoint"


def test_a_hang_dump_does_not_hold_back_the_restart_its_cause_calls_for() -> None:
    """The dead GPU's rank hangs first (dump stacks), the XID incident follows seconds later."""
    engine = RecoveryEngine(_policy(cooldown_s=60))
    assert _brief(engine.on_detection(_hang("j1", 0))) == [("decided", "dump_stacks", "j1")]
    (restart,) = engine.on_incident(_incident("j1", 6))
    # the first restart: a stack dump neither counts against the bound nor starts a backoff
    assert (restart.stage, restart.action, restart.attempt) == (
        "decided",
        "exclude_node_and_restart",
        1,
    )
    assert restart.not_before_ts == restart.ts
    # after the restart, the cascade's other findings are held back
    (held,) = engine.on_detection(_hang("j1", 20))
    assert held.stage == "suppressed" and "cool-down" in held.reason


def test_progress_resumed_after_a_recovery_closes_it() -> None:
    engine = RecoveryEngine(_policy(progress_deadline_s=600))
    engine.on_progress("c1", "j1", 40, T0 - 10 * S)
    (decided,) = engine.on_incident(_incident("j1", 0))
    assert engine.on_progress("c1", "j1", 40, T0 + 100 * S) == []  # an old step, replayed
    (resumed,) = engine.on_progress("c1", "j1", 41, T0 + 300 * S)
    assert (resumed.stage, resumed.key) == ("progress_resumed", decided.key)
    assert engine.tick(T0 + 10_000 * S) == []


def test_no_progress_retries_then_escalates_at_the_bound() -> None:
    engine = RecoveryEngine(_policy(max_actions=2, progress_deadline_s=600, cooldown_s=0))
    engine.on_progress("c1", "j1", 40, T0 - 10 * S)
    (first,) = engine.on_incident(_incident("j1", 0))
    assert engine.tick(T0 + 599 * S) == []
    out = engine.tick(T0 + 600 * S)
    assert _brief(out) == [
        ("progress_not_resumed", "exclude_node_and_restart", "j1"),
        ("decided", "restart_from_checkpoint", "j1"),
    ]
    assert out[0].key == first.key and out[1].attempt == 2
    deadline = (out[1].not_before_ts - T0) / S + 600
    out = engine.tick(T0 + int(deadline * S))
    assert _brief(out) == [
        ("progress_not_resumed", "restart_from_checkpoint", "j1"),
        ("decided", "escalate", "j1"),  # the bound (2 actions) reached
    ]
    assert "2 recoveries" in out[1].reason


def test_the_circuit_breaker_trips_on_a_fleet_wide_burst() -> None:
    engine = RecoveryEngine(_policy())
    for j in range(20):  # 20 healthy jobs are running
        engine.on_progress("c1", f"job{j}", 5, T0)
    out: list[RecoveryEvent] = []
    for j in range(8):  # a storage outage fails job after job
        out += engine.on_incident(_incident(f"job{j}", 10 + j, "application", n=j))
    decided = [e for e in out if e.stage == "decided"]
    # min_jobs 4, share 0.25 of 20 seen: the 6th job (6/20 > 0.25) trips it
    assert [e.job_id for e in decided if e.action != "escalate"] == [f"job{j}" for j in range(5)]
    (breaker,) = [e for e in decided if e.action == "escalate"]
    assert breaker.rule == "circuit-breaker" and "6 of 20 jobs" in breaker.reason
    held = [e for e in out if e.stage == "suppressed"]
    assert [e.job_id for e in held] == ["job5", "job6", "job7"]
    assert all("circuit breaker" in e.reason for e in held)
    # it re-arms after reset_s
    later = engine.on_incident(_incident("job9", 10 + 1800 + 20, "application", n=99))
    assert _brief(later) == [("decided", "restart_from_checkpoint", "job9")]


def test_a_paused_pipeline_acts_on_nothing() -> None:
    engine = RecoveryEngine(load_policy())
    engine.paused = True
    out = engine.on_incident(_incident("j1", 0)) + engine.on_detection(_hang("j2", 0))
    assert [e.stage for e in out] == ["suppressed", "suppressed"]
    assert all(e.reason.startswith("recovery is paused") for e in out)
    assert engine.tick(T0 + 10**6 * S) == []


def test_the_same_findings_make_the_same_decisions() -> None:
    def run() -> list[RecoveryEvent]:
        engine = RecoveryEngine(load_policy())
        return engine.on_incident(_incident("j1", 0)) + engine.on_detection(_hang("j2", 5))

    assert run() == run()


def test_a_rule_matches_one_kind_of_finding() -> None:
    doc = load_policy().model_dump()
    doc["rules"][0]["when"]["detection"] = ["hang"]
    with pytest.raises(ValueError, match="exactly one of them"):
        Policy.model_validate(doc)


def test_a_node_that_keeps_failing_is_drained_once() -> None:
    """XIDs on node003 in two different jobs within a day: each job is restarted without it,
    and the second finding drains the node (once: a third does not drain it again)."""
    engine = RecoveryEngine(_policy(node_rules=True))
    first = engine.on_incident(_incident("j1", 0))
    assert _brief(first) == [("decided", "exclude_node_and_restart", "j1")]
    assert engine.on_incident(_incident("j1", 5, revision=1)) == []  # a revision counts once
    second = engine.on_incident(_incident("j2", 3600, n=1))
    assert _brief(second) == [
        ("decided", "exclude_node_and_restart", "j2"),
        ("decided", "drain_node", "j2"),
    ]
    drain = second[1]
    assert (drain.node, drain.rank, drain.rule) == ("node003", None, "repeat-hardware-drain-node")
    assert "node003 was named by 2 findings within 86400 s" in drain.reason
    third = engine.on_incident(_incident("j3", 7200, "gpu_ecc", n=2))
    assert _brief(third) == [("decided", "exclude_node_and_restart", "j3")]
    # another node with one XID, and node003 again after the window: counted afresh
    assert _brief(engine.on_incident(_incident("j4", 7300, n=3, node="node007"))) == [
        ("decided", "exclude_node_and_restart", "j4")
    ]
    late = [engine.on_incident(_incident(f"j{5 + k}", 200_000 + k, n=4 + k)) for k in range(2)]
    assert [e.action for e in late[0]] == ["exclude_node_and_restart"]
    assert [e.action for e in late[1]] == ["exclude_node_and_restart", "drain_node"]


def test_a_paused_pipeline_drains_nothing() -> None:
    engine = RecoveryEngine(_policy(node_rules=True))
    engine.paused = True
    engine.on_incident(_incident("j1", 0))
    out = engine.on_incident(_incident("j2", 60, n=1))
    assert [(e.stage, e.action) for e in out] == [
        ("suppressed", "exclude_node_and_restart"),
        ("suppressed", "drain_node"),
    ]


def test_the_circuit_breaker_trips_when_too_many_nodes_are_acted_on() -> None:
    """Two large jobs on 40 nodes; a switch fails and node after node is excluded: the breaker
    counts nodes too (4 of 40 is the limit at 10 %), whatever the number of jobs."""
    engine = RecoveryEngine(_policy(cooldown_s=0, backoff_base_s=0, max_actions=50))
    for k in range(40):
        engine.on_progress("c1", f"big{k % 2}", 5, T0, nodes=[f"node{k:03d}"])
    out: list[RecoveryEvent] = []
    for k in range(7):
        out += engine.on_incident(
            _incident(f"big{k % 2}", 10 + k, "ib_link", n=k, node=f"node{k:03d}")
        )
    decided = [e for e in out if e.stage == "decided"]
    assert [e.node for e in decided if e.action != "escalate"] == [f"node{k:03d}" for k in range(4)]
    (breaker,) = [e for e in decided if e.action == "escalate"]
    assert "5 of 40 nodes were acted on" in breaker.reason
    assert [e.node for e in out if e.stage == "suppressed"] == [f"node{k:03d}" for k in range(4, 7)]


def test_progress_notes_thin_step_spans_to_a_note_per_job_and_interval() -> None:
    notes = ProgressNotes(interval_s=5)
    out = [
        notes.observe("c1", "j1", step, T0 + step * S, f"node{rank % 2}", wall=float(step))
        for step in range(12)
        for rank in range(4)
    ]
    sent = [n for n in out if n is not None]
    # every 5 s of event time, with the highest step and the nodes seen since the last note
    assert [(n.step, n.nodes) for n in sent] == [
        (0, ["node0"]),
        (5, ["node0", "node1"]),
        (10, ["node0", "node1"]),
    ]
    assert notes.flush_idle(wall=11.5, idle_s=1.0) == []  # still reporting
    (last,) = notes.flush_idle(wall=13.0, idle_s=1.0)  # quiet: its last step still goes out
    assert (last.step, last.ts) == (11, T0 + 11 * S)
    assert notes.flush_idle(wall=20.0, idle_s=1.0) == []  # nothing new since


def test_a_recovery_input_carries_one_thing() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        RecoveryInput()
    both = {"incident": _incident("j1", 0), "detection": _hang("j1", 0)}
    with pytest.raises(ValueError, match="exactly one"):
        RecoveryInput(**both)


def test_a_rebuilt_decider_decides_what_an_uninterrupted_one_would() -> None:
    """The state a crash loses comes back from the input read again: bounds, backoff and the
    progress watch continue where they were (the same keys, the same attempts)."""
    policy = _policy(max_actions=3, progress_deadline_s=600, cooldown_s=0)
    inputs = [RecoveryInput(incident=_incident("j1", at, n=n)) for n, at in enumerate((0, 200))]
    later = RecoveryInput(incident=_incident("j1", 500, n=2))
    whole = Decider(policy)
    for r in inputs:
        whole.feed(r)
    rebuilt = Decider(policy)
    assert rebuilt.rebuild(inputs, paused=False) == 2
    assert rebuilt.feed(later) == whole.feed(later)
    (third,) = rebuilt.feed(RecoveryInput(incident=_incident("j1", 1500, n=3)))
    assert third.action == "escalate"  # the bound counts the actions before the crash
    fresh = Decider(policy)
    assert fresh.feed(later)[0].attempt == 1  # what a decider without its history would do
    findings_s, progress_s = replay_horizon_s(policy)
    assert findings_s >= policy.breaker.reset_s and progress_s >= 600


def test_one_jobs_findings_do_not_run_out_another_jobs_deadline() -> None:
    """The input mixes the fleet's jobs in the order workers emitted them (issue 13): a job
    read later whose events are an hour ahead must not fail another job's recovery; that job's
    own clock (its event time, moved on by the wall clock since its record was written) does."""
    policy = _policy(progress_deadline_s=600, cooldown_s=0)
    decider = Decider(policy)
    written = 10**18  # when the records were written (ns): the wall clock below is far later
    (decided,) = decider.feed(RecoveryInput(incident=_incident("j1", 0)), written_ns=now_ns())
    assert decided.stage == "decided"
    decider.feed(RecoveryInput(incident=_incident("j2", 3600, n=1)), written_ns=now_ns())
    assert [e for e in decider.tick() if e.job_id == "j1"] == []
    # j1 went quiet long ago: its own clock passes the deadline
    decider.feed(RecoveryInput(incident=_incident("j1", 1, revision=1)), written_ns=written)
    failed = [e for e in decider.tick() if e.job_id == "j1" and e.stage == "progress_not_resumed"]
    assert [e.key for e in failed] == [decided.key]


def test_state_older_than_the_horizon_is_forgotten_and_decisions_do_not_change() -> None:
    """Issue 15: a stream of ever-new job ids must not grow the engine for ever. Pruning at
    the replay horizon forgets only what no later decision reads."""
    policy = _policy(node_rules=True, cooldown_s=0)
    horizon_s = sum(replay_horizon_s(policy))
    pruned, whole = Decider(policy), Decider(policy)
    flood = [RecoveryInput(incident=_incident(f"flood-{j}", j, n=j)) for j in range(200)]
    for r in flood:
        pruned.feed(r)
        whole.feed(r)
    held = pruned.engine.tracked()
    assert held["jobs"] == 200 and held["handled"] >= 200
    # a job far past the horizon: the flood is forgotten, the newest job kept
    late = RecoveryInput(incident=_incident("late", horizon_s + 1_000, n=999))
    assert pruned.feed(late) == whole.feed(late)
    pruned.prune(T0 + int((horizon_s + 1_000) * S))
    after = pruned.engine.tracked()
    watched = pruned.engine.watching() - {"late"}  # a recovery still being watched is kept
    assert len(watched) < 20
    assert after["jobs"] == 1 + len(watched) and after["node_acted"] <= 1
    assert after["handled"] <= 2 + len(watched)
    assert set(pruned._clocks) == {"late"} | watched
    # what comes next is decided as without pruning
    nxt = [RecoveryInput(incident=_incident("late", horizon_s + 1_500 + k, n=1000 + k))
           for k in range(3)]  # fmt: skip
    for r in nxt:
        assert pruned.feed(r) == whole.feed(r)
