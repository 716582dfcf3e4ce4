"""Actuators run recovery decisions; a ledger makes each idempotency key run at most once.

The ledger (SQLite, one file per actuator host) survives restarts: a key is claimed before the
action and finished after it. A decision read again after a crash finds its key finished (the
stored outcome is returned, nothing runs again) or claimed but never finished (the process
died mid-action: whether it ran is unknown, so it is *not* repeated; the outcome says so and
a person decides). Decisions come from Kafka at least once; actions run at most once.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rankscope.schemas.derived import RecoveryEvent


@dataclass(frozen=True)
class ActuatorResult:
    ok: bool
    detail: str


class Actuator(Protocol):
    name: str

    def execute(self, decision: RecoveryEvent) -> ActuatorResult: ...


def describe(d: RecoveryEvent) -> str:
    where = d.node + (f" rank {d.rank}" if d.rank is not None else "")
    return f"{d.action} for job {d.job_id or '(fleet)'}" + (f" on {where}" if where else "")


class Ledger:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None)  # autocommit: each write durable
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS actions (key TEXT PRIMARY KEY, actuator TEXT, "
            "state TEXT, ok INTEGER, detail TEXT, claimed_at REAL, finished_at REAL)"
        )

    def claim(self, key: str, actuator: str) -> bool:
        """True when this process may run ``key`` now; False when it was claimed before."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO actions (key, actuator, state, claimed_at) "
            "VALUES (?, ?, 'claimed', ?)",
            (key, actuator, time.time()),
        )
        return cur.rowcount == 1

    def finish(self, key: str, result: ActuatorResult) -> None:
        self._db.execute(
            "UPDATE actions SET state = 'finished', ok = ?, detail = ?, finished_at = ? "
            "WHERE key = ?",
            (int(result.ok), result.detail, time.time(), key),
        )

    def get(self, key: str) -> tuple[str, ActuatorResult | None] | None:
        row = self._db.execute(
            "SELECT state, ok, detail FROM actions WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        state, ok, detail = row
        return state, (ActuatorResult(bool(ok), detail) if state == "finished" else None)

    def close(self) -> None:
        self._db.close()


class ActuatorRunner:
    """Decisions in, outcome events out; each key through the actuator at most once."""

    def __init__(self, actuator: Actuator, ledger: Ledger) -> None:
        self.actuator = actuator
        self.ledger = ledger

    def run(self, decision: RecoveryEvent, now_ns: int | None = None) -> RecoveryEvent | None:
        """The outcome of ``decision``, or None when there is nothing to do (yet): not a
        decision, or its backoff has not passed (call again later)."""
        if decision.stage != "decided":
            return None
        now = time.time_ns() if now_ns is None else now_ns
        if decision.not_before_ts > now:
            return None
        known = self.ledger.get(decision.key)
        if known is not None:
            _, result = known
            if result is None:  # claimed, never finished: the process died mid-action
                result = ActuatorResult(
                    False,
                    f"interrupted: {self.actuator.name} was running {describe(decision)} when "
                    "the process stopped; not repeated (at most once), check by hand",
                )
                self.ledger.finish(decision.key, result)
            return self._outcome(decision, result, now)
        if not self.ledger.claim(decision.key, self.actuator.name):
            return None  # another runner claimed it between our read and now
        try:
            result = self.actuator.execute(decision)
        except Exception as exc:  # an actuator bug must not take the runner down
            result = ActuatorResult(False, f"{self.actuator.name} raised {type(exc).__name__}")
        self.ledger.finish(decision.key, result)
        return self._outcome(decision, result, now)

    def _outcome(self, d: RecoveryEvent, result: ActuatorResult, now: int) -> RecoveryEvent:
        return d.model_copy(
            update={
                "stage": "succeeded" if result.ok else "failed",
                "reason": f"{self.actuator.name}: {result.detail}"[:2048],
                "ts": max(now, d.ts),
            }
        )
