"""A job against its reference baseline (issue 19): the live profile and the ``throughput_gap``.

Why the profile is frozen: a job's profile is measured on its first ``profile_steps`` finalised
steps (after ``skip_steps`` of warm-up) and never changes after, so whether the baseline was read
before those steps, after them, or after a restart, the comparison sees the same numbers and
gives the same finding (same id: job and baseline, so a re-emission rewrites the row). Which
steps count, and the configuration seen until then, follow from the event-time order the job's
analyzer feeds them in, never from when the worker read them.

The comparison (:func:`compare`) is pure: the throughput gap is ``1 - baseline step / job step``
(or the samples/tokens rates where both profiles have them); above ``margin`` it names the phases
whose slowdown accounts for the gap (ranked by their share of the step-time difference) and every
configuration setting that differs.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rankscope.schemas.baselines import (
    ATTR_GLOBAL_BATCH,
    ATTR_MODEL,
    ATTR_SAMPLES,
    ATTR_TOKENS,
    PROFILE_PHASES,
    Baseline,
    ConfigFingerprint,
    JobProfile,
    ModelKey,
    PhaseStat,
    nccl_env_of,
)
from rankscope.schemas.derived import Detection
from rankscope.schemas.events import Event, GpuSampleEvent, NodeInventoryEvent, SpanEvent
from rankscope.streams.analysis.steps import StepStats

#: GPU samples kept for the clock and power medians (the first ones: bounded, deterministic)
_MAX_SAMPLES = 4096


class BaselineConfig(BaseModel):
    margin: float = Field(default=0.05, gt=0, lt=1, description="Gap above which it is a finding.")
    skip_steps: int = Field(default=2, ge=0, description="Warm-up steps left out of the profile.")
    profile_steps: int = Field(default=20, ge=3, description="Steps the profile is measured on.")
    #: a phase is named when it accounts for at least this share of the step-time difference
    min_phase_share: float = Field(default=0.2, gt=0, le=1)


def _stat(values: list[float]) -> PhaseStat:
    if len(values) < 2:
        return PhaseStat(median_s=values[0] if values else 0.0)
    q1, _, q3 = statistics.quantiles(values, n=4)
    return PhaseStat(median_s=statistics.median(values), spread_s=max(0.0, q3 - q1))


def _majority(values: list[str]) -> str:
    return Counter(v for v in values if v).most_common(1)[0][0] if any(values) else ""


@dataclass
class ProfileTracker:
    """One job's profile, built from the analyzer's step joins and the events it sees in
    event-time order; frozen once ``profile_steps`` steps are in."""

    cluster: str
    job_id: str
    config: BaselineConfig = field(default_factory=BaselineConfig)
    steps_seen: int = 0
    per_step: list[dict[str, float]] = field(default_factory=list)  # seconds per phase + "step"
    ranks: int = 0
    first_ts: int | None = None
    frozen_ts: int | None = None
    model: str = ""
    global_batch: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    inventory: dict[str, NodeInventoryEvent] = field(default_factory=dict)
    sm_clocks: list[float] = field(default_factory=list)
    mem_clocks: list[float] = field(default_factory=list)
    power: list[float] = field(default_factory=list)
    samples_per_step: dict[int, float] = field(default_factory=dict)
    tokens_per_step: dict[int, float] = field(default_factory=dict)
    profile: JobProfile | None = None
    compared: set[str] = field(default_factory=set)  # baseline ids already judged

    @property
    def frozen(self) -> bool:
        return self.frozen_ts is not None

    def observe(self, ev: Event) -> None:
        """What configures the job: span attributes, inventory, GPU clocks and power."""
        if self.frozen_ts is not None:  # ``frozen``, without a property call per event
            return
        if isinstance(ev, SpanEvent):
            attrs = ev.payload.attributes
            if attrs:
                self._attributes(attrs, ev.payload.step)
        elif isinstance(ev, NodeInventoryEvent):
            self.inventory[ev.node] = ev
        elif isinstance(ev, GpuSampleEvent) and len(self.power) < _MAX_SAMPLES:
            p = ev.payload
            if p.sm_clock_mhz:
                self.sm_clocks.append(p.sm_clock_mhz)
            if p.mem_clock_mhz:
                self.mem_clocks.append(p.mem_clock_mhz)
            if p.power_w is not None:
                self.power.append(p.power_w)

    def _attributes(self, attrs: Mapping[str, object], step: int | None) -> None:
        model = attrs.get(ATTR_MODEL)
        if isinstance(model, str) and model and not self.model:
            self.model = model
        batch = attrs.get(ATTR_GLOBAL_BATCH)
        if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
            self.global_batch = self.global_batch or batch
        env = nccl_env_of(attrs)
        for k, v in env.items():
            self.env.setdefault(k, v)
        if step is not None:
            for attr, per_step in ((ATTR_SAMPLES, self.samples_per_step),
                                   (ATTR_TOKENS, self.tokens_per_step)):  # fmt: skip
                value = attrs.get(attr)
                if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                    per_step[step] = per_step.get(step, 0.0) + float(value)

    def on_step(self, stats: StepStats, step_end_ts: int) -> None:
        """One finalised step; the profile freezes at the ``profile_steps``-th one counted."""
        if self.frozen:
            return
        self.steps_seen += 1
        if self.steps_seen <= self.config.skip_steps or "step" not in stats.median_phase_ns:
            return
        self.per_step.append({k: v / 1e9 for k, v in stats.median_phase_ns.items()})
        self.ranks = max(self.ranks, len(stats.compute_ns))
        if self.first_ts is None:
            self.first_ts = step_end_ts
        if len(self.per_step) >= self.config.profile_steps:
            self.frozen_ts = step_end_ts
            self.profile = self._build()

    def _build(self) -> JobProfile | None:
        if not self.model or not self.per_step:
            return None  # no model/config key: nothing to compare with
        invs = [e.payload for e in self.inventory.values()]
        fingerprint = ConfigFingerprint(
            driver_version=_majority([i.driver_version for i in invs]),
            cuda_version=_majority([i.cuda_version for i in invs]),
            nccl_version=_majority([i.nccl_version for i in invs]),
            kernel=_majority([i.kernel for i in invs]),
            nccl_env=dict(sorted(self.env.items())),
            sm_clock_mhz=statistics.median(self.sm_clocks) if self.sm_clocks else None,
            mem_clock_mhz=statistics.median(self.mem_clocks) if self.mem_clocks else None,
            gpus_per_node=max((i.gpu_count for i in invs), default=0),
            nodes=len(self.inventory),
            hcas_per_node=max((len(i.hca_firmware) for i in invs), default=0),
        )
        return profile_of(
            self.cluster,
            self.job_id,
            ModelKey(
                model=self.model,
                ranks=max(1, self.ranks),
                gpu_model=_majority([i.gpu_model for i in invs]),
                global_batch=self.global_batch,
            ),
            self.per_step,
            fingerprint,
            power=self.power,
            samples=list(self.samples_per_step.values()),
            tokens=list(self.tokens_per_step.values()),
        )

    def findings(self, baselines: Mapping[str, Baseline], emitted_ns: int) -> list[Detection]:
        """The gap against this job's baseline, once per (job, baseline); [] until frozen."""
        profile = self.profile
        if profile is None:
            return []
        baseline = baselines.get(profile.model_key.key)
        if baseline is None or baseline.baseline_id in self.compared:
            return []
        self.compared.add(baseline.baseline_id)
        if baseline.profile.job_id == self.job_id:
            return []  # the reference itself
        assert self.first_ts is not None and self.frozen_ts is not None
        found = compare(profile, baseline, self.config, self.first_ts, self.frozen_ts, emitted_ns)
        return [] if found is None else [found]


def profile_of(
    cluster: str,
    job_id: str,
    key: ModelKey,
    per_step: list[dict[str, float]],
    config: ConfigFingerprint,
    power: list[float] | None = None,
    samples: list[float] | None = None,
    tokens: list[float] | None = None,
) -> JobProfile:
    """A profile from per-step phase medians (seconds; keys: phases and ``step``)."""
    phases = {
        p: _stat([s.get(p, 0.0) for s in per_step])
        for p in PROFILE_PHASES
        if any(p in s for s in per_step)
    }
    step = _stat([s["step"] for s in per_step])
    step_s = step.median_s
    collective = phases.get("collective", PhaseStat(median_s=0.0)).median_s

    def rate(per_step: list[float] | None) -> float | None:
        return statistics.median(per_step) / step_s if per_step and step_s > 0 else None

    return JobProfile(
        cluster=cluster,
        job_id=job_id,
        model_key=key,
        steps=len(per_step),
        phases=phases,
        step=step,
        comm_share=min(1.0, collective / step_s) if step_s > 0 else 0.0,
        power_w_per_gpu=statistics.median(power) if power else None,
        samples_per_s=rate(samples),
        tokens_per_s=rate(tokens),
        config=config,
    )


def throughput_gap(job: JobProfile, baseline: JobProfile) -> float:
    """How far below the baseline the job runs, as a share of the baseline's throughput:
    from samples or tokens per second where both have them, else from step time."""
    for attr in ("tokens_per_s", "samples_per_s"):
        mine, ref = getattr(job, attr), getattr(baseline, attr)
        if mine and ref:
            return 1.0 - float(mine) / float(ref)
    if job.step.median_s <= 0:
        return 0.0
    return 1.0 - baseline.step.median_s / job.step.median_s


def compare(
    job: JobProfile,
    baseline: Baseline,
    config: BaselineConfig,
    onset_ts: int,
    detected_ts: int,
    emitted_ns: int,
) -> Detection | None:
    """A ``throughput_gap`` finding when ``job`` runs more than ``config.margin`` below."""
    ref = baseline.profile
    gap = throughput_gap(job, ref)
    if gap <= config.margin:
        return None
    diff = job.step.median_s - ref.step.median_s
    deltas = {
        p: job.phases[p].median_s - ref.phases[p].median_s
        for p in PROFILE_PHASES
        if p in job.phases and p in ref.phases
    }
    ranked = sorted(deltas.items(), key=lambda kv: (-kv[1], kv[0]))
    named = [p for p, d in ranked if diff > 0 and d / diff >= config.min_phase_share]
    differences = ref.config.differences(job.config)
    evidence = [
        f"{p}: {ref.phases[p].median_s:.4f} s -> {job.phases[p].median_s:.4f} s "
        f"({d:+.4f} s, {d / diff:.0%} of the step-time difference)"
        for p, d in ranked
        if diff > 0
    ]
    evidence += [f"configuration differs: {d}" for d in differences]
    phases_text = ", ".join(named) or "no single phase"
    config_text = "; ".join(str(d) for d in differences[:6]) or "no configuration difference seen"
    details: dict[str, float | int | str] = {
        "gap_pct": round(gap * 100, 2),
        "baseline": baseline.name,
        "baseline_id": baseline.baseline_id,
        "baseline_job": ref.job_id,
        "key": job.model_key.key,
        "step_s": round(job.step.median_s, 6),
        "baseline_step_s": round(ref.step.median_s, 6),
        "phases": ",".join(named),
        "settings": ",".join(d.setting for d in differences),
    }
    for p, delta in ranked:
        details[f"delta_s.{p}"] = round(delta, 6)
    for d in differences[:40]:
        details[f"diff.{d.setting}"] = f"{d.baseline} -> {d.job}"
    return Detection(
        detection_id=f"{job.job_id}/throughput_gap/{baseline.baseline_id}",
        detection_type="throughput_gap",
        cluster=job.cluster,
        job_id=job.job_id,
        score=round(gap, 4),
        onset_ts=onset_ts,
        detected_ts=detected_ts,
        emitted_ts=emitted_ns,
        summary=(
            f"{job.job_id} runs {gap:.1%} below baseline {baseline.name!r} "
            f"(step {job.step.median_s:.3f} s vs {ref.step.median_s:.3f} s); the gap is in "
            f"{phases_text}; {config_text}"
        )[:2048],
        evidence=evidence[:64],
        details=dict(list(details.items())[:64]),
    )
