"""The agent's typed config: pydantic models for its YAML file, and the environment overrides.

Config (:class:`AgentConfig`): a YAML file, overridden by environment variables
``RANKSCOPE_AGENT__<SECTION>__<KEY>=value`` (``__`` separates nesting levels, names are
case-insensitive, e.g. ``RANKSCOPE_AGENT__KAFKA__BOOTSTRAP=kafka:9092``,
``RANKSCOPE_AGENT__GPU__INTERVAL_S=2``, ``RANKSCOPE_AGENT__CLUSTER=prod``). Values are strings
that pydantic converts to the field's type; a value starting with ``{`` or ``[`` is parsed as
JSON (dicts, lists). Environment wins over the file, so one file can serve a whole fleet.

The CLI's common names (:data:`COMMON_ENV`, e.g. ``RANKSCOPE_BOOTSTRAP``) apply too, below the
agent's own: ``RANKSCOPE_AGENT__KAFKA__BOOTSTRAP`` > ``RANKSCOPE_BOOTSTRAP`` > file > default.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rankscope.collectors.agent.registry import COLLECTORS, AgentConfigError, load_collector
from rankscope.collectors.base import CollectorConfig
from rankscope.collectors.publisher import PublisherConfig
from rankscope.collectors.spool import DEFAULT_MAX_BYTES, DEFAULT_SEGMENT_BYTES, FsyncPolicy
from rankscope.redaction.source import SourceRedactionConfig

__all__ = [
    "AGENT_NAME",
    "COMMON_ENV",
    "ENV_PREFIX",
    "AgentConfig",
    "SpoolConfig",
    "agent_version",
    "env_overrides",
]

ENV_PREFIX = "RANKSCOPE_AGENT__"
#: the CLI's common settings (``rankscope.settings.Settings``, one name each) the agent reads
#: when its own ``RANKSCOPE_AGENT__...`` name is unset, so one environment serves every command
COMMON_ENV: dict[str, tuple[str, ...]] = {
    "RANKSCOPE_BOOTSTRAP": ("kafka", "bootstrap"),
    "RANKSCOPE_TOPIC_PREFIX": ("kafka", "topic_prefix"),
}
AGENT_NAME = "rankscope-agent"


class SpoolConfig(BaseModel):
    """Where and how much the agent buffers while Kafka is unreachable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path = Field(
        default=Path(".rankscope/agent-spool"),
        description="Spool directory (one agent per directory; relative to the working dir).",
    )
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=64 * 1024)
    segment_bytes: int = Field(default=DEFAULT_SEGMENT_BYTES, ge=4 * 1024)
    fsync: FsyncPolicy = "interval"
    fsync_interval_s: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _segments_fit(self) -> Self:
        if self.segment_bytes * 2 > self.max_bytes:
            raise ValueError("spool.segment_bytes must be at most half of spool.max_bytes")
        return self


class AgentConfig(BaseModel):
    """The node agent's config: identity, Kafka, spool, built-in sources, one section per
    collector (validated by that collector's own config class, see :data:`COLLECTORS`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    cluster: str = Field(min_length=1, max_length=256)
    node: str = Field(default_factory=socket.gethostname, min_length=1, max_length=256)
    agent_name: str = Field(default=AGENT_NAME, min_length=1, max_length=256)
    job_id: str = Field(
        default="",
        max_length=256,
        description="Job id for node-level events when no GPU is bound to a job.",
    )
    kafka: PublisherConfig
    spool: SpoolConfig = SpoolConfig()
    redaction: SourceRedactionConfig = Field(
        default_factory=SourceRedactionConfig,
        description="Redaction before spooling and publishing (on by default; "
        "redaction.enabled: false or RANKSCOPE_AGENT__REDACTION__ENABLED=false turns it off).",
    )
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    inventory_interval_s: float = Field(default=300.0, gt=0)
    shutdown_timeout_s: float = Field(
        default=10.0, ge=0, description="On SIGTERM: how long to keep delivering the spool."
    )
    max_inflight_batches: int = Field(default=1000, ge=1)
    retry_backoff_s: float = Field(default=0.5, gt=0)
    retry_backoff_max_s: float = Field(default=30.0, gt=0)
    stuck_poll_s: float = Field(
        default=60.0, gt=0, description="Report a poll still running after this long."
    )
    gpu: dict[str, Any] | None = None
    fabric: dict[str, Any] | None = None
    nccl_log: dict[str, Any] | None = None
    kernel_log: dict[str, Any] | None = None
    slurm: dict[str, Any] | None = None
    kubernetes: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _agent_client_id(cls, data: Any) -> Any:
        """Name the producer after the agent (broker logs, quotas) unless the config does."""
        if isinstance(data, dict) and isinstance(data.get("kafka"), dict):
            kafka = data["kafka"]
            if "client_id" not in kafka:
                data = {**data, "kafka": {**kafka, "client_id": AGENT_NAME}}
        return data

    @model_validator(mode="after")
    def _known_sections(self) -> Self:
        """Extra top-level keys are allowed only for collectors registered in COLLECTORS, so a
        typo ("gpus:") fails loudly instead of silently disabling a collector."""
        for key, value in (self.model_extra or {}).items():
            if key not in COLLECTORS:
                known = ", ".join(sorted({*type(self).model_fields, *COLLECTORS}))
                raise ValueError(f"unknown agent config key {key!r} (known: {known})")
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"collector section {key!r} must be a mapping")
        return self

    def collector_sections(self) -> dict[str, dict[str, Any]]:
        """Configured collector sections, in registry order (an empty section means defaults)."""
        out: dict[str, dict[str, Any]] = {}
        extra = self.model_extra or {}
        for name in COLLECTORS:
            value = getattr(self, name, None) if name in type(self).model_fields else None
            if value is None:
                value = extra.get(name)
            if value is not None:
                out[name] = dict(value)
        return out

    def collector_configs(self) -> dict[str, CollectorConfig]:
        """Validate every configured section with its collector's config class (imports the
        collector modules). Raises :class:`AgentConfigError` with the section name."""
        out: dict[str, CollectorConfig] = {}
        for name, section in self.collector_sections().items():
            config_cls, _ = load_collector(name)
            try:
                out[name] = config_cls.model_validate(section)
            except ValidationError as exc:
                raise AgentConfigError(f"invalid `{name}` section: {exc}") from exc
        return out

    @classmethod
    def load(cls, path: Path | str, env: Mapping[str, str] | None = None) -> AgentConfig:
        """Read a YAML file and apply ``RANKSCOPE_AGENT__*`` overrides from ``env``."""
        env = os.environ if env is None else env
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except FileNotFoundError as exc:
            raise AgentConfigError(f"agent config {path} does not exist") from exc
        except (OSError, yaml.YAMLError) as exc:
            raise AgentConfigError(f"{path}: cannot be read as YAML: {exc}") from exc
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise AgentConfigError(f"{path}: the top level must be a mapping")
        common: dict[str, Any] = {}
        for name, keys in COMMON_ENV.items():
            if env.get(name):
                common = _deep_merge(common, _nested(keys, env[name]))
        merged = _deep_merge(_deep_merge(raw, common), env_overrides(env))
        try:
            return cls.model_validate(merged)
        except ValidationError as exc:
            raise AgentConfigError(f"{path}: {exc}") from exc


def env_overrides(env: Mapping[str, str], prefix: str = ENV_PREFIX) -> dict[str, Any]:
    """``RANKSCOPE_AGENT__KAFKA__BOOTSTRAP=x`` -> ``{"kafka": {"bootstrap": "x"}}``."""
    out: dict[str, Any] = {}
    plen = len(prefix)
    for name, value in sorted(env.items()):
        if name[:plen].upper() != prefix:
            continue
        path = [p.lower() for p in name[plen:].split("__") if p]
        if not path:
            continue
        parsed: Any = value
        if value[:1] in ("{", "["):
            try:
                parsed = json.loads(value)
            except ValueError as exc:
                raise AgentConfigError(f"{name}: not valid JSON: {exc}") from exc
        node = out
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise AgentConfigError(f"{name}: conflicts with another override")
            node = child
        node[path[-1]] = parsed
    return out


def _nested(path: tuple[str, ...], value: str) -> dict[str, Any]:
    """``("kafka", "bootstrap"), "x"`` -> ``{"kafka": {"bootstrap": "x"}}``."""
    out: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        out = {part: out}
    return out


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def agent_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("rankscope")
    except (ImportError, PackageNotFoundError):
        return "0+unknown"
