"""The spool directory's files: its lock, recovery after a crash, the cursor, deleting segments.

Crash consistency: on open every segment is scanned; the first frame whose header is incomplete,
whose length runs past the end of the file, whose crc does not match, or whose sequence number
is out of order ends that segment: the file is truncated there (a torn tail after a crash) and
the lost bytes are counted in :attr:`Spool.truncated_bytes`. ``cursor.json`` is replaced
atomically (write to a temporary file, ``os.replace``); if it is missing or unreadable every
record still on disk is replayed (duplicates, never loss).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import zlib
from pathlib import Path

from rankscope.collectors.spool.segments import (
    _CRC_OFFSET,
    _CURSOR,
    _HEADER,
    _LOCK,
    _SEGMENT_SUFFIX,
    _fsync_dir,
    _Segment,
)

__all__ = ["SpoolDirectory", "SpoolError"]

log = logging.getLogger(__name__)


class SpoolError(RuntimeError):
    """The spool directory cannot be used (locked by another agent, unreadable, ...)."""


class SpoolDirectory:
    """What one spool directory holds on disk, and getting it back after a crash: the directory
    lock, the scan of every segment on open (torn tails truncated), the cursor file, deleting
    segments. :class:`~rankscope.collectors.spool.Spool` builds on it and sets the attributes
    declared here."""

    directory: Path
    _lock_fd: int
    _write_fd: int | None
    _segments: list[_Segment]
    _size: int
    _committed: int
    _persisted_committed: int
    _next_seq: int
    _pending_events: int
    _truncated_bytes: int

    # ----------------------------------------------------------------- open

    def _take_lock(self) -> int:
        fd = os.open(self.directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SpoolError(
                f"spool directory {self.directory} is in use by another agent "
                "(one spool per directory)"
            ) from exc
        return fd

    def _release_lock(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def _recover(self) -> None:
        """Index every segment, truncating torn or corrupt tails, and load the cursor."""
        found: list[tuple[int, Path]] = []
        for path in self.directory.glob(f"*{_SEGMENT_SUFFIX}"):
            stem = path.name[: -len(_SEGMENT_SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), path))
            else:
                log.warning("ignoring stray file in spool: %s", path)
        found.sort()
        expected_next: int | None = None
        for first_seq, path in found:
            if expected_next is not None and first_seq < expected_next:
                # Overlaps the previous segment: only possible through outside tampering.
                log.warning("spool segment %s overlaps its predecessor; removing it", path)
                self._truncated_bytes += path.stat().st_size
                path.unlink()
                continue
            segment = self._scan(path, first_seq)
            if segment.count == 0:
                path.unlink()
                continue
            self._segments.append(segment)
            self._size += segment.size
            expected_next = segment.last_seq + 1
        committed = self._load_cursor()
        if self._segments:
            first = self._segments[0].first_seq
            last = self._segments[-1].last_seq
            # Records below the oldest segment are gone (acked or dropped); a cursor beyond the
            # last record means the tail was lost in a crash: continue numbering after it so a
            # sequence number is never reused.
            committed = max(committed, first - 1)
            self._next_seq = max(last, committed) + 1
        else:
            self._next_seq = committed + 1
        self._committed = committed
        self._persisted_committed = committed
        self._pending_events = sum(s.events_after(committed) for s in self._segments)
        self._delete_acked_segments(keep_active=False)
        if self._truncated_bytes:
            log.warning(
                "spool %s: truncated %d corrupt or torn bytes",
                self.directory,
                self._truncated_bytes,
            )

    def _scan(self, path: Path, first_seq: int) -> _Segment:
        segment = _Segment(path, first_seq)
        data = path.read_bytes()
        pos = 0
        expect = first_seq
        total = len(data)
        while pos < total:
            if pos + _HEADER.size > total:
                break
            length, crc, seq, n_events, meta_len = _HEADER.unpack_from(data, pos)
            end = pos + _HEADER.size + meta_len + length
            if end > total or seq != expect:
                break
            if zlib.crc32(data[pos + _CRC_OFFSET : end]) != crc:
                break
            segment.offsets.append(pos)
            segment.events.append(n_events)
            expect += 1
            pos = end
        if pos < total:
            self._truncated_bytes += total - pos
            log.warning(
                "spool segment %s: corrupt or torn record at byte %d; truncating %d bytes",
                path,
                pos,
                total - pos,
            )
            with path.open("r+b") as fh:
                fh.truncate(pos)
                os.fsync(fh.fileno())
        segment.size = pos
        return segment

    def _load_cursor(self) -> int:
        path = self.directory / _CURSOR
        try:
            value = json.loads(path.read_text())["committed"]
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("spool cursor %s unreadable (%s); replaying everything on disk", path, exc)
            return 0
        return int(value) if isinstance(value, int) and value >= 0 else 0

    # ----------------------------------------------------------------- segments and cursor

    def _remove_segment(self, segment: _Segment) -> None:
        segment.close_reader()
        self._segments.remove(segment)
        self._size -= segment.size
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()

    def _delete_acked_segments(self, keep_active: bool) -> None:
        while self._segments and self._segments[0].last_seq <= self._committed:
            segment = self._segments[0]
            if keep_active and segment is self._segments[-1] and self._write_fd is not None:
                return  # still being written: deleted once sealed
            self._remove_segment(segment)

    def _persist_cursor(self, force_sync: bool) -> None:
        if self._committed == self._persisted_committed:
            return
        path = self.directory / _CURSOR
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as fh:
            fh.write(json.dumps({"committed": self._committed}))
            if force_sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if force_sync:
            _fsync_dir(self.directory)
        self._persisted_committed = self._committed
