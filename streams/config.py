"""Typed configuration of the stream workers (one component config, OTel-collector style)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from rankscope.schemas.topics import (
    DEFAULT_OTLP_LOGS_TOPICS,
    DEFAULT_OTLP_TRACES_TOPICS,
    DEFAULT_PREFIX,
    Topics,
    streams_group,
    validate_group,
)
from rankscope.streams.analysis.job import AnalysisConfig

#: the worker's event loop implementations (``StreamsConfig.event_loop``)
EventLoop = Literal["uvloop", "asyncio"]


class ValidationLimits(BaseModel):
    """What the validate stage accepts; everything else is dead-lettered with a reason."""

    max_message_bytes: int = Field(
        default=1_048_576, gt=0, description="Larger messages are refused (too_large)."
    )
    max_past_s: float = Field(
        default=7 * 86_400,
        gt=0,
        description="Events older than this relative to their Kafka record time are refused.",
    )
    max_future_s: float = Field(
        default=3_600, gt=0, description="Events this far ahead of their record time are refused."
    )
    max_batch_events: int = Field(
        default=10_000,
        gt=0,
        description="A batch with more elements is refused whole (too_large): bounded work per "
        "record whatever its contents.",
    )
    max_dead_letters_per_record: int = Field(
        default=5,
        ge=1,
        description="Bad elements of one batch past this many share one summary dead letter "
        "(counts by reason), so a hostile record cannot multiply into thousands of rows.",
    )
    max_number_digits: int = Field(
        default=40,
        ge=20,
        description="Longer JSON integers are refused as invalid values (Python's int parser "
        "would otherwise raise on a few thousand digits).",
    )


class WindowConfig(BaseModel):
    """Event-time tumbling windows (Kafka Streams semantics: grace, emit once on close)."""

    size_s: float = Field(default=5.0, gt=0)
    grace_s: float = Field(default=2.0, ge=0)
    channel_idle_s: float = Field(
        default=5.0,
        gt=0,
        description="A (kind, node) input silent this long stops holding the watermark back.",
    )
    channel_discovery_s: float = Field(
        default=3.0,
        ge=0,
        description="After a job is first seen, hold its windows this long while inputs appear.",
    )
    idle_close_s: float = Field(
        default=10.0,
        gt=0,
        description="Close a job's open windows after this much processing time without events.",
    )


class RedactionConfig(BaseModel):
    """The redaction stage (issue 5): on by default, rules from ``redaction/rules.yaml``."""

    enabled: bool = Field(
        default=True, description="Off only for benchmarks of the other stages: raw text flows."
    )
    rules_path: Path | None = Field(default=None, description="None: the packaged default rules.")
    key_file: Path | None = Field(
        default=None, description="Key for hashed entities when the rules' key_env is unset."
    )
    create_key: bool = Field(default=True, description="Create key_file when it is missing.")


class RecoveryConfig(BaseModel):
    """The recovery decider (issue 7): findings -> decisions on ``<p>.recovery``."""

    enabled: bool = True
    policy_path: Path | None = Field(default=None, description="None: the packaged policy.")
    progress_note_s: float = Field(
        default=5.0,
        gt=0,
        description="A job's step counter reaches the decider at most this often (event time).",
    )
    key_file: Path | None = Field(
        default=None,
        description="Key that signs decisions and verifies pause/resume (RANKSCOPE_RECOVERY_KEY "
        "and RANKSCOPE_RECOVERY_KEY_FILE win); the runner and the CLI need the same key.",
    )
    create_key: bool = Field(default=True, description="Create key_file when it is missing.")


class StateConfig(BaseModel):
    """Snapshots of the analysis state on ``<p>.worker_state`` (streams/state.py)."""

    enabled: bool = Field(
        default=True,
        description="Off: the analysis is in memory only and restarts empty after a crash or a "
        "rebalance (records are then acknowledged without waiting for a snapshot).",
    )
    snapshot_interval_s: float = Field(
        default=15.0,
        gt=0,
        description="Seconds between snapshots of a partition that received records; a crash "
        "re-reads at most about this much. A partition read to its end is snapshotted after "
        "one quiet second.",
    )
    chunk_bytes: int = Field(default=512 * 1024, ge=1024, le=4 * 1024 * 1024)
    key_file: Path | None = Field(
        default=None,
        description="File holding the key that signs snapshots (RANKSCOPE_STATE_KEY wins); "
        "every worker of a deployment needs the same key.",
    )
    create_key: bool = Field(default=True, description="Create key_file when it is missing.")


class StreamsConfig(BaseModel):
    bootstrap: str
    topic_prefix: str = DEFAULT_PREFIX
    app_id: str = streams_group(DEFAULT_PREFIX)
    data_dir: Path = Path(".rankscope/faust")
    limits: ValidationLimits = ValidationLimits()
    redaction: RedactionConfig = RedactionConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    session_timeout_s: float = Field(
        default=60.0,
        ge=6,
        description="A worker silent this long loses its partitions to the others. Shorter "
        "moves work sooner after a crash; too short and a worker busy with a large job misses "
        "heartbeats and the group rebalances for nothing.",
    )
    fetch_max_bytes: int = Field(
        default=256 * 1024,
        ge=1024,
        description="Bytes per partition per fetch. Small fetches keep a worker that is behind "
        "from holding many seconds of one partition in memory; the broker still returns a "
        "larger first batch, so an oversized record is not stuck. Findings do not depend on it.",
    )
    fetch_max_wait_ms: int = Field(
        default=100,
        ge=0,
        le=1500,
        description="Longest the broker holds the worker's fetch open waiting for data. faust "
        "sets 1,500 ms; a worker reads its own events topic back, and a fetch holding only "
        "caught-up events partitions kept the raw partitions waiting for that long "
        "(streams/transport.py). Lower wakes an idle worker more often (10 fetches/s at 100). "
        "Findings do not depend on it.",
    )
    output_compression: Literal["none", "zstd", "gzip", "lz4"] = Field(
        default="zstd",
        description="Compression of the worker's output topics. zstd cuts the events topic "
        "from ~740 to ~195 B/event on the broker and the worker's CPU per event to ~0.82x. "
        "Opt-in until the fetch wait was found (rows reached ClickHouse 2-5x later: the worker "
        "stalled on faust's 1,500 ms fetch wait, fetch_max_wait_ms); default since "
        "(docs/decisions.md, 'The consumer's fetch wait'). Findings do not depend on it.",
    )
    event_loop: EventLoop = Field(
        default="uvloop",
        description="The worker's event loops (faust's and its consumer thread's). uvloop "
        "(libuv, in C) does the socket work and the hand-off between faust's two threads with "
        "less interpreter time: ~0.95x worker CPU per event in the e2e bench. asyncio: the "
        "standard library's, for a platform without uvloop. Findings do not depend on it.",
    )
    backpressure_events: int = Field(
        default=0,
        ge=0,
        description="Stop fetching the raw topics while this many validated events wait for "
        "this worker's windows agent, resume at 80% of it (0, the default: never). In a backlog "
        "the windows agent then takes the events already parsed instead of parsing them again: "
        "~0.91x worker CPU per event in the bench, but validation is paced by the analysis, so "
        "rows reached ClickHouse ~1.6x later and the findings were not sooner (docs/decisions.md, "
        "'Back-pressure is opt-in'). Findings do not depend on it.",
    )
    validate_in_worker: bool = Field(
        default=True,
        description="Validate and redact the raw topics in this faust worker (the default). "
        "False: the worker reads only <p>.events and its own topics, and `rankscope validator` "
        "processes (a confluent-kafka loop) validate the raw topics in their own consumer "
        "group (validate_group_id): rows were stored 1.21-1.38x sooner in the e2e bench, for "
        "the same CPU per event in total. Findings do not depend on it: the analysis reads the "
        "same events log either way.",
    )
    windows: WindowConfig = WindowConfig()
    state: StateConfig = StateConfig()
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    analysis_enabled: bool = True
    analysis_flush_idle_s: float = Field(
        default=5.0,
        gt=0,
        description="Seconds (processing time) a job's events must have stopped, with its "
        "partition read to the end, before the analysis attributes what is still settling. "
        "The one decision not taken on event time: a job that resumes after a longer pause "
        "may be attributed differently than one read without the pause.",
    )
    analysis_retention_s: float = Field(
        default=3600.0, gt=0, description="Forget a job's analysis state after this much quiet."
    )
    max_ranks_per_job: int = Field(
        default=131_072,
        gt=0,
        description="Ranks of one job the worker windows and analyzes; events of further ranks "
        "are stored but not analyzed (a warning per job): one job id cannot claim unbounded state.",
    )
    max_nodes_per_job: int = Field(default=32_768, gt=0, description="Nodes of one job, likewise.")
    analysis_admit_events: int = Field(
        default=8,
        ge=1,
        description="A new job's events wait in a list until it has this many (or goes quiet), "
        "then its analyzer is made and fed them in order: a flood of one-event job ids costs a "
        "list append each, not an analyzer each. Findings are the same either way.",
    )
    log_level: str = "warn"
    #: read the raw topics of this prefix instead of ``topic_prefix``'s (a replay)
    raw_topic_prefix: str | None = None
    otlp_traces_topics: list[str] = Field(
        default=list(DEFAULT_OTLP_TRACES_TOPICS),
        description="Topics an OpenTelemetry Collector's Kafka exporter writes traces to "
        "(its traces::topic; the prefixed <p>.raw.otlp_spans is read too).",
    )
    otlp_logs_topics: list[str] = Field(
        default=list(DEFAULT_OTLP_LOGS_TOPICS),
        description="Topics an OpenTelemetry Collector's Kafka exporter writes logs to "
        "(its logs::topic).",
    )

    @property
    def validate_group_id(self) -> str:
        """The consumer group whose committed raw offsets say what has been validated: the
        faust app's own group, or the validators' (a group of their own: a faust group and a
        plain consumer group cannot share members, their assignment protocols differ)."""
        return self.app_id if self.validate_in_worker else validate_group(self.app_id)

    @property
    def topics(self) -> Topics:
        return Topics(
            self.topic_prefix,
            self.raw_topic_prefix,
            tuple(self.otlp_traces_topics),
            tuple(self.otlp_logs_topics),
        )
