"""The spool directory's files: its lock, recovery after a crash, the cursor, deleting segments.

Crash consistency: on open every segment is scanned; the first frame whose header is incomplete,
whose length runs past the end of the file, whose crc does not match, or whose sequence number
is out of order ends that segment: the file is truncated there (a torn tail after a crash) and
the lost bytes are counted in :attr:`SpoolDirectory.truncated_bytes` (reported by
:meth:`Spool.stats() <rankscope.collectors.spool.Spool.stats>`). ``cursor.json`` is replaced
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
from typing import NamedTuple

from rankscope.collectors.spool.segments import (
    _CRC_OFFSET,
    _CURSOR,
    _HEADER,
    _LOCK,
    _SEGMENT_SUFFIX,
    _fsync_dir,
    _Segment,
)

__all__ = ["Recovered", "SpoolDirectory", "SpoolError"]

log = logging.getLogger(__name__)


class SpoolError(RuntimeError):
    """The spool directory cannot be used (locked by another agent, unreadable, ...)."""


class Recovered(NamedTuple):
    """The queue position found on disk by :meth:`SpoolDirectory.recover`."""

    committed: int
    next_seq: int
    pending_events: int


def _private_dir(directory: Path) -> None:
    """Create ``directory`` 0700 (spooled telemetry is raw, unredacted; shared GPU nodes).

    Explicit chmod, so the umask does not matter; a looser existing directory is tightened
    with a warning.
    """
    directory.mkdir(parents=True, exist_ok=True)
    mode = directory.stat().st_mode & 0o777
    if mode != 0o700:
        if mode & 0o077:
            log.warning("spool directory %s had mode %o; tightened to 0700", directory, mode)
        os.chmod(directory, 0o700)


class SpoolDirectory:
    """What one spool directory holds on disk, and getting it back after a crash: the directory
    lock, the scan of every segment on open (torn tails truncated), the cursor file, deleting
    segments.

    It owns the state about files: the segment indexes (:attr:`segments`, oldest first; the
    :class:`~rankscope.collectors.spool.Spool` that owns this object appends frames to the newest
    one in place and adds them to :attr:`size`), the bytes on disk, the bytes cut off by
    recovery and the position last written to the cursor file. The queue position itself
    (committed, next sequence number) belongs to the ``Spool`` and is passed in. Not thread-safe
    on its own: the ``Spool`` calls it under its lock.

    Creating one creates the directory and takes its lock (:class:`SpoolError` when another
    agent holds it); :meth:`recover` must follow, :meth:`release_lock` ends it.
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.segments: list[_Segment] = []
        self.size = 0
        self.truncated_bytes = 0
        self.persisted_committed = -1
        _private_dir(self.directory)
        self._lock_fd = self._take_lock()

    # ----------------------------------------------------------------- open

    def _take_lock(self) -> int:
        fd = os.open(self.directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SpoolError(
                f"spool directory {self.directory} is in use by another agent "
                "(one spool per directory)"
            ) from exc
        return fd

    def release_lock(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def recover(self) -> Recovered:
        """Index every segment, truncating torn or corrupt tails, and load the cursor; returns
        the queue position found (the caller owns it from then on)."""
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
                self.truncated_bytes += path.stat().st_size
                path.unlink()
                continue
            segment = self._scan(path, first_seq)
            if segment.count == 0:
                path.unlink()
                continue
            self.segments.append(segment)
            self.size += segment.size
            expected_next = segment.last_seq + 1
        committed = self._load_cursor()
        if self.segments:
            first = self.segments[0].first_seq
            last = self.segments[-1].last_seq
            # Records below the oldest segment are gone (acked or dropped); a cursor beyond the
            # last record means the tail was lost in a crash: continue numbering after it so a
            # sequence number is never reused.
            committed = max(committed, first - 1)
            next_seq = max(last, committed) + 1
        else:
            next_seq = committed + 1
        self.persisted_committed = committed
        pending_events = sum(s.events_after(committed) for s in self.segments)
        self.delete_acked_segments(committed, keep_active=False)
        if self.truncated_bytes:
            log.warning(
                "spool %s: truncated %d corrupt or torn bytes",
                self.directory,
                self.truncated_bytes,
            )
        return Recovered(committed, next_seq, pending_events)

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
            self.truncated_bytes += total - pos
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

    def remove_segment(self, segment: _Segment) -> None:
        segment.close_reader()
        self.segments.remove(segment)
        self.size -= segment.size
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()

    def delete_acked_segments(self, committed: int, keep_active: bool) -> None:
        """Delete the oldest segments whose records all have ``seq <= committed``; with
        ``keep_active`` (the newest segment is open for writing) the newest one is kept."""
        while self.segments and self.segments[0].last_seq <= committed:
            segment = self.segments[0]
            if keep_active and segment is self.segments[-1]:
                return  # still being written: deleted once sealed
            self.remove_segment(segment)

    def persist_cursor(self, committed: int, force_sync: bool) -> None:
        """Write ``committed`` to the cursor file (atomically) unless it is there already."""
        if committed == self.persisted_committed:
            return
        path = self.directory / _CURSOR
        tmp = path.with_suffix(".tmp")
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(json.dumps({"committed": committed}))
            if force_sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if force_sync:
            _fsync_dir(self.directory)
        self.persisted_committed = committed
