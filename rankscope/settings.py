"""Settings shared by the CLI commands, from flags or ``RANKSCOPE_*`` environment variables.

Each component keeps its own typed config (``PublisherConfig``, ``StreamsConfig``,
``SinkConfig``); this module only holds what the operator sets once and builds those from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rankscope.kafka_security import KafkaSecurity, security_from_env
from rankscope.schemas.topics import (
    DEFAULT_OTLP_LOGS_TOPICS,
    DEFAULT_OTLP_TRACES_TOPICS,
    Topics,
    streams_group,
)

if TYPE_CHECKING:
    # imported where they are built: the sink's and the worker's configs pull in their extras
    # (ClickHouse client, faust), which an agent-only install lacks (README "Install")
    from rankscope.collectors.publisher import PublisherConfig
    from rankscope.sinks.kafka_sink import SinkConfig
    from rankscope.streams.config import StreamsConfig


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RANKSCOPE_", extra="ignore")

    home: Path = Path(".rankscope")
    bootstrap: str | None = None  # None: use (or start) the local broker
    clickhouse_url: str | None = None  # None: use (or start) the local chDB engine
    database: str = "rankscope"
    topic_prefix: str = "rankscope"
    #: the raw topics' prefix when it is not topic_prefix (``rankscope replay`` sets it)
    raw_topic_prefix: str | None = None
    partitions: int = 4
    redaction_rules: Path | None = None  # None: the packaged default rules
    recovery_policy: Path | None = None  # None: the packaged recovery policy
    #: off: the worker decides no recovery action (a replay must not act on the past)
    recovery_enabled: bool = True
    #: how long a silent stream worker keeps its partitions before the group moves them
    worker_session_timeout_s: float = 60.0
    #: bytes per partition per fetch for the stream worker (findings do not depend on it)
    worker_fetch_max_bytes: int = 256 * 1024
    #: longest the broker holds the stream worker's fetch open (faust's own is 1,500 ms)
    worker_fetch_max_wait_ms: int = 100
    #: compression of the worker's output topics: zstd (default), none, gzip, lz4
    worker_output_compression: Literal["none", "zstd", "gzip", "lz4"] = "zstd"
    #: validated events waiting for the windows agent before the worker stops fetching raw
    #: topics (0, the default: never; opt-in: less CPU in a backlog, rows stored later);
    #: resumes at 80% of it
    worker_backpressure_events: int = 0
    #: validate the raw topics in the faust worker (default); false: `rankscope validator`
    #: processes do it (a confluent-kafka loop, less CPU per event) and the worker reads events
    worker_validate: bool = True
    #: seconds between snapshots of the analysis state of a busy partition
    worker_snapshot_interval_s: float = 15.0
    #: seconds a job's events must have stopped before its analysis is flushed
    worker_flush_idle_s: float = 5.0
    #: the stream worker's scratch directory (None: <home>/faust); one per worker process
    worker_data_dir: Path | None = None
    #: topics an OpenTelemetry Collector's Kafka exporter writes to (JSON lists in the env)
    otlp_traces_topics: list[str] = list(DEFAULT_OTLP_TRACES_TOPICS)
    otlp_logs_topics: list[str] = list(DEFAULT_OTLP_LOGS_TOPICS)
    #: what one GPU-hour costs, for the named queries' money columns (run_cost, efficiency, ...);
    #: None: the SQL library's default (named_queries.default_price_per_gpu_hour)
    price_per_gpu_hour: float | None = Field(default=None, gt=0)

    @property
    def topics(self) -> Topics:
        return Topics(
            self.topic_prefix,
            self.raw_topic_prefix,
            tuple(self.otlp_traces_topics),
            tuple(self.otlp_logs_topics),
        )

    @property
    def kafka_security(self) -> KafkaSecurity:
        """TLS/SASL of every Kafka client: RANKSCOPE_KAFKA_* over RANKSCOPE_KAFKA_CONFIG_FILE."""
        return security_from_env()

    def publisher(self, bootstrap: str) -> PublisherConfig:
        from rankscope.collectors.publisher import PublisherConfig

        return PublisherConfig(bootstrap=bootstrap, topic_prefix=self.topic_prefix)

    def streams(self, bootstrap: str) -> StreamsConfig:
        from rankscope.streams.config import (
            RecoveryConfig,
            RedactionConfig,
            StateConfig,
            StreamsConfig,
        )

        return StreamsConfig(
            bootstrap=bootstrap,
            topic_prefix=self.topic_prefix,
            app_id=streams_group(self.topic_prefix),
            data_dir=self.worker_data_dir or self.home / "faust",
            redaction=RedactionConfig(
                rules_path=self.redaction_rules, key_file=self.home / "redaction.key"
            ),
            recovery=RecoveryConfig(
                enabled=self.recovery_enabled,
                policy_path=self.recovery_policy,
                key_file=self.home / "recovery.key",
            ),
            state=StateConfig(
                key_file=self.home / "state.key",
                snapshot_interval_s=self.worker_snapshot_interval_s,
            ),
            session_timeout_s=self.worker_session_timeout_s,
            fetch_max_bytes=self.worker_fetch_max_bytes,
            fetch_max_wait_ms=self.worker_fetch_max_wait_ms,
            output_compression=self.worker_output_compression,
            backpressure_events=self.worker_backpressure_events,
            validate_in_worker=self.worker_validate,
            analysis_flush_idle_s=self.worker_flush_idle_s,
            raw_topic_prefix=self.raw_topic_prefix,
            otlp_traces_topics=self.otlp_traces_topics,
            otlp_logs_topics=self.otlp_logs_topics,
        )

    def sink(self, bootstrap: str, clickhouse_url: str) -> SinkConfig:
        from rankscope.sinks.kafka_sink import SinkConfig

        return SinkConfig(
            bootstrap=bootstrap,
            clickhouse_url=clickhouse_url,
            database=self.database,
            topic_prefix=self.topic_prefix,
            group_id=f"{self.topic_prefix}-sink",
        )
