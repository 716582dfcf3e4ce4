"""The spool's on-disk format: segment files of CRC-checked record frames, and a segment's index.

Layout of the spool directory::

    00000000000000000001.seg   segment files, named by the sequence number of their first record
    00000000000000004711.seg   (append-only; the newest one is the "active" segment)
    cursor.json                {"committed": <seq>}: every record with seq <= committed was acked
    LOCK                       flock()ed while open: one agent per spool directory

Record frame (little-endian), one ``os.write`` per record so a crash tears at most the tail::

    u32 payload length | u32 crc32 | u64 seq | u32 n_events | u16 meta length | meta | payload

The crc covers everything after itself (seq, counts, meta, payload). ``payload`` is one event
batch in the Kafka wire format (``rankscope.schemas.dump_events(list)``); ``meta`` is small opaque
routing data for the reader (the agent stores the event kind and the partition key there, so a
replay does not have to parse the JSON). Sequence numbers are consecutive across segments and
never reused, even after every record was acknowledged (the next one continues from
``committed``).
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SpoolRecord"]

_HEADER = struct.Struct("<IIQIH")  # length, crc32, seq, n_events, meta length
_CRC_OFFSET = 8  # the crc covers the header from the seq field on, then meta and payload
_SEGMENT_SUFFIX = ".seg"
_CURSOR = "cursor.json"
_LOCK = "LOCK"
_MAX_META = 0xFFFF


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One spooled batch: ``data`` is the Kafka value, ``meta`` the writer's routing data."""

    seq: int
    n_events: int
    data: bytes
    meta: bytes = b""


class _Segment:
    """An index of one segment file: offsets and event counts of its records, by position."""

    __slots__ = ("events", "first_seq", "offsets", "path", "read_fd", "size")

    def __init__(self, path: Path, first_seq: int) -> None:
        self.path = path
        self.first_seq = first_seq
        self.offsets = array("Q")
        self.events = array("I")
        self.size = 0
        self.read_fd: int | None = None

    @property
    def count(self) -> int:
        return len(self.offsets)

    @property
    def last_seq(self) -> int:
        """Sequence number of the last record (``first_seq - 1`` when empty)."""
        return self.first_seq + len(self.offsets) - 1

    def events_after(self, seq: int) -> int:
        """Events of the records in this segment with a sequence number above ``seq``."""
        start = max(0, seq + 1 - self.first_seq)
        if start >= len(self.events):
            return 0
        return sum(self.events[start:])

    def events_between(self, low: int, high: int) -> int:
        """Events of the records with ``low < seq <= high``."""
        start = max(0, low + 1 - self.first_seq)
        stop = min(len(self.events), high + 1 - self.first_seq)
        if stop <= start:
            return 0
        return sum(self.events[start:stop])

    def close_reader(self) -> None:
        if self.read_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.read_fd = None


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{_SEGMENT_SUFFIX}"


def _fsync_dir(path: Path) -> None:
    """Make a rename/creation/unlink in ``path`` durable (POSIX needs the directory synced)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
