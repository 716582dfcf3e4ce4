"""The attributor's knobs (a strict, frozen pydantic model) and their event-time spans in ns.

Why a module: the config is what the worker's job config embeds and what operators tune; it is
read by every other part, so it lives apart from the code that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas.derived import CauseClass
from rankscope.streams.analysis.rootcause.records import NS
from rankscope.streams.analysis.rootcause.scoring import DEFAULT_CLASS_WEIGHTS

__all__ = ["RootCauseConfig", "Windows"]


class RootCauseConfig(BaseModel):
    """Knobs of the attributor; every default is explained by the package docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lookback_s: float = Field(
        default=120.0, gt=0, description="Event time before the first failure signal searched."
    )
    settle_s: float = Field(
        default=5.0,
        ge=0,
        description="Event time after the first failure signal to wait for more evidence "
        "(late arrivals, clock error) before attributing.",
    )
    end_grace_s: float = Field(
        default=0.0,
        ge=0,
        description="Attribute at most this long after the scheduler ends the job: nothing of "
        "the job arrives after that to advance its event time.",
    )
    after_tolerance_s: float = Field(
        default=3.0, ge=0, description="A precursor this far after the first signal still counts."
    )
    after_factor: float = Field(default=0.6, ge=0, le=1)
    decay_after_s: float = Field(default=30.0, ge=0)
    decay_max: float = Field(default=0.2, ge=0, le=1)
    survived_factor: float = Field(
        default=0.3, ge=0, le=1, description="For a precursor the job made progress after."
    )
    corroboration_s: float = Field(default=3.0, ge=0)
    node_silence_s: float = Field(
        default=3.0,
        gt=0,
        description="A node with no event for this long while the others report is silent "
        "(>= 3 GPU sample intervals).",
    )
    cascade_gap_s: float = Field(
        default=660.0,
        gt=0,
        description="Without a restart or progress, a failure signal this long after the last "
        "one opens a new cascade; >= the NCCL watchdog timeout (600 s in production) so the "
        "survivors' timeouts join the incident of the death they follow.",
    )
    class_weights: dict[CauseClass, float] = Field(
        default_factory=lambda: dict(DEFAULT_CLASS_WEIGHTS)
    )
    trigger_on_fatal_precursors: bool = True
    emit_revisions: bool = True
    reattribute: bool = Field(
        default=True,
        description="A revision may replace a weak primary (inferred stall or silence, "
        "communication error) by an event read later that explains the cascade better.",
    )
    max_revisions: int = Field(default=8, ge=0)
    max_history: int = Field(default=4096, ge=16, description="Candidate precursors kept.")
    max_evidence: int = Field(default=256, ge=8, le=256)
    node_addresses: dict[str, str] = Field(
        default_factory=dict,
        description="Peer address (as NCCL logs it, e.g. an IPoIB address) -> node name.",
    )


@dataclass(frozen=True, slots=True)
class Windows:
    """The config's spans of event time in integer nanoseconds, converted once per attributor."""

    lookback: int
    settle: int
    after: int
    end_grace: int
    cascade_gap: int
    decay_after: int
    corroboration: int
    node_silence: int

    @classmethod
    def of(cls, cfg: RootCauseConfig) -> Windows:
        return cls(
            lookback=round(cfg.lookback_s * NS),
            settle=round(cfg.settle_s * NS),
            after=round(cfg.after_tolerance_s * NS),
            end_grace=round(cfg.end_grace_s * NS),
            cascade_gap=round(cfg.cascade_gap_s * NS),
            decay_after=round(cfg.decay_after_s * NS),
            corroboration=round(cfg.corroboration_s * NS),
            node_silence=round(cfg.node_silence_s * NS),
        )
