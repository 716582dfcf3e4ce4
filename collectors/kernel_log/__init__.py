"""Kernel-log collector: NVIDIA XID/SXid, "fallen off the bus", GSP RPC timeouts and PCIe AER
lines from ``/dev/kmsg``, ``journalctl -k -o json`` or a text file -> ``gpu_event``.

Why: NVML's event API reports a subset of XIDs and no PCI address or message text; the kernel
log has every XID the driver raises, with the GPU's PCI address, the process and the text (dcgm,
gpud and NVSentinel read it for this reason).

Line formats (exact shapes with their public sources in ``tests/data/kernel_log/README.md``)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable ...
    NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.          (before r460)
    NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 ...)
    NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
    NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5) installed in this system has /
        NVRM: fallen off the bus and is not responding to commands.   (570+: one kmsg record
        with newlines, three journal/file lines: joined by FallenOffBusJoiner)
    NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>                (no event: PCI -> UUID mapping)
    nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ ...
    NVRM: _kgspLogXid119: ******** GSP Timeout ********   (and other GSP/rpcRecvPoll timeouts)
    pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0
    nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=...

Any prefix before these (dmesg ``[  219.47]``, syslog ``Dec  2 11:38:47 host kernel:``,
``dmesg --time-format iso``) is tolerated: regexes search the text.

Events: one ``GpuEventEvent`` per matched line. ``xid``: ``event_type="xid"`` and ``xid`` = the
code; ``fallen_off_bus``: ``gpu_unresponsive`` (a driver also prints Xid 79 for it: both come);
``sxid``, ``gsp_timeout``, ``aer``: ``other`` (``sxid`` = the SXid code). ``pci_bus_id`` is the
normalised ``dddd:bb:dd.f`` (Xid lines omit the function: ``.0``), for AER the device that
reported the error (``received: <id>``) else the printing device; ``source`` is the reader
(``kmsg``/``journal``/``file``); ``pattern`` the line shape; ``message`` the line, cut at
``max_message_bytes``. The envelope ``gpu`` (and ``gpu_uuid``) come from the PCI address:
NVML's ``nvmlDeviceGetPciInfo`` once at start, else the config's ``inventory``, plus UUIDs
learnt from ``NVRM: GPU at PCI:`` lines; an unknown address leaves ``gpu`` empty (counted as
``unmapped``). NVSwitch and AER root-port addresses are not GPUs and stay unmapped.

Not done: deduplication against the GPU collector's NVML XID event for the same code (both
arrive; they differ by ``source``: "" vs the reader); the line's syslog stamp in ``file`` mode
(the read time is used).

Readers (``source``; ``auto`` tries them in this order):

- ``kmsg``: ``/dev/kmsg`` opened non-blocking; one record per ``read()`` (``prio,seq,usec,
  flags;text``, kmsg's ``\\xNN`` escapes undone); ``EPIPE`` (overwritten) skipped and the
  sequence gap counted as ``records_lost``; records of facilities other than the kernel's
  (userspace writes) dropped; starts at the end unless ``from_start``; with ``state_path`` the
  (boot id, last seq) is kept and a restart in the same boot resumes after it.
- ``journal``: ``journalctl -k -o json --follow`` (``--after-cursor`` when a cursor was kept,
  else ``--lines=0``/``--no-tail``); stdout read non-blocking; ``MESSAGE`` as a string or a
  byte array; ``__REALTIME_TIMESTAMP`` is the time; restarted after ``restart_backoff_s``.
- ``file``: ``paths`` (default ``/var/log/kern.log``) followed with the NCCL collector's tailer
  (rotation, truncation, partial lines).

Every poll reads at most ``max_records_per_poll`` records and ``max_read_bytes`` bytes, so a
flood (e.g. a GSP core dump's thousand lines) cannot stall the agent; the rest comes next poll.
Nothing raises out of ``poll``.
"""

from rankscope.collectors.kernel_log.collector import (
    GpuRef,
    KernelLogCollector,
    KernelLogStats,
    create_kernel_log_collector,
    nvml_pci_map,
)
from rankscope.collectors.kernel_log.config import (
    KernelLogCollectorConfig,
    KernelLogGpu,
    KernelLogSource,
)
from rankscope.collectors.kernel_log.parsing import (
    PATTERNS,
    FallenOffBusJoiner,
    ParsedKernelLine,
    normalize_pci,
    parse_message,
)
from rankscope.collectors.kernel_log.readers import (
    FileReader,
    JournalReader,
    KernelRecord,
    KmsgReader,
    ReaderStats,
)

__all__ = [
    "PATTERNS",
    "FallenOffBusJoiner",
    "FileReader",
    "GpuRef",
    "JournalReader",
    "KernelLogCollector",
    "KernelLogCollectorConfig",
    "KernelLogGpu",
    "KernelLogSource",
    "KernelLogStats",
    "KernelRecord",
    "KmsgReader",
    "ParsedKernelLine",
    "ReaderStats",
    "create_kernel_log_collector",
    "normalize_pci",
    "nvml_pci_map",
    "parse_message",
]
