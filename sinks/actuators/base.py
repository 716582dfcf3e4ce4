"""Actuators run recovery decisions; a ledger makes each idempotency key run at most once.

The ledger (SQLite, one file per actuator host) survives restarts: a key is claimed before the
action and finished after it. A decision read again after a crash finds its key finished (the
stored outcome is returned, nothing runs again) or claimed but never finished (the process
died mid-action: whether it ran is unknown, so it is *not* repeated; the outcome says so and
a person decides). Decisions come from Kafka at least once; actions run at most once.

Before anything runs, the runner checks the decision itself (issue 14): it must carry a valid
signature of the decider (unsigned or forged records are refused), must not be older than
``max_age_s`` past its backoff (expired), and its key must not have been acted on from another
record (a replay: the ledger remembers the record a key was claimed from, across restarts).
Each refusal is an outcome with stage ``refused`` and the reason; nothing runs.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rankscope.schemas.derived import RecoveryEvent
from rankscope.streams.recovery.signing import Keyring

NS = 1_000_000_000


@dataclass(frozen=True)
class ActuatorResult:
    ok: bool
    detail: str
    refused: bool = False  # nothing ran: the decision named something the actuator must not use


def refuse(detail: str) -> ActuatorResult:
    return ActuatorResult(False, f"refused: {detail}", refused=True)


class Actuator(Protocol):
    name: str

    def execute(self, decision: RecoveryEvent) -> ActuatorResult: ...


def _printable(text: str) -> str:
    """Control characters escaped: a job id from telemetry must not start a new log line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def describe(d: RecoveryEvent) -> str:
    where = _printable(d.node) + (f" rank {d.rank}" if d.rank is not None else "")
    job = _printable(d.job_id) or "(fleet)"
    return f"{d.action} for job {job}" + (f" on {where}" if where else "")


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
        have = {row[1] for row in self._db.execute("PRAGMA table_info(actions)")}
        for column in ("source TEXT", "refused INTEGER DEFAULT 0"):  # added by issue 14
            if column.split()[0] not in have:
                self._db.execute(f"ALTER TABLE actions ADD COLUMN {column}")

    def claim(self, key: str, actuator: str, source: str | None = None) -> bool:
        """True when this process may run ``key`` now; False when it was claimed before.
        ``source``: the record it came from (topic/partition/offset), to tell a replay."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO actions (key, actuator, state, claimed_at, source) "
            "VALUES (?, ?, 'claimed', ?, ?)",
            (key, actuator, time.time(), source),
        )
        return cur.rowcount == 1

    def finish(self, key: str, result: ActuatorResult) -> None:
        self._db.execute(
            "UPDATE actions SET state = 'finished', ok = ?, detail = ?, finished_at = ?, "
            "refused = ? WHERE key = ?",
            (int(result.ok), result.detail, time.time(), int(result.refused), key),
        )

    def get(self, key: str) -> tuple[str, ActuatorResult | None] | None:
        row = self._db.execute(
            "SELECT state, ok, detail, refused FROM actions WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        state, ok, detail, refused = row
        done = ActuatorResult(bool(ok), detail, bool(refused)) if state == "finished" else None
        return state, done

    def source(self, key: str) -> str | None:
        """The record ``key`` was claimed from (None: unknown, e.g. a ledger from before)."""
        row = self._db.execute("SELECT source FROM actions WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self._db.close()


class ActuatorRunner:
    """Decisions in, outcome events out; each key through the actuator at most once.

    ``keyring``: verify the decider's signature (None: accept unsigned records, for tests of
    the actuators alone); ``max_age_s``: refuse decisions signed longer ago than this plus
    their backoff; ``dry_run``: run every decision as a dry run, whatever its mode.
    """

    def __init__(
        self,
        actuator: Actuator,
        ledger: Ledger,
        keyring: Keyring | None = None,
        max_age_s: float = 600.0,
        dry_run: bool = False,
    ) -> None:
        self.actuator = actuator
        self.ledger = ledger
        self.keyring = keyring
        self.max_age_s = max_age_s
        self.dry_run = dry_run

    def check(self, d: RecoveryEvent, now: int) -> str | None:
        """Why ``d`` must not run at all (unsigned, forged, expired), or None."""
        if self.keyring is None:
            return None
        why = self.keyring.check(d)
        if why is not None:
            return why
        waited = max(0, d.not_before_ts - d.ts)  # its backoff, decided with it
        if now - d.decided_at > waited + int(self.max_age_s * NS):
            age = (now - d.decided_at) / NS
            return f"expired: signed {age:.0f} s ago (max age {self.max_age_s:g} s past backoff)"
        return None

    def run(
        self, decision: RecoveryEvent, now_ns: int | None = None, source: str | None = None
    ) -> RecoveryEvent | None:
        """The outcome of ``decision``, or None when there is nothing to do (yet): not a
        decision, or its backoff has not passed (call again later). ``source``: where the
        record was read (topic/partition/offset); a key acted on from another record is a
        replay and is refused."""
        if decision.stage != "decided":
            return None
        now = time.time_ns() if now_ns is None else now_ns
        why = self.check(decision, now)
        if why is not None:
            return self._outcome(decision, refuse(why), now)
        if decision.not_before_ts > now:
            return None
        known = self.ledger.get(decision.key)
        if known is not None:
            return self._again(decision, known[1], now, source)
        if not self.ledger.claim(decision.key, self.actuator.name, source):
            return None  # another runner claimed it between our read and now
        if self.dry_run:
            decision = decision.model_copy(update={"mode": "dry_run"})
        try:
            result = self.actuator.execute(decision)
        except Exception as exc:  # an actuator bug must not take the runner down
            result = ActuatorResult(False, f"{self.actuator.name} raised {type(exc).__name__}")
        self.ledger.finish(decision.key, result)
        return self._outcome(decision, result, now)

    def _again(
        self, d: RecoveryEvent, result: ActuatorResult | None, now: int, source: str | None
    ) -> RecoveryEvent:
        """A key the ledger knows: its stored outcome when read again from the same record
        (Kafka redelivers), a refusal when it comes from another record (a replay)."""
        first = self.ledger.source(d.key)
        if source is not None and first is not None and first != source:
            replay = refuse(f"replayed: decision {d.key} was acted on from {first}")
            key = RecoveryEvent.make_key(d.key, "replay", source)
            return self._outcome(d.model_copy(update={"key": key}), replay, now)
        if result is None:  # claimed, never finished: the process died mid-action
            result = ActuatorResult(
                False,
                f"interrupted: {self.actuator.name} was running {describe(d)} when "
                "the process stopped; not repeated (at most once), check by hand",
            )
            self.ledger.finish(d.key, result)
        return self._outcome(d, result, now)

    def _outcome(self, d: RecoveryEvent, result: ActuatorResult, now: int) -> RecoveryEvent:
        stage = "refused" if result.refused else "succeeded" if result.ok else "failed"
        return d.model_copy(
            update={
                "stage": stage,
                "reason": f"{self.actuator.name}: {result.detail}"[:2048],
                "ts": max(now, d.ts),
                "signature": "",  # an outcome is not a decision: it never runs
            }
        )
