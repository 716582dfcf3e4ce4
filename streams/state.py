"""Snapshots of the analysis and window state of one events partition, on ``<p>.worker_state``.

Why: a job's analysis (clock offsets, straggler histories, open cascades) is built from all of
its events so far; held only in memory, it restarted empty after a crash or a rebalance. The
worker writes the analyzers of a partition, with the offset of the last record they include, to
the same partition number of the state topic; the records of the events topic are acknowledged
only up to a durable snapshot. A worker that gets the partition (after a crash, a restart or a
rebalance) loads the newest snapshot and resumes from the committed offset, skipping the records
the snapshot already includes, so it reaches the findings and windows an uninterrupted run
reaches (docs/decisions.md, "Durable analysis state").

Format: a snapshot is N chunk records followed by one manifest record (the newest manifest is
the state). Payloads are pickled and compressed, so they are signed (HMAC-SHA256 with the state
key every worker of a deployment shares) and a record that does not verify is never unpickled:
whoever can write the topic cannot make a worker run code. A snapshot of another format or
rankscope version is ignored (the worker then starts that partition's analysis empty, as before).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import pickle
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from rankscope.kafka_security import kafka_config
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.recovery.replay import read_partition

__all__ = [
    "STATE_FORMAT",
    "PartitionState",
    "SnapshotManifest",
    "encode_chunks",
    "encode_manifest",
    "load_latest",
    "parse_record",
]

log = logging.getLogger(__name__)

STATE_FORMAT = 2  # 2: the raw sources read (streams/sources.py)
_MAGIC = b"RSS1"
_CHUNK = b"C"
_MANIFEST = b"M"
#: how far back from the end of a state partition to look for a complete snapshot
_SCAN_RECORDS = 256


def _version() -> str:
    try:
        return metadata.version("rankscope")
    except metadata.PackageNotFoundError:  # a source tree without an install
        return "0+unknown"


@dataclass
class PartitionState:
    """The analysis of every job read from one events partition, up to ``offset``."""

    partition: int
    offset: int  # the newest events-topic offset the state includes
    analyzers: dict[str, JobAnalyzer] = field(default_factory=dict)
    flushed: set[str] = field(default_factory=set)
    #: job -> its open windows and stream time (``WindowAggregator.export``)
    windows: dict[str, Any] = field(default_factory=dict)
    #: raw partition -> the newest raw offset read from it (``SourceOffsets.export``)
    sources: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotManifest:
    snapshot_id: str
    partition: int
    offset: int
    chunks: int
    first_chunk_offset: int
    signature: str
    state_format: int
    version: str
    jobs: int
    size: int

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode()


def _sign(key: bytes, snapshot_id: str, payload: bytes) -> str:
    return hmac.new(key, snapshot_id.encode() + b"\0" + payload, hashlib.sha256).hexdigest()


def encode_chunks(
    state: PartitionState, key: bytes, chunk_bytes: int
) -> tuple[str, list[bytes], dict[str, Any]]:
    """(snapshot id, chunk records, manifest fields but the first chunk's offset)."""
    snapshot_id = uuid.uuid4().hex
    payload = zlib.compress(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), 1)
    pieces = [payload[i : i + chunk_bytes] for i in range(0, len(payload), chunk_bytes)] or [b""]
    head = _MAGIC + _CHUNK + snapshot_id.encode() + b"\n"
    chunks = [head + str(i).encode() + b"\n" + piece for i, piece in enumerate(pieces)]
    fields = {
        "snapshot_id": snapshot_id,
        "partition": state.partition,
        "offset": state.offset,
        "chunks": len(chunks),
        "signature": _sign(key, snapshot_id, payload),
        "state_format": STATE_FORMAT,
        "version": _version(),
        "jobs": len(state.analyzers),
        "size": len(payload),
    }
    return snapshot_id, chunks, fields


def encode_manifest(fields: dict[str, Any], first_chunk_offset: int) -> bytes:
    manifest = SnapshotManifest(first_chunk_offset=first_chunk_offset, **fields)
    return _MAGIC + _MANIFEST + manifest.to_json()


def parse_record(value: bytes) -> SnapshotManifest | tuple[str, int, bytes] | None:
    """A manifest, a chunk as (snapshot id, index, piece), or None for anything else."""
    if not value.startswith(_MAGIC):
        return None
    kind, body = value[4:5], value[5:]
    try:
        if kind == _MANIFEST:
            return SnapshotManifest(**json.loads(body))
        if kind == _CHUNK:
            snapshot_id, index, piece = body.split(b"\n", 2)
            return snapshot_id.decode(), int(index), piece
    except (ValueError, TypeError, UnicodeDecodeError):
        return None
    return None


def load_latest(bootstrap: str, topic: str, partition: int, key: bytes) -> PartitionState | None:
    """The newest complete, verified snapshot of ``partition`` (None: there is none)."""

    def read(start: int, end: int) -> list[bytes]:
        return [
            v for _, v in read_partition(bootstrap, topic, partition, 0, end, start_offset=start)
        ]

    probe = Consumer(kafka_config(bootstrap, **{"group.id": "rankscope-state"}))
    try:
        low, end = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        probe.close()
    while end > low:
        start = max(low, end - _SCAN_RECORDS)
        manifests = [
            m for v in read(start, end) if isinstance(m := parse_record(v), SnapshotManifest)
        ]
        # the snapshot that includes the most records; of equal ones, the one written last (a
        # worker that lost the partition mid-write never writes its manifest, but a stalled one
        # that has not noticed yet could write an older state after the next owner's)
        ranked = sorted(enumerate(manifests), key=lambda im: (im[1].offset, im[0]), reverse=True)
        for _, manifest in ranked:
            state = _load(read, f"{topic}/{partition}", manifest, key)
            if state is not None:
                return state
        end = start
    return None


def _load(
    read: Callable[[int, int], list[bytes]], where: str, manifest: SnapshotManifest, key: bytes
) -> PartitionState | None:
    where = f"{where} snapshot {manifest.snapshot_id}"
    if manifest.state_format != STATE_FORMAT or manifest.version != _version():
        log.warning(
            "%s is of format %s from rankscope %s (this worker: %s, %s): the analysis of "
            "partition %d starts empty",
            where, manifest.state_format, manifest.version, STATE_FORMAT, _version(),
            manifest.partition,
        )  # fmt: skip
        return PartitionState(manifest.partition, -1)
    first = manifest.first_chunk_offset
    pieces: list[bytes] = []
    for i, value in enumerate(read(first, first + manifest.chunks)):
        chunk = parse_record(value)
        if not isinstance(chunk, tuple) or chunk[0] != manifest.snapshot_id or chunk[1] != i:
            log.error("%s: chunk %d is missing or foreign; looking further back", where, i)
            return None
        pieces.append(chunk[2])
    payload = b"".join(pieces)
    if len(pieces) != manifest.chunks or not hmac.compare_digest(
        _sign(key, manifest.snapshot_id, payload), manifest.signature
    ):
        log.error("%s does not verify (another key, or not written by a worker): ignored", where)
        return None
    state = pickle.loads(zlib.decompress(payload))  # signed by a worker, verified above
    if not isinstance(state, PartitionState):
        return None
    return state
