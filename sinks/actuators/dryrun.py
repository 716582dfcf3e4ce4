"""The dry-run actuator, the policy's default: it says what it would do and does nothing."""

from __future__ import annotations

import logging

from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.base import ActuatorResult, describe

log = logging.getLogger("rankscope.recovery")


class DryRunActuator:
    """Says what it would do; the policy's default mode."""

    name = "dry-run"

    def __init__(self) -> None:
        self.would: list[str] = []

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        why = decision.reason[:200].replace("\n", "\\n").replace("\r", "\\r")
        what = f"would run {describe(decision)} ({decision.rule}: {why})"
        log.warning("dry run: %s", what)
        self.would.append(what)
        return ActuatorResult(True, what)
