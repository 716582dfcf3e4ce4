"""The spool itself: a bounded, thread-safe append / read / ack queue over the files of its
directory (a :class:`~rankscope.collectors.spool.directory.SpoolDirectory` it owns).

Bound and drop policy: the spool never holds more than ``max_bytes`` on disk (segments + frames).
When an append would exceed it, whole **oldest** segments are deleted, and the events in them that
had not been acknowledged are counted in :attr:`Spool.dropped_events`. Why the oldest: during a
long outage the newest telemetry is what explains the current state of the job (is it still
hung? did the link come back?), the stream workers route very late events aside anyway, and
deleting a whole segment is one ``unlink`` instead of a rewrite. Refusing the newest would freeze
the picture at the start of the outage. A single record larger than ``max_bytes - segment_bytes``
can never fit and is refused with :class:`RecordTooLargeError`.

Durability (``fsync``): ``"always"`` fsyncs every append and every cursor update (survives power
loss, costs one disk flush per batch); ``"interval"`` (default) fsyncs on the first append
after ``fsync_interval_s`` has passed, and on close (a power loss may lose the appends since the
last fsync, about one interval with the agent's heartbeat appending every few seconds; an agent
crash loses nothing, the data is in the page cache); ``"never"`` leaves it to the kernel.
Fully acknowledged segments are deleted; a cursor update is cheap (a rename).

Thread safety: every public method takes one lock, so collectors' threads may append while the
delivery thread reads and acknowledges. The directory object is only used under that lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from rankscope.collectors.spool.directory import SpoolDirectory, SpoolError
from rankscope.collectors.spool.segments import (
    _CRC_OFFSET,
    _HEADER,
    _MAX_META,
    SpoolRecord,
    _fsync_dir,
    _Segment,
    _segment_name,
    _write_all,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "FsyncPolicy",
    "RecordTooLargeError",
    "Spool",
    "SpoolStats",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
FsyncPolicy = Literal["always", "interval", "never"]


class RecordTooLargeError(ValueError):
    """One record can never fit within the spool's bound."""


@dataclass(frozen=True, slots=True)
class SpoolStats:
    """A consistent snapshot of the spool's counters."""

    size_bytes: int
    segments: int
    pending_records: int
    pending_events: int
    committed_seq: int
    last_seq: int
    appended_records: int
    dropped_records: int
    dropped_events: int
    truncated_bytes: int


class Spool:
    """A bounded, crash-safe, append-only queue of event batches on disk.

    ``append`` adds a record and returns its sequence number; ``read`` returns records after a
    given sequence number in order (the reader keeps its own "sent" position); ``ack(up_to)``
    marks every record up to ``up_to`` as delivered, persists that position and deletes segments
    that hold only acknowledged records.

    The spool owns the queue state (bound, sequence numbers, committed position, the open
    write descriptor, fsync bookkeeping, counters); its :class:`SpoolDirectory` owns the files
    (lock, segment indexes, bytes on disk, cursor file).
    """

    def __init__(
        self,
        directory: Path | str,
        max_bytes: int = DEFAULT_MAX_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        *,
        fsync: FsyncPolicy = "interval",
        fsync_interval_s: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if max_bytes <= 0 or segment_bytes <= 0:
            raise ValueError("max_bytes and segment_bytes must be positive")
        if segment_bytes * 2 > max_bytes:
            # At least two segments, so that dropping the oldest one frees room without
            # deleting the segment being written.
            raise ValueError(
                f"segment_bytes ({segment_bytes}) must be at most half of max_bytes ({max_bytes})"
            )
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f"unknown fsync policy {fsync!r}")
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync_policy: FsyncPolicy = fsync
        self.fsync_interval_s = fsync_interval_s
        self._clock = clock or time.monotonic
        self._lock = threading.RLock()
        self._write_fd: int | None = None
        self._dirty = False
        self._last_sync = self._clock()
        self._appended_records = 0
        self._dropped_records = 0
        self._dropped_events = 0
        self._corrupt: set[int] = set()
        self._closed = False
        self._dir = SpoolDirectory(directory)  # creates the directory, takes its lock
        try:
            self._committed, self._next_seq, self._pending_events = self._dir.recover()
        except BaseException:
            self._dir.release_lock()
            raise

    @property
    def directory(self) -> Path:
        """The spool directory."""
        return self._dir.directory

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Persist the cursor, sync and close the files, release the directory lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._dir.persist_cursor(self._committed, force_sync=self.fsync_policy != "never")
            if self._write_fd is not None:
                if self.fsync_policy != "never" and self._dirty:
                    os.fsync(self._write_fd)
                os.close(self._write_fd)
                self._write_fd = None
            for segment in self._dir.segments:
                segment.close_reader()
            self._dir.release_lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ----------------------------------------------------------------- writing

    def append(self, data: bytes, n_events: int, meta: bytes = b"") -> int:
        """Write one batch (``n_events`` events) and return its sequence number.

        May delete the oldest segments to stay within ``max_bytes`` (counted as dropped).
        """
        if n_events < 0:
            raise ValueError("n_events must be >= 0")
        if len(meta) > _MAX_META:
            raise ValueError(f"meta is limited to {_MAX_META} bytes")
        frame_size = _HEADER.size + len(meta) + len(data)
        if frame_size > self.max_bytes - self.segment_bytes:
            raise RecordTooLargeError(
                f"a {frame_size}-byte record cannot fit in a spool of {self.max_bytes} bytes "
                f"with {self.segment_bytes}-byte segments"
            )
        with self._lock:
            self._check_open()
            self._make_room(frame_size)
            active = self._active_for(frame_size)
            seq = self._next_seq
            body = struct.pack("<QIH", seq, n_events, len(meta)) + meta + data
            header = struct.pack("<II", len(data), zlib.crc32(body))
            assert self._write_fd is not None
            try:
                _write_all(self._write_fd, header + body)
            except OSError:
                # Disk full or I/O error: cut a partial frame off again, so that the records
                # appended after it are not lost behind a torn frame at the next recovery.
                with contextlib.suppress(OSError):
                    os.ftruncate(self._write_fd, active.size)
                raise
            active.offsets.append(active.size)
            active.events.append(n_events)
            active.size += frame_size
            self._dir.size += frame_size
            self._next_seq += 1
            self._pending_events += n_events
            self._appended_records += 1
            self._dirty = True
            self._maybe_sync()
            return seq

    def _active_for(self, frame_size: int) -> _Segment:
        """The segment to append to: the open one, or a new one when it is full (or after a
        restart, the newest one on disk if it continues the sequence and has room)."""
        if self._write_fd is not None:
            active = self._dir.segments[-1]
            if active.count == 0 or active.size + frame_size <= self.segment_bytes:
                return active
            self._seal_active()
        elif self._dir.segments:
            last = self._dir.segments[-1]
            if last.last_seq == self._next_seq - 1 and last.size + frame_size <= self.segment_bytes:
                self._write_fd = os.open(last.path, os.O_WRONLY | os.O_APPEND)
                return last
        active = _Segment(self.directory / _segment_name(self._next_seq), self._next_seq)
        self._write_fd = os.open(active.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(self._write_fd, 0o600)  # umask-independent: raw telemetry stays private
        self._dir.segments.append(active)
        if self.fsync_policy == "always":
            _fsync_dir(self.directory)
        # Sealed segments whose records were all acknowledged can go now.
        self._dir.delete_acked_segments(self._committed, keep_active=self._write_fd is not None)
        return active

    def _seal_active(self) -> None:
        if self._write_fd is not None:
            if self.fsync_policy != "never" and self._dirty:
                os.fsync(self._write_fd)
                self._dirty = False
            os.close(self._write_fd)
            self._write_fd = None

    def _make_room(self, frame_size: int) -> None:
        """Delete the oldest segments until ``frame_size`` more bytes fit in ``max_bytes``."""
        while self._dir.segments and self._dir.size + frame_size > self.max_bytes:
            oldest = self._dir.segments[0]
            if oldest is self._dir.segments[-1] and self._write_fd is not None:
                self._seal_active()  # the active segment is the only one: start a new one
            lost = oldest.events_after(self._committed)
            lost_records = max(0, oldest.last_seq - max(self._committed, oldest.first_seq - 1))
            self._dir.remove_segment(oldest)
            if lost_records:
                self._dropped_records += lost_records
                self._dropped_events += lost
                self._pending_events -= lost
                log.warning(
                    "spool full (%d bytes): dropped %d undelivered events (%d batches), seq %d..%d",
                    self.max_bytes,
                    lost,
                    lost_records,
                    max(oldest.first_seq, self._committed + 1),
                    oldest.last_seq,
                )
            # The dropped records count as consumed: the cursor moves past them.
            self._committed = max(self._committed, oldest.last_seq)

    def _maybe_sync(self) -> None:
        if self._write_fd is None or not self._dirty:
            return
        if self.fsync_policy == "always" or (
            self.fsync_policy == "interval"
            and self._clock() - self._last_sync >= self.fsync_interval_s
        ):
            os.fsync(self._write_fd)
            self._dir.persist_cursor(self._committed, force_sync=True)
            self._dirty = False
            self._last_sync = self._clock()

    def sync(self) -> None:
        """fsync the active segment and the cursor now, whatever the policy."""
        with self._lock:
            self._check_open()
            if self._write_fd is not None:
                os.fsync(self._write_fd)
            self._dirty = False
            self._dir.persist_cursor(self._committed, force_sync=True)
            self._last_sync = self._clock()

    # ----------------------------------------------------------------- reading

    def read(
        self, after: int | None = None, max_records: int = 100, max_bytes: int | None = None
    ) -> list[SpoolRecord]:
        """Up to ``max_records`` records with ``seq > after`` (default: the committed position),
        in sequence order. Records dropped by the bound are skipped. ``max_bytes`` caps the
        payload bytes returned (at least one record is always returned when one is pending).
        """
        out: list[SpoolRecord] = []
        with self._lock:
            self._check_open()
            seq = max(self._committed if after is None else after, self._committed) + 1
            budget = max_bytes
            for segment in self._dir.segments:
                if segment.last_seq < seq:
                    continue
                seq = max(seq, segment.first_seq)
                while seq <= segment.last_seq and len(out) < max_records:
                    record = self._read_record(segment, seq - segment.first_seq)
                    if record is None:  # bit rot since open: skip the record, counted
                        seq += 1
                        continue
                    if budget is not None and out and len(record.data) > budget:
                        return out
                    out.append(record)
                    if budget is not None:
                        budget -= len(record.data)
                    seq += 1
                if len(out) >= max_records:
                    break
        return out

    def _read_record(self, segment: _Segment, index: int) -> SpoolRecord | None:
        if segment.read_fd is None:
            segment.read_fd = os.open(segment.path, os.O_RDONLY)
        offset = segment.offsets[index]
        end = segment.offsets[index + 1] if index + 1 < len(segment.offsets) else segment.size
        frame = os.pread(segment.read_fd, end - offset, offset)
        length, crc, seq, n_events, meta_len = _HEADER.unpack_from(frame, 0)
        expected = segment.first_seq + index
        if zlib.crc32(memoryview(frame)[_CRC_OFFSET:]) != crc or seq != expected:
            if expected not in self._corrupt:
                self._corrupt.add(expected)
                log.error(
                    "spool record %d in %s fails its crc; skipping it", expected, segment.path
                )
                self._dropped_records += 1
                self._dropped_events += segment.events[index]
            return None
        start = _HEADER.size
        return SpoolRecord(
            seq=seq,
            n_events=n_events,
            meta=bytes(frame[start : start + meta_len]),
            data=bytes(frame[start + meta_len : start + meta_len + length]),
        )

    def pending(self, batch: int = 256) -> Iterator[SpoolRecord]:
        """Iterate every record not yet acknowledged, in order (reads ``batch`` at a time)."""
        after: int | None = None
        while True:
            records = self.read(after, max_records=batch)
            if not records:
                return
            yield from records
            after = records[-1].seq

    def peek(self) -> SpoolRecord | None:
        """The oldest record not yet acknowledged, or None."""
        records = self.read(max_records=1)
        return records[0] if records else None

    # ----------------------------------------------------------------- acknowledging

    def ack(self, up_to: int) -> int:
        """Every record with ``seq <= up_to`` was delivered: move the cursor, free segments.
        Returns the number of events this acknowledged (0 when ``up_to`` is not new)."""
        with self._lock:
            self._check_open()
            up_to = min(up_to, self._next_seq - 1)
            if up_to <= self._committed:
                return 0
            acked = 0
            for segment in self._dir.segments:
                if segment.first_seq > up_to:
                    break
                acked += segment.events_between(self._committed, up_to)
            self._pending_events -= acked
            self._committed = up_to
            self._dir.delete_acked_segments(self._committed, keep_active=self._write_fd is not None)
            self._dir.persist_cursor(self._committed, force_sync=self.fsync_policy == "always")
            return acked

    # ----------------------------------------------------------------- introspection

    def _check_open(self) -> None:
        if self._closed:
            raise SpoolError(f"spool {self.directory} is closed")

    @property
    def committed_seq(self) -> int:
        """Every record up to this sequence number was acknowledged (or dropped)."""
        with self._lock:
            return self._committed

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest record ever appended (0 before the first)."""
        with self._lock:
            return self._next_seq - 1

    @property
    def pending_events(self) -> int:
        """Events written but not yet acknowledged (and not dropped)."""
        with self._lock:
            return self._pending_events

    @property
    def pending_records(self) -> int:
        with self._lock:
            return self._next_seq - 1 - self._committed

    @property
    def dropped_events(self) -> int:
        """Undelivered events deleted to respect ``max_bytes`` since this spool was opened."""
        with self._lock:
            return self._dropped_events

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._dir.size

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(
                size_bytes=self._dir.size,
                segments=len(self._dir.segments),
                pending_records=self._next_seq - 1 - self._committed,
                pending_events=self._pending_events,
                committed_seq=self._committed,
                last_seq=self._next_seq - 1,
                appended_records=self._appended_records,
                dropped_records=self._dropped_records,
                dropped_events=self._dropped_events,
                truncated_bytes=self._dir.truncated_bytes,
            )
