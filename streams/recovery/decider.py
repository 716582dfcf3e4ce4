"""The recovery decider as the stream worker runs it: inputs in, recovery events out.

It wraps the pure ``RecoveryEngine`` with what a long-running consumer needs: an event clock
for progress deadlines (the latest event time read, moved on by the wall clock since, so a
replay faster than real time keeps event-time semantics and a quiet fleet still reaches its
deadlines), and a rebuild from the input topic itself. The engine's state (bounds, backoffs,
watches, the breaker) lives in memory; after a restart or a partition move the new owner
replays the input of the policy's longest horizon before the first record it is handed, with
outputs dropped (they are on ``<p>.recovery`` already). The engine is deterministic, so the
records read again after a crash decide the same actions under the same idempotency keys, and
the actuators' ledger runs none twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rankscope.schemas.derived import RecoveryEvent, RecoveryInput
from rankscope.streams.recovery.engine import RecoveryEngine
from rankscope.streams.recovery.policy import Policy

NS = 1_000_000_000


def replay_horizon_s(policy: Policy) -> tuple[float, float]:
    """How far back a rebuild must read: (findings and commands, progress notes).

    Findings count against bounds for the longest window (per job, breaker, per node); a
    recovery's progress watch can start after its longest backoff and lasts its deadline, and
    the breaker counts the nodes and jobs seen in its window.
    """
    lim, b = policy.limits, policy.breaker
    longest_backoff = lim.backoff_base_s * lim.backoff_factor ** max(0, lim.max_actions - 1)
    watch = longest_backoff + lim.progress_deadline_s
    repeat = max((r.when.repeat_window_s for r in policy.rules if r.per_node), default=0.0)
    findings = max(lim.window_s, b.window_s, b.reset_s, repeat) + watch
    return findings, max(b.window_s, watch)


class Decider:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.engine = RecoveryEngine(policy)
        self._clock = (0, 0)  # (latest event time read, wall clock when it was read)

    def feed(self, record: RecoveryInput) -> list[RecoveryEvent]:
        e = self.engine
        if record.control is not None:  # issued on the wall clock: not event time
            e.paused = record.control.paused
            return []
        self._advance(record.ts)
        if record.detection is not None:
            return e.on_detection(record.detection)
        if record.incident is not None:
            return e.on_incident(record.incident)
        assert record.progress is not None
        p = record.progress
        return e.on_progress(p.cluster, p.job_id, p.step, p.ts, p.nodes)

    def now(self) -> int:
        ts, wall = self._clock
        return ts + (time.time_ns() - wall) if ts else 0

    def tick(self) -> list[RecoveryEvent]:
        """Progress deadlines that passed on the event clock."""
        now = self.now()
        return self.engine.tick(now) if now else []

    def rebuild(self, earlier: Iterable[RecoveryInput], paused: bool) -> int:
        """Start over from ``earlier`` input (oldest first), dropping its outputs; ``paused`` is
        the operators' latest command as of before it. Returns the records replayed."""
        self.engine = RecoveryEngine(self.policy)
        self.engine.paused = paused
        self._clock = (0, 0)
        _, progress_s = replay_horizon_s(self.policy)
        n = 0
        records = list(earlier)
        newest = max((r.ts for r in records if r.control is None), default=0)
        for r in records:
            if r.progress is not None and r.ts < newest - int(progress_s * NS):
                continue  # older than any watch or breaker window can need
            if r.control is None:
                self.engine.tick(r.ts)
            self.feed(r)
            n += 1
        return n

    def _advance(self, ts: int) -> None:
        if ts > self._clock[0]:
            self._clock = (ts, time.time_ns())
