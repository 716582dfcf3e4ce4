"""The agent's counters: per-source stats and the snapshot the CLI and benchmarks read."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AgentStats", "CollectorStats"]


@dataclass(slots=True)
class CollectorStats:
    """Per-source counters, including the agent's own CPU time spent on it (poll + serialise +
    spool append, measured with the thread CPU clock)."""

    name: str
    interval_s: float | None = None
    polls: int = 0
    errors: int = 0
    events: int = 0
    cpu_s: float = 0.0
    skipped_ticks: int = 0
    failing: bool = False
    streak: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class AgentStats:
    """A snapshot of the agent's counters (events unless said otherwise)."""

    sampled: int
    spooled: int
    published: int
    delivered: int
    dropped: int
    rejected: int
    pending: int
    spool_bytes: int
    in_flight_batches: int
    delivery_failures: int
    collector_errors: int
    broker_ok: bool | None
    last_delivery_error: str
    uptime_s: float
    collectors: tuple[CollectorStats, ...] = ()

    def line(self) -> str:
        """One human-readable status line (the CLI prints it on stderr)."""
        broker = {True: "up", False: "DOWN", None: "?"}[self.broker_ok]
        return (
            f"sampled={self.sampled} delivered={self.delivered} pending={self.pending} "
            f"({self.spool_bytes / 1e6:.1f} MB) in_flight={self.in_flight_batches} "
            f"dropped={self.dropped} collector_errors={self.collector_errors} broker={broker}"
        )
