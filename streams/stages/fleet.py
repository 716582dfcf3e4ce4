"""The fleet drift stage: every node's inventory in one place, ``node_drift`` findings out.

Why this shape: a majority needs all nodes of a pool, but the events topic is split by key
across workers. So each worker forwards the ``node_inventory`` events of the events partitions
it holds to ``<p>.fleet_input`` (ONE partition, compacted by node and configuration), and the
worker holding that partition runs the one fleet view, like the recovery decider. The view is
rebuilt from the whole input whenever the worker (re)gains the partition, so a restart, a
rebalance or a second worker gives the same findings; re-published findings keep their ids
(node + fingerprint) and rewrite the same rows, and the decider's idempotency key acts once.

Findings are published from the one-second timer, and only once the stage has read its input
to the end: a worker that is behind or replaying does not publish the view of a half-read log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import faust

from rankscope.schemas.derived import Detection, RecoveryInput
from rankscope.schemas.events import EVENT_LIST_ADAPTER, NodeInventoryEvent, dump_events
from rankscope.streams.analysis.fleet import FleetConfig, FleetView
from rankscope.streams.config import StreamsConfig
from rankscope.streams.recovery.replay import committed_offset, read_partition
from rankscope.streams.stages.shared import StageCounters, StageTopics

log = logging.getLogger("rankscope.streams")

#: the recovery decider's input (``DeciderHost.to_decider``); the input partition's log end
ToDecider = Callable[[RecoveryInput, str], Awaitable[None]]
Highwater = Callable[[Any], int | None]
#: what a record of the events topic must contain to be worth parsing here
_MARK = b'"node_inventory"'


def fleet_key(ev: NodeInventoryEvent) -> bytes:
    """The compaction key: the newest copy of each configuration of each node survives."""
    return f"{ev.cluster}|{ev.node}|{ev.payload.fingerprint}".encode()


def inventories(value: bytes) -> list[NodeInventoryEvent]:
    """The node inventories in one record of the events topic (a JSON array of events)."""
    if _MARK not in value:
        return []
    return [e for e in EVENT_LIST_ADAPTER.validate_json(value) if isinstance(e, NodeInventoryEvent)]


class FleetStage:
    """The forwarder (an agent on the events topic) and the fleet view's host (an agent on
    ``<p>.fleet_input``); ``tick`` publishes from the worker's timer."""

    def __init__(
        self,
        config: StreamsConfig,
        topics: StageTopics,
        counters: StageCounters,
        to_decider: ToDecider,
        highwater: Highwater,
        fleet: FleetConfig | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.counters = counters
        self.to_decider = to_decider
        self.highwater = highwater
        self.view = FleetView(fleet)
        self.next_offset = -1  # the next input offset; anything else: rebuild first
        self.lock = asyncio.Lock()
        self._tp: Any = None
        self._app: faust.App | None = None

    def register(self, app: faust.App) -> None:
        self._app = app
        name = self.config.topics.fleet_input
        fleet_input = app.topic(name, key_type=bytes, value_type=bytes, value_serializer="raw")

        @app.agent(self.topics.events, name=f"{self.config.app_id}.fleet-forward")
        async def forward(stream: faust.StreamT[bytes]) -> None:
            """Node inventories of this worker's events partitions -> the fleet input."""
            async for value in stream:
                try:
                    found = inventories(value)
                except ValueError:  # the windows agent reads the same record and reports it
                    continue
                for ev in found:
                    await fleet_input.send(key=fleet_key(ev), value=dump_events([ev]))

        @app.agent(fleet_input, name=f"{self.config.app_id}.fleet")
        async def fleet(stream: faust.StreamT[bytes]) -> None:
            """The fleet's one view (its input has one partition)."""
            async for event in stream.events():
                msg = event.message
                async with self.lock:
                    self._tp = msg.tp
                    if msg.offset != self.next_offset:  # first record since start or a move
                        await self.rebuild(msg.offset)
                    self.next_offset = msg.offset + 1
                    self.feed(event.value)

        @app.on_partitions_revoked.connect
        async def fleet_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            """Another worker may hold the fleet view now: publish nothing until rebuilt."""
            revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
            if any(tp.topic == name for tp in revoked):
                self.next_offset = -1

    def feed(self, value: bytes) -> None:
        try:
            found = inventories(value)
        except ValueError:
            log.warning("ignoring a malformed fleet input record")
            return
        for ev in found:
            self.view.observe(ev.cluster, ev.node, ev.ts, ev.payload)

    async def rebuild(self, offset: int) -> None:
        """Read the input before ``offset`` again into a fresh view."""
        config = self.config

        def read() -> list[bytes]:
            topic = config.topics.fleet_input
            return [v for _, v in read_partition(config.bootstrap, topic, 0, end_offset=offset)]

        started = time.monotonic()
        values = await asyncio.get_running_loop().run_in_executor(None, read)
        self.view.reset()
        for v in values:
            self.feed(v)
        self.view.dirty = True  # publish the rebuilt findings again: same ids, same rows
        log.warning(
            "fleet view rebuilt from %d record(s), %d node(s), in %.1f s",
            len(values), self.view.model.nodes(), time.monotonic() - started,
        )  # fmt: skip

    async def adopt(self) -> None:
        """Holding the fleet input with nothing new to read (a restart in a quiet fleet):
        rebuild up to the group's committed offset, so the findings are published again."""
        app, config = self._app, self.config
        assert app is not None, "register() the stage before its timer runs"
        name = config.topics.fleet_input
        held = [tp for tp in app.consumer.assignment() if tp.topic == name]
        if not held:
            return
        self._tp = held[0]
        start = await asyncio.get_running_loop().run_in_executor(
            None, committed_offset, config.bootstrap, config.app_id, name, 0
        )
        await self.rebuild(start)
        self.next_offset = start

    def caught_up(self) -> bool:
        end = self.highwater(self._tp) if self._tp is not None else None
        return end is not None and self.next_offset >= end

    async def tick(self, now: float) -> None:
        """Publish what changed, once the input is read to its end."""
        async with self.lock:
            if self.next_offset < 0:
                await self.adopt()
            if self.next_offset < 0 or not self.view.dirty or not self.caught_up():
                return
            fresh, cleared = self.view.settle(int(now * 1e9))
        for d in fresh:
            await self.publish(d)
            await self.to_decider(RecoveryInput(detection=d), d.job_id)
        for d in cleared:
            await self.publish(d)

    async def publish(self, d: Detection) -> None:
        self.counters.detections += 1
        self.counters.detections_by_type[d.detection_type] += 1
        await self.topics.detections.send(key=d.job_id.encode(), value=d.model_dump_json().encode())
