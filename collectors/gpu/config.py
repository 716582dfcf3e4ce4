"""What the GPU collector can be told (the agent's ``gpu:`` section) and the error that says it
cannot run on this node."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rankscope.collectors.base import CollectorConfig

# --- Config, errors ---------------------------------------------------------------------------


class GpuCollectorConfig(CollectorConfig):
    interval_s: float = 1.0
    #: NVML indexes to watch; None = every GPU of the node
    gpus: list[int] | None = None
    #: map GPU -> job/rank from the environment of the processes running on it
    map_processes: bool = True
    #: where ``<pid>/environ`` is read; the host's /proc when the agent runs in a container
    #: (NVML reports host pids)
    proc_root: Path = Path("/proc")
    #: run the NVML event thread (XID and ECC events)
    events: bool = True
    #: longest block in nvmlEventSetWait_v2; bounds how long ``stop()`` takes
    event_wait_ms: int = Field(default=1000, ge=1, le=60_000)
    #: read NVLink states and error counters every N polls (18 links x 5 calls per GPU are
    #: most of the NVML calls of a cycle); the sample repeats the last total in between
    nvlink_every: int = Field(default=1, ge=1)


class GpuCollectorUnavailable(RuntimeError):
    """NVML cannot be used on this node (no driver, library missing, no permission...)."""
