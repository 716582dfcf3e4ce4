"""The shapes of the lines worth reading: compiled regexes and marker phrases for NCCL's
``debug.cc``/``net_ib`` WARN lines and PyTorch ``ProcessGroupNCCL`` lines (formats quoted in the
package docstring), kept apart from the code that applies them."""

from __future__ import annotations

import re
from typing import Final

# -- patterns --------------------------------------------------------------------------------

#: cheap pre-filter: a line without any of these (lower-cased) is chatter
_MARKERS: Final = ("nccl", "watchdog", "net/ib", "remote peer", "[rank ", "[pg ")
#: launcher labels before anything: c10 "[rank3]:", torchrun "[default3]:", srun -l "12: " (right-
#: aligned), mpirun --tag-output "[1,5]<stdout>:", Ray "(WorkerDict pid=3490362) "
_LABEL_RE: Final = re.compile(
    r"\s*(?:\[rank(?P<rank>\d+)\]:|\[(?P<role>[A-Za-z_][\w-]*?)(?P<lrank>\d+)\]:|(?P<task>\d+): "
    r"|\[\d+,(?P<mpirank>\d+)\]<std(?:out|err|diag)>: ?|\([\w.-]+ pid=\d+(?:, ip=[\w.:-]+)?\) )"
)
#: ISO 8601 / RFC 3339 clock then blanks: kubectl --timestamps "2025-11-24T03:20:21.001125857Z ",
#: rsyslog "2024-12-04T18:27:29.123456+01:00 ", journald short-iso "...T20:30:27-0400 ", dmesg iso
#: "...T03:00:00,000000+00:00 ", zone-less "2024-12-04 18:27:29 "
_ISO_CLOCK_RE: Final = re.compile(
    r"\s*(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d\d(?::?\d\d)?)?[ \t]+"
)
#: syslog / journald short and short-precise clock: "Dec 04 18:27:29 ", "Dec  4 18:27:29.123456 "
_SYSLOG_CLOCK_RE: Final = re.compile(
    r"\s*(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<d>[ \d]?\d) "
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d{1,9}))? +"
)
#: after a journald/syslog clock: "host ident[pid]: " (no ':' or '[' in host, so NCCL's
#: "host:pid:tid [dev]" and "host [dev]" never match)
_JOURNAL_IDENT_RE: Final = re.compile(r"[^\s:\[\]]+ [^\s:\[\]]+(?:\[\d+\])?: ")
_NCCL_RE: Final = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:\d+\.\d+ )?(?:(?P<src>[^\s:]+):(?P<srcline>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>WARN|INFO|TRACE|CALL|ABORT)\b ?(?P<msg>.*)"
)
#: a WARN line whose prefix is cut short ("host [dev] ", or nothing before "NCCL WARN"), matched
#: only where the prefixes end so that a mangled "host:pid:tid" stays malformed
_NCCL_BARE_RE: Final = re.compile(
    r"(?:\[[\d-]+[ T][\d:.,]+\] )?(?:(?P<host>[^\s:\[\]]+) )?(?:\[(?P<dev>\d+)\] )?"
    r"(?:(?P<src>[^\s:\[\]]+):(?P<srcline>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>WARN|INFO|TRACE|CALL|ABORT)\b ?(?P<msg>.*)"
)
#: nccl-tests' NCCLCHECK: "NCCL failure common.cu:908 'unhandled cuda error'." and, newer,
#: "<host>: Test NCCL failure common.cu:1204 '<error> / <last error>'"
_NCCL_TESTS_RE: Final = re.compile(
    r"(?:(?P<host>[^\s:]+): )?(?:Test )?NCCL failure (?P<where>[\w.+-]+:\d+) '(?P<err>[^']*)'"
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
_WORK_SEQ_RE: Final = re.compile(
    r"(?:Timeout at NCCL work|detected by watchdog at work(?: sequence id)?): (\d+)"
)
_ABORTED_ON_RANK_RE: Final = re.compile(r"communicator was aborted on rank (\d+)")
_COMPLETION_RE: Final = re.compile(
    r"Got completion from peer (?P<peer>\S+?) with "
    r"(?:error (?P<err>\d+)|status=(?:[A-Z_]+\()?(?P<status>\d+))"
)
_VENDOR_RE: Final = re.compile(r"vendor[ _]err[ =](\d+)")
_HCA_ASYNC_RE: Final = re.compile(r"NET/IB ?: (?P<hca>[\w.-]+:\d+) ")
_HCA_TAIL_RE: Final = re.compile(r" hca (?P<hca>[\w.-]+)\s*$")
_CLOSED_RE: Final = re.compile(r"Connection closed by remote peer (?P<peer>\S+)")
#: misc/socket.cc: "Call to recv from <peer> failed", "Call to send to <peer> failed",
#: "socketStartConnect: Connect to <peer> failed"
_SOCKET_PEER_RE: Final = re.compile(
    r"(?:Call to (?:recv from|send to)|Connect to) (?P<peer>\S+) failed"
)
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
    "NCCL communicator was aborted",
)
