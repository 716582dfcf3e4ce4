"""NVIDIA XID knowledge for attribution: text, cause class, strength, fatal, catalogue bucket.

Why a module: the XID table is a fact about GPUs, not about cascades; it is read from NVIDIA's
catalogue (``schemas/xid_catalogue.yaml``, shared with the collectors and the recovery policy),
so it changes when the catalogue does, not when the attribution rules do.
"""

from __future__ import annotations

from typing import NamedTuple

from rankscope.schemas.derived import CauseClass
from rankscope.schemas.xid_catalogue import xid_catalogue

__all__ = ["UNKNOWN_XID", "XID_INFO", "XidInfo", "xid_description"]


class XidInfo(NamedTuple):
    """What an XID means for attribution: its text, class, strength, and whether it is fatal."""

    description: str
    cause: CauseClass
    strength: float
    #: always ends the process on that GPU, so it is itself a failure signal
    fatal: bool
    #: the catalogue's immediate-action bucket (RESTART_APP, RESET_GPU, RESTART_BM, ...)
    bucket: str = ""


def _info() -> dict[int, XidInfo]:
    out: dict[int, XidInfo] = {}
    for code, entry in xid_catalogue().items():
        cause, strength, fatal = entry.attribution
        out[code] = XidInfo(entry.description, cause, strength, fatal, entry.bucket)
    return out


#: Every code of NVIDIA's XID catalogue. XIDs 13/31/43 are usually an application bug surfacing
#: on the GPU (weaker than the exception span they come with); 45 is the driver cleaning up after
#: a killed process (a consequence, e.g. of an OOM kill); 92 is ECC-related, so it maps to gpu_ecc.
XID_INFO: dict[int, XidInfo] = _info()
#: an XID not in the catalogue: a GPU fault of middling strength that does not trigger by itself
UNKNOWN_XID = XidInfo("", "gpu_xid", 0.6, False)


def xid_description(xid: int) -> str:
    """Human text for an XID ("XID 79 (GPU has fallen off the bus)")."""
    info = XID_INFO.get(xid)
    return f"XID {xid} ({info.description})" if info else f"XID {xid}"
