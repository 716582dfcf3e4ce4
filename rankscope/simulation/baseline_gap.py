"""Jobs with a known gap against a recorded baseline (issue 19): the truth the
``throughput_gap`` comparison is checked against.

Three jobs of the same model and configuration key (model, world size, GPU model, global batch):

* the **reference**, whose profile is recorded as the baseline (``rankscope baseline record``);
* a **slow** job whose collective takes ``gap`` of the step longer (a throughput ``gap`` below
  the reference) and whose NCCL environment differs in one setting (``NCCL_ALGO``): the finding
  must name the collective phase and that setting;
* a **within-margin** job, 2% slower with a harmless-looking difference (``NCCL_PROTO``): no
  finding.

The training process's side (what instrumented code sets) is the span attributes of
``schemas/baselines.py``: ``rankscope.model``, ``rankscope.global_batch``, ``rankscope.samples``
and the ``rankscope.env.NCCL_*`` of :func:`~rankscope.schemas.baselines.nccl_env_attributes`,
here on each rank's collective spans.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas import Event
from rankscope.schemas.baselines import (
    ATTR_GLOBAL_BATCH,
    ATTR_MODEL,
    ATTR_SAMPLES,
    nccl_env_attributes,
)
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.simulator import TrainingJobSimulator

__all__ = ["GapJob", "GapJobSimulator", "baseline_gap_jobs", "events_of", "publish_jobs"]

REFERENCE_ENV: dict[str, str] = {
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
}


class GapJob(BaseModel):
    """One job of the scenario and what the comparison must say about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str = Field(description="reference, slow or within_margin")
    config: SimulationConfig
    model: str
    global_batch: int
    nccl_env: dict[str, str]
    #: added to every step's all-reduce, as a share of the nominal step time
    collective_extra: float = 0.0
    #: what the finding must name (None: no finding)
    expect_phase: str | None = None
    expect_setting: str | None = None


class GapJobSimulator(TrainingJobSimulator):
    """A healthy job with the scenario's attributes on its collective spans and, optionally, a
    longer all-reduce (what a worse NCCL algorithm or protocol does to a fabric-bound step)."""

    def __init__(self, job: GapJob) -> None:
        super().__init__(job.config)
        self.job = job
        self._extra_ns = round(job.collective_extra * job.config.step_time_s * 1e9)
        per_rank = max(1, job.global_batch // job.config.ranks)
        self._attrs: dict[str, str | int | float | bool] = {
            ATTR_MODEL: job.model,
            ATTR_GLOBAL_BATCH: job.global_batch,
            ATTR_SAMPLES: per_rank,
            **nccl_env_attributes(job.nccl_env),
        }

    def collective_attributes(self, step: int) -> dict[str, str | int | float | bool]:
        return {**super().collective_attributes(step), **self._attrs}

    def collective_duration(self, step: int) -> int:
        return super().collective_duration(step) + self._extra_ns


def baseline_gap_jobs(
    start_ns: int,
    ranks: int = 16,
    duration_s: float = 40.0,
    gap: float = 0.10,
    within: float = 0.02,
    cluster: str = "sim",
    seed: int = 11,
) -> list[GapJob]:
    """The reference, the slow and the within-margin job, one after the other in event time.

    ``gap``: how far below the reference the slow job's throughput is (0.10: 10%), all of it in
    the collective; ``within``: the same for the job that stays within the margin."""
    jobs: list[GapJob] = []
    plan = (
        ("reference", 0.0, REFERENCE_ENV, None, None),
        ("slow", gap, {**REFERENCE_ENV, "NCCL_ALGO": "Tree"}, "collective", "NCCL_ALGO"),
        ("within_margin", within, {**REFERENCE_ENV, "NCCL_PROTO": "LL128"}, None, None),
    )
    t = start_ns
    for i, (role, slower, env, phase, setting) in enumerate(plan):
        config = SimulationConfig(
            cluster=cluster,
            job_id=f"gap-{role.replace('_', '-')}",
            ranks=ranks,
            duration_s=duration_s,
            step_time_s=1.0,
            seed=seed + i,
            start_ns=t,
            inventory=True,
        )
        jobs.append(
            GapJob(
                role=role,
                config=config,
                model="llama-3-8b",
                global_batch=1024,
                nccl_env=env,
                # throughput (1 - slower) of the reference: the step takes 1 / (1 - slower)
                collective_extra=1.0 / (1.0 - slower) - 1.0,
                expect_phase=phase,
                expect_setting=setting,
            )
        )
        t += int((duration_s + 5) * 1e9)
    return jobs


def events_of(job: GapJob) -> Iterator[Event]:
    """The job's events in the order its agents would publish them."""
    return GapJobSimulator(job).run()


def publish_jobs(bootstrap: str, topic_prefix: str, jobs: list[GapJob], speed: float = 0.0) -> int:
    """Publish ``jobs`` as the node agents would: ``speed`` > 0 plays each at that multiple of
    real time, 0 publishes as fast as possible (``--speed 0``). Returns the events published."""
    import time

    from rankscope.collectors.publisher import Publisher, PublisherConfig
    from rankscope.simulation.pacing import pace

    config = PublisherConfig(
        bootstrap=bootstrap, topic_prefix=topic_prefix, max_batch_event_span_s=1.0
    )
    n = 0
    with Publisher(config) as pub:
        for job in jobs:
            chunk: list[Event] = []
            flushed = time.monotonic()
            for ev in pace(events_of(job), speed):
                chunk.append(ev)
                if len(chunk) >= 5000 or (speed and time.monotonic() - flushed >= 0.05):
                    pub.publish(chunk)
                    n += len(chunk)
                    chunk = []
                    flushed = time.monotonic()
            pub.publish(chunk)
            n += len(chunk)
        pub.flush(120)
    return n
