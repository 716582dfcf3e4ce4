"""Hand-built events for unit tests (the simulator has its own tests)."""

from __future__ import annotations

import itertools
import time

from rankscope.schemas.events import (
    CommEventEvent,
    GpuSampleEvent,
    HeartbeatEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from rankscope.schemas.payloads import CommEvent, GpuSample, Heartbeat, SchedulerEvent, Span

_ids = itertools.count(1)
NOW_NS = (time.time_ns() // 10**9) * 10**9


def eid() -> str:
    return f"evt{next(_ids):013d}"


def span(
    rank: int,
    end_ns: int,
    dur_s: float = 1.0,
    phase: str = "step",
    job: str = "job-1",
    step: int = 1,
    clock_offset_ns: int | None = None,
) -> SpanEvent:
    return SpanEvent(
        event_id=eid(),
        schema="span/1",
        kind="span",
        cluster="c1",
        job_id=job,
        node=f"node{rank // 8:03d}",
        rank=rank,
        local_rank=rank % 8,
        gpu=rank % 8,
        ts=end_ns,
        observed_ts=end_ns + 1000,
        clock_offset_ns=clock_offset_ns,
        payload=Span(
            name=phase,
            phase=phase,  # type: ignore[arg-type]
            trace_id=f"{step:032x}",
            span_id=f"{next(_ids):016x}",
            start_ns=end_ns - int(dur_s * 1e9),
            end_ns=end_ns,
            step=step,
            status="ok",
        ),
    )


def gpu_sample(rank: int, ts: int, util: float = 95.0, job: str = "job-1") -> GpuSampleEvent:
    return GpuSampleEvent(
        event_id=eid(),
        schema="gpu_sample/1",
        kind="gpu_sample",
        cluster="c1",
        job_id=job,
        node=f"node{rank // 8:03d}",
        rank=rank,
        gpu=rank % 8,
        ts=ts,
        observed_ts=ts,
        payload=GpuSample(gpu_uuid=f"GPU-{rank:08x}", sm_util_pct=util, power_w=600.0),
    )


def heartbeat(node: str, ts: int, seq: int = 1) -> HeartbeatEvent:
    return HeartbeatEvent(
        event_id=eid(),
        schema="heartbeat/1",
        kind="heartbeat",
        cluster="c1",
        node=node,
        ts=ts,
        observed_ts=ts,
        payload=Heartbeat(agent="test", seq=seq, interval_s=5.0),
    )


def scheduler(event_type: str, ts: int, job: str = "job-1") -> SchedulerEventEvent:
    return SchedulerEventEvent(
        event_id=eid(),
        schema="scheduler_event/1",
        kind="scheduler_event",
        cluster="c1",
        job_id=job,
        node="head",
        ts=ts,
        observed_ts=ts,
        payload=SchedulerEvent(source="simulator", event_type=event_type),  # type: ignore[arg-type]
    )


def comm(
    message: str,
    ts: int = NOW_NS,
    job: str = "job-1",
    node: str = "node001",
    rank: int = 1,
    peer: str = "",
    event_type: str = "nccl_warn",
) -> CommEventEvent:
    return CommEventEvent(
        event_id=eid(),
        schema="comm_event/1",
        kind="comm_event",
        cluster="c1",
        job_id=job,
        node=node,
        rank=rank,
        ts=ts,
        observed_ts=ts,
        payload=CommEvent(
            source="nccl",
            event_type=event_type,  # type: ignore[arg-type]
            message=message,
            peer=peer,
        ),
    )
