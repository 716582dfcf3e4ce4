"""Consume a stream: count what it holds (:func:`summarize`) or replay it in scaled real time.

Why a module of its own: these work on any event iterator (a simulated job, a faulty one, a
recorded file), not on the simulator, and the demo and the CLI use them on their own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from rankscope.schemas import Envelope

__all__ = ["SimulationSummary", "pace", "summarize"]

_NS = 1_000_000_000


class SimulationSummary(BaseModel):
    """What a stream contained: enough to print after ``rankscope demo`` and to assert in tests."""

    model_config = ConfigDict(frozen=True)

    counts: dict[str, int]
    total: int
    first_ts: int | None
    last_ts: int | None

    @property
    def duration_s(self) -> float:
        if self.first_ts is None or self.last_ts is None:
            return 0.0
        return (self.last_ts - self.first_ts) / _NS


def summarize(events: Iterable[Envelope]) -> SimulationSummary:
    """Count events per kind and the event-time span they cover (consumes ``events``)."""
    counts: dict[str, int] = {}
    first: int | None = None
    last: int | None = None
    total = 0
    for e in events:
        counts[e.kind] = counts.get(e.kind, 0) + 1
        total += 1
        first = e.ts if first is None or e.ts < first else first
        last = e.ts if last is None or e.ts > last else last
    return SimulationSummary(counts=counts, total=total, first_ts=first, last_ts=last)


E = TypeVar("E", bound=Envelope)


def pace(
    events: Iterable[E],
    speed: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[E]:
    """Release each event no earlier than its event-time offset from the first event / ``speed``.

    ``speed=60`` plays a two-minute job in two seconds; ``0`` or ``inf`` means no pacing. Used so
    a demo exercises the stream workers' windows and watermarks in (scaled) real time.
    """
    if math.isnan(speed) or speed < 0:
        raise ValueError(f"speed must be >= 0 (0 or inf: as fast as possible), got {speed}")
    if speed == 0 or math.isinf(speed):
        yield from events
        return
    first_ts: int | None = None
    wall0 = 0.0
    for e in events:
        if first_ts is None:
            first_ts, wall0 = e.ts, clock()
        else:
            delay = wall0 + (e.ts - first_ts) / _NS / speed - clock()
            if delay > 0:
                sleep(delay)
        yield e
