"""What every stage shares: the counters they bump and the faust topics they read and write.

Kept apart from the stages so that each stage module depends on this one only, never on another
stage's module, and ``create_app`` builds the topics once for all of them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import faust

from rankscope.schemas.topics import Topics


@dataclass
class StageCounters:
    """Exposed for tests and the CLI; the faust web view is disabled to keep workers light."""

    records_in: int = 0
    events_valid: int = 0
    dead_letters: int = 0
    window_records_in: int = 0
    windows_emitted: int = 0
    late_events: int = 0
    detections: int = 0
    incidents: int = 0
    pending_acks: int = 0
    recovery_events: int = 0
    values_redacted: int = 0
    events_quarantined: int = 0
    snapshots: int = 0
    snapshots_restored: int = 0
    duplicates_dropped: int = 0
    events_over_job_caps: int = 0
    otlp_lines_ignored: int = 0  # OTLP log lines that were not NCCL/PyTorch lines
    #: times the raw topics were paused because the windows agent was behind (back-pressure)
    raw_pauses: int = 0
    #: events records the windows agent parsed because the handoff did not hold them
    events_records_parsed_again: int = 0
    #: events records the handoff did not hold because it was full (set each tick)
    handoff_not_held: int = 0
    #: events the handoff holds for the windows agent now (`ParsedHandoff.report`, each tick)
    handoff_held_events: int = 0
    started_wall: float = field(default_factory=time.time)
    # breakdowns of the totals above, counted in the same places (exported as metrics)
    records_by_topic: Counter[str] = field(default_factory=Counter)
    dead_letters_by_reason: Counter[str] = field(default_factory=Counter)
    findings_by_entity: Counter[tuple[str, str]] = field(default_factory=Counter)  # entity, action
    detections_by_type: Counter[str] = field(default_factory=Counter)
    recovery_by_action: Counter[tuple[str, str]] = field(default_factory=Counter)  # stage, action
    #: records behind per (topic, partition), and when the timer last ran (monotonic)
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    ticked: float = field(default_factory=time.monotonic)
    #: seconds from a window's end to its emission; the metrics histogram when exported
    observe_close_delay: Callable[[float], None] = field(default=lambda seconds: None)

    def summary(self) -> str:
        """One log line: what the worker did since it started."""
        return (
            f"{self.records_in:,} raw records, {self.events_valid:,} events valid, "
            f"{self.dead_letters:,} dead letters, {self.events_quarantined:,} quarantined; "
            f"{self.windows_emitted:,} windows ({self.late_events:,} late events), "
            f"{self.detections:,} detections, {self.incidents:,} incidents, "
            f"{self.recovery_events:,} recovery events; {self.pending_acks:,} records held"
        )


@dataclass(frozen=True)
class StageTopics:
    """The worker's faust topics, declared once on the app (faust never creates them: the
    topics exist beforehand, ``topic_allow_declare=False``)."""

    raw: faust.TopicT
    events: faust.TopicT
    windows: faust.TopicT
    late: faust.TopicT
    deadletter: faust.TopicT
    quarantine: faust.TopicT
    audit: faust.TopicT
    recovery: faust.TopicT
    recovery_input: faust.TopicT
    detections: faust.TopicT
    incidents: faust.TopicT
    state: faust.TopicT

    @classmethod
    def create(cls, app: faust.App, topics: Topics) -> StageTopics:
        raw = app.topic(
            *topics.all_raw,
            key_type=bytes,
            value_type=bytes,
            value_serializer="raw",
        )
        events = app.topic(topics.events, key_type=bytes, value_type=bytes, value_serializer="raw")
        return cls(
            raw=raw,
            events=events,
            windows=app.topic(topics.windows, value_serializer="raw"),
            late=app.topic(topics.late, value_serializer="raw"),
            deadletter=app.topic(topics.deadletter, value_serializer="raw"),
            quarantine=app.topic(topics.quarantine, value_serializer="raw"),
            audit=app.topic(topics.redaction_audit, value_serializer="raw"),
            recovery=app.topic(topics.recovery, value_serializer="raw"),
            recovery_input=app.topic(topics.recovery_input, value_serializer="raw"),
            detections=app.topic(topics.detections, value_serializer="raw"),
            incidents=app.topic(topics.incidents, value_serializer="raw"),
            state=app.topic(
                topics.worker_state, key_type=bytes, value_type=bytes, value_serializer="raw"
            ),
        )
