"""What the kernel-log collector can be told (the agent's ``kernel_log:`` section)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rankscope.collectors.base import CollectorConfig

KernelLogSource = Literal["auto", "kmsg", "journal", "file"]


class KernelLogGpu(BaseModel):
    """One GPU of the node's static inventory: PCI address -> NVML index (and UUID)."""

    model_config = ConfigDict(extra="forbid")

    #: as ``nvidia-smi --query-gpu=pci.bus_id`` or ``lspci -D`` prints it, e.g. 0000:3b:00.0
    pci_bus_id: str
    index: int = Field(ge=0)
    uuid: str = ""


class KernelLogCollectorConfig(CollectorConfig):
    """Where the kernel log is read and how much of it per poll."""

    interval_s: float = 1.0
    #: auto = /dev/kmsg when readable, else journalctl, else the files in ``paths``
    source: KernelLogSource = "auto"
    kmsg_path: Path = Path("/dev/kmsg")
    boot_id_path: Path = Path("/proc/sys/kernel/random/boot_id")
    #: argv before the collector's own options (``-k -o json --follow ...``)
    journalctl: list[str] = Field(default_factory=lambda: ["journalctl"])
    #: files followed with ``source: file`` (and by ``auto`` as the last resort)
    paths: list[str] = Field(default_factory=lambda: ["/var/log/kern.log"])
    #: read what the buffer/journal/file already holds (else start at its end); a resume
    #: position in ``state_path`` takes precedence
    from_start: bool = False
    #: where the kmsg boot id + sequence number and the journal cursor are kept across restarts
    #: (None: not kept; a restart then starts at the end again)
    state_path: Path | None = None
    #: seconds between state writes (and at stop)
    state_every_s: float = Field(default=5.0, ge=0)
    #: records (kmsg, journal) or lines (file) read per poll at most: a flood cannot stall the
    #: agent; the rest comes next poll
    max_records_per_poll: int = Field(default=2000, ge=1)
    max_read_bytes: int = Field(default=1024 * 1024, ge=4096)
    #: longest message kept (``message`` of the event), the rest is cut
    max_message_bytes: int = Field(default=4096, ge=64, le=16_384)
    #: PCI -> GPU mapping from NVML (``nvmlDeviceGetPciInfo``) when it initialises
    use_nvml: bool = True
    #: static PCI -> GPU mapping (used when NVML is absent or does not know the address)
    inventory: list[KernelLogGpu] = Field(default_factory=list)
    #: a record's own time is the event time when it lies within this many seconds before the
    #: read (else the read time)
    max_log_time_lag_s: float = Field(default=86_400.0, ge=0)
    #: emit corrected (correctable) PCIe AER reports too: they can arrive continuously on a
    #: noisy link (the GPU collector's ``pcie_replay_count`` counts them cheaper)
    aer_corrected: bool = False
    #: seconds before a journalctl that exited is started again
    restart_backoff_s: float = Field(default=5.0, ge=0)
