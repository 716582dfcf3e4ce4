"""A training run of several job attempts, with checkpoints, and its known cost (issue 19).

Why a module of its own: the run queries (``run_attempts``, ``run_cost``, ``run_losses``,
``run_goodput``, ``efficiency``) need a run whose truth is known to the digit: attempts that fail,
are preempted and requeued, restart from their last checkpoint and redo the steps since, then
complete. The step simulator models one job's phases; here only what the accounting reads is
made (step spans with throughput attributes, checkpoint spans, GPU samples with energy counters,
scheduler events carrying ``run_id`` and ``attempt``, node inventory), and :func:`run_truth`
computes from the same timeline what the queries must answer.

An attempt starts (``job_started``), spends ``startup_s`` before its first step, resumes at the
step after the last checkpoint saved so far, and runs ``steps`` ok steps of ``step_time_s``; a
checkpoint of step k (k a multiple of ``checkpoint_every``) is a span over the last 2 s of step k.
An attempt that fails (or is OOM-killed) then fails one step; one that does not complete ends
``tail_s`` after that (a preempted one stops stepping), one that completes 5 s after its last
step. Every GPU samples at the attempt's start and end, every
``sample_interval_s`` and at each checkpoint's end, its energy counter rising at ``power_w``.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas.events import (
    Event,
    GpuSampleEvent,
    NodeInventoryEvent,
    SchedulerEventEvent,
    SpanEvent,
)
from rankscope.schemas.payloads import (
    GpuSample,
    NodeInventory,
    SchedulerEvent,
    Span,
    inventory_fingerprint,
)

__all__ = ["AttemptSpec", "RunScenario", "RunTruth", "run_truth", "simulate_run"]

S = 1_000_000_000
Outcome = Literal["job_completed", "job_failed", "preempted", "oom_killed"]


class AttemptSpec(BaseModel):
    """One job attempt: its job id (a requeue repeats the previous one), ok steps, how it ends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str = Field(min_length=1, max_length=256)
    steps: int = Field(ge=1, le=1_000_000)
    outcome: Outcome


def _default_attempts() -> list[AttemptSpec]:
    return [
        AttemptSpec(job_id="sim-run-1", steps=120, outcome="job_failed"),
        AttemptSpec(job_id="sim-run-1", steps=80, outcome="preempted"),  # requeued: same job id
        AttemptSpec(job_id="sim-run-1-b", steps=150, outcome="job_completed"),  # a dependent job
    ]


class RunScenario(BaseModel):
    """The run to simulate; the defaults are a failure, a requeue after a preemption and a
    completion on 4 GPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(default="sim-run-1", min_length=1, max_length=256)
    cluster: str = Field(default="sim", min_length=1, max_length=256)
    ranks: int = Field(default=4, ge=1, le=4096)
    gpus_per_node: int = Field(default=8, ge=1, le=64)
    node_prefix: str = Field(default="run-node", min_length=1, max_length=200)
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    model: str = "llama-7b"
    step_time_s: int = Field(default=10, ge=3)
    startup_s: int = Field(default=20, ge=0)
    checkpoint_every: int = Field(default=50, ge=1)
    tail_s: int = Field(default=60, ge=0, description="From the failed step to the end event.")
    gap_s: int = Field(default=300, ge=0, description="Between an attempt's end and the next.")
    sample_interval_s: int = Field(default=30, ge=1)
    power_w: int = Field(default=500, ge=1)
    samples_per_step: int = Field(default=256, ge=0)
    tokens_per_step: int = Field(default=256 * 2048, ge=0)
    start_ns: int | None = Field(default=None, ge=0, description="Default: 3 h ago, whole s.")
    attempts: list[AttemptSpec] = Field(default_factory=_default_attempts, min_length=1)


@dataclass(frozen=True)
class _Attempt:
    number: int
    spec: AttemptSpec
    start_s: int  # relative to the run's start
    end_s: int
    first_step: int
    last_step: int
    saved_step: int  # the last step saved when the attempt ended
    saved_until_s: int  # when that checkpoint was written (the attempt's start if it wrote none)
    checkpoints: tuple[tuple[int, int], ...]  # (step, end s)

    @property
    def completed(self) -> bool:
        return self.spec.outcome == "job_completed"


def _timeline(s: RunScenario) -> list[_Attempt]:
    out: list[_Attempt] = []
    t, saved = 0, 0
    for n, spec in enumerate(s.attempts, 1):
        first = saved + 1
        steps_start = t + s.startup_s
        ckpts = tuple(
            (k, steps_start + (k - first + 1) * s.step_time_s)
            for k in range(first, first + spec.steps)
            if k % s.checkpoint_every == 0
        )
        last = first + spec.steps - 1
        steps_end = steps_start + spec.steps * s.step_time_s
        end = steps_end + 5 if spec.outcome == "job_completed" else steps_end + 3 + s.tail_s
        saved_until = ckpts[-1][1] if ckpts else t
        saved = ckpts[-1][0] if ckpts else saved
        out.append(_Attempt(n, spec, t, end, first, last, saved, saved_until, ckpts))
        t = end + s.gap_s
    return out


@dataclass(frozen=True)
class RunTruth:
    """What the run queries must answer for the scenario (``run_cost`` at ``price``)."""

    attempts: int
    failed_attempts: int
    completed_job_id: str
    gpu_hours: float
    energy_kwh: float
    recomputed_steps: int
    lost_gpu_hours: float
    lost_energy_kwh: float


def run_truth(s: RunScenario) -> RunTruth:
    """The scenario's accounting, by the rules of ``sinks/sql/run_attempts.sql``."""
    atts = _timeline(s)
    gpu_s = sum(s.ranks * (a.end_s - a.start_s) for a in atts)
    lost_s = sum(s.ranks * (a.end_s - a.saved_until_s) for a in atts if not a.completed)
    recomputed = sum(a.last_step - a.saved_step for a in atts if not a.completed)
    done = [a for a in atts if a.completed]
    return RunTruth(
        attempts=len(atts),
        failed_attempts=len(atts) - len(done),
        completed_job_id=done[-1].spec.job_id if done else "",
        gpu_hours=round(gpu_s / 3600, 4),
        energy_kwh=round(gpu_s * s.power_w / 3.6e6, 4),
        recomputed_steps=recomputed,
        lost_gpu_hours=round(lost_s / 3600, 4),
        lost_energy_kwh=round(lost_s * s.power_w / 3.6e6, 4),
    )


class _Ids:
    """Event and span ids derived from the scenario, so a rerun publishes the same events."""

    def __init__(self, seed: str) -> None:
        self.seed, self.n = seed, 0

    def next(self, size: int) -> str:
        self.n += 1
        return hashlib.sha256(f"{self.seed}|{self.n}".encode()).hexdigest()[:size]


def simulate_run(s: RunScenario | None = None) -> list[Event]:
    """Every event of the run, in event-time order."""
    s = s or RunScenario()
    t0 = s.start_ns if s.start_ns is not None else (time.time_ns() // S - 3 * 3600) * S
    ids = _Ids(f"{s.cluster}|{s.run_id}|{t0}")

    def env(ts_s: float, job: str, rank: int | None) -> dict[str, object]:
        node = s.node_prefix + f"{(rank or 0) // s.gpus_per_node:03d}"
        ts = t0 + int(ts_s * S)
        gpu = None if rank is None else rank % s.gpus_per_node
        return {
            "event_id": f"run-{ids.next(24)}",
            "cluster": s.cluster,
            "job_id": job,
            "node": node,
            "rank": rank,
            "gpu": gpu,
            "ts": ts,
            "observed_ts": ts,
        }

    def span(job: str, rank: int, phase: str, step: int, a: float, b: float, ok: bool) -> Event:
        attrs: dict[str, str | int | float | bool] = {"rankscope.model": s.model}
        if phase == "step" and ok:
            attrs |= {
                "rankscope.samples": s.samples_per_step,
                "rankscope.tokens": s.tokens_per_step,
            }
        return SpanEvent(
            **env(b, job, rank),
            schema_id="span/1",
            kind="span",
            payload=Span(
                name=phase,
                phase=phase,
                trace_id=ids.next(32),
                span_id=ids.next(16),
                start_ns=t0 + int(a * S),
                end_ns=t0 + int(b * S),
                step=step,
                status="ok" if ok else "error",
                error_type="" if ok else "RuntimeError",
                attributes=attrs,
            ),
        )

    events: list[Event] = []
    nodes = -(-s.ranks // s.gpus_per_node)
    fields: dict[str, object] = {"gpu_model": s.gpu_model, "gpu_count": s.gpus_per_node}
    for i in range(nodes):
        events.append(
            NodeInventoryEvent(
                **env(0, "", i * s.gpus_per_node),
                schema_id="node_inventory/1",
                kind="node_inventory",
                payload=NodeInventory(**fields, fingerprint=inventory_fingerprint(fields)),
            )
        )
    energy_mj = [0] * s.ranks
    for a in _timeline(s):
        job = a.spec.job_id
        for etype, at in (("job_started", a.start_s), (a.spec.outcome, a.end_s)):
            events.append(
                SchedulerEventEvent(
                    **env(at, job, None),
                    schema_id="scheduler_event/1",
                    kind="scheduler_event",
                    payload=SchedulerEvent(
                        source="simulator",
                        event_type=etype,
                        run_id=s.run_id,
                        attempt=a.number,
                    ),
                )
            )
        steps_start = a.start_s + s.startup_s
        sample_at = set(range(a.start_s, a.end_s, s.sample_interval_s))
        sample_at |= {a.end_s} | {end for _, end in a.checkpoints}
        for rank in range(s.ranks):
            for k in range(a.first_step, a.last_step + 1):
                b = steps_start + (k - a.first_step + 1) * s.step_time_s
                events.append(span(job, rank, "step", k, b - s.step_time_s, b, True))
            for k, end in a.checkpoints:
                events.append(span(job, rank, "checkpoint", k, end - 2, end, True))
            if a.spec.outcome in ("job_failed", "oom_killed"):  # a preemption fails no step
                b = steps_start + (a.last_step - a.first_step + 1) * s.step_time_s
                events.append(span(job, rank, "step", a.last_step + 1, b, b + 3, False))
            base = energy_mj[rank]
            for at in sorted(sample_at):
                mj = base + (at - a.start_s) * s.power_w * 1000
                events.append(
                    GpuSampleEvent(
                        **env(at, job, rank),
                        schema_id="gpu_sample/1",
                        kind="gpu_sample",
                        payload=GpuSample(
                            gpu_uuid=f"GPU-{s.run_id}-{rank}",
                            sm_util_pct=90,
                            power_w=s.power_w,
                            energy_mj=mj,
                        ),
                    )
                )
            # between attempts the GPU idles, its counter keeps rising a little
            energy_mj[rank] = base + (a.end_s - a.start_s) * s.power_w * 1000 + 1_000_000
    events.sort(key=lambda e: e.ts)
    return events
