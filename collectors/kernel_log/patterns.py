"""The shapes of the kernel-log lines worth reading (formats and sources in the package
docstring and ``tests/data/kernel_log/README.md``), kept apart from the code that applies them.

Every regex is applied with ``search`` to the message text, so any prefix (dmesg's
``[ 1843.308145] ``, syslog's ``Dec  2 11:38:47 host kernel: ``, ``dmesg -T``/``--time-format
iso`` stamps, ``kern  :err   : ``) is tolerated.
"""

from __future__ import annotations

import re
from typing import Final

#: cheap pre-filter (case-sensitive substrings); a line with none of them is chatter
MARKERS: Final = ("NVRM", "Xid", "nvswitch", "AER", "fallen off the bus")

#: a PCI address as the driver prints it: ``0000:3b:00`` (Xid, no function), ``0000:3b:00.0``,
#: very old drivers ``3b:00.0``
_PCI: Final = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

#: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.``
#: (``pid='<unknown>', name=<unknown>,`` when no process; ``pid=``/``name=`` absent before r460;
#: ``(0000:3b:00)`` without ``PCI:`` on old drivers; ``(PCI:0000:3b:00 GPU-I:00 GPU-CI:00)`` for a
#: MIG instance)
XID_RE: Final = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>" + _PCI + r")"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): (?P<code>\d+),"
    r"(?: pid=(?P<pid>'<unknown>'|<unknown>|\d+),)?"
    r"(?: name=(?P<name>.*?),)?"
    r" ?(?P<text>.*)"
)
#: ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress ...``
SXID_RE: Final = re.compile(
    r"nvidia-nvswitch(?P<switch>\d+): SXid \((?:PCI:)?(?P<pci>" + _PCI + r")\): "
    r"(?P<code>\d+),? ?(?P<text>.*)"
)
#: ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.``
FALLEN_RE: Final = re.compile(
    r"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>" + _PCI + r"):? .*fallen off the bus"
)
#: 570+ multi-line form, one kmsg record (``\n`` inside) or three journal/file lines:
#: ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this
#: system has`` / ``NVRM: fallen off the bus and is not responding to commands.``
FALLEN_HEAD_RE: Final = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>" + _PCI + r")\b")
FALLEN_TAIL: Final = "fallen off the bus and is not responding"
#: ``NVRM: GPU at PCI:0000:3b:00: GPU-8f6ab1b2-...`` (printed when the driver binds a GPU)
GPU_UUID_RE: Final = re.compile(
    r"NVRM: GPU at PCI:(?P<pci>" + _PCI + r"): (?P<uuid>GPU-[0-9a-fA-F-]{36})"
)
#: GSP RPC timeouts that are not themselves an Xid line (an Xid 119/120 line usually comes with
#: them), matched lower-cased on ``NVRM`` lines: the banner ``NVRM: GPU6 _kgspLogRpcTimeout:
#: ****** GSP Timeout ******`` (``_kgspLogXid119:`` on 535/550), ``NVRM: GPU6
#: _kgspIsHeartbeatTimedOut: Heartbeat timed out, ...``, ``... Timeout waiting for RPC from GSP``,
#: ``rpcRecvPoll timedout``. The banner's following lines (RPC history tables, "Note: Please
#: also check logs above") are not events.
GSP_TIMEOUT_PHRASES: Final = (
    "gsp timeout",
    "heartbeat timed out",
    "timeout waiting for rpc",
    "waiting for rpc response",
    "rpcrecvpoll timedout",
    "rpcrecvpoll: timeout",
)
#: the summary line of one AER report (the ``PCIe Bus Error: severity=...``, ``device [...]``
#: and ``[ 5] SDES`` lines that follow it describe the same report and are not events):
#: ``pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: id=0010`` (before 4.x:
#: ``id=<requester id>``; later ``: 0000:01:00.0``; 5.x ``Uncorrected (Non-Fatal) error received:
#: 0000:01:00.0``; 6.x ``Uncorrectable (Non-Fatal) error message received from 0000:63:00.0``,
#: ``Correctable error message received from ...``; ``Multiple ...`` when several were queued)
AER_RE: Final = re.compile(
    r"(?P<driver>[\w-]+) (?P<pci>" + _PCI + r"): (?:AER: )?(?:Multiple )?"
    r"(?P<sev>Uncorrected|Uncorrectable|Corrected|Correctable)"
    r"(?: \((?P<fatal>Fatal|Non-Fatal)\))? error (?:message )?received"
    r"(?::? (?:from )?(?:id=(?P<rid>[0-9a-fA-F]{4})|(?P<src>" + _PCI + r")))?"
)
#: ``nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)``: the GPU's driver
#: cannot take part in AER recovery (the GPU is usually lost)
AER_NO_RECOVER_RE: Final = re.compile(
    r"(?P<driver>nvidia) (?P<pci>" + _PCI + r"): AER: can't recover"
)
#: the XID catalogue codes whose message is "GPU has fallen off the bus"
XID_FALLEN_OFF_BUS: Final = 79
