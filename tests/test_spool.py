"""The agent's on-disk spool: order, replay after reopen, the bound, torn tails, concurrency."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from rankscope.collectors.spool import RecordTooLargeError, Spool, SpoolError

KIB = 1024


def _payload(i: int, size: int = 100) -> bytes:
    head = f"[{i}]".encode()
    return head + b" " * max(0, size - len(head))


def _seqs_and_data(spool: Spool) -> list[tuple[int, bytes]]:
    return [(r.seq, r.data) for r in spool.pending()]


def test_records_come_back_in_order_with_meta_and_counts(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=4 * KIB) as spool:
        seqs = [spool.append(_payload(i), n_events=i + 1, meta=f"k{i}".encode()) for i in range(50)]
        assert seqs == list(range(1, 51))
        records = list(spool.pending())
        assert [r.seq for r in records] == seqs
        assert [r.data for r in records] == [_payload(i) for i in range(50)]
        assert [r.meta for r in records] == [f"k{i}".encode() for i in range(50)]
        assert spool.pending_events == sum(range(1, 51))
        assert spool.stats().segments > 1  # 50 x ~120 bytes over 4 KiB segments
        # A reader keeps its own position: read after seq 10, a few at a time.
        assert [r.seq for r in spool.read(after=10, max_records=3)] == [11, 12, 13]
        assert spool.peek() is not None and spool.peek().seq == 1  # type: ignore[union-attr]


def test_ack_persists_and_reopen_replays_only_unacked(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=2 * KIB) as spool:
        for i in range(40):
            spool.append(_payload(i), n_events=2)
        spool.ack(25)
        assert spool.pending_events == 15 * 2
        assert spool.committed_seq == 25
        segments_after_ack = spool.stats().segments
    # Fully acknowledged segments were deleted from disk.
    assert len(list(tmp_path.glob("*.seg"))) == segments_after_ack

    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=2 * KIB) as spool:
        assert spool.committed_seq == 25
        assert spool.pending_events == 30
        assert _seqs_and_data(spool) == [(i + 1, _payload(i)) for i in range(25, 40)]
        # Numbering continues; nothing is reused.
        assert spool.append(_payload(99), 1) == 41
        spool.ack(41)
        assert spool.pending_events == 0
        assert spool.peek() is None

    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=2 * KIB) as spool:
        assert spool.peek() is None
        assert spool.append(b"[]", 0) == 42  # fully acked spool still never reuses a seq


def test_bound_drops_oldest_segments_and_counts_dropped_events(tmp_path: Path) -> None:
    max_bytes, segment = 16 * KIB, 4 * KIB
    with Spool(tmp_path, max_bytes=max_bytes, segment_bytes=segment) as spool:
        n = 400
        for i in range(n):
            spool.append(_payload(i, 200), n_events=3)
            assert spool.size_bytes <= max_bytes
        stats = spool.stats()
        assert stats.dropped_events > 0
        assert stats.dropped_events == 3 * stats.dropped_records
        kept = list(spool.pending())
        # Newest kept, oldest gone, no gap inside what is kept, and the books balance.
        assert kept[-1].seq == n
        assert [r.seq for r in kept] == list(range(kept[0].seq, n + 1))
        assert stats.dropped_records + len(kept) == n
        assert spool.pending_events == 3 * len(kept)
        assert spool.committed_seq == kept[0].seq - 1
        # Acknowledged records are not counted as dropped when their segment goes later.
        firsts = sorted(int(p.name.split(".")[0]) for p in tmp_path.glob("*.seg"))
        acked = firsts[0] + 5  # part of the oldest segment
        spool.ack(acked)
        before = spool.stats()
        i = 0
        while spool.stats().dropped_records == before.dropped_records:
            spool.append(_payload(i, 200), n_events=3)
            i += 1
        after = spool.stats()
        assert after.dropped_records - before.dropped_records == firsts[1] - 1 - acked
        assert after.dropped_events - before.dropped_events == 3 * (firsts[1] - 1 - acked)


def test_record_larger_than_the_bound_is_refused(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=16 * KIB, segment_bytes=4 * KIB) as spool:
        with pytest.raises(RecordTooLargeError):
            spool.append(b"x" * 13 * KIB, 1)
        # A record bigger than a segment but within the bound gets a segment of its own.
        spool.append(b"y" * 6 * KIB, 1)
        spool.append(b"z", 1)
        assert [len(r.data) for r in spool.pending()] == [6 * KIB, 1]


def test_torn_tail_is_truncated_by_the_crc_check(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB, fsync="never") as spool:
        for i in range(10):
            spool.append(_payload(i), 1)
    (segment,) = tmp_path.glob("*.seg")
    good_size = segment.stat().st_size
    # A crash mid-write: half a frame at the end.
    with segment.open("ab") as fh:
        fh.write(b"\x40\x00\x00\x00\x12\x34")
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB) as spool:
        assert spool.stats().truncated_bytes == 6
        assert [r.seq for r in spool.pending()] == list(range(1, 11))
        assert spool.append(_payload(10), 1) == 11
    assert segment.stat().st_size > good_size

    # Bit rot in the last record: the frame's crc no longer matches; that record is cut off.
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF
    segment.write_bytes(bytes(data))
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB) as spool:
        assert spool.stats().truncated_bytes > 0
        assert [r.seq for r in spool.pending()] == list(range(1, 11))
        # The lost seq 11 is never handed out again under another record.
        assert spool.append(b"[]", 0) == 11


def test_unreadable_cursor_replays_everything(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB) as spool:
        for i in range(5):
            spool.append(_payload(i), 1)
        spool.ack(3)
    assert json.loads((tmp_path / "cursor.json").read_text()) == {"committed": 3}
    (tmp_path / "cursor.json").write_text("{garbage")
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB) as spool:
        assert [r.seq for r in spool.pending()] == [1, 2, 3, 4, 5]  # duplicates, never loss


def test_one_spool_per_directory(tmp_path: Path) -> None:
    with (
        Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB),
        pytest.raises(SpoolError, match="in use"),
    ):
        Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB)
    Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB).close()


def test_concurrent_appends_from_two_threads_interleave_whole_records(tmp_path: Path) -> None:
    per_thread = 500
    with Spool(tmp_path, max_bytes=4096 * KIB, segment_bytes=16 * KIB) as spool:
        start = threading.Barrier(2)

        def writer(tag: str) -> None:
            start.wait()
            for i in range(per_thread):
                spool.append(f"{tag}{i}".encode() * 7, 1, meta=tag.encode())

        threads = [threading.Thread(target=writer, args=(t,)) for t in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert spool.pending_events == 2 * per_thread

    with Spool(tmp_path, max_bytes=4096 * KIB, segment_bytes=16 * KIB) as spool:
        records = list(spool.pending())
    assert [r.seq for r in records] == list(range(1, 2 * per_thread + 1))
    for tag in ("a", "b"):
        mine = [r.data for r in records if r.meta == tag.encode()]
        # Each thread's records are intact and in the order that thread wrote them.
        assert mine == [f"{tag}{i}".encode() * 7 for i in range(per_thread)]


def test_bad_sizes_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="half"):
        Spool(tmp_path, max_bytes=10 * KIB, segment_bytes=8 * KIB)


def test_failed_write_leaves_no_torn_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full mid-frame: the partial frame is cut off, later appends stay readable."""
    import rankscope.collectors.spool.segments as spool_mod

    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB) as spool:
        spool.append(_payload(0), 1)
        real_write = spool_mod.os.write

        def half_then_enospc(fd: int, data: bytes) -> int:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(spool_mod.os, "write", half_then_enospc)
        with pytest.raises(OSError, match="No space"):
            spool.append(_payload(1), 1)
        monkeypatch.setattr(spool_mod.os, "write", real_write)
        spool.append(_payload(2), 1)
    with Spool(tmp_path, max_bytes=64 * KIB, segment_bytes=32 * KIB) as spool:
        assert spool.stats().truncated_bytes == 0
        assert [r.data for r in spool.pending()] == [_payload(0), _payload(2)]


def test_spool_directory_0700_and_files_0600_whatever_the_umask(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Spooled records are raw, unredacted telemetry on shared GPU nodes: owner-only modes."""
    import os
    import stat

    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)  # an existing world-writable directory is tightened with a warning
    fresh = tmp_path / "new" / "spool"
    old_umask = os.umask(0)  # the most permissive umask: modes must not depend on it
    try:
        for directory in (loose, fresh):
            with Spool(directory, max_bytes=64 * KIB, segment_bytes=2 * KIB) as spool:
                for i in range(30):
                    spool.append(_payload(i), n_events=1)
                spool.ack(3)
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            files = [p for p in directory.iterdir() if p.is_file()]
            assert any(p.suffix == ".seg" for p in files)
            assert any(p.name == "cursor.json" for p in files)
            for path in files:
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        os.umask(old_umask)
    assert any("tightened to 0700" in r.getMessage() for r in caplog.records)
