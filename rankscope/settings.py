"""Settings shared by the CLI commands, from flags or ``RANKSCOPE_*`` environment variables.

Each component keeps its own typed config (``PublisherConfig``, ``StreamsConfig``,
``SinkConfig``); this module only holds what the operator sets once and builds those from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

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


#: the stream worker's settings -> the ``StreamsConfig`` field each sets ("state.x": a field of
#: its ``state``). Their defaults and bounds live there only; the README's configuration table
#: states them and ``tests/test_settings_defaults.py`` holds the two equal.
WORKER_SETTINGS: Final[dict[str, str]] = {
    "worker_session_timeout_s": "session_timeout_s",
    "worker_fetch_max_bytes": "fetch_max_bytes",
    "worker_fetch_max_wait_ms": "fetch_max_wait_ms",
    "worker_output_compression": "output_compression",
    "worker_event_loop": "event_loop",
    "worker_backpressure_events": "backpressure_events",
    "worker_validate": "validate_in_worker",
    "worker_snapshot_interval_s": "state.snapshot_interval_s",
    "worker_flush_idle_s": "analysis_flush_idle_s",
}


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
    # The stream worker's settings (WORKER_SETTINGS): None, unset, leaves StreamsConfig's default.
    #: how long a silent stream worker keeps its partitions before the group moves them
    worker_session_timeout_s: float | None = None
    #: bytes per partition per fetch for the stream worker (findings do not depend on it)
    worker_fetch_max_bytes: int | None = None
    #: longest the broker holds the stream worker's fetch open (faust's own is 1,500 ms)
    worker_fetch_max_wait_ms: int | None = None
    #: compression of the worker's output topics: zstd, none, gzip, lz4
    worker_output_compression: Literal["none", "zstd", "gzip", "lz4"] | None = None
    #: the worker's event loops: uvloop or asyncio (the standard library's)
    worker_event_loop: Literal["uvloop", "asyncio"] | None = None
    #: validated events waiting for the windows agent before the worker stops fetching raw
    #: topics (0: never; opt-in: less CPU in a backlog, rows stored later); resumes at 80% of it
    worker_backpressure_events: int | None = None
    #: validate the raw topics in the faust worker; false: `rankscope validator` processes do
    #: it (a confluent-kafka loop, their own group) and the worker reads events
    worker_validate: bool | None = None
    #: seconds between snapshots of the analysis state of a busy partition
    worker_snapshot_interval_s: float | None = None
    #: seconds a job's events must have stopped before its analysis is flushed
    worker_flush_idle_s: float | None = None
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

        overrides: dict[str, dict[str, Any]] = {"": {}, "state": {}}
        for name, target in WORKER_SETTINGS.items():
            value = getattr(self, name)
            if value is not None:  # unset: the worker's own default
                section, _, field = target.rpartition(".")
                overrides[section][field] = value
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
            state=StateConfig(key_file=self.home / "state.key", **overrides["state"]),
            raw_topic_prefix=self.raw_topic_prefix,
            otlp_traces_topics=self.otlp_traces_topics,
            otlp_logs_topics=self.otlp_logs_topics,
            **overrides[""],
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
