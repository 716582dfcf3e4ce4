"""dcgm-exporter's Prometheus text page -> one reading per physical GPU.

Why a parser of our own around ``prometheus_client.parser``: the library reads the exposition
format (escapes, comments, timestamps); what it cannot know is DCGM's conventions, handled here:

- one series per GPU, keyed by the ``gpu`` label (the NVML index); identity labels ``UUID``,
  ``pci_bus_id``, ``Hostname``, ``modelName`` and, on Kubernetes, ``pod``/``namespace``/
  ``container`` (the pod the device plugin gave the GPU to; empty strings when none);
- DCGM's "blank" sentinels (no value, not supported, not permitted) are real numbers on the page:
  int64 blanks from ``0x7ffffffffffffff0`` up (the README example shows
  ``DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794``) and fp64 blanks from ``2**47``; they,
  NaN and infinities are dropped (counted), never stored as values;
- MIG: dcgm-exporter repeats every series of a MIG-enabled GPU once per GPU instance (labels
  ``GPU_I_PROFILE``/``GPU_I_ID``, seen on a recorded A800 page). Device-level fields
  (``DCGM_FI_DEV_*``) are the same in each copy and are read once for the physical GPU; the
  profiling fields (``DCGM_FI_PROF_*``) are per instance and are skipped (counted). Such a GPU has
  no ``DCGM_FI_DEV_GPU_UTIL`` (NVML has none in MIG mode), so it gets XID events but no sample;
- metrics that are not ``DCGM_FI_*`` or not mapped are ignored (counted);
- ``prometheus_client`` names the sample of a ``counter`` family ``<name>_total``; DCGM's names
  carry no such suffix (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` is a counter), so the family
  name is used.

A page the library cannot read, or one without a single ``DCGM_FI_`` metric (another exporter's
page, an HTML error page), raises :class:`DcgmPageError` with a one-line reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["DcgmPageError", "GpuReading", "ParsedPage", "normalise_pci_bus_id", "parse_page"]

_INT64_BLANK: Final = float(0x7FFFFFFFFFFFFFF0)
_FP64_BLANK: Final = float(2**47)  # DCGM_FP64_BLANK = 140737488355328.0, then +1..+3
_PREFIX: Final = "DCGM_FI_"
_PROFILING: Final = "DCGM_FI_PROF_"


class DcgmPageError(ValueError):
    """The scraped page is not a dcgm-exporter page; the message is one line."""


@dataclass
class GpuReading:
    """Everything the page says about one physical GPU."""

    gpu: int
    uuid: str = ""
    pci_bus_id: str = ""
    hostname: str = ""
    model: str = ""
    pod: str = ""
    namespace: str = ""
    container: str = ""
    #: DCGM field name -> value (finite, not a blank)
    values: dict[str, float] = field(default_factory=dict)
    #: DCGM_FI_DEV_XID_ERRORS's ``err_msg`` label (newer exporters), '' when absent
    xid_text: str = ""
    #: MIG mode: the series came per GPU instance
    mig: bool = False


@dataclass
class ParsedPage:
    gpus: dict[int, GpuReading] = field(default_factory=dict)
    dcgm_series: int = 0
    blank_values: int = 0
    mig_series: int = 0
    unlabelled: int = 0
    other_metrics: int = 0


def normalise_pci_bus_id(text: str) -> str:
    """``00000000:17:00.0`` (DCGM/NVML, 8-digit domain) -> ``0000:17:00.0`` (kernel form)."""
    domain, sep, rest = text.strip().lower().partition(":")
    if not sep or not rest:
        return text.strip().lower()[:256]
    try:
        return f"{int(domain, 16):04x}:{rest}"[:256]
    except ValueError:
        return text.strip().lower()[:256]


def _blank(value: float) -> bool:
    if not math.isfinite(value):
        return True
    return value >= _INT64_BLANK or _FP64_BLANK <= value <= _FP64_BLANK + 3


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_page(text: str) -> ParsedPage:
    """Read a dcgm-exporter page; raises :class:`DcgmPageError` for anything else."""
    page = ParsedPage()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError, and others on odd input
        raise DcgmPageError(
            f"not Prometheus text exposition: {_one_line(str(exc)) or type(exc).__name__}"
        ) from None
    for family in families:
        for sample in family.samples:
            name = sample.name
            if family.type == "counter" and name == family.name + "_total":
                name = family.name  # the library names counter samples <name>_total
            if not name.startswith(_PREFIX):
                page.other_metrics += 1
                continue
            page.dcgm_series += 1
            labels = sample.labels
            instance = bool(labels.get("GPU_I_ID"))
            if instance:
                page.mig_series += 1
                if name.startswith(_PROFILING):
                    continue  # one value per GPU instance, not the GPU's
            try:
                index = int(labels.get("gpu", ""))
            except ValueError:
                page.unlabelled += 1
                continue
            reading = page.gpus.get(index)
            if reading is None:
                reading = page.gpus[index] = GpuReading(
                    gpu=index,
                    uuid=labels.get("UUID", "")[:256],
                    pci_bus_id=normalise_pci_bus_id(labels.get("pci_bus_id", "")),
                    hostname=labels.get("Hostname", "")[:256],
                    model=labels.get("modelName", "")[:256],
                    pod=labels.get("pod", "")[:256],
                    namespace=labels.get("namespace", "")[:256],
                    container=labels.get("container", "")[:256],
                )
            reading.mig = reading.mig or instance
            value = float(sample.value)
            if _blank(value):
                page.blank_values += 1
                continue
            if instance and name in reading.values:
                continue  # the same device value again, from the next GPU instance
            reading.values[name] = value
            if name == "DCGM_FI_DEV_XID_ERRORS":
                reading.xid_text = labels.get("err_msg", "")[:1024]
    if page.dcgm_series == 0:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise DcgmPageError(
            f"no DCGM_FI_* metric on the page (not dcgm-exporter?): {_one_line(first, 80)!r}"
        )
    return page
