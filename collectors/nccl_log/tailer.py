"""Following log files: glob discovery (``%h``/``%p`` expansion), offsets per (device, inode),
rotation, truncation, partial and over-long lines, idle descriptors; complete lines go to the
collector's ``_line``."""

from __future__ import annotations

import contextlib
import glob
import os
import stat
from dataclasses import dataclass, field

from rankscope.collectors.base import BaseCollector
from rankscope.collectors.nccl_log.config import NcclLogCollectorConfig
from rankscope.schemas.events import Event


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


class _Tailer(BaseCollector):
    """The file-following half of :class:`~rankscope.collectors.nccl_log.NcclLogCollector`."""

    config: NcclLogCollectorConfig
    stats: NcclLogStats
    _patterns: list[str]
    _tails: dict[str, _Tail]
    _first_poll: bool

    def _line(self, tail: _Tail, raw: bytes, now_ns: int) -> list[Event]:
        """One complete line (or the start of an over-long one) -> events; the collector's."""
        raise NotImplementedError

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
