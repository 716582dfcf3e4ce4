"""Slurm documents as real clusters print them (issue 17): a parser given another command's
document says so in one line; 21.08 shapes (lower-case node states and ``state_flags``, sacct
``REQUEUED``, states as strings); ``sinfo --json`` node states become node events like
``scontrol show node``. Documents and their sources: tests/data/slurm/SOURCES.md."""

from __future__ import annotations

import json

import pytest

from rankscope.collectors.slurm import SlurmCollector, SlurmCollectorConfig
from rankscope.collectors.slurm.errors import SlurmOutputError
from rankscope.collectors.slurm.parsing import (
    document_kind,
    parse_sacct,
    parse_scontrol_nodes,
    parse_sinfo,
    parse_squeue,
)
from rankscope.collectors.slurm.snapshots import JobSnapshot, NodeSnapshot
from tests.test_slurm_collector import NOW_NS, ScriptedRunner, factory, invalid_job_id, rec, summary

SACCT_37 = "v0.0.37/sacct_1001_requeued.json"
SQUEUE_42 = "v0.0.42/squeue_4242_running.json"
SACCT_42 = "v0.0.42/sacct_4242_failed.json"
NODE_42 = "v0.0.42/scontrol_gpu001_draining.json"
SINFO = "sinfo/sinfo_gpu001_draining.json"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (SQUEUE_42, "squeue"),
        (SACCT_42, "sacct"),
        (SACCT_37, "sacct"),
        (NODE_42, "nodes"),
        ("v0.0.37/scontrol_g001_mixed.json", "nodes"),
        (SINFO, "sinfo"),
    ],
)
def test_document_kind_from_the_top_level_keys(name: str, kind: str) -> None:
    assert document_kind(json.loads(rec(name))) == kind


@pytest.mark.parametrize(
    ("parse", "name", "says"),
    [
        (parse_squeue, SACCT_42, "squeue --json: got a sacct document"),
        (parse_sacct, SQUEUE_42, "sacct --json: got a squeue / scontrol show job document"),
        (parse_sacct, NODE_42, "sacct --json: got a scontrol show node document"),
        (parse_squeue, SINFO, "squeue --json: got a sinfo document"),
        (parse_scontrol_nodes, SQUEUE_42, "scontrol --json show node: got a squeue"),
    ],
)
def test_a_parser_given_another_commands_document_says_which_in_one_line(
    parse: object, name: str, says: str
) -> None:
    assert callable(parse)
    with pytest.raises(SlurmOutputError) as info:
        parse(rec(name))
    message = str(info.value)
    assert message.startswith(says) and "\n" not in message
    assert "top-level keys: " in message
    # an unrelated JSON object is named as such too
    with pytest.raises(SlurmOutputError, match="not a Slurm --json document"):
        parse_sacct('{"apiVersion": "v1", "kind": "PodList", "items": []}')


def test_sacct_21_08_requeued_run_and_string_states() -> None:
    jobs = parse_sacct(rec(SACCT_37)).jobs
    assert [j.state.current for j in jobs] == [["REQUEUED"], ["RUNNING"]]
    snap = JobSnapshot.from_sacct(jobs[0])
    assert (snap.base, snap.exit_code, snap.end_s) == ("REQUEUED", 0, 1729503000)


def test_sacct_requeued_record_becomes_job_requeued() -> None:
    doc = json.loads(rec(SACCT_37))
    doc["jobs"] = doc["jobs"][:1]  # accounting has only the run that ended in the requeue
    runner = ScriptedRunner()
    col = SlurmCollector(
        SlurmCollectorConfig(job_ids=["1001"], watch_node=False), factory("g001"), runner=runner
    )
    sq = ["squeue", "--json", "--states=all", "--jobs=1001"]
    sa = ["sacct", "--json", "--duplicates", "--jobs=1001"]
    runner.expect((sq, invalid_job_id(sq)), (sa, json.dumps(doc)))

    got = summary(col.poll(NOW_NS))

    assert [(t, job, state) for t, job, _node, state, _code, _ts in got] == [
        ("job_requeued", "1001", "REQUEUED")  # main reported "other"
    ]
    runner.done()


@pytest.mark.parametrize(
    ("name", "states", "klass"),
    [
        ("v0.0.37/scontrol_g001_mixed.json", ("MIXED",), "up"),
        ("v0.0.37/scontrol_g001_drain.json", ("MIXED", "DRAIN"), "drain"),
        ("v0.0.37/scontrol_g001_down.json", ("DOWN", "NOT_RESPONDING"), "down"),
        ("v0.0.37/scontrol_g001_idle_drain.json", ("IDLE", "DRAIN"), "drain"),
        ("v0.0.37/scontrol_g001_idle.json", ("IDLE",), "up"),
        ("v0.0.42/scontrol_gpu001_down.json", None, "down"),
    ],
)
def test_node_states_of_21_08_and_later(
    name: str, states: tuple[str, ...] | None, klass: str
) -> None:
    (node,) = parse_scontrol_nodes(rec(name)).nodes
    snap = NodeSnapshot.from_scontrol(node)
    if states is not None:
        assert snap.states == states
    assert snap.node_class == klass


def test_lower_case_text_states_and_not_responding_star() -> None:
    doc = json.loads(rec("v0.0.37/scontrol_g001_mixed.json"))
    doc["nodes"][0]["state"] = "down*"
    (node,) = parse_scontrol_nodes(json.dumps(doc)).nodes
    assert NodeSnapshot.from_scontrol(node).states == ("DOWN", "NOT_RESPONDING")


def _node_mode(node: str, cmd: list[str]) -> tuple[SlurmCollector, ScriptedRunner]:
    runner = ScriptedRunner()
    config = SlurmCollectorConfig(job_ids=[], node=node, use_sacct=False, scontrol_cmd=cmd)
    return SlurmCollector(config, factory(node), runner=runner), runner


def test_21_08_node_states_become_node_events() -> None:
    col, runner = _node_mode("g001", ["scontrol", "--json", "show", "node"])
    sc = ["scontrol", "--json", "show", "node", "g001"]
    seen = []
    for name in ("mixed", "drain", "down", "idle_drain", "idle"):
        runner.expect((sc, rec(f"v0.0.37/scontrol_g001_{name}.json")))
        seen.extend(summary(col.poll(NOW_NS)))
    runner.done()
    assert [(t, node, state, ts) for t, _job, node, state, _code, ts in seen] == [
        ("node_drain", "g001", "MIXED+DRAIN", 1729507000),
        ("node_down", "g001", "DOWN+NOT_RESPONDING", 1729508000),
        ("node_drain", "g001", "IDLE+DRAIN", 1729509000),
        ("node_up", "g001", "IDLE", NOW_NS // 1_000_000_000),
    ]


def test_sinfo_documents_are_read_as_node_states() -> None:
    (node,) = parse_sinfo(rec(SINFO)).nodes
    assert (node.name, node.state, node.reason, node.reason_changed_at) == (
        "gpu001",
        ["MIXED", "DRAIN"],
        "Kill task failed",
        1762795000,
    )
    col, runner = _node_mode("gpu001", ["sinfo", "--json", "--nodes"])
    cmd = ["sinfo", "--json", "--nodes", "gpu001"]
    seen = []
    for name in ("allocated", "draining", "down", "idle"):
        runner.expect((cmd, rec(f"sinfo/sinfo_gpu001_{name}.json")))
        seen.extend(summary(col.poll(NOW_NS)))
    runner.done()
    assert [(t, state, ts) for t, _job, _node, state, _code, ts in seen] == [
        ("node_drain", "MIXED+DRAIN", 1762795000),
        ("node_down", "DOWN+NOT_RESPONDING", 1762796000),
        ("node_up", "IDLE", NOW_NS // 1_000_000_000),
    ]
