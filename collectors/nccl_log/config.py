"""What the NCCL log collector can be told (the agent's ``nccl_log:`` section)."""

from __future__ import annotations

from pydantic import Field

from rankscope.collectors.base import CollectorConfig


class NcclLogCollectorConfig(CollectorConfig):
    """Which files to follow and how much to trust them."""

    interval_s: float = 0.5
    #: glob patterns; ``%h``/``%p`` (NCCL_DEBUG_FILE style) are expanded, e.g. /tmp/nccl.%h.%p
    paths: list[str] = Field(default_factory=list)
    from_start: bool = False
    max_line_bytes: int = Field(default=16_384, ge=64)
    #: bytes read per file per poll at most (a runaway log cannot stall the agent)
    max_read_bytes: int = Field(default=4 * 1024 * 1024, ge=4096)
    idle_close_s: float = Field(default=300.0, gt=0)
    cuda_dev_is_gpu_index: bool = True
    max_log_time_lag_s: float = Field(default=300.0, ge=0)
    #: None = this host's name (for ``%h``)
    hostname: str | None = None
