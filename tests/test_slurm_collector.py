"""The Slurm collector against recorded squeue/sacct/scontrol JSON (data_parser v0.0.40, v0.0.42).

The runner is scripted: each poll declares the exact command lines it expects and the recorded
output (or failure) each one gets, so the tests check what is run as well as what is emitted.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from rankscope.collectors.base import EventFactory
from rankscope.collectors.slurm import (
    SlurmCollector,
    SlurmCollectorConfig,
    SlurmCommandError,
    SlurmError,
    SlurmOutputError,
    SubprocessRunner,
    create_slurm_collector,
    exit_code_value,
    expand_hostlist,
    parse_sacct,
    parse_scontrol_nodes,
    parse_squeue,
)
from rankscope.schemas.events import SchedulerEventEvent

DATA = Path(__file__).parent / "data" / "slurm"
NOW_NS = 1_762_800_000_000_000_000
S = 1_000_000_000

Reply = str | Exception
Call = tuple[list[str], Reply]


def rec(name: str) -> str:
    return (DATA / name).read_text()


def invalid_job_id(argv: list[str]) -> SlurmCommandError:
    err = "slurm_load_jobs error: Invalid job id specified"
    return SlurmCommandError(argv, f"exit 1: {err}", stderr=err)


class ScriptedRunner:
    """Replays recorded outputs and fails the test on any command it did not expect."""

    def __init__(self) -> None:
        self.script: list[Call] = []
        self.calls: list[list[str]] = []

    def expect(self, *calls: Call) -> None:
        assert not self.script, f"commands not run by the previous poll: {self.script}"
        self.script = list(calls)

    def __call__(self, argv: Sequence[str], timeout_s: float) -> str:
        assert timeout_s > 0
        self.calls.append(list(argv))
        assert self.script, f"unexpected command {list(argv)}"
        want, reply = self.script.pop(0)
        assert list(argv) == want
        if isinstance(reply, Exception):
            raise reply
        return reply

    def done(self) -> None:
        assert not self.script, f"commands not run: {self.script}"


def factory(node: str = "gpu001") -> EventFactory:
    ids = itertools.count(1)
    return EventFactory(
        cluster="dgx",
        node=node,
        clock_ns=lambda: NOW_NS,
        id_factory=lambda: f"rnd{next(ids):010d}",
    )


def summary(events: Sequence[object]) -> list[tuple[str, str, str, str, int | None, int]]:
    """(event_type, job_id, node, state, exit_code, ts_s) of each event, in order."""
    out = []
    for ev in events:
        assert isinstance(ev, SchedulerEventEvent)
        assert ev.payload.source == "slurm"
        out.append(
            (
                ev.payload.event_type,
                ev.job_id,
                ev.node,
                ev.payload.state,
                ev.payload.exit_code,
                ev.ts // S,
            )
        )
    return out


SQ_4242 = ["squeue", "--json", "--states=all", "--jobs=4242"]
SA_4242 = ["sacct", "--json", "--duplicates", "--jobs=4242"]
SC_GPU001 = ["scontrol", "--json", "show", "node", "gpu001"]
T0 = 1762790000
T1 = T0 + 3800
T2 = T1 + 5400


# --------------------------------------------------------------------------------------------
# the data_parser models
# --------------------------------------------------------------------------------------------


def test_parses_v0042_squeue_sacct_scontrol() -> None:
    sq = parse_squeue(rec("v0.0.42/squeue_4242_requeued.json"))
    assert sq.data_parser == "data_parser/v0.0.42"
    (job,) = sq.jobs
    assert job.job_id == 4242
    assert job.job_state == ["PENDING", "REQUEUED"]
    assert job.restart_cnt == 1
    assert job.start_time is None  # {"set": true, "number": 0} is "no time", not the epoch
    assert job.end_time == T0 + 3600

    sa = parse_sacct(rec("v0.0.42/sacct_4242_failed.json"))
    assert [j.state.current for j in sa.jobs] == [["PREEMPTED"], ["FAILED"]]
    oom = sa.jobs[1].steps[1]
    assert oom.state == ["OUT_OF_MEMORY"]
    assert oom.nodes.names == ["gpu003"]
    assert oom.time.end == T2 - 2  # step times are wrapped, job times are plain integers
    assert sa.jobs[1].time.end == T2

    (node,) = parse_scontrol_nodes(rec("v0.0.42/scontrol_gpu001_draining.json")).nodes
    assert node.state == ["MIXED", "DRAIN"]
    assert node.reason == "Kill task failed"
    assert node.reason_changed_at == T2 - 1


def test_parses_v0040_and_older_shapes() -> None:
    sq = parse_squeue(rec("v0.0.40/squeue_node_ended.json"))
    assert sq.data_parser == "data_parser/v0.0.40"
    assert [(j.job_id, j.job_state) for j in sq.jobs] == [
        (1001, ["TIMEOUT"]),
        (1002, ["OUT_OF_MEMORY"]),
    ]
    # pre-v0.0.39 shapes: a state string, plain integers, a bare exit code
    old = parse_squeue(
        json.dumps(
            {
                "jobs": [
                    {
                        "job_id": 7,
                        "job_state": "RUNNING",
                        "start_time": 1700000000,
                        "end_time": 0,
                        "exit_code": 0,
                        "nodes": "n1",
                        "state_reason": None,
                    }
                ]
            }
        )
    )
    (job,) = old.jobs
    assert (job.job_state, job.start_time, job.state_reason) == (["RUNNING"], 1700000000, "")
    assert exit_code_value(job.exit_code) == 0


def test_exit_code_value() -> None:
    sa = parse_sacct(rec("v0.0.42/sacct_4242_failed.json"))
    assert exit_code_value(sa.jobs[1].exit_code) == 1
    assert exit_code_value(sa.jobs[0].exit_code) == 128 + 15  # SIGNALED TERM
    assert exit_code_value(sa.jobs[1].steps[1].exit_code) == 253  # Slurm's SIG_OOM
    assert exit_code_value(None) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty output"),
        ("squeue: error: Unable to contact slurm controller", "not JSON"),
        ('{"jobs": [{"job_id": 1, "job_state": ["RUN', "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"jobs": [{"job_state": ["RUNNING"]}]}', "jobs.0.job_id"),
    ],
)
def test_malformed_output_raises_a_clear_error(text: str, fragment: str) -> None:
    with pytest.raises(SlurmOutputError, match=fragment):
        parse_squeue(text)


def test_expand_hostlist() -> None:
    assert expand_hostlist("gpu[001-003,007],login1") == [
        "gpu001",
        "gpu002",
        "gpu003",
        "gpu007",
        "login1",
    ]
    assert expand_hostlist("r[1-2]n[08-09]") == ["r1n08", "r1n09", "r2n08", "r2n09"]
    assert expand_hostlist("a100-[07-08]") == ["a100-07", "a100-08"]
    assert expand_hostlist("") == []
    assert expand_hostlist("bad[9-1]") == ["bad[9-1]"]


# --------------------------------------------------------------------------------------------
# v0.0.42: a job preempted and requeued, restarted, failed with an OOM-killed step; node drain
# --------------------------------------------------------------------------------------------


def test_v0042_job_lifecycle_and_node_states() -> None:
    runner = ScriptedRunner()
    col = create_slurm_collector(
        SlurmCollectorConfig(), factory(), runner=runner, environ={"SLURM_JOB_ID": "4242"}
    )
    assert (col.name, col.interval_s, col.job_ids, col.node) == ("slurm", 10.0, ["4242"], "gpu001")

    # 1: running -> job_started at the job's start time
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_running.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_mixed.json")),
    )
    first = col.poll(NOW_NS)
    assert summary(first) == [("job_started", "4242", "gpu001", "RUNNING", None, T0)]
    assert col.data_parser == "data_parser/v0.0.42"

    # 2: nothing changed -> nothing emitted
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_running.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_mixed.json")),
    )
    assert col.poll(NOW_NS) == []

    # 3: requeued (restart_cnt 1); sacct's record of the first run says it was preempted
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_requeued.json")),
        (SA_4242, rec("v0.0.42/sacct_4242_after_preemption.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_idle.json")),
    )
    third = col.poll(NOW_NS)
    assert summary(third) == [
        ("job_requeued", "4242", "gpu001", "PENDING+REQUEUED", 128 + 15, T0 + 3600),
        ("preempted", "4242", "gpu001", "PREEMPTED", 128 + 15, T0 + 3600),
    ]
    assert third[0].payload.reason == "restart 1; previous run PREEMPTED"

    # 4: running again (on gpu[001,003]) -> job_started at the new start time
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_running_again.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_allocated.json")),
    )
    assert summary(col.poll(NOW_NS)) == [("job_started", "4242", "gpu001", "RUNNING", None, T1)]

    # 5: failed; sacct shows step 4242.0 OOM-killed on gpu003; this node starts draining
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_failed.json")),
        (SA_4242, rec("v0.0.42/sacct_4242_failed.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_draining.json")),
    )
    fifth = col.poll(NOW_NS)
    assert summary(fifth) == [  # in event-time order
        ("oom_killed", "4242", "gpu003", "OUT_OF_MEMORY", 253, T2 - 2),
        ("node_drain", "4242", "gpu001", "MIXED+DRAIN", None, T2 - 1),
        ("job_failed", "4242", "gpu001", "FAILED", 1, T2),
    ]
    assert fifth[0].payload.reason == "step 4242.0 ran out of memory on gpu003"
    assert fifth[1].payload.reason == "Kill task failed (set by slurm)"
    assert fifth[2].payload.reason == "NonZeroExitCode"

    # 6: squeue purged the job ("Invalid job id specified" is not an error); node down
    runner.expect(
        (SQ_4242, invalid_job_id(SQ_4242)),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_down.json")),
    )
    sixth = col.poll(NOW_NS)
    assert summary(sixth) == [
        ("node_down", "", "gpu001", "DOWN+DRAIN+NOT_RESPONDING", None, T2 + 300),
    ]
    assert sixth[0].payload.reason == "Not responding (set by slurm)"

    # 7: the finished job is not asked for again; the node is back -> node_up (now)
    runner.expect((SC_GPU001, rec("v0.0.42/scontrol_gpu001_idle.json")))
    seventh = col.poll(NOW_NS)
    assert summary(seventh) == [("node_up", "", "gpu001", "IDLE", None, NOW_NS // S)]
    runner.done()

    every = first + third + fifth + sixth + seventh
    assert len({e.event_id for e in every}) == len(every)
    # events timed by Slurm get ids derived from the occurrence; node_up has no Slurm time
    assert all(e.event_id.startswith("sch-") for e in every[:-1])
    assert seventh[0].event_id.startswith("rnd")


def test_late_start_and_every_observer_derive_the_same_event_ids() -> None:
    """Agents that first see the job after it failed still report its history, and the agents
    of all its nodes derive the same ids, so ClickHouse keeps one row per occurrence."""
    got = []
    for node in ("gpu001", "gpu003"):
        runner = ScriptedRunner()
        col = SlurmCollector(
            SlurmCollectorConfig(job_ids=["4242"], node="gpu001", watch_node=False),
            factory(node),
            runner=runner,
        )
        runner.expect(
            (SQ_4242, rec("v0.0.42/squeue_4242_failed.json")),
            (SA_4242, rec("v0.0.42/sacct_4242_failed.json")),
        )
        got.append(col.poll(NOW_NS))
        runner.done()
    assert summary(got[1]) == [
        ("job_requeued", "4242", "gpu003", "FAILED", 128 + 15, T0 + 3600),
        ("preempted", "4242", "gpu003", "PREEMPTED", 128 + 15, T0 + 3600),
        ("oom_killed", "4242", "gpu003", "OUT_OF_MEMORY", 253, T2 - 2),
        ("job_failed", "4242", "gpu003", "FAILED", 1, T2),
    ]
    assert [e.event_id for e in got[0]] == [e.event_id for e in got[1]]
    assert [e.node for e in got[0]] == ["gpu001", "gpu001", "gpu003", "gpu001"]


def test_without_sacct_the_requeue_is_still_reported() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(
        SlurmCollectorConfig(job_ids=["4242"], use_sacct=False, watch_node=False),
        factory(),
        runner=runner,
    )
    runner.expect((SQ_4242, rec("v0.0.42/squeue_4242_running.json")))
    col.poll(NOW_NS)
    runner.expect((SQ_4242, rec("v0.0.42/squeue_4242_requeued.json")))
    events = col.poll(NOW_NS)
    assert summary(events) == [
        ("job_requeued", "4242", "gpu001", "PENDING+REQUEUED", None, NOW_NS // S)
    ]
    assert events[0].payload.reason == "restart 1; BeginTime"
    runner.expect((SQ_4242, rec("v0.0.42/squeue_4242_failed.json")))
    assert summary(col.poll(NOW_NS)) == [("job_failed", "4242", "gpu001", "FAILED", 1, T2)]
    runner.done()


# --------------------------------------------------------------------------------------------
# v0.0.40: every job on a node; a timeout, a job OOM, a job that vanished before its end was seen
# --------------------------------------------------------------------------------------------

SQ_NODE = ["squeue", "--json", "--states=all", "--nodelist=a100-07"]
SQ_1003 = ["squeue", "--json", "--states=all", "--jobs=1003"]
SA_1001_1003 = ["sacct", "--json", "--duplicates", "--jobs=1001,1003"]
SC_A100 = ["scontrol", "--json", "show", "node", "a100-07"]
U0 = 1731990100


def test_v0040_node_mode() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(SlurmCollectorConfig(), factory("a100-07"), runner=runner, environ={})
    assert col.job_ids is None

    runner.expect(
        (SQ_NODE, rec("v0.0.40/squeue_node_running.json")),
        (SC_A100, rec("v0.0.40/scontrol_a100-07_allocated.json")),
    )
    assert summary(col.poll(NOW_NS)) == [
        ("job_started", "1001", "a100-07", "RUNNING", None, U0),
        ("job_started", "1002", "a100-07", "RUNNING", None, U0 + 20),
        ("job_started", "1003", "a100-07", "RUNNING", None, U0 + 30),
    ]

    # 1001 timed out, 1002 ran out of memory, 1003 vanished (purged): sacct tells its end and
    # is asked for 1001's steps in the same call; the node was drained after an XID 79
    runner.expect(
        (SQ_NODE, rec("v0.0.40/squeue_node_ended.json")),
        (SQ_1003, invalid_job_id(SQ_1003)),
        (SA_1001_1003, rec("v0.0.40/sacct_1001_1003.json")),
        (SC_A100, rec("v0.0.40/scontrol_a100-07_drain.json")),
    )
    second = col.poll(NOW_NS)
    assert summary(second) == [
        ("job_cancelled", "1003", "a100-07", "CANCELLED", 128 + 15, U0 + 400),
        ("node_drain", "1001", "a100-07", "MIXED+DRAIN", None, U0 + 1490),
        ("oom_killed", "1002", "a100-07", "OUT_OF_MEMORY", 253, U0 + 1500),
        ("job_timeout", "1001", "a100-07", "TIMEOUT", 0, U0 + 3600),
    ]
    assert second[1].payload.reason == "GPU fell off the bus (Xid 79) (set by root)"
    assert second[2].payload.reason == "OutOfMemory"
    assert second[3].payload.reason == "TimeLimit"

    # the ended jobs leave squeue: forgotten without another event or command
    runner.expect(
        (SQ_NODE, rec("v0.0.40/squeue_node_empty.json")),
        (SC_A100, rec("v0.0.40/scontrol_a100-07_drain.json")),
    )
    assert col.poll(NOW_NS) == []
    runner.expect(
        (SQ_NODE, rec("v0.0.40/squeue_node_empty.json")),
        (SC_A100, rec("v0.0.40/scontrol_a100-07_drain.json")),
    )
    assert col.poll(NOW_NS) == []
    runner.done()


# --------------------------------------------------------------------------------------------
# failures
# --------------------------------------------------------------------------------------------


def test_failing_command_raises_once_and_loses_no_event() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(SlurmCollectorConfig(job_ids=["4242"]), factory(), runner=runner)
    down = SlurmCommandError(
        SQ_4242,
        "exit 1: slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
        stderr="slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
    )
    runner.expect(
        (SQ_4242, down),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_draining.json")),
    )
    with pytest.raises(SlurmCommandError, match="Unable to contact slurm controller"):
        col.poll(NOW_NS)

    # the node event derived in the failed poll comes out of the next one
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_running.json")),
        (SC_GPU001, rec("v0.0.42/scontrol_gpu001_draining.json")),
    )
    assert [e[0] for e in summary(col.poll(NOW_NS))] == ["job_started", "node_drain"]
    runner.done()


def test_malformed_json_does_not_advance_state() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(
        SlurmCollectorConfig(job_ids=["4242"], watch_node=False), factory(), runner=runner
    )
    truncated = rec("v0.0.42/squeue_4242_running.json")[:700]
    runner.expect((SQ_4242, truncated))
    with pytest.raises(SlurmOutputError, match="squeue --json: not JSON"):
        col.poll(NOW_NS)
    runner.expect((SQ_4242, rec("v0.0.42/squeue_4242_running.json")))
    assert [e[0] for e in summary(col.poll(NOW_NS))] == ["job_started"]
    runner.done()


def test_both_commands_failing_is_one_error() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(SlurmCollectorConfig(job_ids=["4242"]), factory(), runner=runner)
    runner.expect(
        (SQ_4242, SlurmCommandError(SQ_4242, "timed out after 20s")),
        (SC_GPU001, "scontrol: error: Invalid user for SlurmUser slurm, ignored"),
    )
    with pytest.raises(SlurmError) as info:
        col.poll(NOW_NS)
    assert "timed out after 20s" in str(info.value)
    assert "scontrol --json show node: not JSON" in str(info.value)
    runner.done()


def test_sacct_failure_still_reports_the_requeue() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(
        SlurmCollectorConfig(job_ids=["4242"], watch_node=False), factory(), runner=runner
    )
    runner.expect((SQ_4242, rec("v0.0.42/squeue_4242_running.json")))
    col.poll(NOW_NS)
    runner.expect(
        (SQ_4242, rec("v0.0.42/squeue_4242_requeued.json")),
        (SA_4242, SlurmCommandError(SA_4242, "exit 1: Slurm accounting storage is disabled")),
    )
    with pytest.raises(SlurmCommandError, match="accounting storage is disabled"):
        col.poll(NOW_NS)
    runner.expect((SQ_4242, rec("v0.0.42/squeue_4242_requeued.json")))
    events = col.poll(NOW_NS)
    assert summary(events) == [
        ("job_requeued", "4242", "gpu001", "PENDING+REQUEUED", None, NOW_NS // S)
    ]
    runner.done()


def test_errors_array_in_the_document() -> None:
    runner = ScriptedRunner()
    col = SlurmCollector(
        SlurmCollectorConfig(job_ids=["1003"], watch_node=False, max_missing_polls=2),
        factory("a100-07"),
        runner=runner,
    )
    sa = ["sacct", "--json", "--duplicates", "--jobs=1003"]
    empty_sacct = json.dumps({"jobs": [], "errors": [], "warnings": []})
    # error 2017 (invalid job id) inside the document means "purged", like the stderr form
    runner.expect((SQ_1003, rec("v0.0.40/squeue_1003_unfound.json")), (sa, empty_sacct))
    assert col.poll(NOW_NS) == []
    runner.expect((SQ_1003, rec("v0.0.40/squeue_1003_empty.json")), (sa, empty_sacct))
    assert col.poll(NOW_NS) == []  # unknown everywhere twice: given up
    runner.expect()
    assert col.poll(NOW_NS) == []
    runner.done()

    other = json.loads(rec("v0.0.40/squeue_1003_unfound.json"))
    other["errors"][0].update(error_number=1007, error="Protocol authentication error")
    runner2 = ScriptedRunner()
    col2 = SlurmCollector(
        SlurmCollectorConfig(job_ids=["1003"], watch_node=False), factory(), runner=runner2
    )
    runner2.expect((SQ_1003, json.dumps(other)))
    with pytest.raises(SlurmOutputError, match="Protocol authentication error"):
        col2.poll(NOW_NS)


def test_subprocess_runner() -> None:
    run = SubprocessRunner()
    assert run([sys.executable, "-c", "print('{}')"], 10).strip() == "{}"
    with pytest.raises(SlurmCommandError, match="exit 3: boom") as info:
        run([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"], 10)
    assert info.value.stderr == "boom"
    with pytest.raises(SlurmCommandError, match="not found"):
        run(["/nonexistent/squeue", "--json"], 10)
    with pytest.raises(SlurmCommandError, match="timed out"):
        run([sys.executable, "-c", "import time; time.sleep(5)"], 0.2)
