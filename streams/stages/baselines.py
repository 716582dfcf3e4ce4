"""The worker's view of the reference baselines: the compacted ``<p>.baselines`` topic, read whole
by every worker, and the ``throughput_gap`` findings of the jobs it analyses.

Why this design (docs/decisions.md, "Reference baselines (issue 19)"): each worker needs every
baseline (a job on any partition may match any key), so the topic is read by a client that
joins no group, from its beginning, at start and on every timer tick after; the latest record
per key wins, as compaction keeps it. Nothing about the baselines is snapshotted: the topic is
their state, so a restarted worker has them again after one read. Correctness under replay and
restart does not depend on *when* a baseline is read either: a job's profile is frozen at a point
fixed by its event-time order (``streams/analysis/baseline.py``), each (job, baseline) pair is
judged once per analyzer, and the finding's id is (job, baseline), so a job judged again after a
restart rewrites the same row.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import ValidationError

from rankscope.schemas.baselines import Baseline
from rankscope.schemas.derived import Detection
from rankscope.streams.analysis.job import JobAnalyzer

log = logging.getLogger(__name__)

#: how often a worker looks for a baselines topic that does not exist
_LOOKUP_EVERY_S = 30.0
#: records read per tick at most (a compacted topic holds one per key: this is plenty)
_MAX_PER_TICK = 5000


class BaselineFeed:
    """Reads the baselines topic from its beginning, assigned (no group membership, no commits)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        from rankscope.kafka_security import kafka_config

        self.topic = topic
        self._client = Consumer(
            kafka_config(
                bootstrap,
                **{
                    "group.id": "rankscope-state",  # never joined: assign() only
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": False,
                },
            )
        )
        self._assigned = False
        self._next_lookup = 0.0  # monotonic: when to look for a missing topic again

    def _read(self) -> list[tuple[bytes | None, bytes | None]]:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if not self._assigned:
            if time.monotonic() < self._next_lookup:
                return []
            self._next_lookup = time.monotonic() + _LOOKUP_EVERY_S
            meta = self._client.list_topics(self.topic, timeout=2).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return []  # not created (yet): looked up again in a while, the tick not held up
            self._client.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
            )
            self._assigned = True
        out: list[tuple[bytes | None, bytes | None]] = []
        while len(out) < _MAX_PER_TICK:
            batch = self._client.consume(num_messages=500, timeout=0.05)
            if not batch:
                break
            for msg in batch:
                if msg.error() is None:
                    out.append((msg.key(), msg.value()))
        return out

    async def read(self) -> list[tuple[bytes | None, bytes | None]]:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, self._read)
        except Exception as exc:  # the broker is unreachable: the baselines we have stay
            log.warning("cannot read %s (%s): baselines unchanged this tick", self.topic, exc)
            return []


class BaselineBook:
    """The latest baseline per model/config key, and the findings of analyzers against them."""

    def __init__(self, feed: BaselineFeed | Any = None) -> None:
        self.feed = feed
        self.by_key: dict[str, Baseline] = {}
        self._changed = False

    def put(self, value: bytes | None, key: bytes | None = None) -> None:
        """One record of the topic, in log order; a tombstone (None) removes its key; a record
        that is not a baseline is skipped with one line."""
        if value is None:
            if key is not None:
                self._changed |= self.by_key.pop(key.decode(errors="replace"), None) is not None
            return
        try:
            baseline = Baseline.model_validate_json(value)
        except ValidationError as exc:
            log.warning("baselines: skipped a record that is not a baseline (%s)",
                        str(exc).splitlines()[0])  # fmt: skip
            return
        if self.by_key.get(baseline.key) != baseline:
            self.by_key[baseline.key] = baseline
            self._changed = True

    async def poll(self) -> bool:
        """Read what is new on the topic; whether any baseline changed since the last poll."""
        if self.feed is not None:
            for key, value in await self.feed.read():
                self.put(value, key)
        changed, self._changed = self._changed, False
        return changed

    def findings(self, analyzer: JobAnalyzer) -> list[Detection]:
        """The analyzer's gap against its key's baseline, once per (job, baseline)."""
        if not self.by_key:
            return []
        return analyzer.baseline.findings(self.by_key, analyzer.clock_ns())
