"""The three kernel-log sources behind one small interface: ``/dev/kmsg`` records, ``journalctl
-k -o json --follow`` and a followed text file. Each ``read(now_ns)`` is non-blocking and bounded
(``max_records_per_poll``, ``max_read_bytes``); none raises for an unavailable source."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rankscope.collectors.kernel_log.config import KernelLogCollectorConfig
from rankscope.collectors.nccl_log.config import NcclLogCollectorConfig
from rankscope.collectors.nccl_log.tailer import NcclLogStats, _Tail, _Tailer
from rankscope.schemas.events import Event


@dataclass(frozen=True)
class KernelRecord:
    """One kernel message: its text (kmsg escapes undone), its own time when the source says
    (epoch ns), and where it came from."""

    text: str
    ts_ns: int | None
    source: str


@dataclass
class ReaderStats:
    """What a reader read and lost (it never raises)."""

    reads: int = 0
    records: int = 0
    bytes_read: int = 0
    #: kmsg: records overwritten in the ring buffer before we read them (sequence gaps)
    records_lost: int = 0
    #: kmsg: records skipped because a resume position says they were already read
    records_skipped: int = 0
    #: kmsg: records not from the kernel facility (userspace writes to /dev/kmsg)
    records_not_kernel: int = 0
    records_malformed: int = 0
    #: polls that stopped at the per-poll bound (more may be waiting: it comes next poll)
    bounded: int = 0
    read_errors: int = 0
    restarts: int = 0
    last_error: str = ""


class KernelLogReader(Protocol):
    name: str
    stats: ReaderStats

    def open(self) -> None:
        """Opens the source; raises OSError (with the reason) when it is not usable."""

    def read(self, now_ns: int) -> list[KernelRecord]: ...

    def state(self) -> dict[str, Any]:
        """The resume position to persist (JSON-able)."""

    def close(self) -> None: ...


def read_boot_id(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _boottime_offset_ns() -> int:
    """epoch ns - CLOCK_BOOTTIME ns (what a kmsg usec stamp is added to)."""
    return time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME)


_KMSG_ESC = re.compile(rb"\\x([0-9a-fA-F]{2})")


def _unescape_kmsg(raw: bytes) -> bytes:
    return _KMSG_ESC.sub(lambda m: bytes([int(m[1], 16)]), raw)


# -- /dev/kmsg -------------------------------------------------------------------------------


class KmsgReader:
    """``/dev/kmsg``: every ``read()`` returns one record ``prio,seq,usec,flags[,..];text\\n``
    (plus `` KEY=value`` continuation lines); ``EAGAIN`` when none is waiting, ``EPIPE`` when the
    next record was overwritten (the sequence gap counts what was lost). Starts at the end unless
    ``from_start``; with a saved (boot id, seq) of this boot it resumes after that seq.
    A regular file of records works too (tests): reads then return several records."""

    name = "kmsg"

    def __init__(self, config: KernelLogCollectorConfig, resume: dict[str, Any] | None) -> None:
        self.config = config
        self.stats = ReaderStats()
        self.path = config.kmsg_path
        self.boot_id = read_boot_id(config.boot_id_path)
        self.last_seq: int | None = None
        self._skip_upto: int | None = None
        if resume and resume.get("boot_id") == self.boot_id and self.boot_id:
            seq = resume.get("seq")
            if isinstance(seq, int) and seq >= 0:
                self._skip_upto = seq
                self.last_seq = seq
        self._fd: int | None = None
        self._buf = b""
        self._offset_ns = _boottime_offset_ns()

    def open(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if self._skip_upto is None and not self.config.from_start:
                os.lseek(fd, 0, os.SEEK_END)
            # resume or from_start: SEEK_SET is the oldest record still in the buffer (the
            # position a fresh open already has)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def _read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)

    def read(self, now_ns: int) -> list[KernelRecord]:
        out: list[KernelRecord] = []
        if self._fd is None:
            return out
        self.stats.reads += 1
        self._offset_ns = _boottime_offset_ns()  # per poll: NTP moves the wall clock
        budget = self.config.max_read_bytes
        left = self.config.max_records_per_poll
        while True:
            left = self._records(out, left)  # whole records already buffered first
            if left <= 0 or budget <= 0:
                self.stats.bounded += 1
                return out
            try:
                chunk = self._read(self._fd, 16 * 1024)
            except BlockingIOError:
                return out
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.EINTR):  # overwritten: the seq gap counts it
                    continue
                self.stats.read_errors += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                return out
            if not chunk:  # a regular file at its end
                return out
            budget -= len(chunk)
            self.stats.bytes_read += len(chunk)
            self._buf += chunk

    def _records(self, out: list[KernelRecord], left: int) -> int:
        """Parses whole buffered records (at most ``left``); returns how many more may come."""
        buf = self._buf
        pos = 0
        while left > 0:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            line = buf[pos:nl]
            pos = nl + 1
            if not line or line[:1] == b" ":  # continuation (dictionary) line
                continue
            left -= 1
            rec = self._record(line)
            if rec is not None:
                out.append(rec)
        self._buf = buf[pos:]
        return left

    def _record(self, line: bytes) -> KernelRecord | None:
        head, sep, text = line.partition(b";")
        fields = head.split(b",")
        if not sep or len(fields) < 3:
            self.stats.records_malformed += 1
            return None
        try:
            prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
        except ValueError:
            self.stats.records_malformed += 1
            return None
        if self._skip_upto is not None:
            if seq <= self._skip_upto:
                self.stats.records_skipped += 1
                return None
            self._skip_upto = None
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.stats.records_lost += seq - self.last_seq - 1
        self.last_seq = seq
        self.stats.records += 1
        if prio >> 3 != 0:  # facility: 0 = kernel; userspace writes are LOG_USER or above
            self.stats.records_not_kernel += 1
            return None
        decoded = _unescape_kmsg(text).decode("utf-8", errors="replace")
        return KernelRecord(decoded, self._offset_ns + usec * 1000, self.name)

    def state(self) -> dict[str, Any]:
        return {"boot_id": self.boot_id, "seq": self.last_seq}

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


# -- journalctl -k -o json --follow ----------------------------------------------------------


class JournalReader:
    """``journalctl -k -o json --follow`` as a child process, its stdout read non-blocking.

    Each line is one JSON entry: ``MESSAGE`` (a string, or an array of byte values when the
    message is not valid UTF-8 or has control characters), ``__REALTIME_TIMESTAMP`` (epoch usec,
    a string), ``__CURSOR``, ``_BOOT_ID``. The last cursor is the resume position
    (``--after-cursor``); without one, ``--lines=0`` (the end) or ``--no-tail`` (from_start).
    A child that exits is started again after ``restart_backoff_s``, after the last cursor.
    Entries whose ``SYSLOG_FACILITY`` is not 0 (userspace writes to /dev/kmsg) are dropped."""

    name = "journal"

    def __init__(
        self,
        config: KernelLogCollectorConfig,
        resume: dict[str, Any] | None,
        argv: list[str] | None = None,
    ) -> None:
        self.config = config
        self.stats = ReaderStats()
        cursor = (resume or {}).get("cursor")
        self.cursor: str | None = cursor if isinstance(cursor, str) and cursor else None
        self.boot_id = ""
        self._argv_override = argv
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._next_start = 0.0

    def argv(self) -> list[str]:
        if self._argv_override is not None:
            return list(self._argv_override)
        argv = [*self.config.journalctl, "-k", "-o", "json", "--follow", "--no-pager"]
        if self.cursor:
            argv.append(f"--after-cursor={self.cursor}")
        elif self.config.from_start:
            argv.append("--no-tail")
        else:
            argv.append("--lines=0")
        return argv

    def open(self) -> None:
        proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        if proc.stderr is not None:
            os.set_blocking(proc.stderr.fileno(), False)
        self._proc = proc

    def _stderr(self) -> str:
        if self._proc is None or self._proc.stderr is None:
            return ""
        try:
            data = self._proc.stderr.read(4096) or b""
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace").strip()

    def read(self, now_ns: int) -> list[KernelRecord]:
        out: list[KernelRecord] = []
        if self._proc is None:
            if time.monotonic() < self._next_start:
                return out
            try:
                self.open()
                self.stats.restarts += 1
            except OSError as e:
                self.stats.read_errors += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                self._next_start = time.monotonic() + self.config.restart_backoff_s
                return out
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        self.stats.reads += 1
        budget = self.config.max_read_bytes
        eof = False
        while len(out) < self.config.max_records_per_poll:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                rec = self._entry(line)
                if rec is not None:
                    out.append(rec)
                continue
            if budget <= 0:
                break
            try:
                chunk = os.read(proc.stdout.fileno(), min(budget, 64 * 1024))
            except BlockingIOError:
                return out
            except OSError as e:
                self.stats.read_errors += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                eof = True
                break
            if not chunk:
                eof = True
                break
            budget -= len(chunk)
            self.stats.bytes_read += len(chunk)
            self._buf += chunk
        if eof:
            if self._buf.strip():
                rec = self._entry(self._buf)
                if rec is not None:
                    out.append(rec)
            self._buf = b""
            err = self._stderr()
            code = proc.poll()
            if code is None:
                with contextlib.suppress(OSError):
                    proc.wait(timeout=1)
                code = proc.returncode
            if code:
                self.stats.read_errors += 1
                self.stats.last_error = f"journalctl exited {code}: {err[:500]}"
            self._reap()
            self._next_start = time.monotonic() + self.config.restart_backoff_s
        else:
            self.stats.bounded += 1
        return out

    def _entry(self, line: bytes) -> KernelRecord | None:
        try:
            entry = json.loads(line)
        except ValueError:
            self.stats.records_malformed += 1
            return None
        if not isinstance(entry, dict):
            self.stats.records_malformed += 1
            return None
        cursor = entry.get("__CURSOR")
        if isinstance(cursor, str) and cursor:
            self.cursor = cursor
        boot = entry.get("_BOOT_ID")
        if isinstance(boot, str):
            self.boot_id = boot
        self.stats.records += 1
        facility = entry.get("SYSLOG_FACILITY")
        if isinstance(facility, str) and facility not in ("", "0"):
            # a userspace write to /dev/kmsg: journald keeps its facility (never 0)
            self.stats.records_not_kernel += 1
            return None
        msg = entry.get("MESSAGE")
        if isinstance(msg, list):
            try:
                text = bytes(msg).decode("utf-8", errors="replace")
            except (TypeError, ValueError):
                self.stats.records_malformed += 1
                return None
        elif isinstance(msg, str):
            text = msg
        else:
            self.stats.records_malformed += 1
            return None
        ts: int | None = None
        stamp = entry.get("__REALTIME_TIMESTAMP")
        if isinstance(stamp, str) and stamp.isdigit():
            ts = int(stamp) * 1000
        return KernelRecord(text, ts, self.name)

    def state(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "boot_id": self.boot_id}

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def close(self) -> None:
        self._reap()


# -- a followed text file (/var/log/kern.log) ------------------------------------------------


class _LineTailer(_Tailer):
    """The NCCL collector's file follower (rotation, truncation, partial lines), collecting
    lines instead of making events."""

    def __init__(self, config: NcclLogCollectorConfig) -> None:
        self.config = config
        self.stats = NcclLogStats()
        self._patterns = list(config.paths)
        self._tails: dict[str, _Tail] = {}
        self._first_poll = True
        self.lines: list[bytes] = []

    def _line(self, tail: _Tail, raw: bytes, now_ns: int) -> list[Event]:
        self.lines.append(raw)
        return []

    def stop(self) -> None:
        for tail in self._tails.values():
            self._close(tail)


class FileReader:
    """Follows text files (``paths``, globs) with the NCCL collector's tailer; the per-poll
    bound is ``max_read_bytes`` per file. A line's own syslog stamp is not read (its text is
    parsed with any prefix): the event time is the read time."""

    name = "file"

    def __init__(self, config: KernelLogCollectorConfig) -> None:
        self.config = config
        self.stats = ReaderStats()
        self._tailer = _LineTailer(
            NcclLogCollectorConfig(
                paths=config.paths,
                from_start=config.from_start,
                max_line_bytes=max(config.max_message_bytes, 64),
                max_read_bytes=max(config.max_read_bytes, 4096),
            )
        )

    def open(self) -> None:
        if not any(Path(p).exists() for p in self.config.paths) and not any(
            any(ch in p for ch in "*?[") for p in self.config.paths
        ):
            raise FileNotFoundError(f"none of {self.config.paths} exists")
        # a file that exists but cannot be read is an error now, not silence later
        for p in self.config.paths:
            if Path(p).is_file() and not os.access(p, os.R_OK):
                raise PermissionError(f"{p} is not readable")

    def read(self, now_ns: int) -> list[KernelRecord]:
        self.stats.reads += 1
        before = self._tailer.stats.read_errors
        self._tailer.poll(now_ns)
        if self._tailer.stats.read_errors > before:
            self.stats.read_errors += self._tailer.stats.read_errors - before
        lines, self._tailer.lines = self._tailer.lines, []
        self.stats.bytes_read = self._tailer.stats.bytes_read
        self.stats.records += len(lines)
        return [
            KernelRecord(raw.decode("utf-8", errors="replace"), None, self.name) for raw in lines
        ]

    def state(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self._tailer.stop()
