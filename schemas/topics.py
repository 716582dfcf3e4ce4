"""Kafka topic names: the contract between collectors, stream workers and sinks.

A prefix (default ``rankscope``) namespaces every topic so that several deployments, or several
test runs, can share one cluster without seeing each other's data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_PREFIX = "rankscope"
#: the OpenTelemetry Collector kafkaexporter's default topics (``traces::topic``,
#: ``logs::topic``): a Collector pointed at the broker with no topic set writes here. Not under
#: the prefix, so that the Collector's defaults work as they are (docs/decisions.md, "Which
#: topics the OTLP input reads")
DEFAULT_OTLP_TRACES_TOPICS: tuple[str, ...] = ("otlp_spans",)
DEFAULT_OTLP_LOGS_TOPICS: tuple[str, ...] = ("otlp_logs",)

OtlpSignal = Literal["traces", "logs"]


@dataclass(frozen=True)
class Topics:
    prefix: str = DEFAULT_PREFIX
    #: where the raw topics live when it is not ``prefix``: a replay reads the raw topics of a
    #: deployment and writes its derived topics under a prefix of its own
    raw_prefix: str | None = None
    #: topics an OpenTelemetry Collector's Kafka exporter writes OTLP traces / logs to
    otlp_traces_topics: tuple[str, ...] = DEFAULT_OTLP_TRACES_TOPICS
    otlp_logs_topics: tuple[str, ...] = DEFAULT_OTLP_LOGS_TOPICS

    @property
    def raw(self) -> str:
        """Where collectors publish events of every kind (key: job id, or node for node events).

        One topic for all kinds, so a job's partition holds its events in the order the node
        agents emitted them: the analysis is then a function of the log, whatever the lag or
        read pattern of the worker (docs/decisions.md, "One raw topic").
        """
        return f"{self.raw_prefix or self.prefix}.raw.events"

    @property
    def all_raw(self) -> list[str]:
        """Every topic the validate stage reads: the collectors' events and the OTLP topics."""
        return [self.raw, *self.otlp_traces, *self.otlp_logs]

    @property
    def otlp_spans(self) -> str:
        """The prefixed OTLP traces topic of earlier releases, still read (a Collector already
        configured with it keeps working)."""
        return f"{self.raw_prefix or self.prefix}.raw.otlp_spans"

    @property
    def otlp_traces(self) -> list[str]:
        """Topics read as OTLP traces: the configured ones, then :attr:`otlp_spans`."""
        return list(dict.fromkeys([*self.otlp_traces_topics, self.otlp_spans]))

    @property
    def otlp_logs(self) -> list[str]:
        """Topics read as OTLP logs (a topic listed for traces too is read as traces)."""
        return [t for t in dict.fromkeys(self.otlp_logs_topics) if t not in self.otlp_traces]

    def otlp_signal(self, topic: str) -> OtlpSignal | None:
        """Which OTLP signal ``topic`` carries; None for the project's own raw topic."""
        if topic in self.otlp_traces:
            return "traces"
        if topic in self.otlp_logs:
            return "logs"
        return None

    @property
    def events(self) -> str:
        """Validated and redacted events: what every derived stage reads."""
        return f"{self.prefix}.events"

    @property
    def windows(self) -> str:
        return f"{self.prefix}.windows"

    @property
    def late(self) -> str:
        return f"{self.prefix}.late"

    @property
    def detections(self) -> str:
        return f"{self.prefix}.detections"

    @property
    def incidents(self) -> str:
        return f"{self.prefix}.incidents"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    @property
    def quarantine(self) -> str:
        """Events the redaction stage could not redact, with their free text removed."""
        return f"{self.prefix}.quarantine"

    @property
    def redaction_audit(self) -> str:
        """Counts of what redaction found, per rule, entity, field and kind (never values)."""
        return f"{self.prefix}.redaction_audit"

    @property
    def worker_state(self) -> str:
        """Snapshots of the workers' analysis state, one partition per events partition."""
        return f"{self.prefix}.worker_state"

    @property
    def recovery(self) -> str:
        """Recovery decisions and their outcomes (RecoveryEvent), keyed by job."""
        return f"{self.prefix}.recovery"

    @property
    def recovery_input(self) -> str:
        """What the recovery decider reads (RecoveryInput): findings, progress notes and operator
        commands of the whole fleet, on ONE partition so one decider (and its circuit breaker)
        sees them all, in order."""
        return f"{self.prefix}.recovery_input"

    @property
    def recovery_control(self) -> str:
        """Operator commands to the recovery decider (pause, resume); the latest one wins."""
        return f"{self.prefix}.recovery_control"

    @property
    def worker_outputs(self) -> list[str]:
        """What the stream worker derives for the sink and nobody reads back: one list for the
        ACL plan and for tests that scan every derived topic."""
        return [
            self.windows,
            self.late,
            self.detections,
            self.incidents,
            self.deadletter,
            self.quarantine,
            self.redaction_audit,
        ]

    @property
    def all(self) -> list[str]:
        return [
            *self.all_raw,
            self.events,
            self.windows,
            self.late,
            self.detections,
            self.incidents,
            self.deadletter,
            self.quarantine,
            self.redaction_audit,
            self.worker_state,
            self.recovery,
            self.recovery_input,
            self.recovery_control,
        ]


def partition_key(job_id: str, node: str) -> bytes:
    """Events of one job share a partition (ordering per job); node events key by node."""
    return (job_id or f"node:{node}").encode()
