"""When the analysis stage flushes a quiet job (``streams/stages/analysis.py``).

A flush attributes whatever is still settling once a job's events stopped; it is the one
processing-time decision, so it must wait for the job's events still upstream: the events
partition read to its end, and the job's raw partition validated past the end it had when the
job went quiet (a job whose validating worker died is stuck, not quiet). The upstream here is an
in-memory stand-in for the raw partition's end and the group's committed offset; the broker
path of the same rule is exercised by tests/test_worker_rebalance.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from rankscope.schemas.derived import RecoveryInput
from rankscope.simulation.faults import scenario_suite, simulate_with_faults
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.shared import StageCounters, StageTopics

RAW = "p.raw.events:2"


@dataclass
class _Topic:
    sent: list[bytes] = field(default_factory=list)

    async def send(self, key: bytes, value: bytes) -> None:
        self.sent.append(value)


@dataclass
class _Upstream:
    """The raw partition: records appended (``end``) and validated (``committed``)."""

    end_offset: int = 10
    committed_offset: int = 10
    asked: list[str] = field(default_factory=list)

    async def end(self, where: str) -> int:
        self.asked.append(f"end {where}")
        return self.end_offset

    async def committed(self, where: str) -> int:
        self.asked.append(f"committed {where}")
        return self.committed_offset


def _stage(upstream: _Upstream) -> tuple[AnalysisStage, _Topic]:
    incidents = _Topic()
    topics = cast(StageTopics, type("T", (), {"detections": _Topic(), "incidents": incidents})())

    async def to_decider(_: RecoveryInput, __: str) -> None:
        return None

    config = StreamsConfig(bootstrap="unused:9092", analysis_flush_idle_s=5.0)
    stage = AnalysisStage(
        config, topics, StageCounters(), to_decider, highwater=lambda tp: 100, upstream=upstream
    )
    return stage, incidents


def _feed(stage: AnalysisStage, now: float) -> None:
    case = next(
        c for c in scenario_suite(16, [0], duration_s=30) if c.name == "gpu_fell_off_bus/s0"
    )
    events, _ = simulate_with_faults(case.config, case.faults)
    tp: Any = "events-0"
    for ev in events:
        stage.observe(ev, now, tp, RAW)
    stage.read(tp, 99)  # read to the events partition's end (highwater 100)


def test_a_quiet_job_is_flushed_once_its_raw_partition_was_validated_past_the_mark() -> None:
    upstream = _Upstream()
    stage, incidents = _stage(upstream)
    _feed(stage, now=0.0)
    (job,) = stage.analyzers

    async def ticks() -> None:
        await stage.tick(4.0)  # not quiet long enough
        assert upstream.asked == [] and job not in stage.flushed
        await stage.tick(5.0)  # quiet: note the raw partition's end
        assert upstream.asked == [f"end {RAW}"] and job not in stage.flushed
        await stage.tick(6.0)  # validated past it: the next tick may flush
        assert job not in stage.flushed
        await stage.tick(7.0)
        assert job in stage.flushed

    asyncio.run(ticks())
    assert incidents.sent, "the flush attributes the cascade"


def test_a_job_whose_raw_records_are_not_validated_yet_is_not_flushed() -> None:
    upstream = _Upstream(end_offset=50, committed_offset=10)  # a dead validator's backlog
    stage, _ = _stage(upstream)
    _feed(stage, now=0.0)
    (job,) = stage.analyzers

    async def ticks() -> None:
        for t in range(5, 40):
            await stage.tick(float(t))
        assert job not in stage.flushed  # stuck, not quiet
        upstream.committed_offset = 50  # the next owner validated the backlog ...
        await stage.tick(40.0)
        await stage.tick(41.0)
        assert job in stage.flushed

    asyncio.run(ticks())


def test_an_event_after_the_mark_starts_the_wait_again() -> None:
    upstream = _Upstream()
    stage, _ = _stage(upstream)
    _feed(stage, now=0.0)
    (job,) = stage.analyzers

    async def ticks() -> None:
        await stage.tick(5.0)
        assert job in stage.raw_mark
        _feed(stage, now=5.5)  # more of the job arrived: it is not quiet after all
        assert job not in stage.raw_mark
        await stage.tick(6.0)
        assert job not in stage.flushed

    asyncio.run(ticks())
