"""What the dcgm-exporter collector can be told (the agent's ``dcgm`` section)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rankscope.collectors.base import CollectorConfig

__all__ = ["DEFAULT_POD_PATTERNS", "DcgmCollectorConfig"]

#: Pod name -> job (``job``) and replica index (``index``), tried in order; the first match wins.
#: Why these: the names Kubernetes controllers give pods, so the job is the same owner name the
#: ``kubernetes`` collector uses (``collectors/kubernetes``: controller owner):
#: Kubeflow training-operator ``<job>-<master|worker|launcher|chief|ps>-<index>``; an Indexed
#: Job or JobSet pod ``<job>-<index>-<5 random>``; a ReplicaSet pod (Deployment)
#: ``<rs>-<5 random>`` and a plain Job pod ``<job>-<5 random>`` (no index).
DEFAULT_POD_PATTERNS: tuple[str, ...] = (
    r"^(?P<job>.+)-(?:master|worker|launcher|chief|ps)-(?P<index>\d+)$",
    r"^(?P<job>.+)-(?P<index>\d+)-[a-z0-9]{5}$",
    r"^(?P<job>.+)-[a-z0-9]{5}$",
)


class DcgmCollectorConfig(CollectorConfig):
    """Where dcgm-exporter listens and how its pod labels become job and rank."""

    #: dcgm-exporter refreshes its values every 30 s by default (``-c 30000``); scraping faster
    #: returns the same numbers, so 10 s is a compromise between freshness and repeats
    interval_s: float = Field(default=10.0, gt=0)
    url: str = Field(
        default="http://localhost:9400/metrics",
        description="dcgm-exporter's Prometheus text endpoint (its default port is 9400).",
    )
    timeout_s: float = Field(default=5.0, gt=0, description="Connect and read timeout.")
    max_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="A larger page is refused (one error)."
    )
    pod_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_POD_PATTERNS),
        description="Regexes over the pod label: group `job` (required), `index` (optional).",
    )

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https:// (got {value[:80]!r})")
        return value

    @field_validator("pod_patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pod pattern {pattern!r}: {exc}") from None
            if "job" not in compiled.groupindex:
                raise ValueError(f"pod pattern {pattern!r} has no (?P<job>...) group")
        return value
