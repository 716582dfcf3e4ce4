"""One log line -> :class:`ParsedCommLine` (event type, rank, op/seq, peer, HCA, stamp), pure
and without I/O, plus the conversion of a printed stamp (local time or zoned) to epoch ns."""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from rankscope.schemas.comm_lines.patterns import (
    _ABORT_PHRASES,
    _ABORTED_ON_RANK_RE,
    _CLOSED_RE,
    _COMPLETION_RE,
    _FROM_RANK_RE,
    _GLOG_RE,
    _HCA_ASYNC_RE,
    _HCA_TAIL_RE,
    _MARKERS,
    _NCCL_BARE_RE,
    _NCCL_ERR_RE,
    _NCCL_RE,
    _NCCL_TESTS_RE,
    _NCCL_TS_RE,
    _OLD_RANK_RE,
    _OP_RE,
    _PG_RE,
    _RAN_FOR_RE,
    _REMOTE_PHRASES,
    _SEQ_RE,
    _SOCKET_PEER_RE,
    _TIMEOUT_RE,
    _VENDOR_RE,
    _WORK_SEQ_RE,
)
from rankscope.schemas.comm_lines.prefixes import LinePrefix, LogTime, strip_prefixes
from rankscope.schemas.payloads import CommEventType


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
    prefix = strip_prefixes(text)
    parsed = _parse_body(text, prefix)
    if not isinstance(parsed, ParsedCommLine):
        return parsed
    if prefix.log_time is None and (parsed.rank is not None or prefix.task is None):
        return parsed
    return replace(
        parsed,
        log_time=prefix.log_time or parsed.log_time,  # the outermost clock: zoned, with a year
        rank=parsed.rank if parsed.rank is not None else prefix.task,
    )


def _parse_body(text: str, prefix: LinePrefix) -> ParsedCommLine | _Skip:
    pos, rank, local_rank = prefix.end, prefix.rank, prefix.local_rank
    nccl = _NCCL_RE.search(text, pos) or _NCCL_BARE_RE.match(text, pos)
    if nccl is not None:
        return _parse_nccl(text, nccl, rank, local_rank)
    if "NCCL WARN" in text or "NCCL INFO" in text or "NCCL ABORT" in text:
        return "malformed"  # NCCL's marker behind a prefix we cannot read
    tests = _NCCL_TESTS_RE.search(text, pos) if "NCCL failure" in text else None
    if tests is not None:
        return ParsedCommLine(
            source="nccl",
            event_type="nccl_error",
            message=text[pos:].strip(),
            rank=rank,
            local_rank=local_rank,
            host=tests["host"] or "",
        )
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
    ts = _NCCL_TS_RE.search(text, 0, m.start("msg"))
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
        cuda_dev=_int(m.group("dev")),
        pid=_int(m.group("pid")) if "pid" in m.re.groupindex else None,
        tid=_int(m.group("tid")) if "tid" in m.re.groupindex else None,
        host=m.group("host") or "",
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
        closed = _CLOSED_RE.search(msg) or _SOCKET_PEER_RE.search(msg)
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
        aborted = _ABORTED_ON_RANK_RE.search(body)  # "communicator was aborted on rank N"
        if aborted is not None:
            pg_rank = int(aborted.group(1))
            rank = pg_rank if rank is None else rank
    message = body[prefix_end:].strip()

    source: Literal["nccl", "pytorch"] = "pytorch"
    event_type: CommEventType
    if (
        "Watchdog caught collective operation timeout" in body
        or "Timeout at NCCL work" in body
        or "timed out in blocking wait" in body
    ):
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
    """The stamp as ns since the epoch (its zone when printed, else local time; a missing year
    is the one that is not in the future), or None when it is not a valid date."""
    if not (1 <= stamp.month <= 12 and 1 <= stamp.day <= 31 and stamp.hour <= 23):
        return None
    year = stamp.year
    if year is None:
        year = time.localtime(now_ns / 1e9).tm_year
    fields = (stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second)
    try:
        if stamp.utc_offset_s is not None:
            secs = calendar.timegm((year, *fields, 0, 0, 0)) - stamp.utc_offset_s
        else:
            secs = int(time.mktime((year, *fields, 0, 0, -1)))
            if stamp.year is None and secs > now_ns / 1e9 + 86_400:
                secs = int(time.mktime((year - 1, *fields, 0, 0, -1)))
    except (OverflowError, ValueError):
        return None
    return secs * 1_000_000_000 + stamp.nanos
