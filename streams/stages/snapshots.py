"""The worker's side of durable analysis state: when to snapshot a partition, how records wait
for a snapshot before they are acknowledged, and how a partition's state is taken over.

The rules (why: docs/decisions.md, "Durable analysis state"):

* a record of the events topic is acknowledged only once a snapshot that includes it is on
  Kafka (and, as before, once every window it touched was emitted), so the committed offset never
  passes the state that can be restored;
* the first record a worker reads from a partition (at start, or after a rebalance gave it the
  partition) loads the partition's newest snapshot (analyzers and open windows) first; records up
  to the snapshot's offset are then skipped, since the state already includes them;
* a revoked partition's state is dropped at once: the next owner restores it from Kafka, and
  this worker, should the partition come back, restores it again instead of trusting a copy
  that another worker may have moved on from.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rankscope.redaction.keys import load_key
from rankscope.streams.config import StreamsConfig
from rankscope.streams.sources import Source, SourceOffsets
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.shared import StageCounters, StageTopics
from rankscope.streams.state import PartitionState, encode_chunks, encode_manifest, load_latest

log = logging.getLogger(__name__)

STATE_KEY_ENV = "RANKSCOPE_STATE_KEY"
#: a partition read to its end is snapshotted once it has been quiet this long
_QUIET_S = 1.0


class WindowState(Protocol):
    """The windows stage as the keeper sees it: one partition's open windows out and in."""

    def export(self, tp: Any) -> dict[str, Any]: ...

    def install(self, tp: Any, jobs: dict[str, Any], now: float) -> None: ...


class SnapshotKeeper:
    #: set by the windows stage when it is built (it needs the keeper first)
    windows: WindowState | None = None

    def __init__(
        self,
        config: StreamsConfig,
        topics: StageTopics,
        counters: StageCounters,
        analysis: AnalysisStage,
        flush_outputs: Callable[[], Awaitable[None]] | None = None,
    ):
        self.config = config
        self.topics = topics
        self.counters = counters
        self.analysis = analysis
        self.enabled = config.state.enabled and analysis.enabled
        self.key = (
            load_key(STATE_KEY_ENV, config.state.key_file, create=config.state.create_key)
            if self.enabled
            else None
        )
        if self.enabled and self.key is None:
            raise ValueError(
                f"snapshots need a signing key: set {STATE_KEY_ENV} or a state key file "
                "(or turn snapshots off)"
            )
        self.loaded: dict[Any, int] = {}  # partition -> offset its restored state includes
        self.durable: dict[Any, int] = {}  # partition -> offset of the newest snapshot on Kafka
        self.snapshot_wall: dict[Any, float] = {}  # partition -> when it was last snapshotted
        self.record_wall: dict[Any, float] = {}  # partition -> when its last record was read
        self.in_record: Any = None  # the partition whose record the agent is in the middle of
        self.sources = SourceOffsets()
        #: everything the worker sent so far reaches Kafka (the producer's flush)
        self.flush_outputs = flush_outputs
        #: partition -> times it was forgotten (a snapshot begun before is not written)
        self.generation: dict[Any, int] = {}

    # -- the events agent's side ----------------------------------------------------------
    async def begin(self, tp: Any, offset: int, now: float) -> bool:
        """Before the record at ``offset`` of ``tp`` is processed: load the partition's state
        if this worker has not yet; returns whether the analysis already includes the record
        (then it feeds the windows only)."""
        self.in_record = tp
        self.record_wall[tp] = now
        if not self.enabled:
            return False
        if tp not in self.loaded:
            await self._restore(tp, now)
        return offset <= self.loaded[tp]

    def duplicate(self, tp: Any, source: Source | None) -> bool:
        """Whether the record (from raw ``source``) repeats one already read from ``tp``."""
        if self.sources.first_time(tp, source):
            return False
        self.counters.duplicates_dropped += 1
        return True

    def end(self) -> None:
        self.in_record = None

    def is_durable(self, tp: Any, offset: int) -> bool:
        """May the record at ``offset`` of ``tp`` be acknowledged (a snapshot includes it)?"""
        return not self.enabled or offset <= self.durable.get(tp, -1)

    def durable_upto(self, tp: Any) -> float:
        """The newest offset of ``tp`` a snapshot includes (everything, with snapshots off)."""
        return self.durable.get(tp, -1) if self.enabled else math.inf

    # -- the timer's side -----------------------------------------------------------------
    async def tick(self, now: float) -> bool:
        """Snapshot the partitions that are due; returns whether any was written."""
        if not self.enabled:
            return False
        wrote = False
        analysis = self.analysis
        for tp, upto in list(analysis.read_upto.items()):
            if tp == self.in_record or upto <= self.durable.get(tp, -1):
                continue
            due = now - self.snapshot_wall.get(tp, 0.0) >= self.config.state.snapshot_interval_s
            quiet = now - self.record_wall.get(tp, now) >= _QUIET_S
            if due or (quiet and analysis.partition_caught_up(tp)):
                await self.snapshot(tp, now)
                wrote = True
        return wrote

    async def snapshot(self, tp: Any, now: float) -> None:
        state = self.analysis.export(tp)
        if self.windows is not None:
            state.windows = self.windows.export(tp)
        state.sources = self.sources.export(tp)
        assert self.key is not None
        snapshot_id, chunks, fields = encode_chunks(state, self.key, self.config.state.chunk_bytes)
        generation = self.generation.get(tp, 0)
        if self.flush_outputs is not None:
            # the windows and findings the state counts as emitted reach Kafka before the state
            # does: a crash after the manifest must not lose what the restored state will not
            # emit again
            await self.flush_outputs()
        send = self.topics.state.send
        key = str(tp.partition).encode()
        pending = [await send(key=key, value=c, partition=tp.partition) for c in chunks]
        first = (await pending[0]).offset
        for fut in pending[1:]:
            await fut
        if self.generation.get(tp, 0) != generation:
            # the partition was given up meanwhile: its next owner may already have moved on
            # from an older snapshot, and this one, written last, would look newest
            log.info("snapshot %s of %s dropped: the partition moved", snapshot_id, tp)
            return
        done = await send(key=key, value=encode_manifest(fields, first), partition=tp.partition)
        await done
        self.durable[tp] = state.offset
        self.snapshot_wall[tp] = now
        self.counters.snapshots += 1
        log.debug("snapshot %s of %s at offset %d: %d jobs, %d bytes", snapshot_id, tp,
                  state.offset, fields["jobs"], fields["size"])  # fmt: skip

    # -- ownership ------------------------------------------------------------------------
    async def _restore(self, tp: Any, now: float) -> None:
        config = self.config
        assert self.key is not None
        started = time.monotonic()
        state: PartitionState | None = await asyncio.get_running_loop().run_in_executor(
            None,
            load_latest,
            config.bootstrap,
            config.topics.worker_state,
            tp.partition,
            self.key,
        )
        if state is None or state.offset < 0:
            self.loaded[tp] = -1
            return
        self.analysis.install(tp, state, now)
        if self.windows is not None:
            self.windows.install(tp, state.windows, now)
        self.sources.install(tp, state.sources)
        self.loaded[tp] = self.durable[tp] = state.offset
        self.snapshot_wall[tp] = now
        self.counters.snapshots_restored += 1
        log.warning(
            "restored the analysis of partition %d (%d jobs) at offset %d in %.2f s",
            tp.partition, len(state.analyzers), state.offset, time.monotonic() - started,
        )  # fmt: skip

    def forget(self, partitions: set[Any]) -> list[str]:
        """Drop this worker's state of ``partitions`` (given up, or handed over again: the
        next record restores the snapshot); returns their jobs."""
        jobs: list[str] = []
        for tp in partitions:
            if tp.topic != self.config.topics.events:
                continue
            jobs += self.analysis.drop(tp)
            self.sources.drop(tp)
            self.generation[tp] = self.generation.get(tp, 0) + 1
            for held in (self.loaded, self.durable, self.snapshot_wall, self.record_wall):
                held.pop(tp, None)
        return jobs
