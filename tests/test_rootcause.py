"""Root-cause attribution: hand-built cascades, then every terminal scenario of the simulator.

The hand-built cases pin one rule each (class order, topology, late evidence, clock skew, one
incident per cascade); the simulator suite checks the whole thing against ground-truth labels and
the acceptance bar (attribution within 10 s of event time after the first symptom).
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from rankscope.schemas.derived import Incident
from rankscope.schemas.envelope import Envelope
from rankscope.schemas.events import (
    CommEventEvent,
    Event,
    FabricEventEvent,
    GpuEventEvent,
    GpuSampleEvent,
    HeartbeatEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from rankscope.schemas.payloads import (
    CommEvent,
    FabricEvent,
    GpuEvent,
    GpuSample,
    Heartbeat,
    SchedulerEvent,
    Span,
)
from rankscope.streams.analysis.rootcause import (
    XID_INFO,
    RootCauseAttributor,
    RootCauseConfig,
    xid_description,
)

S = 1_000_000_000
MS = 1_000_000
T0 = 1_767_225_600 * S  # 2026-01-01T00:00:00Z
_ids = itertools.count(1)


# ==================================================================================== builders


@dataclass
class Job:
    """A small synchronous job: ``nodes`` x ``gpn`` ranks, rank r on node r // gpn, GPU r % gpn."""

    nodes: int = 4
    gpn: int = 8
    job_id: str = "job-1"
    cluster: str = "c1"
    #: node -> source clock minus true time (events are stamped with it)
    skew: dict[str, int] = field(default_factory=dict)

    @property
    def ranks(self) -> range:
        return range(self.nodes * self.gpn)

    def node(self, rank: int) -> str:
        return f"node{rank // self.gpn:03d}"

    def _env(self, node: str, ts: int, rank: int | None, gpu: int | None) -> dict[str, Any]:
        raw = ts + self.skew.get(node, 0)
        return {
            "event_id": f"e{next(_ids):015d}",
            "cluster": self.cluster,
            "job_id": self.job_id,
            "node": node,
            "rank": rank,
            "local_rank": None if rank is None else rank % self.gpn,
            "gpu": gpu,
            "ts": raw,
            "observed_ts": raw + 5 * MS,
        }

    def _rank_env(self, rank: int, ts: int) -> dict[str, Any]:
        return self._env(self.node(rank), ts, rank, rank % self.gpn)

    def xid(self, rank: int, ts: int, xid: int) -> GpuEventEvent:
        p = GpuEvent(event_type="xid", gpu_uuid=f"GPU-{rank:04d}", xid=xid, message=f"XID {xid}")
        return GpuEventEvent(
            **self._rank_env(rank, ts), schema="gpu_event/1", kind="gpu_event", payload=p
        )

    def gpu_event(self, rank: int, ts: int, event_type: str, message: str) -> GpuEventEvent:
        p = GpuEvent.model_validate(
            {"event_type": event_type, "gpu_uuid": f"GPU-{rank:04d}", "message": message}
        )
        return GpuEventEvent(
            **self._rank_env(rank, ts), schema="gpu_event/1", kind="gpu_event", payload=p
        )

    def span(
        self,
        rank: int,
        ts: int,
        phase: str = "step",
        step: int = 0,
        *,
        dur: int = S,
        error: tuple[str, str] | None = None,
        seq: int | None = None,
    ) -> SpanEvent:
        raw_end = ts + self.skew.get(self.node(rank), 0)
        p = Span.model_validate(
            {
                "name": phase,
                "phase": phase,
                "trace_id": f"{step + 1:032x}",
                "span_id": f"{next(_ids):016x}",
                "start_ns": raw_end - dur,
                "end_ns": raw_end,
                "step": step,
                "status": "error" if error else "ok",
                "error_type": error[0] if error else "",
                "error_message": error[1] if error else "",
                "attributes": {"collective.seq": seq} if seq is not None else {},
            }
        )
        return SpanEvent(**self._rank_env(rank, ts), schema="span/1", kind="span", payload=p)

    def sample(self, rank: int, ts: int) -> GpuSampleEvent:
        p = GpuSample(gpu_uuid=f"GPU-{rank:04d}", sm_util_pct=90.0)
        return GpuSampleEvent(
            **self._rank_env(rank, ts), schema="gpu_sample/1", kind="gpu_sample", payload=p
        )

    def heartbeat(self, node: str, ts: int) -> HeartbeatEvent:
        p = Heartbeat(agent="rankscope-agent", seq=0, interval_s=5.0)
        return HeartbeatEvent(
            **self._env(node, ts, None, None), schema="heartbeat/1", kind="heartbeat", payload=p
        )

    def comm(self, rank: int, ts: int, event_type: str, message: str, **kw: Any) -> CommEventEvent:
        p = CommEvent.model_validate(
            {"source": "nccl", "event_type": event_type, "message": message, **kw}
        )
        return CommEventEvent(
            **self._rank_env(rank, ts), schema="comm_event/1", kind="comm_event", payload=p
        )

    def watchdog(self, rank: int, ts: int, seq: int) -> CommEventEvent:
        msg = (
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE"
        )
        msg += ")"
        return self.comm(
            rank, ts, "watchdog_timeout", msg, op="ALLREDUCE", seq=seq, timeout_ms=10_000,
            elapsed_ms=10_050, source="pytorch",
        )  # fmt: skip

    def sched(
        self, node: str, ts: int, event_type: str, state: str, reason: str = "", **kw: Any
    ) -> SchedulerEventEvent:
        rank = kw.pop("rank", None)
        p = SchedulerEvent.model_validate(
            {"source": "slurm", "event_type": event_type, "state": state, "reason": reason, **kw}
        )
        env = self._rank_env(rank, ts) if rank is not None else self._env(node, ts, None, None)
        return SchedulerEventEvent(
            **env, schema="scheduler_event/1", kind="scheduler_event", payload=p
        )

    def fabric(self, node: str, ts: int, event_type: str, **kw: Any) -> FabricEventEvent:
        p = FabricEvent.model_validate({"event_type": event_type, **kw})
        return FabricEventEvent(
            **self._env(node, ts, None, None),
            schema="fabric_event/1",
            kind="fabric_event",
            payload=p,
        )

    # ------------------------------------------------------------------ whole-job patterns

    def steps(
        self, start: int, n: int, first_step: int = 0, ranks: Iterable[int] | None = None
    ) -> list[Event]:
        """``n`` completed 1 s steps from ``start``: per rank a collective span (with the
        collective seq = step + 3) and the step span, plus one GPU sample per rank per step."""
        out: list[Event] = []
        rs = list(self.ranks if ranks is None else ranks)
        for k in range(n):
            step = first_step + k
            end = start + (k + 1) * S
            for r in rs:
                out.append(self.sample(r, end - S // 2))
                out.append(self.span(r, end, "collective", step, dur=S // 4, seq=step + 3))
                out.append(self.span(r, end, "step", step, dur=S))
        return out

    def samples(self, start: int, end: int, ranks: Iterable[int], every: int = S) -> list[Event]:
        return [self.sample(r, t) for t in range(start, end, every) for r in ranks]

    def timeouts(self, ranks: Iterable[int], at: int, seq: int) -> list[Event]:
        """The survivors' watchdog timeouts and the error spans that follow them."""
        out: list[Event] = []
        for i, r in enumerate(ranks):
            t = at + i * 7 * MS
            out.append(self.watchdog(r, t, seq))
            err = ("DistBackendError", f"[Rank {r}] Watchdog caught collective operation timeout")
            out.append(self.span(r, t + 2 * MS, "collective", seq - 3, error=err, seq=seq))
            out.append(self.span(r, t + 2 * MS, "step", seq - 3, error=err))
        return out


def by_time(events: Iterable[Event], skew: dict[str, int] | None = None) -> list[Event]:
    """Arrival order: true time (a skewed node's agent still publishes in real time)."""
    sk = skew or {}
    return sorted(events, key=lambda e: e.ts - sk.get(e.node, 0))


def feed(
    att: RootCauseAttributor,
    events: Sequence[Event],
    *,
    correct: dict[str, int] | None = None,
    idle_s: float = 30.0,
) -> list[Incident]:
    """Feed in the given (arrival) order, advancing the job's event time after each event, then
    let ``idle_s`` of event time pass (the worker's idle timer)."""
    corr = correct or {}
    out: list[Incident] = []
    now = -1
    for e in events:
        ts = e.ts - corr.get(e.node, 0)
        now = max(now, ts)
        att.observe(e, ts)
        out.extend(att.advance(now))
    for k in range(1, int(idle_s) + 1):
        out.extend(att.advance(now + k * S))
    return out


def attributor(job: Job, **cfg: Any) -> RootCauseAttributor:
    return RootCauseAttributor(job.cluster, job.job_id, RootCauseConfig(**cfg), clock_ns=lambda: 42)


def one(incidents: list[Incident]) -> tuple[Incident, Incident]:
    """Exactly one cascade: every emission shares the incident id; (first, final) versions."""
    assert incidents, "no incident"
    ids = {i.incident_id for i in incidents}
    assert len(ids) == 1, (
        f"expected one incident, got {[(i.cause_class, i.node) for i in incidents]}"
    )
    return incidents[0], incidents[-1]


def others(job: Job, *exclude: int) -> list[int]:
    return [r for r in job.ranks if r not in exclude]


# ==================================================================================== XID 79


def _xid79_job(job: Job, culprit: int = 11) -> tuple[list[Event], int]:
    """10 good steps, XID 79 on ``culprit`` 0.3 s into step 10, GPU lost, the others time out
    10 s later on seq 13, the scheduler fails the job at +12 s."""
    t = T0 + 10 * S
    xid_at = t + 300 * MS
    ev = job.steps(T0, 10)
    ev += [
        job.xid(culprit, xid_at, 79),
        job.gpu_event(culprit, xid_at + 700 * MS, "gpu_unresponsive", "GPU is lost"),
    ]
    ev += job.samples(t, t + 12 * S, others(job, culprit))
    ev += [job.heartbeat(f"node{n:03d}", t + k * 5 * S) for n in range(job.nodes) for k in range(3)]
    ev += job.timeouts(others(job, culprit), xid_at + 10 * S, seq=13)
    ev.append(
        job.sched("node000", t + 12 * S, "job_failed", "FAILED", "NonZeroExitCode", exit_code=1)
    )
    return by_time(ev, job.skew), xid_at


def test_xid79_then_timeouts_then_job_failed_is_one_gpu_xid_incident() -> None:
    job = Job()
    events, xid_at = _xid79_job(job)
    first, final = one(feed(attributor(job), events))
    for inc in (first, final):
        assert (inc.cause_class, inc.node, inc.gpu, inc.rank, inc.xid) == (
            "gpu_xid",
            "node001",
            3,
            11,
            79,
        )
        assert inc.first_cause_ts == xid_at
        assert inc.incident_id == f"c1/job-1/{xid_at}"
    # the XID itself is a failure signal: attributed settle_s after it, before any timeout
    assert first.attributed_ts - xid_at <= 5 * S + S
    assert first.symptom_ranks == []
    assert final.symptom_ranks == others(job, 11)
    ts = [e.ts for e in final.evidence]
    assert ts == sorted(ts)
    cause = [e for e in final.evidence if e.role == "cause"]
    assert len(cause) == 1 and "XID 79 (GPU has fallen off the bus)" in cause[0].what
    assert cause[0].what.startswith("00:00:10.300 node001 GPU 3 (rank 11)")
    assert any("not answering NVML" in e.what for e in final.evidence if e.role == "precursor")
    assert any(e.kind == "scheduler_event" for e in final.evidence)
    assert "fell off the bus (XID 79)" in final.summary
    assert "31 ranks then timed out in ALLREDUCE seq 13 about 10 s later" in final.summary
    assert "the scheduler failed the job at T+12 s" in final.summary
    assert final.confidence >= 0.95 > first.confidence >= 0.75  # symptoms corroborate it later
    assert final.clock_offsets_ns == {}


def test_incident_is_deterministic() -> None:
    a, b = Job(), Job()
    ea, _ = _xid79_job(a)
    eb, _ = _xid79_job(b)
    ia, ib = feed(attributor(a), ea), feed(attributor(b), eb)
    strip = {"evidence"}  # event ids differ between the two builds
    assert [i.model_dump(exclude=strip) for i in ia] == [i.model_dump(exclude=strip) for i in ib]


def test_symptom_only_triggering_still_finds_the_xid() -> None:
    """With precursor triggers off, the timeouts 10 s later open the cascade and look back."""
    job = Job()
    events, xid_at = _xid79_job(job)
    first, _ = one(feed(attributor(job, trigger_on_fatal_precursors=False), events))
    assert (first.cause_class, first.rank, first.first_cause_ts) == ("gpu_xid", 11, xid_at)
    assert first.symptom_ranks == others(job, 11)
    assert first.attributed_ts - first.first_symptom_ts <= 10 * S


# ==================================================================================== ECC, NVLink


def test_ecc_xid48_with_cuda_error_span() -> None:
    job = Job()
    t = T0 + 5 * S
    ev = job.steps(T0, 5)
    ev += [
        job.xid(20, t + 100 * MS, 48),
        job.gpu_event(20, t + 103 * MS, "ecc", "nvml event: double-bit ECC error"),
        job.span(
            20,
            t + 250 * MS,
            "backward",
            5,
            error=("RuntimeError", "CUDA error: uncorrectable ECC error encountered"),
        ),
    ]
    ev += job.samples(t, t + 12 * S, job.ranks)
    ev += job.timeouts(others(job, 20), t + 10 * S, seq=8)
    ev.append(job.sched("node000", t + 11 * S, "job_failed", "FAILED"))
    first, final = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.gpu, first.rank, first.xid) == (
        "gpu_ecc",
        "node002",
        4,
        20,
        48,
    )
    assert final.symptom_ranks == others(job, 20)
    kinds = [(e.role, e.kind) for e in final.evidence[:4]]
    assert kinds[0] == ("cause", "gpu_event")
    assert any("uncorrectable ECC error encountered" in e.what for e in final.evidence)


def test_ecc_without_the_xid_event_is_found_from_the_cuda_error() -> None:
    job = Job()
    t = T0 + 5 * S
    ev = job.steps(T0, 5) + job.samples(t, t + 12 * S, job.ranks)
    ev.append(
        job.span(
            20,
            t + 250 * MS,
            "backward",
            5,
            error=("RuntimeError", "CUDA error: uncorrectable ECC error encountered"),
        )
    )
    ev += job.timeouts(others(job, 20), t + 10 * S, seq=8)
    first, _ = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.rank, first.xid) == ("gpu_ecc", 20, None)


def test_nvlink_xid74_local_ranks_fail_first() -> None:
    job = Job()
    t = T0 + 5 * S
    culprit, local = 17, [16, 18, 19, 20, 21, 22, 23]
    remote = [r for r in job.ranks if r // 8 != 2]
    ev = job.steps(T0, 5) + job.samples(t, t + 12 * S, job.ranks)
    ev += [
        job.xid(culprit, t + 200 * MS, 74),
        job.comm(
            culprit,
            t + 220 * MS,
            "nccl_warn",
            "Cuda failure 'uncorrectable NVLink error detected during the execution'",
        ),
        job.span(
            culprit,
            t + 240 * MS,
            "collective",
            5,
            error=(
                "DistBackendError",
                "NCCL error: unhandled cuda error\nuncorrectable NVLink error",
            ),
            seq=8,
        ),
        job.fabric(
            "node002",
            t + 1 * S,
            "nvlink_error",
            device="GPU-0017",
            port=4,
            counter="dl_crc_flit",
            delta=300,
            message="GPU 1 NVLink 4 dl_crc_flit +300",
        ),
    ]
    for i, r in enumerate(local):
        at = t + (400 + 60 * i) * MS
        ev.append(
            job.comm(
                r,
                at,
                "remote_process_exited",
                "NCCL error: remote process exited or there was a network error",
                source="pytorch",
            )
        )
        ev.append(
            job.span(
                r,
                at + 5 * MS,
                "collective",
                5,
                error=("DistBackendError", "ncclRemoteError: remote process exited"),
                seq=8,
            )
        )
    ev += job.timeouts(remote, t + 10 * S, seq=8)
    first, final = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.gpu, first.rank, first.xid) == (
        "nvlink",
        "node002",
        1,
        17,
        74,
    )
    assert sorted(first.symptom_ranks) == local  # at attribution: the local ranks only
    assert final.symptom_ranks == others(job, culprit)
    symptoms = [e for e in final.evidence if e.role == "symptom"]
    assert {e.rank for e in symptoms[: len(local)]} <= {culprit, *local}  # local ranks first
    assert "7 ranks failed with errors" in first.summary


# ==================================================================================== InfiniBand


def _ib_job(job: Job, *, link_events: bool) -> list[Event]:
    """node002's mlx5_1 port 1 flaps; ring neighbours node001/node003 get IB completion errors
    naming node002's address and abort; the rest time out."""
    t = T0 + 5 * S
    ev = job.steps(T0, 5) + job.samples(t, t + 13 * S, job.ranks)
    if link_events:
        ev += [
            job.fabric(
                "node002",
                t + 100 * MS,
                "link_down",
                device="mlx5_1",
                port=1,
                old_state="4: ACTIVE",
                new_state="1: DOWN",
            ),
            job.fabric(
                "node002",
                t + 1_500 * MS,
                "error_counter_increase",
                device="mlx5_1",
                port=1,
                counter="link_downed",
                delta=1,
            ),
            job.fabric(
                "node002",
                t + 1_500 * MS,
                "error_counter_increase",
                device="mlx5_1",
                port=1,
                counter="symbol_error",
                delta=812,
            ),
            job.fabric(
                "node002",
                t + 2_100 * MS,
                "link_up",
                device="mlx5_1",
                port=1,
                old_state="1: DOWN",
                new_state="4: ACTIVE",
            ),
        ]
    peer = "10.0.0.3<43123>"
    msg = (
        f"NET/IB : Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR(12) "
        "opcode=RDMA_WRITE len=0 vendor_err=129 hca mlx5_1"
    )
    aborted = [9, 25]  # rail ranks of node001 and node003
    for i, r in enumerate(aborted):
        at = t + (600 + 200 * i) * MS
        ev.append(job.comm(r, at, "net_ib_error", msg, peer=peer))
        ev.append(
            job.span(
                r,
                at + 50 * MS,
                "collective",
                5,
                error=("DistBackendError", f"ncclRemoteError\nLast error:\n{msg}"),
                seq=8,
            )
        )
    ev += job.timeouts(others(job, *aborted), t + 10 * S, seq=8)
    return by_time(ev)


def test_ib_link_down_is_attributed_to_the_flapping_node_not_the_peers_that_log_errors() -> None:
    job = Job()
    att = attributor(job)
    for n in range(job.nodes):
        att.note_node_address(f"node{n:03d}", f"10.0.0.{n + 1}")
    first, final = one(feed(att, _ib_job(job, link_events=True)))
    assert (first.cause_class, first.node, first.device, first.rank) == (
        "ib_link",
        "node002",
        "mlx5_1:1",
        None,
    )
    assert "InfiniBand port mlx5_1:1 on node002" in first.summary
    assert final.symptom_ranks == list(job.ranks)
    assert first.confidence >= 0.9


def test_ib_peers_naming_a_node_without_any_port_event() -> None:
    """No link event was collected: the node the peers' errors name is the suspect."""
    job = Job()
    att = attributor(job)
    att.note_node_address("node002", "10.0.0.3")
    first, _ = one(feed(att, _ib_job(job, link_events=False)))
    assert (first.cause_class, first.node) == ("ib_link", "node002")
    assert "name it" in first.summary


# =============================================================================== scheduler, host


def test_preemption_is_the_scheduler_not_the_hardware_that_follows() -> None:
    job = Job()
    t = T0 + 5 * S
    victims = list(range(24, 32))
    ev = job.steps(T0, 5) + job.samples(t, t + 13 * S, others(job, *victims))
    ev += job.samples(t, t + 500 * MS, victims)
    ev += [
        job.sched(
            "node003",
            t + 100 * MS,
            "preempted",
            "PREEMPTED",
            "capacity reclaimed for a higher-priority job",
        ),
        job.xid(26, t + 600 * MS, 43),  # channel reset as the processes are killed
        job.fabric(
            "node003",
            t + 1_200 * MS,
            "link_down",
            device="mlx5_0",
            port=1,
            old_state="4: ACTIVE",
            new_state="1: DOWN",
        ),
    ]
    ev += job.timeouts(others(job, *victims), t + 10 * S, seq=8)
    ev.append(job.sched("node000", t + 11 * S, "job_failed", "PREEMPTED", "PREEMPTED"))
    first, final = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.rank) == ("scheduler_preemption", "node003", None)
    assert "not a hardware fault" in first.summary
    assert final.symptom_ranks == others(job, *victims)


def test_host_oom_on_that_node() -> None:
    job = Job()
    t = T0 + 5 * S
    ev = job.steps(T0, 5) + job.samples(t, t + 12 * S, job.ranks)
    ev += [
        job.sched(
            "node001",
            t + 100 * MS,
            "oom_killed",
            "OUT_OF_MEMORY",
            "Out of memory: Killed process 4242 (python3)",
            rank=9,
            exit_code=137,
        ),
        job.xid(9, t + 150 * MS, 45),  # the driver cleans up after the killed process
    ]
    ev += job.timeouts(others(job, 9), t + 10 * S, seq=8)
    ev.append(job.sched("node000", t + 11 * S, "job_failed", "OUT_OF_MEMORY"))
    first, final = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.rank) == ("host_oom", "node001", 9)
    assert final.symptom_ranks == others(job, 9)


def test_application_exception_on_one_rank() -> None:
    job = Job()
    t = T0 + 5 * S
    ev = job.steps(T0, 5) + job.samples(t, t + 12 * S, job.ranks)
    ev.append(
        job.span(
            5,
            t + 300 * MS,
            "forward",
            5,
            error=("ValueError", "shapes (4,128) and (64,) not aligned"),
        )
    )
    ev += job.timeouts(others(job, 5), t + 10 * S, seq=8)
    first, final = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.rank) == ("application", "node000", 5)
    assert "ValueError" in first.summary
    assert final.symptom_ranks == others(job, 5)
    assert 0.6 <= final.confidence <= 0.75


def test_node_silent_while_others_report_is_node_unresponsive() -> None:
    job = Job()
    t = T0 + 5 * S
    dead = list(range(16, 24))
    ev = job.steps(T0, 5) + job.samples(t, t + 13 * S, others(job, *dead))
    ev += job.samples(t, t + 400 * MS, dead)
    ev += job.timeouts(others(job, *dead), t + 10 * S, seq=8)
    first, final = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.rank) == ("node_unresponsive", "node002", None)
    assert final.symptom_ranks == others(job, *dead)


def test_rank_that_never_entered_the_collective_is_the_hang() -> None:
    job = Job()
    t = T0 + 5 * S
    hung = 13
    ev = job.steps(T0, 5) + job.samples(t, t + 13 * S, job.ranks)  # its GPU keeps reporting
    ev += job.timeouts(others(job, hung), t + 10 * S, seq=8)
    first, _ = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.node, first.rank, first.gpu) == ("hang", "node001", 13, 5)
    assert "never entered" in " ".join(e.what for e in first.evidence if e.role == "cause")


def test_detector_notes_hang_and_progress_contradicts_a_wrong_note() -> None:
    job = Job()
    att = attributor(job)
    feed(att, by_time(job.steps(T0, 3)), idle_s=0)
    att.note_hang(13, "node001", T0 + 3 * S, None)  # but the job keeps going
    assert feed(att, by_time(job.steps(T0 + 3 * S, 8, first_step=3))) == []
    assert att.stats.cascades_dropped == 1
    # a real one: no step after the onset
    onset = T0 + 11 * S
    inc = feed(att, by_time(job.samples(onset, onset + 10 * S, job.ranks)), idle_s=0)
    att.note_hang(13, "node001", onset, 14)
    inc += feed(att, by_time(job.samples(onset + 10 * S, onset + 20 * S, job.ranks)))
    first, _ = one(inc)
    assert (first.cause_class, first.rank, first.first_cause_ts) == ("hang", 13, onset)


# ==================================================================================== cascades


def test_two_faults_at_different_times_are_two_incidents() -> None:
    job = Job()
    events, xid_at = _xid79_job(job)
    restart = T0 + 60 * S
    survivors = [r for r in job.ranks if r // 8 != 1]  # restarted without node001
    ev2 = [job.sched("node000", restart, "job_started", "RUNNING")]
    ev2 += job.steps(restart, 20, first_step=0, ranks=survivors)
    t = restart + 20 * S
    ev2 += job.samples(t, t + 12 * S, survivors)
    ev2.append(
        job.sched("node002", t + 200 * MS, "oom_killed", "OUT_OF_MEMORY", "Killed process", rank=20)
    )
    ev2 += job.timeouts([r for r in survivors if r != 20], t + 10 * S, seq=23)
    incidents = feed(attributor(job), events + by_time(ev2))
    ids = list(dict.fromkeys(i.incident_id for i in incidents))
    assert len(ids) == 2
    latest = {i.incident_id: i for i in incidents}
    a, b = latest[ids[0]], latest[ids[1]]
    assert (a.cause_class, a.rank, a.first_cause_ts) == ("gpu_xid", 11, xid_at)
    assert (b.cause_class, b.node, b.rank) == ("host_oom", "node002", 20)
    assert 11 not in b.symptom_ranks and a.incident_id != b.incident_id


def test_benign_corrected_ecc_an_hour_earlier_is_not_picked() -> None:
    job = Job()
    t = T0 + 3600 * S
    ev: list[Event] = [
        job.gpu_event(3, T0, "ecc", "nvml event: single-bit ECC error"),
        job.gpu_event(3, T0 + S, "ecc", "single-bit (corrected) ECC errors +1 (volatile total 1)"),
    ]
    ev += job.steps(t - 5 * S, 5)
    ev.append(
        job.gpu_event(6, t - 2 * S, "ecc", "nvml event: single-bit ECC error")
    )  # recent, benign
    ev += job.samples(t, t + 12 * S, job.ranks)
    ev.append(job.span(3, t + 300 * MS, "forward", 5, error=("KeyError", "'labels'")))
    ev += job.timeouts(others(job, 3), t + 10 * S, seq=8)
    first, _ = one(feed(attributor(job), by_time(ev)))
    assert (first.cause_class, first.rank) == ("application", 3)


def test_late_arriving_precursor_within_settle_still_wins() -> None:
    """The XID is published late (after the timeouts) but its corrected time is earlier."""
    job = Job()
    t = T0 + 5 * S
    xid_at = t + 200 * MS
    ev = by_time(
        job.steps(T0, 5)
        + job.samples(t, t + 10 * S, others(job, 11))
        + job.timeouts(others(job, 11), t + 3 * S, seq=8)
    )
    late = job.xid(11, xid_at, 79)
    cut = next(i for i, e in enumerate(ev) if e.ts > t + 5 * S)  # 2 s after the first timeout
    first, _ = one(
        feed(attributor(job, trigger_on_fatal_precursors=False), [*ev[:cut], late, *ev[cut:]])
    )
    assert (first.cause_class, first.rank, first.first_cause_ts) == ("gpu_xid", 11, xid_at)


def test_precursor_arriving_after_attribution_does_not_change_the_cause() -> None:
    job = Job()
    t = T0 + 5 * S
    ev = by_time(job.steps(T0, 5) + job.samples(t, t + 20 * S, job.ranks))
    ev.insert(len(ev) // 2, job.span(5, t + 300 * MS, "forward", 5, error=("ValueError", "bad")))
    ev = by_time(ev)
    ev.append(job.xid(11, t, 79))  # 15 s late: beyond settle_s
    first, final = one(feed(attributor(job), ev))
    assert first.cause_class == final.cause_class == "application"


def test_a_late_xid_replaces_an_inferred_stall_in_a_revision_of_the_same_incident() -> None:
    """A worker that is behind reads the busy span topic late: the hang detector's anonymous
    "no progress" note is attributed first; the XID read afterwards (earlier in corrected time)
    must become the primary cause of that same incident, attributed when it was read."""
    job = Job()
    t = T0 + 5 * S
    xid_at = t + 300 * MS
    att = attributor(job)
    feed(att, by_time(job.steps(T0, 5)), idle_s=0)
    feed(att, by_time(job.samples(t, t + 6 * S, job.ranks)), idle_s=0)
    att.note_hang(None, "", t, None)  # the collective is stuck; nobody named yet
    early = feed(att, by_time(job.samples(t + 6 * S, t + 12 * S, job.ranks)), idle_s=0)
    assert [i.cause_class for i in early] == ["hang"]
    late = [job.xid(11, xid_at, 79), *job.timeouts(others(job, 11), t + 10 * S, seq=8)]
    revised = feed(att, late + by_time(job.samples(t + 12 * S, t + 20 * S, job.ranks)))
    assert revised, "no revision"
    final = revised[-1]
    assert (final.cause_class, final.rank, final.first_cause_ts) == ("gpu_xid", 11, xid_at)
    assert final.incident_id == early[0].incident_id and final.revision >= 1
    assert final.attributed_ts > early[0].attributed_ts
    assert att.stats.reattributed == 1


def test_a_fatal_primary_is_not_replaced_by_a_later_one() -> None:
    job = Job()
    events, xid_at = _xid79_job(job)
    att = attributor(job)
    incidents = feed(att, events, idle_s=0)
    # an unrelated-looking ECC XID on another GPU, read later with an earlier corrected time
    incidents += feed(att, [job.xid(20, xid_at - 100 * MS, 48)])
    assert {i.cause_class for i in incidents} == {"gpu_xid"}
    assert {i.rank for i in incidents} == {11} and att.stats.reattributed == 0


def test_skewed_node_is_ordered_by_corrected_time() -> None:
    """node001's clock is 5 s ahead: its XID's raw ts is after the peers' timeouts (a 3 s
    watchdog here) but its corrected ts is before them."""
    job = Job(skew={"node001": 5 * S})
    t = T0 + 5 * S
    xid_at = t + 200 * MS
    ev = job.steps(T0, 5) + job.samples(t, t + 8 * S, others(job, 11))
    ev.append(job.xid(11, xid_at, 79))
    ev += job.timeouts(others(job, 11), xid_at + 3 * S, seq=8)
    events = by_time(ev, job.skew)
    xid = next(e for e in events if isinstance(e, GpuEventEvent))
    first_timeout = min(e.ts for e in events if isinstance(e, CommEventEvent))
    assert xid.ts > first_timeout  # raw order is inverted
    first, final = one(
        feed(attributor(job, trigger_on_fatal_precursors=False), events, correct=job.skew)
    )
    assert (first.cause_class, first.node, first.rank, first.first_cause_ts) == (
        "gpu_xid",
        "node001",
        11,
        xid_at,
    )
    assert final.clock_offsets_ns == {"node001": 5 * S}
    assert [e.ts for e in final.evidence] == sorted(e.ts for e in final.evidence)


# ==================================================================================== bounds


def test_history_is_bounded_and_hot_path_is_cheap() -> None:
    job = Job(nodes=64)
    att = attributor(job, max_history=64)
    for k in range(1000):
        att.observe(
            job.gpu_event(k % 512, T0 + k * MS, "ecc", "nvml event: single-bit ECC error"),
            T0 + k * MS,
        )
    assert len(att._history) == 64 and att.stats.history_dropped == 1000 - 64
    samples = [job.sample(r, T0 + k * S) for k in range(40) for r in job.ranks]  # 20k events
    spans = [job.span(r, T0 + k * S, "step", k) for k in range(20) for r in job.ranks]
    t = time.perf_counter()
    for e in samples + spans:
        att.observe(e, e.ts)
    per_event = (time.perf_counter() - t) / (len(samples) + len(spans))
    assert per_event < 20e-6, f"{per_event * 1e6:.1f} us per event"
    assert att.advance(T0 + 40 * S) == []


def test_xid_table_covers_the_common_xids() -> None:
    for xid in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert xid in XID_INFO and XID_INFO[xid].description
    assert xid_description(79) == "XID 79 (GPU has fallen off the bus)"
    assert xid_description(999) == "XID 999"
    assert {XID_INFO[x].cause for x in (48, 63, 64, 94, 95)} == {"gpu_ecc"}
    assert XID_INFO[74].cause == "nvlink" and XID_INFO[79].cause == "gpu_xid"


# ==================================================================================== simulator


from rankscope.simulation import faults  # noqa: E402 - the labelled fault simulator

_FAILURE_COMM = {"watchdog_timeout", "nccl_error", "remote_process_exited", "process_group_abort"}


@dataclass
class SuiteResult:
    name: str
    scenario: str
    terminal: bool
    errors: list[str]
    latency_s: float | None = None
    symptom_recall: float | None = None


def _is_failure_signal(e: Envelope) -> bool:
    """The design's failure signals: exception spans, NCCL errors, the scheduler failing the job."""
    if isinstance(e, SpanEvent):
        return e.payload.status == "error"
    if isinstance(e, CommEventEvent):
        p = e.payload
        return p.event_type in _FAILURE_COMM or (
            p.event_type == "net_ib_error" and "non-fatal" not in p.message
        )
    return isinstance(e, SchedulerEventEvent) and e.payload.event_type == "job_failed"


class _StandInHangDetector:
    """Stand-in for the lead's liveness detector (streams/analysis/liveness.py), so the
    no-abort hang, which has no failure signal at all, reaches the attributor the way it will in
    the worker: no step completes for 3 steps -> note the rank whose last span is oldest."""

    def __init__(self) -> None:
        self.last_step = -1
        self.rank_last: dict[int, tuple[int, str]] = {}
        self.done = False

    def observe(self, e: Event, ts: int) -> None:
        if isinstance(e, SpanEvent) and e.rank is not None and e.payload.status == "ok":
            self.rank_last[e.rank] = (ts, e.node)
            if e.payload.phase == "step":
                self.last_step = max(self.last_step, ts)
        elif isinstance(e, SchedulerEventEvent) and e.payload.event_type.startswith("job_"):
            self.done = e.payload.event_type != "job_started"

    def check(self, att: RootCauseAttributor, now: int) -> None:
        if not self.done and self.last_step > 0 and now - self.last_step > 3 * S:
            rank = min(self.rank_last, key=lambda r: self.rank_last[r][0])
            ts, node = self.rank_last[rank]
            att.note_hang(rank, node, ts, None)
            self.done = True


def _run_case(case: Any) -> SuiteResult:
    from rankscope.simulation.simulator import TrainingJobSimulator

    cfg = case.config
    stream, labels = faults.simulate_with_faults(cfg, case.faults)
    label = labels[0]
    # the TRUE skew from the label (the worker's clock-offset estimator supplies it later)
    skew = {label.skewed_node: label.skew_offset_ns} if label.skewed_node else {}
    # the worker reads the job's partition: node-level events of a node that left the job
    # carry another (empty) job id and are not in it
    events = [e for e in stream if e.job_id == cfg.job_id]
    events.sort(key=lambda e: e.ts - skew.get(e.node, 0))  # corrected-ts order (stable)
    att = RootCauseAttributor(cfg.cluster, cfg.job_id)
    sim = TrainingJobSimulator(cfg)
    for node in sim.node_names:  # what the lead wires from inventory/config
        att.note_node_address(node, sim.node_address(node))
    hang = _StandInHangDetector()
    incidents: list[Incident] = []
    first_signal: int | None = None
    now = -1
    for e in events:
        ts = e.ts - skew.get(e.node, 0)
        now = max(now, ts)
        att.observe(e, ts)
        hang.observe(e, ts)
        hang.check(att, now)
        if _is_failure_signal(e) and (first_signal is None or ts < first_signal):
            first_signal = ts
        incidents.extend(att.advance(now))
    late = att.flush(now)  # anything only the end of the stream would attribute
    name = case.name.split("/")[0]
    terminal = any(f.scenario in faults.TERMINAL_SCENARIOS for f in case.faults)
    res = SuiteResult(case.name, name, terminal, [])
    if not terminal:
        if incidents or late:
            res.errors.append(
                f"false positive: {[(i.cause_class, i.node) for i in incidents + late]}"
            )
        return res
    if not incidents:
        res.errors.append("no incident" + (" (only at end of stream)" if late else ""))
        return res
    if len({i.incident_id for i in incidents}) != 1:
        res.errors.append(f"{len({i.incident_id for i in incidents})} incidents for one cascade")
    inc, final = incidents[0], incidents[-1]
    expect: dict[str, Any] = {"cause_class": label.cause_class, "node": label.node}
    if label.gpu is not None:
        expect["gpu"] = label.gpu
    if label.rank is not None:
        expect["rank"] = label.rank
    if label.xid is not None:
        expect["xid"] = label.xid
    if label.hca_device is not None:
        expect["device"] = f"{label.hca_device}:{label.hca_port}"
    for k, v in expect.items():
        if getattr(inc, k) != v:
            res.errors.append(f"{k}: {getattr(inc, k)!r} != {v!r}")
    ref = first_signal if first_signal is not None else label.onset_ns
    assert ref is not None
    res.latency_s = (inc.attributed_ts - ref) / S
    if res.latency_s > 10:
        res.errors.append(f"attributed {res.latency_s:.1f} s after the first symptom")
    if label.symptom_ranks and label.failure_ns is not None:  # the waiters of a hang say nothing
        got = set(final.symptom_ranks)
        res.symptom_recall = len(got & set(label.symptom_ranks)) / len(label.symptom_ranks)
        if got - set(label.symptom_ranks):
            res.errors.append(
                f"symptom ranks not in the label: {sorted(got - set(label.symptom_ranks))[:8]}"
            )
    return res


SUITE_RANKS, SUITE_SEEDS = 64, (0, 1, 2)


def _suite_names() -> list[str]:
    return [c.name for c in faults.scenario_suite(SUITE_RANKS, SUITE_SEEDS)]


@pytest.fixture(scope="module")
def suite() -> dict[str, SuiteResult]:
    return {c.name: _run_case(c) for c in faults.scenario_suite(SUITE_RANKS, SUITE_SEEDS)}


@pytest.mark.parametrize("name", _suite_names())
def test_simulated_scenario_is_attributed_as_labelled(
    suite: dict[str, SuiteResult], name: str
) -> None:
    res = suite[name]
    assert not res.errors, res.errors


def test_simulated_suite_accuracy(
    suite: dict[str, SuiteResult], capsys: pytest.CaptureFixture[str]
) -> None:
    per: dict[str, list[SuiteResult]] = defaultdict(list)
    for r in suite.values():
        per[r.scenario].append(r)
    lines = [f"root-cause accuracy, {SUITE_RANKS} ranks, seeds {list(SUITE_SEEDS)}:"]
    for name, rs in per.items():
        ok = sum(not r.errors for r in rs)
        lat = [r.latency_s for r in rs if r.latency_s is not None]
        lat_s = f" latency max {max(lat):+.1f} s" if lat else ""
        lines.append(f"  {name:38s} {ok}/{len(rs)}{lat_s}")
    total = sum(not r.errors for r in suite.values())
    lines.append(f"  total {total}/{len(suite)}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    terminal = [r for r in suite.values() if r.terminal]
    assert sum(not r.errors for r in terminal) == len(terminal)
    recall = [r.symptom_recall for r in terminal if r.symptom_recall is not None]
    assert min(recall) == 1.0
