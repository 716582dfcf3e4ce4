"""NCCL and PyTorch ProcessGroupNCCL log lines -> ``comm_event``: a pure parser and a file tailer.

Why: when one IB link flaps, a minute later hundreds of ranks die with NCCL timeouts; the log
lines say *which* collective (op, sequence number) timed out on *which* rank and which peer a
network error came from. The attribution stage orders these against the fabric and GPU events.

Line formats (quoted from the sources; tests use these exact shapes):

- NCCL ``src/debug.cc`` (``ncclDebugLogV``)::

      [<NCCL_DEBUG_TIMESTAMP_FORMAT, default "[%F %T] ", on WARN by default since 2.26>]
      <host>:<pid>:<tid> [<cudaDev>] <file>:<line> [(<func>) ]NCCL WARN <message>
      <host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>

  (a WARN is preceded by an empty line; ``host`` is cut at the first ``.``).
- NCCL ``net_ib`` completion errors, by version::

      NET/IB : Got completion from peer <peer> with error 12, opcode 0, len 0, vendor err 129
      NET/IB : Got completion from peer <peer> with status=12 opcode=0 len=0 vendor err 129 (Recv)
      NET/IB: Got completion from peer <peer> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=...
          vendor_err=129 hca mlx5_0
      NET/IB : mlx5_1:1 Got non-fatal async event: port error(10)

  peers are ``ncclSocketToString``: ``<ip or host><<port>>``.
- PyTorch ``ProcessGroupNCCL.cpp``: ``logPrefix()`` is ``[Rank N] `` (old), ``[PG <uid> Rank N] ``
  (2.3), ``[PG <name> (<desc>) Rank N] `` (2.4), ``[PG ID <id> PG GUID <uid>(<desc>) Rank N] ``
  (2.5+); c10 logging prepends ``[rank<global>]:[E<MMDD> <hh:mm:ss.ns> <file>:<line>] ``::

      [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=ALLREDUCE,
          NumelIn=..., NumelOut=..., Timeout(ms)=600000) ran for 600012 milliseconds before timing
          out.
      [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with
          exception: NCCL error: remote process exited or there was a network error, NCCL version ..
      ncclRemoteError: A call failed possibly due to a network error or a remote process ...
      Last error:
      NET/IB : Got completion from peer ...          (NCCL's last error, printed bare by PyTorch)

Rank (envelope ``rank``), in this order: the c10 ``[rank<N>]:`` prefix (the global rank); the PG
prefix's rank when the PG is the default group (PG ID 0 / uid 0 / ``default_pg``), or the old
``[Rank N]`` prefix (which is the rank in *its* PG: global only for the default PG, the usual case
for old releases); otherwise ``pg_rank`` only. NCCL's own lines carry just ``[cudaDev]``: with
``cuda_dev_is_gpu_index`` (default) the collector passes it as the envelope ``gpu``, so the
``JobRegistry`` binding of that GPU supplies job, rank and local rank. Turn it off when each rank's
process sees only its own GPU (``CUDA_VISIBLE_DEVICES`` per rank): every process then logs ``[0]``.

Time: the line's own timestamp (NCCL's ``[%F %T]``, glog's ``MMDD hh:mm:ss.ns``, both local time)
is the event time when it lies within ``max_log_time_lag_s`` before the read (else the read time):
a whole-hour disagreement means the writer's timezone differs and the stamp is not trusted.

Tailing: per file the (device, inode) and offset; rotation (the path now names another inode:
the old file is drained to its end first, and a rotated name that the globs also match keeps its
offset), truncation (size < offset, or the byte before the offset is no longer the newline we
consumed: read again from 0), partial last lines kept until completed,
lines longer than ``max_line_bytes`` truncated (the first bytes are parsed) and counted,
undecodable bytes replaced. Files present at the first poll start at their end unless
``from_start``; files that appear later are read from their start. Idle files' descriptors are
closed after ``idle_close_s`` (their offsets are kept); at most ``max_read_bytes`` per file per
poll (the rest comes next poll). Nothing raises out of ``poll``. Cost measured here: ~0.03 ms CPU
for an idle poll over 8 files, ~225k lines/s when parsing (lines without an NCCL/watchdog
marker are dropped by a substring test before any regex runs; NCCL INFO by the prefix regex).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from pydantic import Field, ValidationError

from rankscope.collectors.base import BaseCollector, CollectorConfig, EventFactory
from rankscope.schemas.events import CommEventEvent, Event
from rankscope.schemas.payloads import CommEvent, CommEventType

__all__ = [
    "LogTime",
    "NcclLogCollector",
    "NcclLogCollectorConfig",
    "NcclLogStats",
    "ParsedCommLine",
    "create_nccl_log_collector",
    "expand_nccl_debug_file",
    "log_time_ns",
    "parse_line",
]

_SHORT: Final = 256
_LONG: Final = 16_384


class LogTime(NamedTuple):
    """A wall-clock stamp as printed (local time); ``year`` None when the format omits it."""

    year: int | None
    month: int
    day: int
    hour: int
    minute: int
    second: int
    nanos: int


@dataclass(frozen=True)
class ParsedCommLine:
    """What one interesting line says; fields are empty/None when the line does not say."""

    source: Literal["nccl", "pytorch"]
    event_type: CommEventType
    message: str
    rank: int | None = None
    local_rank: int | None = None
    pg_rank: int | None = None
    process_group: str = ""
    cuda_dev: int | None = None
    op: str = ""
    seq: int | None = None
    timeout_ms: int | None = None
    elapsed_ms: int | None = None
    peer: str = ""
    peer_rank: int | None = None
    hca: str = ""
    ib_status: int | None = None
    vendor_err: int | None = None
    pid: int | None = None
    tid: int | None = None
    host: str = ""
    level: str = ""
    log_time: LogTime | None = None


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


def _int(text: str | None) -> int | None:
    return int(text) if text else None


def _nanos(frac: str | None) -> int:
    return int(frac.ljust(9, "0")[:9]) if frac else 0


def _is_default_pg(pgid: str | None, pg: str) -> bool:
    if pgid is not None:
        return pgid == "0"
    head = pg.split("(", 1)[0].strip()
    return head == "0" or "default_pg" in pg


_Skip = Literal["ignored", "malformed"]


def parse_line(line: str) -> ParsedCommLine | None:
    """The structured content of one log line, or None for chatter and malformed lines."""
    parsed = _parse(line)
    return parsed if isinstance(parsed, ParsedCommLine) else None


def _parse(line: str) -> ParsedCommLine | _Skip:
    text = line.rstrip("\r\n")
    low = text.lower()
    if not any(marker in low for marker in _MARKERS):
        return "ignored"
    rank: int | None = None
    local_rank: int | None = None
    pos = 0
    while True:  # launcher labels, in any order
        m = _LABEL_RE.match(text, pos)
        if m is None or m.end() == pos:
            break
        if m.group("rank") is not None:
            rank = int(m.group("rank"))
        elif m.group("lrank") is not None:
            local_rank = int(m.group("lrank"))
        pos = m.end()

    nccl = _NCCL_RE.search(text, pos)
    if nccl is not None:
        return _parse_nccl(text, nccl, rank, local_rank)
    if "NCCL WARN" in text or "NCCL INFO" in text or "NCCL ABORT" in text:
        return "malformed"  # NCCL's marker without its host:pid:tid [dev] prefix
    return _parse_torch(text, pos, rank, local_rank)


def _parse_nccl(
    text: str, m: re.Match[str], rank: int | None, local_rank: int | None
) -> ParsedCommLine | _Skip:
    level = m.group("level")
    if level not in ("WARN", "ABORT"):
        return "ignored"  # INFO/TRACE/CALL: chatter
    msg = m.group("msg").strip()
    if not msg and level == "WARN":
        return "malformed"
    log_time = None
    ts = _NCCL_TS_RE.search(text, 0, m.start())
    if ts is not None:
        log_time = LogTime(
            int(ts["y"]),
            int(ts["mo"]),
            int(ts["d"]),
            int(ts["h"]),
            int(ts["mi"]),
            int(ts["s"]),
            _nanos(ts["frac"]),
        )
    if level == "ABORT":
        event_type: CommEventType = "nccl_error"
    else:
        event_type = _classify_nccl_warn(msg)
    net = _network_fields(msg)
    return ParsedCommLine(
        source="nccl",
        event_type=event_type,
        message=msg,
        rank=rank,
        local_rank=local_rank,
        cuda_dev=int(m.group("dev")),
        pid=int(m.group("pid")),
        tid=int(m.group("tid")),
        host=m.group("host"),
        level=level,
        log_time=log_time,
        peer=net.peer,
        peer_rank=net.peer_rank,
        hca=net.hca,
        ib_status=net.ib_status,
        vendor_err=net.vendor_err,
    )


def _classify_nccl_warn(msg: str) -> CommEventType:
    if "NET/IB" in msg or "Got completion from peer" in msg or "ibv_" in msg:
        return "net_ib_error"
    if "IB Got async event" in msg:
        return "net_ib_error"
    if any(p in msg for p in _REMOTE_PHRASES) or "Connection reset by peer" in msg:
        return "remote_process_exited"
    if _NCCL_ERR_RE.search(msg):
        return "nccl_error"
    return "nccl_warn"


class _Net(NamedTuple):
    peer: str = ""
    peer_rank: int | None = None
    hca: str = ""
    ib_status: int | None = None
    vendor_err: int | None = None


def _network_fields(msg: str) -> _Net:
    """Peer, peer rank, HCA and verbs status as NCCL prints them."""
    peer = ""
    ib_status = vendor_err = None
    comp = _COMPLETION_RE.search(msg)
    if comp is not None:
        peer = comp.group("peer")
        ib_status = _int(comp.group("err") or comp.group("status"))
        vendor_err = _first_int(_VENDOR_RE, msg[comp.end() :])
    else:
        closed = _CLOSED_RE.search(msg)
        if closed is not None:
            peer = closed.group("peer").rstrip(".,")
    hca = _HCA_ASYNC_RE.search(msg) or _HCA_TAIL_RE.search(msg)
    return _Net(
        peer=peer,
        peer_rank=_first_int(_FROM_RANK_RE, msg),
        hca=hca.group("hca") if hca else "",
        ib_status=ib_status,
        vendor_err=vendor_err,
    )


def _parse_torch(
    text: str, pos: int, rank: int | None, local_rank: int | None
) -> ParsedCommLine | _Skip:
    severity = ""
    log_time = None
    glog = _GLOG_RE.match(text, pos)
    if glog is not None:
        severity = glog.group("sev")
        if glog.group("mo") is not None:
            log_time = LogTime(
                None,
                int(glog["mo"]),
                int(glog["d"]),
                int(glog["h"]),
                int(glog["mi"]),
                int(glog["s"]),
                _nanos(glog["frac"]),
            )
        pos = glog.end()
    body = text[pos:].strip()
    if body.startswith("what():"):
        body = body[len("what():") :].strip()

    process_group = ""
    pg_rank: int | None = None
    pg = _PG_RE.search(body)
    old = _OLD_RANK_RE.search(body)
    if pg is not None and (old is None or pg.start() < old.start()):
        process_group = pg.group("pg").strip()
        pg_rank = int(pg.group("rank"))
        if rank is None and _is_default_pg(pg.group("pgid"), process_group):
            rank = pg_rank
        prefix_end = pg.end() if pg.start() == 0 else 0
    elif old is not None:
        pg_rank = int(old.group("rank"))
        if rank is None:
            rank = pg_rank
        prefix_end = old.end() if old.start() == 0 else 0
    else:
        prefix_end = 0
    message = body[prefix_end:].strip()

    source: Literal["nccl", "pytorch"] = "pytorch"
    event_type: CommEventType
    if "Watchdog caught collective operation timeout" in body or "Timeout at NCCL work" in body:
        event_type = "watchdog_timeout"
    elif any(p in body for p in _REMOTE_PHRASES[:2]):
        event_type = "remote_process_exited"
    elif "NET/IB" in body or "Got completion from peer" in body:
        event_type, source = "net_ib_error", "nccl"
    elif "Connection closed by remote peer" in body:
        event_type, source = "remote_process_exited", "nccl"
    elif "NCCL error" in body or _NCCL_ERR_RE.search(body):
        event_type = "nccl_error"
    elif any(p in body for p in _ABORT_PHRASES):
        event_type = "process_group_abort"
    elif "detected by watchdog at work" in body or (
        severity in ("E", "F") and glog is not None and "NCCL" in glog.group("src")
    ):
        event_type = "other"
    else:
        return "ignored"

    work = body.find("WorkNCCL(")
    seq = op = timeout_ms = elapsed_ms = None
    if work >= 0:
        tail = body[work:]
        seq = _first_int(_SEQ_RE, tail)
        op_m = _OP_RE.search(tail)
        op = op_m.group(1) if op_m else None
        timeout_ms = _first_int(_TIMEOUT_RE, tail)
        elapsed_ms = _first_int(_RAN_FOR_RE, tail)
    if seq is None:
        seq = _first_int(_WORK_SEQ_RE, body)
    net = _network_fields(body) if source == "nccl" or "peer" in body else _Net()
    return ParsedCommLine(
        source=source,
        event_type=event_type,
        message=message,
        rank=rank,
        local_rank=local_rank,
        pg_rank=pg_rank,
        process_group=process_group,
        op=op or "",
        seq=seq,
        timeout_ms=timeout_ms,
        elapsed_ms=elapsed_ms,
        level=severity,
        log_time=log_time,
        peer=net.peer,
        peer_rank=net.peer_rank,
        hca=net.hca,
        ib_status=net.ib_status,
        vendor_err=net.vendor_err,
    )


def _first_int(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    return int(m.group(1)) if m else None


def log_time_ns(stamp: LogTime, now_ns: int) -> int | None:
    """The stamp as ns since the epoch (local time; a missing year is the one that is not in
    the future), or None when it is not a valid date."""
    if not (1 <= stamp.month <= 12 and 1 <= stamp.day <= 31 and stamp.hour <= 23):
        return None
    year = stamp.year
    if year is None:
        year = time.localtime(now_ns / 1e9).tm_year
    try:
        secs = time.mktime(
            (year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second, 0, 0, -1)
        )
        if stamp.year is None and secs > now_ns / 1e9 + 86_400:
            secs = time.mktime(
                (year - 1, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second, 0, 0, -1)
            )
    except (OverflowError, ValueError):
        return None
    return int(secs) * 1_000_000_000 + stamp.nanos


def expand_nccl_debug_file(pattern: str, hostname: str) -> str:
    """A glob for NCCL_DEBUG_FILE-style names: ``%h`` -> host (as NCCL writes it), ``%p`` ->
    any pid, ``%%`` -> ``%``; other ``%x`` stay literal, as in NCCL's ``ncclDebugInit``."""
    host = glob.escape(hostname.split(".", 1)[0].replace("%", "-").replace("/", "-"))
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append({"%": "%", "h": host, "p": "*"}.get(nxt, "%" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


# -- the tailer -------------------------------------------------------------------------------


class NcclLogCollectorConfig(CollectorConfig):
    """Which files to follow and how much to trust them."""

    interval_s: float = 0.5
    #: glob patterns; ``%h``/``%p`` (NCCL_DEBUG_FILE style) are expanded, e.g. /tmp/nccl.%h.%p
    paths: list[str] = Field(default_factory=list)
    from_start: bool = False
    max_line_bytes: int = Field(default=16_384, ge=64)
    #: bytes read per file per poll at most (a runaway log cannot stall the agent)
    max_read_bytes: int = Field(default=4 * 1024 * 1024, ge=4096)
    idle_close_s: float = Field(default=300.0, gt=0)
    cuda_dev_is_gpu_index: bool = True
    max_log_time_lag_s: float = Field(default=300.0, ge=0)
    #: None = this host's name (for ``%h``)
    hostname: str | None = None


@dataclass
class NcclLogStats:
    """What the tailer read, skipped and emitted (it never raises)."""

    polls: int = 0
    files_opened: int = 0
    bytes_read: int = 0
    lines_read: int = 0
    events: int = 0
    lines_ignored: int = 0
    lines_malformed: int = 0
    lines_truncated: int = 0
    rotations: int = 0
    renames_followed: int = 0
    truncations: int = 0
    read_errors: int = 0
    invalid_events: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


@dataclass
class _Tail:
    path: str
    ident: tuple[int, int]
    offset: int
    fd: int | None = None
    buf: bytearray = field(default_factory=bytearray)
    #: inside an over-long line whose start was already emitted: drop bytes until the newline
    skipping: bool = False
    last_growth_ns: int = 0


class NcclLogCollector(BaseCollector):
    """Follows log files and turns interesting lines into ``CommEventEvent``s."""

    name = "nccl_log"

    def __init__(self, config: NcclLogCollectorConfig, factory: EventFactory) -> None:
        self.config = config
        self.factory = factory
        self.interval_s = config.interval_s
        self.stats = NcclLogStats()
        host = config.hostname or socket.gethostname()
        self._patterns = [expand_nccl_debug_file(p, host) for p in config.paths]
        self._tails: dict[str, _Tail] = {}
        self._first_poll = True

    def stop(self) -> None:
        for tail in self._tails.values():
            self._close(tail)

    # -- discovery ---------------------------------------------------------------------------

    def _scan(self) -> dict[str, os.stat_result]:
        found: dict[str, os.stat_result] = {}
        for pattern in self._patterns:
            for path in glob.glob(pattern):
                if path in found:
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found[path] = st
        return found

    def poll(self, now_ns: int) -> list[Event]:
        """Reads what was appended since the last poll, in every matching file."""
        self.stats.polls += 1
        out: list[Event] = []
        try:
            found = self._scan()
        except Exception:  # a broken pattern or filesystem must not stop the agent
            self.stats.read_errors += 1
            return out
        # 1. detach every tail whose path now names another file (or nothing)
        moved: dict[tuple[int, int], _Tail] = {}
        for path, tail in list(self._tails.items()):
            st = found.get(path)
            if st is None or (st.st_dev, st.st_ino) != tail.ident:
                del self._tails[path]
                moved[tail.ident] = tail
        # 2. files that left the globs (rotated away, deleted): drain what they still hold
        present = {(st.st_dev, st.st_ino) for st in found.values()}
        for ident in [i for i in moved if i not in present]:
            self.stats.rotations += 1
            out.extend(self._drain(moved.pop(ident), now_ns))
        # 3. follow every matching file; a renamed one (rotated to a name the globs also
        #    match, e.g. a chain .log -> .log.1 -> .log.2) keeps its offset
        for path in sorted(found):
            st = found[path]
            current = self._tails.get(path)
            if current is None:
                current = moved.pop((st.st_dev, st.st_ino), None)
                if current is not None:
                    current.path = path
                    self.stats.renames_followed += 1
                else:
                    start_at_end = self._first_poll and not self.config.from_start
                    current = self._new_tail(path, st, now_ns, start_at_end)
                self._tails[path] = current
            out.extend(self._follow(current, st, now_ns))
        for tail in moved.values():  # not reachable in practice; never leak an fd
            out.extend(self._drain(tail, now_ns))
        self._first_poll = False
        return out

    def _new_tail(self, path: str, st: os.stat_result, now_ns: int, at_end: bool) -> _Tail:
        tail = _Tail(path, (st.st_dev, st.st_ino), 0, last_growth_ns=now_ns)
        self._open(tail)  # held from now on, so a rotated or deleted file can still be drained
        if at_end and st.st_size > 0:
            tail.offset = st.st_size
            # starting inside a line: its rest is not a line of its own
            last = self._pread(tail, 1, st.st_size - 1)
            tail.skipping = last is not None and last != b"\n"
        return tail

    # -- reading -----------------------------------------------------------------------------

    def _open(self, tail: _Tail) -> bool:
        if tail.fd is not None:
            return True
        try:
            fd = os.open(tail.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.stats.read_errors += 1
            return False
        try:
            st = os.fstat(fd)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != tail.ident:  # replaced since the stat
            os.close(fd)
            return False
        tail.fd = fd
        self.stats.files_opened += 1
        return True

    def _close(self, tail: _Tail) -> None:
        if tail.fd is not None:
            with contextlib.suppress(OSError):
                os.close(tail.fd)
            tail.fd = None

    def _pread(self, tail: _Tail, size: int, offset: int) -> bytes | None:
        if not self._open(tail):
            return None
        assert tail.fd is not None
        try:
            return os.pread(tail.fd, size, offset)
        except OSError:
            self.stats.read_errors += 1
            self._close(tail)
            return None

    def _follow(self, tail: _Tail, st: os.stat_result, now_ns: int) -> list[Event]:
        if st.st_size < tail.offset or (
            st.st_size > tail.offset and not self._still_ours(tail)
        ):  # truncated (copytruncate, "> file"): read again from 0
            self.stats.truncations += 1
            tail.offset = 0
            tail.buf.clear()
            tail.skipping = False
        if st.st_size == tail.offset:
            if (
                tail.fd is not None
                and now_ns - tail.last_growth_ns > self.config.idle_close_s * 1e9
            ):
                self._close(tail)
            return []
        return self._read_lines(tail, now_ns, final=False)

    def _still_ours(self, tail: _Tail) -> bool:
        """With no partial line pending, the byte before the offset is the newline we consumed;
        anything else means the file was truncated and rewritten past our offset meanwhile."""
        if tail.offset == 0 or tail.buf or tail.skipping:
            return True
        last = self._pread(tail, 1, tail.offset - 1)
        return last is None or last == b"\n"

    def _drain(self, tail: _Tail, now_ns: int) -> list[Event]:
        """The rest of a file that was rotated away or deleted, its last partial line included."""
        out = self._read_lines(tail, now_ns, final=True) if tail.fd is not None else []
        self._close(tail)
        return out

    def _read_lines(self, tail: _Tail, now_ns: int, *, final: bool) -> list[Event]:
        out: list[Event] = []
        budget = self.config.max_read_bytes
        while budget > 0:
            chunk = self._pread(tail, min(budget, 1 << 20), tail.offset)
            if not chunk:
                break
            budget -= len(chunk)
            tail.offset += len(chunk)
            tail.last_growth_ns = now_ns
            self.stats.bytes_read += len(chunk)
            out.extend(self._split(tail, chunk, now_ns))
        if final and tail.buf and not tail.skipping:
            out.extend(self._line(tail, bytes(tail.buf), now_ns))
            tail.buf.clear()
        return out

    def _split(self, tail: _Tail, chunk: bytes, now_ns: int) -> list[Event]:
        out: list[Event] = []
        limit = self.config.max_line_bytes
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                break
            piece = chunk[start:nl]
            start = nl + 1
            if tail.skipping:  # the rest of an over-long line already emitted
                tail.skipping = False
                tail.buf.clear()
                continue
            if tail.buf:
                tail.buf += piece
                raw = bytes(tail.buf)
                tail.buf.clear()
            else:
                raw = piece
            out.extend(self._line(tail, raw, now_ns))
        rest = chunk[start:]
        if rest and not tail.skipping:
            tail.buf += rest
            if len(tail.buf) > limit:  # no newline in sight: emit the start, drop the rest
                raw = bytes(tail.buf)
                tail.buf.clear()
                tail.skipping = True
                out.extend(self._line(tail, raw, now_ns))
        return out

    def _line(self, tail: _Tail, raw: bytes, now_ns: int) -> list[Event]:
        limit = self.config.max_line_bytes
        if len(raw) > limit:
            raw = raw[:limit]
            self.stats.lines_truncated += 1
        self.stats.lines_read += 1
        text = raw.decode("utf-8", errors="replace")
        parsed = _parse(text)
        if parsed == "ignored":
            self.stats.lines_ignored += 1
            return []
        if parsed == "malformed":
            self.stats.lines_malformed += 1
            return []
        assert isinstance(parsed, ParsedCommLine)
        event = self._event(parsed, tail.path, now_ns)
        if event is None:
            return []
        self.stats.events += 1
        self.stats.by_type[parsed.event_type] = self.stats.by_type.get(parsed.event_type, 0) + 1
        return [event]

    def _event(self, p: ParsedCommLine, path: str, now_ns: int) -> Event | None:
        ts = now_ns
        if p.log_time is not None:
            stamped = log_time_ns(p.log_time, now_ns)
            lag = self.config.max_log_time_lag_s * 1e9
            if stamped is not None and now_ns - lag <= stamped <= now_ns + 2_000_000_000:
                ts = stamped
        gpu = p.cuda_dev if self.config.cuda_dev_is_gpu_index else None
        log_file = path if len(path) <= _SHORT else "..." + path[-(_SHORT - 3) :]
        try:
            payload = CommEvent(
                source=p.source,
                event_type=p.event_type,
                op=p.op[:_SHORT],
                seq=p.seq,
                peer_rank=p.peer_rank,
                peer=p.peer[:_SHORT],
                timeout_ms=p.timeout_ms,
                elapsed_ms=p.elapsed_ms,
                process_group=p.process_group[:_SHORT],
                pid=p.pid,
                log_file=log_file,
                message=p.message[:_LONG],
                host=p.host[:_SHORT],
                hca=p.hca[:_SHORT],
                cuda_dev=p.cuda_dev,
                ib_status=p.ib_status,
                vendor_err=p.vendor_err,
                pg_rank=p.pg_rank,
            )
            return self.factory.make(
                CommEventEvent, payload, ts, gpu=gpu, rank=p.rank, local_rank=p.local_rank
            )
        except ValidationError:
            self.stats.invalid_events += 1
            return None


def create_nccl_log_collector(
    config: NcclLogCollectorConfig, factory: EventFactory
) -> NcclLogCollector:
    """Factory used by the agent's component wiring."""
    return NcclLogCollector(config, factory)
