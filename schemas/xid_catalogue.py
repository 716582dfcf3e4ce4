"""NVIDIA's XID catalogue, loaded from ``xid_catalogue.yaml``: one place for what an XID means.

Why data, not code: the catalogue is NVIDIA's (it grows with each GPU generation, 144-161 came
with GB200), and three stages read it: the collectors stamp the resolution bucket on each
``gpu_event``, root cause takes cause class / strength / fatal from it, and the recovery policy's
rules match on the bucket. Updating the file updates all three.

Attribution for codes without explicit values follows the bucket (``ATTRIBUTION_BY_BUCKET``):
the catalogue's immediate action says how far the damage goes (restart the app < reset the GPU <
reboot), which is what root cause needs to know about a precursor.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rankscope.schemas.derived import CauseClass

__all__ = [
    "ATTRIBUTION_BY_BUCKET",
    "CATALOGUE_PATH",
    "SEVERITY_BY_BUCKET",
    "XID_BUCKETS",
    "XidBucket",
    "XidCatalogue",
    "XidEntry",
    "load_xid_catalogue",
    "xid_bucket",
    "xid_catalogue",
]

CATALOGUE_PATH = Path(__file__).with_name("xid_catalogue.yaml")

#: The catalogue's "Resolution Bucket (Immediate Action)" names.
XidBucket = Literal[
    "RESTART_APP",
    "RESET_GPU",
    "RESTART_BM",
    "RESTART_VM",
    "WORKFLOW_XID_45",
    "WORKFLOW_XID_48",
    "WORKFLOW_NVLINK_ERR",
    "WORKFLOW_NVLINK5_ERR",
    "CONTACT_SUPPORT",
    "CHECK_MECHANICALS",
    "CHECK_UVM",
    "UPDATE_SWFW",
    "XID_154",
    "IGNORE",
]
XID_BUCKETS: frozenset[str] = frozenset(get_args(XidBucket))
Severity = Literal["critical", "warning", "info"]

#: Severity from the bucket: anything needing more than an app restart (or a person) is
#: critical, an app restart or software fix a warning, IGNORE info. Unused codes are info.
SEVERITY_BY_BUCKET: dict[str, Severity] = {
    "RESET_GPU": "critical",
    "RESTART_BM": "critical",
    "RESTART_VM": "critical",
    "WORKFLOW_XID_48": "critical",
    "WORKFLOW_NVLINK_ERR": "critical",
    "WORKFLOW_NVLINK5_ERR": "critical",
    "CHECK_MECHANICALS": "critical",
    "CONTACT_SUPPORT": "critical",
    "RESTART_APP": "warning",
    "UPDATE_SWFW": "warning",
    "CHECK_UVM": "warning",
    "XID_154": "warning",
    "WORKFLOW_XID_45": "warning",
    "IGNORE": "info",
}

#: (strength, fatal) for a code the file gives no values for. A GPU that needs a reset or a
#: reboot ended the process on it (fatal, near-certain cause); CONTACT_SUPPORT / mechanical codes
#: keep the old "unknown XID" weight (0.6, not a trigger); an app-restart code is usually the
#: application's fault (0.35, like XID 13/31); 154 only restates another XID's recovery action
#: (0.3); 45 is cleanup after another failure (0.15); IGNORE is noise (0.05).
ATTRIBUTION_BY_BUCKET: dict[str, tuple[float, bool]] = {
    "RESET_GPU": (0.95, True),
    "RESTART_BM": (0.95, True),
    "RESTART_VM": (0.95, True),
    "WORKFLOW_XID_48": (0.95, True),
    "WORKFLOW_NVLINK_ERR": (0.95, True),
    "WORKFLOW_NVLINK5_ERR": (0.95, True),
    "CONTACT_SUPPORT": (0.6, False),
    "CHECK_MECHANICALS": (0.6, False),
    "RESTART_APP": (0.35, False),
    "UPDATE_SWFW": (0.35, False),
    "CHECK_UVM": (0.35, False),
    "XID_154": (0.3, False),
    "WORKFLOW_XID_45": (0.15, False),
    "IGNORE": (0.05, False),
}


class XidEntry(BaseModel):
    """One catalogue row plus our attribution (explicit in the file, else from the bucket)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: int = Field(ge=1, le=65535)
    mnemonic: str = Field(min_length=1, max_length=128)
    description: str = Field(min_length=1, max_length=256)
    bucket: XidBucket
    severity: Severity
    cause: CauseClass = "gpu_xid"
    strength: float | None = Field(default=None, ge=0, le=1)
    fatal: bool | None = None

    @property
    def unused(self) -> bool:
        return self.description == "Unused"

    @property
    def attribution(self) -> tuple[CauseClass, float, bool]:
        """(cause class, strength, fatal) for root cause."""
        strength, fatal = ATTRIBUTION_BY_BUCKET[self.bucket]
        return (
            self.cause,
            strength if self.strength is None else self.strength,
            fatal if self.fatal is None else self.fatal,
        )


class XidCatalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    xids: list[XidEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> XidCatalogue:
        codes = [e.code for e in self.xids]
        dupes = sorted({c for c in codes if codes.count(c) > 1})
        if dupes:
            raise ValueError(f"duplicate XID codes: {dupes}")
        return self

    @property
    def by_code(self) -> dict[int, XidEntry]:
        return {e.code: e for e in self.xids}


def load_xid_catalogue(path: Path | None = None) -> XidCatalogue:
    """Read and validate a catalogue file (ValueError with the reason if it is malformed)."""
    doc = yaml.safe_load((path or CATALOGUE_PATH).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("an XID catalogue is a YAML mapping with 'version' and 'xids'")
    return XidCatalogue.model_validate(doc)


@cache
def xid_catalogue() -> dict[int, XidEntry]:
    """The shipped catalogue by code, read once per process."""
    return load_xid_catalogue().by_code


def xid_bucket(xid: int | None) -> str:
    """The catalogue's immediate-action bucket for an XID; '' when none or not catalogued."""
    if xid is None:
        return ""
    entry = xid_catalogue().get(xid)
    return entry.bucket if entry else ""
