"""The right answers: one label per fault of a run, and the label file that records a run.

Why a module of its own: labels are what every detector and the root-cause stage are scored
against (``rankscope eval``, the analysis-suite tests), so their shape, what each scenario's
answer is (outcome, cause class, XID) and the file format are defined once, apart from the
machinery that produces them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas.derived import CauseClass, StragglerClass
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.fault_specs import Fault, ScenarioName

__all__ = [
    "OUTCOMES",
    "FaultLabel",
    "LabelCause",
    "LabelFile",
    "Outcome",
    "read_labels",
    "write_labels",
]


Outcome = Literal["root_cause", "straggler", "hang", "unresponsive_node", "none"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
#: what a label names as the true cause: an incident's cause class, or a straggler's class for the
#: faults that only slow a job down (both declared once, in the event contracts)
LabelCause = CauseClass | StragglerClass


# ==================================================================================== labels


class FaultLabel(BaseModel):
    """The right answer for one fault of one run (true times, never skewed ones).

    ``fault_ranks``: ranks the fault hits directly (the dead/slow/hung rank, a killed node's
    ranks). ``symptom_ranks``: ranks that only show the consequence (NCCL timeouts or errors,
    error spans, waiting longer on a straggler). ``collective_seq``: PyTorch's SeqNum of the
    collective that never completed (= the ``collective.seq`` span attribute of that step).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: ScenarioName
    cluster: str
    job_id: str
    seed: int
    onset_ns: int | None
    outcome: Outcome
    cause_class: LabelCause | None = None
    node: str | None = None
    gpu: int | None = None
    rank: int | None = None
    hca_device: str | None = None
    hca_port: int | None = None
    xid: int | None = None
    fault_ranks: list[int] = Field(default_factory=list)
    symptom_ranks: list[int] = Field(default_factory=list)
    collective_op: str | None = None
    collective_seq: int | None = None
    step: int | None = None
    failure_ns: int | None = Field(default=None, description="True time of job_failed.")
    skewed_node: str | None = None
    skew_offset_ns: int | None = None
    modifiers: list[str] = Field(default_factory=list)
    details: dict[str, str | int | float | bool] = Field(default_factory=dict)


class LabelFile(BaseModel):
    """One run's label file: what was simulated and the answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    cluster: str
    job_id: str
    config: SimulationConfig | None = None
    faults: list[Fault] = Field(default_factory=list)
    labels: list[FaultLabel]


def write_labels(
    path: str | Path,
    labels: Sequence[FaultLabel],
    *,
    config: SimulationConfig | None = None,
    faults: Sequence[Fault] = (),
) -> Path:
    """Write one run's labels (and, for reproduction, its config and fault specs) as JSON."""
    if not labels:
        raise ValueError("a run has at least one label")
    out = Path(path)
    doc = LabelFile(
        cluster=labels[0].cluster,
        job_id=labels[0].job_id,
        config=config,
        faults=list(faults),
        labels=list(labels),
    )
    out.write_text(doc.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return out


def read_labels(path: str | Path) -> LabelFile:
    return LabelFile.model_validate_json(Path(path).read_text(encoding="utf-8"))


#: What the detectors should say per scenario (outcome, cause class, XID).
_ANSWER: dict[str, dict[str, Any]] = {
    "gpu_fell_off_bus": {"outcome": "root_cause", "cause_class": "gpu_xid", "xid": 79},
    "ecc_dbe": {"outcome": "root_cause", "cause_class": "gpu_ecc", "xid": 48},
    "nvlink_error": {"outcome": "root_cause", "cause_class": "nvlink", "xid": 74},
    "ib_link_flap": {"outcome": "root_cause", "cause_class": "ib_link"},
    "thermal_straggler": {"outcome": "straggler", "cause_class": "thermal"},
    "input_straggler": {"outcome": "straggler", "cause_class": "input_pipeline"},
    "hang": {"outcome": "hang", "cause_class": "hang"},
    "node_unresponsive": {"outcome": "unresponsive_node", "cause_class": "node_unresponsive"},
    "preemption": {"outcome": "root_cause", "cause_class": "scheduler_preemption"},
    "host_oom": {"outcome": "root_cause", "cause_class": "host_oom"},
    "config_drift": {"outcome": "straggler", "cause_class": "config_drift"},
    "noise": {"outcome": "none", "cause_class": None},
}
