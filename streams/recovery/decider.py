"""The recovery decider as the stream worker runs it: inputs in, recovery events out.

It wraps the pure ``RecoveryEngine`` with what a long-running consumer needs: an event clock
per job for progress deadlines (the latest event time read for that job, moved on by the wall
clock since it was written, so a replay faster than real time keeps event-time semantics and a
job that went quiet still reaches its deadline), and a rebuild from the input topic itself. The
clock is per job because the input mixes every job of the fleet in the order the workers happened
to emit them: a fleet clock let one job's deadline expire because another job's findings were
read first. The engine's state (bounds, backoffs,
watches, the breaker) lives in memory; after a restart or a partition move the new owner
replays the input of the policy's longest horizon before the first record it is handed, with
outputs dropped (they are on ``<p>.recovery`` already). The engine is deterministic, so the
records read again after a crash decide the same actions under the same idempotency keys, and
the actuators' ledger runs none twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rankscope.schemas.derived import RecoveryControl, RecoveryEvent, RecoveryInput
from rankscope.streams.recovery.engine import RecoveryEngine
from rankscope.streams.recovery.policy import Policy
from rankscope.streams.recovery.signing import Keyring

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
    """``keyring``: sign every event (with the policy's mode and the wall-clock signing time)
    and obey only operators' commands it verifies; None (unit tests) signs nothing and obeys
    every command."""

    def __init__(self, policy: Policy, keyring: Keyring | None = None) -> None:
        self.policy = policy
        self.keyring = keyring
        self.engine = RecoveryEngine(policy)
        #: job -> (latest event time read for it, wall clock ns when that record was written)
        self._clocks: dict[str, tuple[int, int]] = {}

    def feed(self, record: RecoveryInput, written_ns: int | None = None) -> list[RecoveryEvent]:
        """One input record; ``written_ns``: when it was written (its Kafka timestamp), else
        now."""
        e = self.engine
        if record.control is not None:  # issued on the wall clock: not event time
            why = self.refuses(record.control)
            if why is not None:
                return self._seal([_refused_control(record.control, why)])
            e.paused = record.control.paused
            return []
        self._advance(_job_of(record), record.ts, written_ns)
        if record.detection is not None:
            return self._seal(e.on_detection(record.detection))
        if record.incident is not None:
            return self._seal(e.on_incident(record.incident))
        assert record.progress is not None
        p = record.progress
        return self._seal(e.on_progress(p.cluster, p.job_id, p.step, p.ts, p.nodes))

    def refuses(self, command: RecoveryControl) -> str | None:
        """Why an operator's command must be ignored (unsigned, forged), or None."""
        return None if self.keyring is None else self.keyring.check(command)

    def _seal(self, events: list[RecoveryEvent]) -> list[RecoveryEvent]:
        """Stamp the policy's mode and the signing time on each event, and sign it."""
        if self.keyring is None:
            return [e.model_copy(update={"mode": self.policy.mode}) for e in events]
        now = time.time_ns()
        return [
            self.keyring.sign(e.model_copy(update={"mode": self.policy.mode, "decided_at": now}))
            for e in events
        ]

    def now(self, job_id: str) -> int:
        """A job's event clock (0: nothing read for it)."""
        ts, wall = self._clocks.get(job_id, (0, 0))
        return ts + (time.time_ns() - wall) if ts else 0

    def tick(self) -> list[RecoveryEvent]:
        """Progress deadlines that passed on their job's event clock; then what the policy's
        windows no longer need is forgotten (bounded state under ever-new job ids)."""
        out: list[RecoveryEvent] = []
        newest = 0
        for job_id in list(self._clocks):
            now = self.now(job_id)
            newest = max(newest, now)
            out += self.engine.tick(now, job_id)
        self.prune(newest)
        return self._seal(out)

    def prune(self, newest_ts: int) -> None:
        """Forget jobs and counts older than the replay horizon before ``newest_ts`` (the
        newest event clock): a rebuild would not read them either, so decisions stay the same."""
        if newest_ts <= 0:
            return
        horizon_ns = int(sum(replay_horizon_s(self.policy)) * NS)
        self.engine.prune(newest_ts, horizon_ns)
        cut = newest_ts - horizon_ns
        for job_id in [j for j, (ts, _) in self._clocks.items() if ts < cut]:
            if job_id not in self.engine.watching():
                del self._clocks[job_id]

    def rebuild(
        self, earlier: Iterable[RecoveryInput | tuple[int, RecoveryInput]], paused: bool
    ) -> int:
        """Start over from ``earlier`` input (oldest first; each record, or (when it was
        written in ns, record)), dropping its outputs; ``paused`` is the operators' latest
        command as of before it. Returns the records replayed."""
        self.engine = RecoveryEngine(self.policy)
        self.engine.paused = paused
        self._clocks = {}
        _, progress_s = replay_horizon_s(self.policy)
        n = 0
        records = [r if isinstance(r, tuple) else (None, r) for r in earlier]
        newest = max((r.ts for _, r in records if r.control is None), default=0)
        for written_ns, r in records:
            if r.progress is not None and r.ts < newest - int(progress_s * NS):
                continue  # older than any watch or breaker window can need
            if r.control is None:
                self.engine.tick(r.ts, _job_of(r))
            self.feed(r, written_ns)
            n += 1
        return n

    def history_unreadable(self, why: str) -> list[RecoveryEvent]:
        """The alert that the decider could not read its history back and acts on nothing
        until it can: an ``escalate`` for the fleet (a person should know recovery stopped)."""
        ts = time.time_ns()
        key = RecoveryEvent.make_key("fleet", "decider-history", str(ts))
        alert = RecoveryEvent(
            key=key,
            stage="decided",
            action="escalate",
            cluster="",
            job_id="",
            rule="decider-history",
            reason=f"the recovery decider could not read its history back ({why[:200]}): "
            "automated recovery is paused until a retry reads it or an operator resumes it",
            trigger_id=key,
            attempt=1,
            ts=ts,
        )
        return self._seal([alert])

    def _advance(self, job_id: str, ts: int, written_ns: int | None) -> None:
        if ts > self._clocks.get(job_id, (0, 0))[0]:
            self._clocks[job_id] = (ts, time.time_ns() if written_ns is None else written_ns)


def _refused_control(c: RecoveryControl, why: str) -> RecoveryEvent:
    """The record of an operator's command that was ignored (it names no job and acts on
    nothing; ``escalate`` because a person should look at who sent it)."""
    what = "pause" if c.paused else "resume"
    return RecoveryEvent(
        key=RecoveryEvent.make_key("control", what, str(c.ts), c.by),
        stage="refused",
        action="escalate",
        cluster="",
        job_id="",
        rule="recovery-control",
        reason=f"refused a {what} command ({why}) claiming to be by {c.by[:64]!r}",
        trigger_id=f"control:{c.ts}",
        attempt=1,
        ts=c.ts,
    )


def _job_of(record: RecoveryInput) -> str:
    found = record.detection or record.incident or record.progress
    assert found is not None, "a command has no job"
    return found.job_id
