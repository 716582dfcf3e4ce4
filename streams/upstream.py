"""How far the validate stage has got on a raw partition: what a job's flush waits for.

Why: a flush (a job's events stopped) is the one processing-time decision of the analysis, so it
must not fire while the job's events still sit upstream. Reading the events partition to its end
is not enough: when the worker validating the job's raw partition dies, the job's events stop
arriving for a whole session timeout although its raw records are in the log, and a flush then
attributes a cascade before its symptoms (measured: a rebalance test's incident lost its NCCL
timeouts). The analysis therefore notes the raw partition's end when the job goes idle and
flushes only once the worker group has committed past that end, i.e. validated and produced
every raw record that existed then (faust publishes a record's outputs before committing it).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from confluent_kafka import Consumer, TopicPartition

from rankscope.kafka_security import kafka_config


class Upstream(Protocol):
    """The raw side of a job, as the analysis stage asks about it (``where``: "topic:partition")."""

    async def end(self, where: str) -> int: ...

    async def committed(self, where: str) -> int: ...


class RawProgress:
    """Raw partitions' ends and the worker group's committed offsets, from one client that never
    joins the group (reading a group's offsets needs no membership)."""

    def __init__(self, bootstrap: str, group_id: str, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self._client = Consumer(
            kafka_config(bootstrap, **{"group.id": group_id, "enable.auto.commit": False})
        )
        self._lock = asyncio.Lock()  # one blocking call at a time on the client

    @staticmethod
    def _tp(where: str) -> TopicPartition:
        topic, _, partition = where.rpartition(":")
        return TopicPartition(topic, int(partition))

    async def end(self, where: str) -> int:
        async with self._lock:
            _, high = await asyncio.get_running_loop().run_in_executor(
                None, lambda: self._client.get_watermark_offsets(self._tp(where), self.timeout_s)
            )
        return int(high)

    async def committed(self, where: str) -> int:
        async with self._lock:
            (found,) = await asyncio.get_running_loop().run_in_executor(
                None, lambda: self._client.committed([self._tp(where)], timeout=self.timeout_s)
            )
        return int(found.offset)  # negative: nothing committed yet
