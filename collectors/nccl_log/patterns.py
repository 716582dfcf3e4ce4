"""The shapes of the lines worth reading: compiled regexes and marker phrases for NCCL's
``debug.cc``/``net_ib`` WARN lines and PyTorch ``ProcessGroupNCCL`` lines (formats quoted in the
package docstring), kept apart from the code that applies them."""

from __future__ import annotations

import re
from typing import Final

# -- patterns --------------------------------------------------------------------------------

#: cheap pre-filter: a line without any of these (lower-cased) is chatter
_MARKERS: Final = ("nccl", "watchdog", "net/ib", "remote peer", "[rank ", "[pg ")
#: launcher labels before anything: srun -l "12: ", c10 "[rank3]:", torchrun "[default3]:"
_LABEL_RE: Final = re.compile(
    r"\s*(?:\[rank(?P<rank>\d+)\]:|\[(?P<role>[A-Za-z_][\w-]*?)(?P<lrank>\d+)\]:|\d+: )"
)
_NCCL_RE: Final = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:\d+\.\d+ )?(?:(?P<src>[^\s:]+):(?P<srcline>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>WARN|INFO|TRACE|CALL|ABORT)\b ?(?P<msg>.*)"
)
_NCCL_TS_RE: Final = re.compile(
    r"\[(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[ T](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    r"(?:[.,](?P<frac>\d{1,9}))?\]"
)
_GLOG_RE: Final = re.compile(
    r"\[?(?P<sev>[IWEF])(?:(?P<mo>\d{1,2})(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    r"(?:\.(?P<frac>\d{1,9}))?)?(?: \d+)? ?(?P<src>[\w.+-]+\.(?:cpp|cc|cu|hpp|h)):\d+\] ?"
)
_PG_RE: Final = re.compile(
    r"\[PG (?:ID (?P<pgid>\d+) PG GUID )?(?P<pg>[^\]]+?) Rank (?P<rank>\d+)\]"
)
_OLD_RANK_RE: Final = re.compile(r"\[Rank (?P<rank>\d+)\]")
_SEQ_RE: Final = re.compile(r"SeqNum=(\d+)")
_OP_RE: Final = re.compile(r"OpType=(\w+)")
_TIMEOUT_RE: Final = re.compile(r"Timeout\(ms\)=(\d+)")
_RAN_FOR_RE: Final = re.compile(r"ran for (\d+) milliseconds")
_WORK_SEQ_RE: Final = re.compile(r"(?:Timeout at NCCL work|detected by watchdog at work): (\d+)")
_COMPLETION_RE: Final = re.compile(
    r"Got completion from peer (?P<peer>\S+?) with "
    r"(?:error (?P<err>\d+)|status=(?:[A-Z_]+\()?(?P<status>\d+))"
)
_VENDOR_RE: Final = re.compile(r"vendor[ _]err[ =](\d+)")
_HCA_ASYNC_RE: Final = re.compile(r"NET/IB ?: (?P<hca>[\w.-]+:\d+) ")
_HCA_TAIL_RE: Final = re.compile(r" hca (?P<hca>[\w.-]+)\s*$")
_CLOSED_RE: Final = re.compile(r"Connection closed by remote peer (?P<peer>\S+)")
_FROM_RANK_RE: Final = re.compile(r"\bfrom rank (\d+)")
_NCCL_ERR_RE: Final = re.compile(
    r"\bnccl(?:InternalError|SystemError|UnhandledCudaError|InvalidUsage|InvalidArgument)\b"
)
_REMOTE_PHRASES: Final = (
    "remote process exited or there was a network error",
    "ncclRemoteError",
    "Connection closed by remote peer",
)
_ABORT_PHRASES: Final = (
    "Some NCCL operations have failed or timed out",
    "watchdog thread terminated with exception",
    "taking the entire process down",
    "Heartbeat monitor timed out",
    "watchdog got stuck",
)
