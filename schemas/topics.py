"""Kafka topic names: the contract between collectors, stream workers and sinks.

A prefix (default ``rankscope``) namespaces every topic so that several deployments, or several
test runs, can share one cluster without seeing each other's data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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
    def baselines(self) -> str:
        """Reference baselines (``schemas/baselines.py``), compacted, keyed by model/config key.

        Under the raw prefix: like the raw events it is an input the operators wrote, so a replay
        into a prefix of its own compares against the same baselines (issue 19)."""
        return f"{self.raw_prefix or self.prefix}.baselines"

    @property
    def fleet_input(self) -> str:
        """Node inventories of the whole fleet for the fleet drift stage (issue 19): ONE
        partition, compacted by node and configuration, so one stage sees every node and a
        rebuild reads each node's configurations however long ago they were sent."""
        return f"{self.prefix}.fleet_input"

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
            self.baselines,
            self.fleet_input,
        ]


#: Raw topics hold unredacted text (command lines, tracebacks) until the stream stage redacts it:
#: a week is long enough to replay after an outage or re-run an incident review, short enough to
#: bound how long a leaked secret stays readable (docs/decisions.md, "Raw retention")
RAW_RETENTION_MS = 7 * 24 * 3600 * 1000
#: a partition's newest analysis snapshot must outlive its quietest stretch; a week covers the
#: analysis' own retention (an hour) with margin
STATE_RETENTION_MS = 7 * 24 * 3600 * 1000
#: records up to this size reach the validate stage, which dead-letters oversized ones with a
#: reason instead of the producer getting an opaque broker error
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: the topic configs a :class:`TopicSpec` manages; any other key is the cluster's business
MANAGED_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "message.timestamp.type",
    "min.insync.replicas",
    "max.message.bytes",
)

TopicRole = Literal["raw", "derived", "internal"]


class TopicSpec(BaseModel):
    """What one topic of a deployment must look like on the cluster: the single table that topic
    creation, `rankscope topics check`, compose and the docs read (issue 18).

    ``None`` leaves a setting to the cluster's default; every other value is set on the topic.
    Config names and values are Kafka's topic configs (kafka.apache.org, "Topic Configs").
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    #: raw: written by collectors, unredacted; derived: written by the worker for the sink;
    #: internal: read back by the worker itself (events, state, recovery)
    role: TopicRole
    partitions: int = Field(ge=1)
    #: None: the cluster's default.replication.factor
    replication_factor: int | None = Field(default=None, ge=1)
    cleanup_policy: Literal["delete", "compact"] = "delete"
    #: None: the broker's log.retention.* default
    retention_ms: int | None = Field(default=None, ge=-1)
    timestamp_type: Literal["CreateTime", "LogAppendTime"] = "CreateTime"
    min_insync_replicas: int | None = Field(default=None, ge=1)
    max_message_bytes: int | None = Field(default=MAX_MESSAGE_BYTES, ge=1)
    why: str

    def configs(self) -> dict[str, str | None]:
        """Each managed config key -> the value to set, or None (left to the broker)."""
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": None if self.retention_ms is None else str(self.retention_ms),
            "message.timestamp.type": self.timestamp_type,
            "min.insync.replicas": _opt(self.min_insync_replicas),
            "max.message.bytes": _opt(self.max_message_bytes),
        }

    def topic_config(self) -> dict[str, str]:
        """The configs a new topic is created with (keys left to the broker omitted)."""
        return {k: v for k, v in self.configs().items() if v is not None}


def _opt(value: int | None) -> str | None:
    return None if value is None else str(value)


def topic_specs(
    topics: Topics,
    partitions: int = 4,
    replication_factor: int | None = None,
    raw_retention_ms: int = RAW_RETENTION_MS,
) -> list[TopicSpec]:
    """Every topic of the deployment ``topics`` names, in :attr:`Topics.all` order.

    ``partitions`` is the parallelism of the keyed topics; the recovery decider's two topics
    always have one. With ``replication_factor`` 3 or more, ``min.insync.replicas`` is 2: the
    producers are idempotent (acks=all), so a write survives one broker lost without stopping
    writes while one broker is down.
    """
    isr = 2 if replication_factor is not None and replication_factor >= 3 else None
    common = {"replication_factor": replication_factor, "min_insync_replicas": isr}
    why: dict[str, str] = {
        topics.events: "validated, redacted events: what every derived stage and the sink read",
        topics.windows: "closed event-time windows per rank (an array per job), for the sink",
        topics.late: "events that arrived after their window closed, kept for the record",
        topics.detections: "findings of the analysis (stragglers, hangs, faults), for the sink",
        topics.incidents: "root-cause incidents, for the sink",
        topics.deadletter: "records refused by validation, with a reason, never their content",
        topics.quarantine: "events redaction could not redact, free text removed",
        topics.redaction_audit: "counts of what redaction found (never values)",
        topics.recovery: "recovery decisions and their outcomes, keyed by job",
    }
    specs: list[TopicSpec] = []
    for name in topics.all_raw:
        signal = topics.otlp_signal(name)
        specs.append(
            TopicSpec(
                name=name,
                role="raw",
                partitions=partitions,
                retention_ms=raw_retention_ms,
                # the broker's clock as record time: the validate stage judges event times
                # against it, and a producer's CreateTime would let it vouch for its own events
                timestamp_type="LogAppendTime",
                why=(
                    f"OTLP {signal} from an OpenTelemetry Collector; unredacted until the worker"
                    if signal
                    else "every collector event, keyed by job; unredacted until the worker"
                ),
                **common,
            )
        )
    internal = {topics.events, topics.recovery}
    for name in [topics.events, *topics.worker_outputs, topics.recovery]:
        specs.append(
            TopicSpec(
                name=name,
                role="internal" if name in internal else "derived",
                partitions=partitions,
                why=why[name],
                **common,
            )
        )
    specs.append(
        TopicSpec(
            name=topics.worker_state,
            role="internal",
            partitions=partitions,  # one per events partition: a snapshot goes to its number
            retention_ms=STATE_RETENTION_MS,
            why="snapshots of the analysis state per events partition; only the newest is read",
            **common,
        )
    )
    specs.append(
        TopicSpec(
            name=topics.recovery_input,
            role="internal",
            partitions=1,
            why="the decider's input: one partition, so one decider sees the fleet in order",
            **common,
        )
    )
    specs.append(
        TopicSpec(
            name=topics.recovery_control,
            role="internal",
            partitions=1,
            cleanup_policy="compact",
            why="operators' pause/resume: compacted, so the latest command is kept for good",
            **common,
        )
    )
    specs.append(
        TopicSpec(
            name=topics.baselines,
            role="internal",
            partitions=1,
            cleanup_policy="compact",
            why="reference baselines, keyed by model/config key: compacted, the latest per key "
            "is kept for good; every worker reads it whole (issue 19)",
            **common,
        )
    )
    specs.append(
        TopicSpec(
            name=topics.fleet_input,
            role="internal",
            partitions=1,
            cleanup_policy="compact",
            why="node inventories for fleet drift: one partition (one view of the fleet), "
            "compacted by node and configuration so a rebuild still sees quiet nodes",
            **common,
        )
    )
    order = {name: i for i, name in enumerate(topics.all)}
    return sorted(specs, key=lambda s: order[s.name])


def streams_group(prefix: str) -> str:
    """The stream workers' consumer group (faust's app id) of the deployment ``prefix``."""
    return f"{prefix}-streams"


def validate_group(app_id: str) -> str:
    """The group of the ``rankscope validator`` processes beside the workers of ``app_id``: a
    group of its own (a faust group and a plain consumer group cannot share members)."""
    return f"{app_id}-validate"


#: librdkafka's partitioner that places a key as Kafka's Java client and aiokafka (the faust
#: worker's producer) do. Every librdkafka producer of keyed pipeline records sets it, so a job's
#: raw partition has the number of its ``<p>.events`` partition and faust's co-partitioned
#: assignment gives both to one worker (librdkafka's default, CRC32, places keys elsewhere).
KEY_PARTITIONER = "murmur2_random"


def partition_key(job_id: str, node: str) -> bytes:
    """Events of one job share a partition (ordering per job); node events key by node."""
    return (job_id or f"node:{node}").encode()
