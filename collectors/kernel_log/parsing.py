"""One kernel-log message -> :class:`ParsedKernelLine` (pattern, XID/SXid code, PCI id), pure
and without I/O, plus the PCI address normalisation shared with the NVML mapping."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from rankscope.collectors.kernel_log.patterns import (
    AER_NO_RECOVER_RE,
    AER_RE,
    FALLEN_HEAD_RE,
    FALLEN_RE,
    FALLEN_TAIL,
    GPU_UUID_RE,
    GSP_TIMEOUT_PHRASES,
    MARKERS,
    SXID_RE,
    XID_RE,
)
from rankscope.schemas.payloads import GpuEventType

Pattern = Literal["xid", "sxid", "fallen_off_bus", "gsp_timeout", "aer", "gpu_uuid"]
PATTERNS: tuple[Pattern, ...] = ("xid", "sxid", "fallen_off_bus", "gsp_timeout", "aer", "gpu_uuid")

_PCI_PARTS = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)


def normalize_pci(text: str) -> str:
    """``0000:3B:00``, ``00000000:3b:00.0``, ``3b:00.0`` -> ``0000:3b:00.0`` (the kernel's
    ``dddd:bb:dd.f``); the function defaults to 0 (Xid lines omit it; a GPU is function 0).
    Returns ``""`` for anything that is not a PCI address."""
    m = _PCI_PARTS.match(text.strip())
    if m is None:
        return ""
    dom = int(m["dom"], 16) if m["dom"] else 0
    if dom > 0xFFFF:
        return ""
    return f"{dom:04x}:{m['bus'].lower()}:{m['dev'].lower()}.{m['fn'] or '0'}"


@dataclass(frozen=True)
class ParsedKernelLine:
    """What one matched kernel-log message says; fields empty/None when it does not say."""

    pattern: Pattern
    event_type: GpuEventType
    #: normalised ``dddd:bb:dd.f`` of the device the line is about ("" when not said)
    pci_bus_id: str
    message: str
    xid: int | None = None
    sxid: int | None = None
    pid: int | None = None
    process: str = ""
    #: ``GPU-...`` when the line itself names it (``NVRM: GPU at PCI:...: GPU-<uuid>``)
    gpu_uuid: str = ""
    #: AER only: corrected, uncorrected_fatal, uncorrected_nonfatal, no_recovery
    severity: str = ""


def _has_marker(text: str) -> bool:
    return any(m in text for m in MARKERS)


def _xid(text: str) -> ParsedKernelLine | None:
    m = XID_RE.search(text)
    if m is None:
        return None
    pid_text = m["pid"] or ""
    name = m["name"] or ""
    return ParsedKernelLine(
        pattern="xid",
        event_type="xid",
        pci_bus_id=normalize_pci(m["pci"]),
        message=text,
        xid=int(m["code"]),
        pid=int(pid_text) if pid_text.isdigit() else None,
        process="" if name == "<unknown>" else name,
    )


def _sxid(text: str) -> ParsedKernelLine | None:
    m = SXID_RE.search(text)
    if m is None:
        return None
    return ParsedKernelLine(
        pattern="sxid",
        event_type="other",
        pci_bus_id=normalize_pci(m["pci"]),
        message=text,
        sxid=int(m["code"]),
    )


def _fallen(text: str) -> ParsedKernelLine | None:
    if "fallen off the bus" not in text:
        return None
    m = FALLEN_RE.search(text) or FALLEN_HEAD_RE.search(text)
    if m is None:  # the tail line alone: FallenOffBusJoiner pairs it with its head
        return None
    return ParsedKernelLine(
        pattern="fallen_off_bus",
        event_type="gpu_unresponsive",
        pci_bus_id=normalize_pci(m["pci"]),
        message=text,
    )


def _gpu_uuid(text: str) -> ParsedKernelLine | None:
    m = GPU_UUID_RE.search(text)
    if m is None:
        return None
    return ParsedKernelLine(
        pattern="gpu_uuid",
        event_type="other",
        pci_bus_id=normalize_pci(m["pci"]),
        message=text,
        gpu_uuid=m["uuid"],
    )


def _gsp(text: str) -> ParsedKernelLine | None:
    if "NVRM" not in text:
        return None
    low = text.lower()
    if not any(w in low for w in GSP_TIMEOUT_PHRASES):
        return None
    return ParsedKernelLine(pattern="gsp_timeout", event_type="other", pci_bus_id="", message=text)


def _aer(text: str) -> ParsedKernelLine | None:
    if "AER" not in text or "NVRM" in text:
        return None
    m = AER_RE.search(text)
    if m is not None:
        # ``... error received: <source>`` names the device that reported the error (the GPU
        # behind the port, when it was the GPU); without it, the printing port
        src = normalize_pci(m["src"]) if m["src"] else ""
        sev = m["sev"].lower()
        if sev.startswith("correct"):
            severity = "corrected"
        else:
            severity = "uncorrected_fatal" if m["fatal"] == "Fatal" else "uncorrected_nonfatal"
        return ParsedKernelLine(
            pattern="aer",
            event_type="other",
            pci_bus_id=src or normalize_pci(m["pci"]),
            message=text,
            severity=severity,
        )
    m = AER_NO_RECOVER_RE.search(text)
    if m is None:
        return None
    return ParsedKernelLine(
        pattern="aer",
        event_type="other",
        pci_bus_id=normalize_pci(m["pci"]),
        message=text,
        severity="no_recovery",
    )


_MATCHERS: Final = (_xid, _sxid, _fallen, _gpu_uuid, _gsp, _aer)


def parse_message(text: str) -> ParsedKernelLine | None:
    """One kernel message (a kmsg record's text, a journal MESSAGE, or a log-file line with any
    prefix) -> what it says, or None for a line of no interest. The first shape that matches
    wins, in this order: Xid, SXid, fallen off the bus, GPU UUID, GSP timeout, AER."""
    if not _has_marker(text):
        return None
    for matcher in _MATCHERS:
        parsed = matcher(text)
        if parsed is not None:
            return parsed
    return None


class FallenOffBusJoiner:
    """Joins the 570+ three-line "fallen off the bus" form when it arrives as separate lines
    (journal, files): remembers the PCI id of ``NVRM: The NVIDIA GPU <pci>`` for a few lines and
    pairs it with the ``... fallen off the bus and is not responding ...`` line."""

    def __init__(self, window: int = 4) -> None:
        self.window = window
        self._pci = ""
        self._left = 0

    def feed(self, text: str) -> ParsedKernelLine | None:
        """Parses ``text``; for the tail line of the split form returns the joined event."""
        parsed = parse_message(text)
        if parsed is not None and parsed.pattern == "fallen_off_bus":
            self._left = 0  # a whole form in one message (kmsg record, one-line form)
            return parsed
        if "NVRM: The NVIDIA GPU " in text:
            head = FALLEN_HEAD_RE.search(text)
            if head is not None:
                self._pci, self._left = normalize_pci(head["pci"]), self.window
                return parsed
        if FALLEN_TAIL in text and parsed is None:
            pci, self._pci = (self._pci if self._left > 0 else ""), ""
            self._left = 0
            return ParsedKernelLine(
                pattern="fallen_off_bus",
                event_type="gpu_unresponsive",
                pci_bus_id=pci,
                message=text,
            )
        if self._left > 0:
            self._left -= 1
        return parsed
