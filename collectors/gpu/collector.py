"""The GPU collector itself (its two halves joined, its lifecycle, introspection) and the
factory the agent calls, which initialises NVML and picks the GPUs to watch."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Hashable
from typing import Any

from rankscope.collectors.base import EventFactory, JobBinding
from rankscope.collectors.gpu.config import GpuCollectorConfig, GpuCollectorUnavailable
from rankscope.collectors.gpu.events import _EventThread
from rankscope.collectors.gpu.nvml import (
    _E_DRIVER_NOT_LOADED,
    _E_LIBRARY_NOT_FOUND,
    NvmlApi,
    NVMLError,
    _code,
    _err_text,
    real_nvml,
)
from rankscope.collectors.gpu.sampling import _Sampling
from rankscope.collectors.gpu.state import _Gpu

log = logging.getLogger("rankscope.collectors.gpu")  # one logger for the package, as before


class GpuCollector(_EventThread, _Sampling):
    """Polls NVML for every watched GPU; see the package docstring for what it emits."""

    name = "gpu"

    def __init__(
        self, config: GpuCollectorConfig, factory: EventFactory, nvml: NvmlApi, indexes: list[int]
    ) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self._nvml = nvml
        self._factory = factory
        self._proc_root = config.proc_root
        self._gpus = [_Gpu(index=i) for i in indexes]
        self._by_handle: dict[Hashable, _Gpu] = {}
        self._env_cache: dict[int, JobBinding | None] = {}
        self._reasons_fn = nvml.nvmlDeviceGetCurrentClocksEventReasons
        self._legacy_reasons = False
        self._nvml_open = True
        self._cycle = 0
        # event thread
        self._thread: threading.Thread | None = None
        self._stop_evt = threading.Event()
        self._event_set: Any = None
        for g in self._gpus:
            try:
                self._attach(g)
            except NVMLError as e:
                g.responsive = False
                g.last_error = _err_text(e)
                log.warning("GPU %d not answering at start: %s", g.index, g.last_error)

    def stop(self) -> None:
        """Ends the event thread (within ``event_wait_ms``), frees the event set, shuts NVML
        down. Final: the collector is not used after it."""
        self._stop_evt.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.config.event_wait_ms / 1000 + 2.0)
            if thread.is_alive():
                log.error("GPU event thread did not stop; event set left allocated")
                return
        if self._event_set is not None:
            self._free_event_set(self._event_set)
            self._event_set = None
        if self._nvml_open:
            self._nvml_open = False
            try:
                self._nvml.nvmlShutdown()
            except NVMLError as e:
                log.warning("nvmlShutdown failed: %s", _err_text(e))

    # -- introspection (probe, agent status) ----------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Per GPU: index, uuid, NVLinks found, fields not supported, whether it answers."""
        return [
            {
                "index": g.index,
                "uuid": g.uuid,
                "nvlinks": [link.index for link in g.links],
                "unsupported": sorted(g.unsupported),
                "responsive": g.responsive,
                "last_error": g.last_error,
            }
            for g in self._gpus
        ]

    @property
    def cached_pids(self) -> frozenset[int]:
        return frozenset(self._env_cache)


def create_gpu_collector(
    config: GpuCollectorConfig, factory: EventFactory, nvml: NvmlApi | None = None
) -> GpuCollector:
    """Initialise NVML and build the collector; ``GpuCollectorUnavailable`` when NVML cannot be
    used on this node (the agent reports it and runs without GPU telemetry)."""
    api = nvml if nvml is not None else real_nvml()
    try:
        api.nvmlInit()
    except NVMLError as e:
        code = _code(e)
        if code == _E_LIBRARY_NOT_FOUND:
            msg = "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this node"
        elif code == _E_DRIVER_NOT_LOADED:
            msg = "NVIDIA driver not loaded"
        else:
            msg = "NVML initialisation failed"
        raise GpuCollectorUnavailable(f"{msg} ({_err_text(e)})") from e
    try:
        count = api.nvmlDeviceGetCount()
    except NVMLError as e:
        _shutdown_quietly(api)
        raise GpuCollectorUnavailable(f"NVML cannot count GPUs: {_err_text(e)}") from e
    wanted = list(range(count)) if config.gpus is None else list(dict.fromkeys(config.gpus))
    missing = [i for i in wanted if not 0 <= i < count]
    if missing:
        log.warning("GPU indexes %s not present (node has %d GPUs); ignored", missing, count)
    indexes = [i for i in wanted if 0 <= i < count]
    if not indexes:
        _shutdown_quietly(api)
        raise GpuCollectorUnavailable(f"no GPU to watch (node has {count}, asked {config.gpus})")
    return GpuCollector(config, factory, api, indexes)


def _shutdown_quietly(api: NvmlApi) -> None:
    with contextlib.suppress(NVMLError):
        api.nvmlShutdown()
