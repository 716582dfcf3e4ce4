"""NVIDIA XID knowledge: what each XID means for attribution (text, cause class, strength, fatal).

Why a module: the XID table is a fact about GPUs, not about cascades; the signal reader, the
narrative and the tests read it, and it changes when NVIDIA's catalogue does, not when the
attribution rules do.
"""

from __future__ import annotations

from typing import NamedTuple

from rankscope.schemas.derived import CauseClass

__all__ = ["UNKNOWN_XID", "XID_INFO", "XidInfo", "xid_description"]


class XidInfo(NamedTuple):
    """What an XID means for attribution: its text, class, strength, and whether it is fatal."""

    description: str
    cause: CauseClass
    strength: float
    #: always ends the process on that GPU, so it is itself a failure signal
    fatal: bool


#: The XIDs seen in practice on training clusters (NVIDIA's XID catalogue). XIDs 13/31/43 are
#: usually an application bug surfacing on the GPU (weaker than the exception span they come
#: with); 45 is the driver cleaning up after a killed process (a consequence, e.g. of an OOM
#: kill); 92 is ECC-related, so it maps to gpu_ecc.
XID_INFO: dict[int, XidInfo] = {
    13: XidInfo("Graphics Engine Exception, usually an application fault", "gpu_xid", 0.35, False),
    31: XidInfo("GPU memory page fault, usually an application fault", "gpu_xid", 0.35, False),
    43: XidInfo("GPU stopped processing, a channel was reset", "gpu_xid", 0.3, False),
    45: XidInfo("Preemptive cleanup, due to previous errors", "gpu_xid", 0.15, False),
    48: XidInfo("Double Bit ECC Error", "gpu_ecc", 1.0, True),
    61: XidInfo("Internal micro-controller breakpoint/warning", "gpu_xid", 0.8, False),
    62: XidInfo("Internal micro-controller halt", "gpu_xid", 0.95, True),
    63: XidInfo("ECC page retirement or row remapping recording event", "gpu_ecc", 0.5, False),
    64: XidInfo("ECC page retirement or row remapper recording failure", "gpu_ecc", 0.85, False),
    74: XidInfo("NVLink Error", "nvlink", 1.0, True),
    79: XidInfo("GPU has fallen off the bus", "gpu_xid", 1.0, True),
    92: XidInfo("High single-bit ECC error rate", "gpu_ecc", 0.3, False),
    94: XidInfo("Contained ECC error", "gpu_ecc", 0.9, True),
    95: XidInfo("Uncontained ECC error", "gpu_ecc", 1.0, True),
    119: XidInfo("GSP RPC timeout", "gpu_xid", 0.95, True),
    120: XidInfo("GSP error", "gpu_xid", 0.95, True),
}
#: an XID not in the table: a GPU fault of middling strength that does not trigger by itself
UNKNOWN_XID = XidInfo("", "gpu_xid", 0.6, False)


def xid_description(xid: int) -> str:
    """Human text for an XID ("XID 79 (GPU has fallen off the bus)")."""
    info = XID_INFO.get(xid)
    return f"XID {xid} ({info.description})" if info else f"XID {xid}"
