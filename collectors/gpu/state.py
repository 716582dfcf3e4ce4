"""Per-GPU state and the attributes the collector's two halves share.

:class:`GpuCollector` is the sampling half (:mod:`.sampling`) plus the event-thread half
(:mod:`.events`); both read and write the state declared here once, so each type-checks alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankscope.collectors.base import BaseCollector, EventFactory, JobBinding
from rankscope.collectors.gpu.config import GpuCollectorConfig
from rankscope.collectors.gpu.nvml import NvmlApi
from rankscope.schemas.events import FabricEventEvent, GpuEventEvent
from rankscope.schemas.payloads import FabricEvent, GpuEvent, GpuEventType
from rankscope.schemas.xid_catalogue import xid_bucket

# --- Per-GPU state ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Link:
    index: int
    state: int
    ever_active: bool
    errors: list[int | None]


@dataclass(slots=True)
class _Gpu:
    index: int
    handle: Any = None
    uuid: str = ""
    links: list[_Link] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    transient_logged: set[str] = field(default_factory=set)
    responsive: bool = True
    lost_reported: bool = False
    throttle: int = 0
    ecc_sbe: int | None = None
    ecc_dbe: int | None = None
    remap_pending: bool = False
    remap_failure: bool = False
    nvlink_total: int | None = None
    binding: JobBinding | None = None
    last_error: str = ""


class _GpuCollectorBase(BaseCollector):
    """What ``GpuCollector.__init__`` sets, and the event builders both halves use."""

    config: GpuCollectorConfig
    _nvml: NvmlApi
    _factory: EventFactory
    _proc_root: Path
    _gpus: list[_Gpu]
    _by_handle: dict[Hashable, _Gpu]
    _env_cache: dict[int, JobBinding | None]
    _reasons_fn: Callable[[Any], int]
    _legacy_reasons: bool
    _nvml_open: bool
    _cycle: int
    # event thread
    _thread: threading.Thread | None
    _stop_evt: threading.Event
    _event_set: Any

    # -- event builders -------------------------------------------------------------------------

    def _gpu_event(
        self,
        ts: int,
        g: _Gpu | None,
        event_type: GpuEventType,
        *,
        xid: int | None = None,
        count: int = 1,
        message: str = "",
    ) -> GpuEventEvent:
        payload = GpuEvent(
            event_type=event_type,
            gpu_uuid=g.uuid if g is not None else "",
            xid=xid,
            xid_bucket=xid_bucket(xid),
            count=count,
            message=message,
        )
        return self._factory.make(
            GpuEventEvent, payload, ts, gpu=g.index if g is not None else None
        )

    def _fabric_event(self, ts: int, g: _Gpu, payload: FabricEvent) -> FabricEventEvent:
        return self._factory.make(FabricEventEvent, payload, ts, gpu=g.index)
