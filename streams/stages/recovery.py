"""The recovery decider host: runs the fleet's one decider inside whichever worker holds its
input's single partition, and thins step spans into progress notes for it.

Findings, progress notes and operators' commands go in through the recovery-input topic;
recovery events come out. The decider's state is rebuilt from that topic's history whenever the
worker (re)gains the partition, and one lock keeps a rebuild, the records and the ticks around it
from interleaving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust

from rankscope.schemas.derived import RecoveryControl, RecoveryEvent, RecoveryInput, StepProgress
from rankscope.schemas.events import Event, SpanEvent
from rankscope.streams.config import StreamsConfig
from rankscope.streams.recovery.decider import Decider, replay_horizon_s
from rankscope.streams.recovery.policy import load_policy
from rankscope.streams.recovery.progress import ProgressNotes
from rankscope.streams.recovery.replay import committed_offset, read_partition
from rankscope.streams.recovery.signing import load_keyring
from rankscope.streams.stages.shared import StageCounters, StageTopics

log = logging.getLogger("rankscope.streams")


class DeciderHost:
    """Owns the decider (None when recovery is disabled), the progress notes, the decider's next
    input offset and its lock; registers the ``<app_id>.recovery-decider`` agent and the
    partition-revoked handler. ``tick`` is called from the worker's one-second timer."""

    def __init__(self, config: StreamsConfig, topics: StageTopics, counters: StageCounters):
        self.config = config
        self.topics = topics
        self.counters = counters
        rc = config.recovery
        self.decider = (
            Decider(load_policy(rc.policy_path), load_keyring(rc.key_file, rc.create_key))
            if rc.enabled
            else None
        )
        self.notes = ProgressNotes(config.recovery.progress_note_s)
        self.next_offset = -1  # the decider's next input offset; anything else: rebuild first
        self.lock = asyncio.Lock()  # a rebuild and the records or ticks around it never interleave
        #: the last read-back of the decider's history failed: retried from the timer
        self.history_missing = False
        self._history_retry_at = 0.0
        self._history_failures = 0
        self._app: faust.App | None = None

    def register(self, app: faust.App) -> None:
        self._app = app
        recovery_input = self.config.topics.recovery_input
        decider = self.decider

        @app.agent(self.topics.recovery_input, name=f"{self.config.app_id}.recovery-decider")
        async def decide(stream: faust.StreamT[bytes]) -> None:
            """The fleet's one decider (its input has one partition): findings, progress notes
            and operators' commands in, recovery events out."""
            async for event in stream.events():
                if decider is None:
                    continue
                msg = event.message
                async with self.lock:
                    if msg.offset != self.next_offset:  # first record since start or a move
                        await self.rebuild_decider(
                            msg.partition, msg.offset, int((msg.timestamp or 0) * 1000)
                        )
                    self.next_offset = msg.offset + 1
                    try:
                        record = RecoveryInput.model_validate_json(event.value)
                    except ValueError:
                        log.warning("ignoring a malformed recovery input at offset %d", msg.offset)
                        continue
                    if record.control is not None:
                        refused = decider.refuses(record.control)
                        log.warning(
                            "recovery %s by %s%s",
                            "paused" if record.control.paused else "resumed",
                            record.control.by[:64],
                            f": REFUSED ({refused}), ignored" if refused else "",
                        )
                    written_ns = int(msg.timestamp * 1e9) if msg.timestamp else None
                    await self.publish_recovery(decider.feed(record, written_ns))

        @app.on_partitions_revoked.connect
        async def decider_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            """Another worker may own the decider now: stop ticking; rebuild if it comes back."""
            revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
            if any(tp.topic == recovery_input for tp in revoked):
                self.next_offset = -1

    def observe(self, ev: Event, now: float) -> StepProgress | None:
        """A progress note when this event (a completed step span) is due one, else None."""
        if self.decider is not None and isinstance(ev, SpanEvent):
            p = ev.payload
            if p.phase == "step" and p.status == "ok" and p.step is not None:
                return self.notes.observe(ev.cluster, ev.job_id, p.step, ev.ts, ev.node, now)
        return None

    async def to_decider(self, record: RecoveryInput, job_id: str) -> None:
        if self.decider is not None:
            await self.topics.recovery_input.send(
                key=job_id.encode(), value=record.model_dump_json().encode()
            )

    async def send_progress(self, notes: list[StepProgress]) -> None:
        for note in notes:
            await self.to_decider(RecoveryInput(progress=note), note.job_id)

    async def publish_recovery(self, events: list[RecoveryEvent]) -> None:
        for r in events:
            self.counters.recovery_events += 1
            self.counters.recovery_by_action[r.stage, r.action] += 1
            await self.topics.recovery.send(
                key=r.job_id.encode(), value=r.model_dump_json().encode()
            )

    async def tick(self, now: float) -> None:
        """The timer's recovery part: adopt an idle decider partition, fire progress deadlines,
        and send the notes of jobs whose steps went quiet."""
        decider = self.decider
        if decider is not None:
            async with self.lock:
                if self.next_offset < 0:
                    await self.adopt_decider()
                retry_due = time.monotonic() >= self._history_retry_at
                if self.history_missing and self.next_offset >= 0 and retry_due:
                    await self.rebuild_decider(0, self.next_offset, int(time.time() * 1000))
                if self.next_offset >= 0:  # this worker holds the decider's partition
                    await self.publish_recovery(decider.tick())  # progress deadlines
            await self.send_progress(self.notes.flush_idle(now, idle_s=1.0))

    async def adopt_decider(self) -> None:
        """Holding the decider's partition with nothing new to read (a quiet fleet after a
        restart): rebuild up to the group's committed offset now, so overdue progress deadlines
        fire without waiting for the next input record."""
        config = self.config
        app = self._app
        assert app is not None, "register() the host before its timer runs"
        if not any(tp.topic == config.topics.recovery_input for tp in app.consumer.assignment()):
            return
        start = await asyncio.get_running_loop().run_in_executor(
            None, committed_offset, config.bootstrap, config.app_id, config.topics.recovery_input, 0
        )
        await self.rebuild_decider(0, start, int(time.time() * 1000))
        self.next_offset = start

    async def rebuild_decider(self, partition: int, offset: int, record_ms: int) -> None:
        decider = self.decider
        assert decider is not None
        config = self.config
        topics = config.topics
        findings_s, _ = replay_horizon_s(decider.policy)
        since_ms = record_ms - int(findings_s * 1000)

        def read() -> tuple[list[tuple[int, RecoveryInput]], bool]:
            commands = [
                c
                for c in (
                    RecoveryControl.model_validate_json(v)
                    for _, v in read_partition(config.bootstrap, topics.recovery_control, 0)
                )
                if decider.refuses(c) is None  # an unsigned or forged command never counts
            ]
            earlier = []
            for written_ms, value in read_partition(
                config.bootstrap, topics.recovery_input, partition, since_ms, offset
            ):
                try:
                    record = RecoveryInput.model_validate_json(value)
                except ValueError:
                    continue
                earlier.append((written_ms * 1_000_000, record))
            return earlier, bool(commands and commands[-1].paused)

        started = time.monotonic()
        try:
            earlier, paused = await asyncio.get_running_loop().run_in_executor(None, read)
        except Exception as exc:  # the broker did not answer the read-back: act on nothing
            self._history_failures += 1
            wait = min(300.0, 15.0 * 2 ** (self._history_failures - 1))
            self._history_retry_at = time.monotonic() + wait
            log.exception(
                "the recovery decider could not read its history back; automated recovery is "
                "PAUSED (retry in %.0f s, or an operator resumes it: rankscope recovery resume)",
                wait,
            )
            decider.rebuild([], paused=True)
            if not self.history_missing:  # one alert per outage, not one per retry
                await self.publish_recovery(decider.history_unreadable(type(exc).__name__))
            self.history_missing = True
            return
        if self.history_missing:
            log.warning(
                "the recovery decider read its history after %d failed attempt(s)",
                self._history_failures,
            )
        self.history_missing = False
        self._history_failures = 0
        n = decider.rebuild(earlier, paused)
        log.warning(
            "recovery decider rebuilt from %d earlier input record(s) in %.1f s (paused: %s)",
            n, time.monotonic() - started, paused,
        )  # fmt: skip
