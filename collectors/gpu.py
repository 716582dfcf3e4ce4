"""GPU collector: NVML samples, state-change events and an XID event thread.

What it produces, per GPU and per ``poll``:

- one ``GpuSampleEvent`` (utilization, memory, clocks, power, energy, temperature, throttle
  bitmask, PCIe replays, ECC, remapped rows, NVLink error total), stamped with the job and rank
  of the process running on that GPU (``JobRegistry``, fed here from ``/proc/<pid>/environ``);
- ``GpuEventEvent`` on state changes: ``throttle_start``/``throttle_stop`` (only the reasons that
  slow a job down: HW slowdown, HW thermal, HW power brake, SW thermal, SW power cap; not idle or
  application clocks), ``ecc`` when an ECC counter increases (``count`` = the increase),
  ``gpu_unresponsive`` once when a GPU stops answering and ``gpu_recovered`` once when it answers
  again, ``other`` when row remapping becomes pending or fails;
- ``FabricEventEvent`` for NVLink: ``nvlink_down`` (link went inactive), ``state_change`` (link
  came back), ``nvlink_error`` (a link's replay/recovery/CRC counter increased, ``delta``).

From its own thread (``start``), one ``GpuEventEvent`` per NVML event: ``xid`` (``xid`` = the XID
number) and ``ecc`` (single/double-bit ECC error events), each with ``count=1``. An ECC error can
so appear twice: as the thread's notification (message ``nvml event: ...``, as soon as NVML
delivers it) and as the poll's counter increase (message ``... ECC errors +N``, ``count`` = N).
Count errors from the counter events; use the notification for timing.

Field choices (documented so that queries read them right):

- ``ecc_sbe_total``/``ecc_dbe_total`` are NVML's *volatile* totals (corrected/uncorrected), the
  counters of the current driver session: they move as errors happen, which is what a job-level
  event needs. Aggregate counts live for the device lifetime but are persisted to the InfoROM
  and do not say when an error happened. Volatile counts restart at 0 when the driver reloads
  (without persistence mode, when no client holds the GPU): a decrease is taken as a reset, a
  new baseline, never as a negative event.
- ``remapped_rows`` is rows remapped due to correctable plus uncorrectable errors
  (``nvmlDeviceGetRemappedRows``); the *pending* and *failure* flags are booleans, reported as
  ``other`` events when they turn on (a pending remap needs a GPU reset).
- ``nvlink_errors_total`` sums, over the links that have been active, the DL replay, DL recovery,
  DL CRC flit and DL CRC data error counters.
- ``power_w`` is ``nvmlDeviceGetPowerUsage`` (mW) / 1000; ``energy_mj`` is
  ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver was loaded).
- ``throttle_reasons`` is the full bitmask of ``nvmlDeviceGetCurrentClocksEventReasons`` (the
  older ``...ThrottleReasons`` name is used when the driver lacks the new symbol).

A field whose call answers NotSupported (also NoPermission, FunctionNotFound: facts about the
device and driver that do not change while the agent runs) is ``None`` and is not asked again.
``sm_util_pct`` is required by ``gpu_sample/1``: a GPU whose utilization is NotSupported (e.g.
MIG mode) gets its events but no sample.

Cost: static facts (handles, UUIDs, which NVLinks exist, unsupported fields) are read once; the
per-cycle work is the NVML reads themselves, one pass over the process list and the pydantic
models of the events. ``/proc/<pid>/environ`` is read once per process (cached by pid, entries
dropped when the pid leaves every GPU).

Testing: the collector only calls NVML through an injected function table (:class:`NvmlApi`);
``real_nvml()`` is the ``pynvml`` module, tests use ``tests/fakes/nvml.py``. Errors are always
``pynvml.NVMLError`` (the fake raises the same classes), so the error handling is the one that
runs in production.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import pynvml
from pydantic import Field

from rankscope.collectors.base import (
    BaseCollector,
    CollectorConfig,
    Emit,
    EventFactory,
    JobBinding,
    binding_from_environ,
)
from rankscope.schemas.events import Event, FabricEventEvent, GpuEventEvent, GpuSampleEvent
from rankscope.schemas.payloads import FabricEvent, GpuEvent, GpuEventType, GpuSample

__all__ = [
    "INTERESTING_THROTTLE_MASK",
    "GpuCollector",
    "GpuCollectorConfig",
    "GpuCollectorUnavailable",
    "NvmlApi",
    "create_gpu_collector",
    "real_nvml",
    "throttle_reason_names",
]

log = logging.getLogger(__name__)

NVMLError = pynvml.NVMLError

# --- NVML constants used (values from nvml.h, via pynvml) ----------------------------------------
_E_NOT_SUPPORTED: Final[int] = pynvml.NVML_ERROR_NOT_SUPPORTED
_E_NO_PERMISSION: Final[int] = pynvml.NVML_ERROR_NO_PERMISSION
_E_FUNCTION_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
_E_TIMEOUT: Final[int] = pynvml.NVML_ERROR_TIMEOUT
_E_LIBRARY_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
_E_DRIVER_NOT_LOADED: Final[int] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
#: a field answering one of these is a fact about the device/driver: stop asking
_UNSUPPORTED_CODES: Final[frozenset[int]] = frozenset(
    {_E_NOT_SUPPORTED, _E_NO_PERMISSION, _E_FUNCTION_NOT_FOUND}
)
#: any call answering one of these means the GPU is not answering at all
_LOST_CODES: Final[frozenset[int]] = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        pynvml.NVML_ERROR_UNINITIALIZED,
        _E_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
    }
)

_THROTTLE_NAMES: Final[tuple[tuple[int, str], ...]] = (
    (pynvml.nvmlClocksEventReasonSwPowerCap, "sw_power_cap"),
    (pynvml.nvmlClocksEventReasonHwSlowdown, "hw_slowdown"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "hw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"),
)
#: throttle reasons that slow a job down (idle, application/display clocks, sync boost do not)
INTERESTING_THROTTLE_MASK: Final[int] = sum(bit for bit, _ in _THROTTLE_NAMES)

#: NVLink error counters summed into ``nvlink_errors_total`` (counter id, name used in events)
_NVLINK_COUNTERS: Final[tuple[tuple[int, str], ...]] = (
    (pynvml.NVML_NVLINK_ERROR_DL_REPLAY, "dl_replay"),
    (pynvml.NVML_NVLINK_ERROR_DL_RECOVERY, "dl_recovery"),
    (pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, "dl_crc_flit"),
    (pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA, "dl_crc_data"),
)
_NVLINK_FIELDS: Final[tuple[str, ...]] = tuple(f"nvlink_{name}" for _, name in _NVLINK_COUNTERS)
_NVLINK_INACTIVE: Final[int] = 0  # NVML_NVLINK_STATE_INACTIVE (1 = active, 2 = sleep)
_NVLINK_STATE_NAMES: Final[dict[int, str]] = {0: "inactive", 1: "active", 2: "sleep"}

_EV_XID: Final[int] = pynvml.nvmlEventTypeXidCriticalError
_EV_SBE: Final[int] = pynvml.nvmlEventTypeSingleBitEccError
_EV_DBE: Final[int] = pynvml.nvmlEventTypeDoubleBitEccError
_EVENT_MASK: Final[int] = _EV_XID | _EV_SBE | _EV_DBE

#: consecutive non-timeout errors from nvmlEventSetWait before the event set is rebuilt
_WAIT_ERRORS_BEFORE_REBUILD: Final[int] = 5
#: rebuilds without a single successful wait before XID monitoring gives up (and says so)
_MAX_REBUILDS: Final[int] = 3
_WAIT_ERROR_BACKOFF_S: Final[float] = 0.2


def throttle_reason_names(mask: int) -> list[str]:
    """Names of the interesting throttle reasons set in an NVML clocks-event bitmask."""
    return [name for bit, name in _THROTTLE_NAMES if mask & bit]


# --- The NVML function table ------------------------------------------------------------------


class Utilization(Protocol):
    @property
    def gpu(self) -> int: ...
    @property
    def memory(self) -> int: ...


class MemoryInfo(Protocol):
    @property
    def total(self) -> int: ...
    @property
    def used(self) -> int: ...


class ProcessInfo(Protocol):
    @property
    def pid(self) -> int: ...


class EventData(Protocol):
    @property
    def device(self) -> Any: ...
    @property
    def eventType(self) -> int: ...
    @property
    def eventData(self) -> int: ...


class NvmlApi(Protocol):
    """Exactly the NVML functions the collector calls, named and shaped as in ``pynvml``.

    Errors are raised as ``pynvml.NVMLError`` (subclasses per code). Handles and event sets are
    opaque.
    """

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Utilization: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> MemoryInfo: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[ProcessInfo]: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None: ...
    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> EventData: ...
    def nvmlEventSetFree(self, eventSet: Any) -> None: ...


def real_nvml() -> NvmlApi:
    """The real NVML: the ``pynvml`` module (nvidia-ml-py) satisfies :class:`NvmlApi`."""
    api: NvmlApi = pynvml
    return api


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


class _GpuLost(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _code(e: BaseException) -> int | None:
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


def _err_text(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:  # pynvml's __str__ can call into the library
        text = ""
    code = _code(e)
    name = type(e).__name__
    return f"{name} ({code}): {text}" if code is not None else f"{name}: {text}"


def _handle_key(handle: Any) -> Hashable:
    """A key equal for two handles of the same device (ctypes pointers compare by identity)."""
    if isinstance(handle, ctypes._Pointer):
        addr: int | None = ctypes.cast(handle, ctypes.c_void_p).value
        return ("ptr", addr)
    return handle  # type: ignore[no-any-return]


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


_MISSING: Final = object()


class GpuCollector(BaseCollector):
    """Polls NVML for every watched GPU; see the module docstring for what it emits."""

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

    # -- static facts, read once ----------------------------------------------------------------

    def _attach(self, g: _Gpu) -> None:
        nv = self._nvml
        handle = nv.nvmlDeviceGetHandleByIndex(g.index)
        uuid = nv.nvmlDeviceGetUUID(handle)
        links: list[_Link] = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                state = nv.nvmlDeviceGetNvLinkState(handle, link)
            except NVMLError as e:
                if _code(e) in _LOST_CODES:
                    raise
                if link == 0 and _code(e) in _UNSUPPORTED_CODES:
                    break  # no NVLink on this GPU
                continue  # link not present (InvalidArgument past the last link)
            active = state != _NVLINK_INACTIVE
            links.append(_Link(link, state, active, [None] * len(_NVLINK_COUNTERS)))
        g.handle, g.uuid, g.links = handle, str(uuid), links
        self._by_handle[_handle_key(handle)] = g
        log.info("GPU %d %s: %d NVLinks", g.index, g.uuid, len(links))

    # -- polling --------------------------------------------------------------------------------

    def poll(self, now_ns: int) -> list[Event]:
        out: list[Event] = []
        seen: set[int] | None = set() if self.config.map_processes else None
        links = self._cycle % self.config.nvlink_every == 0
        self._cycle += 1
        for g in self._gpus:
            try:
                if g.handle is None:
                    self._attach(g)
                self._poll_gpu(g, now_ns, out, seen, links)
            except (_GpuLost, NVMLError) as e:
                err = e.error if isinstance(e, _GpuLost) else e
                g.last_error = _err_text(err)
                g.responsive = False
                if not g.lost_reported:
                    g.lost_reported = True
                    out.append(
                        self._gpu_event(
                            now_ns,
                            g,
                            "gpu_unresponsive",
                            message=f"GPU {g.index} not answering NVML: {g.last_error}",
                        )
                    )
                    log.warning("GPU %d unresponsive: %s", g.index, g.last_error)
            except Exception as e:  # a bug or an odd value must not cost the other GPUs
                text = f"{type(e).__name__}: {e}"
                if text != g.last_error:
                    log.exception("GPU %d poll failed", g.index)
                g.last_error = text
        if seen is not None and self._env_cache:
            for pid in self._env_cache.keys() - seen:
                del self._env_cache[pid]
        return out

    def _poll_gpu(
        self, g: _Gpu, now_ns: int, out: list[Event], seen: set[int] | None, links: bool
    ) -> None:
        nv = self._nvml
        h = g.handle
        # Core calls: any error other than NotSupported means the GPU is not answering.
        util: Utilization | None = None
        if "utilization" not in g.unsupported:
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h)
            except NVMLError as e:
                if _code(e) not in _UNSUPPORTED_CODES:
                    raise _GpuLost(e) from e
                self._mark_unsupported(g, "utilization", e)
        mem: MemoryInfo | None = None
        if "memory_info" not in g.unsupported:
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
            except NVMLError as e:
                if _code(e) not in _UNSUPPORTED_CODES:
                    raise _GpuLost(e) from e
                self._mark_unsupported(g, "memory_info", e)
        g.responsive = True
        if g.lost_reported:
            g.lost_reported = False
            out.append(
                self._gpu_event(
                    now_ns,
                    g,
                    "gpu_recovered",
                    message=f"GPU {g.index} answering NVML again (was: {g.last_error})",
                )
            )
            log.warning("GPU %d recovered", g.index)
            g.last_error = ""

        if seen is not None and "processes" not in g.unsupported:
            procs = self._read(g, "processes", nv.nvmlDeviceGetComputeRunningProcesses)
            if procs is not None:
                self._map_gpu(g, procs, seen)

        sm_clock = self._read(g, "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
        mem_clock = self._read(g, "mem_clock_mhz", nv.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)
        power_mw = self._read(g, "power_w", nv.nvmlDeviceGetPowerUsage)
        energy = self._read(g, "energy_mj", nv.nvmlDeviceGetTotalEnergyConsumption)
        temp = self._read(
            g, "temperature_c", nv.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU
        )
        reasons = self._read_reasons(g)
        replays = self._read(g, "pcie_replay_count", nv.nvmlDeviceGetPcieReplayCounter)
        sbe = self._read(
            g,
            "ecc_sbe_total",
            nv.nvmlDeviceGetTotalEccErrors,
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        dbe = self._read(
            g,
            "ecc_dbe_total",
            nv.nvmlDeviceGetTotalEccErrors,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        rows = self._read(g, "remapped_rows", nv.nvmlDeviceGetRemappedRows)
        if links and g.links:
            g.nvlink_total = self._poll_nvlinks(g, now_ns, out)

        if reasons is not None:
            self._throttle_events(g, reasons, now_ns, out)
        if sbe is not None:
            g.ecc_sbe = self._ecc_event(g, "single-bit (corrected)", g.ecc_sbe, sbe, now_ns, out)
        if dbe is not None:
            g.ecc_dbe = self._ecc_event(g, "double-bit (uncorrected)", g.ecc_dbe, dbe, now_ns, out)
        remapped: int | None = None
        if rows is not None:
            remapped = int(rows[0]) + int(rows[1])
            self._remap_events(g, bool(rows[2]), bool(rows[3]), now_ns, out)

        if util is None:
            return  # sm_util_pct is required by gpu_sample/1: no sample without it
        sample = GpuSample(
            gpu_uuid=g.uuid,
            sm_util_pct=min(100, util.gpu),
            mem_util_pct=min(100, util.memory),
            mem_used_bytes=mem.used if mem is not None else None,
            mem_total_bytes=mem.total if mem is not None else None,
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=mem_clock,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            energy_mj=energy,
            temperature_c=temp,
            throttle_reasons=reasons,
            pcie_replay_count=replays,
            ecc_sbe_total=sbe,
            ecc_dbe_total=dbe,
            remapped_rows=remapped,
            nvlink_errors_total=g.nvlink_total,
        )
        out.append(self._factory.make(GpuSampleEvent, sample, now_ns, gpu=g.index))

    def _read(self, g: _Gpu, name: str, fn: Any, *args: int) -> Any:
        """One optional NVML read: None when unsupported (remembered) or transiently failing;
        raises _GpuLost when the GPU is not answering."""
        if name in g.unsupported:
            return None
        try:
            return fn(g.handle, *args)
        except NVMLError as e:
            self._read_failed(g, name, e)
            return None

    def _read_failed(self, g: _Gpu, name: str, e: BaseException) -> None:
        code = _code(e)
        if code in _UNSUPPORTED_CODES:
            self._mark_unsupported(g, name, e)
        elif code in _LOST_CODES:
            raise _GpuLost(e) from e
        elif name not in g.transient_logged:
            g.transient_logged.add(name)
            log.warning("GPU %d: %s failed (will retry): %s", g.index, name, _err_text(e))

    def _mark_unsupported(self, g: _Gpu, name: str, e: BaseException) -> None:
        g.unsupported.add(name)
        log.info("GPU %d: %s not available (%s); not asked again", g.index, name, _err_text(e))

    def _read_reasons(self, g: _Gpu) -> int | None:
        if "throttle_reasons" in g.unsupported:
            return None
        try:
            value: int = self._reasons_fn(g.handle)
            return value
        except NVMLError as e:
            if _code(e) == _E_FUNCTION_NOT_FOUND and not self._legacy_reasons:
                # driver older than the ClocksEventReasons rename
                self._legacy_reasons = True
                self._reasons_fn = self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons
                reasons: int | None = self._read(g, "throttle_reasons", self._reasons_fn)
                return reasons
            self._read_failed(g, "throttle_reasons", e)
            return None

    def _poll_nvlinks(self, g: _Gpu, now_ns: int, out: list[Event]) -> int | None:
        nv = self._nvml
        total = 0
        counted = False
        for link in g.links:
            state = self._read(g, "nvlink_state", nv.nvmlDeviceGetNvLinkState, link.index)
            if state is not None and state != link.state:
                self._link_state_event(g, link, state, now_ns, out)
                link.state = state
                if state != _NVLINK_INACTIVE:
                    link.ever_active = True
            if not link.ever_active:
                continue  # never connected: its counters say nothing
            errors = link.errors
            for i, (counter, cname) in enumerate(_NVLINK_COUNTERS):
                value = self._read(
                    g, _NVLINK_FIELDS[i], nv.nvmlDeviceGetNvLinkErrorCounter, link.index, counter
                )
                if value is None:
                    continue
                counted = True
                total += value
                prev = errors[i]
                if prev is not None and value > prev:
                    out.append(
                        self._fabric_event(
                            now_ns,
                            g,
                            FabricEvent(
                                event_type="nvlink_error",
                                device=g.uuid,
                                port=link.index,
                                counter=cname,
                                delta=value - prev,
                                message=f"GPU {g.index} NVLink {link.index} {cname} "
                                f"+{value - prev} (total {value})",
                            ),
                        )
                    )
                errors[i] = value
        return total if counted else None

    def _link_state_event(
        self, g: _Gpu, link: _Link, state: int, now_ns: int, out: list[Event]
    ) -> None:
        old = _NVLINK_STATE_NAMES.get(link.state, str(link.state))
        new = _NVLINK_STATE_NAMES.get(state, str(state))
        went_down = state == _NVLINK_INACTIVE
        if not went_down and link.state != _NVLINK_INACTIVE:
            return  # active <-> sleep: a power state, not a link change
        out.append(
            self._fabric_event(
                now_ns,
                g,
                FabricEvent(
                    event_type="nvlink_down" if went_down else "state_change",
                    device=g.uuid,
                    port=link.index,
                    old_state=old,
                    new_state=new,
                    message=f"GPU {g.index} NVLink {link.index} {old} -> {new}",
                ),
            )
        )

    def _throttle_events(self, g: _Gpu, reasons: int, now_ns: int, out: list[Event]) -> None:
        cur = reasons & INTERESTING_THROTTLE_MASK
        prev = g.throttle
        if cur == prev:
            return
        started, stopped = cur & ~prev, prev & ~cur
        active = ", ".join(throttle_reason_names(cur)) or "none"
        if started:
            names = ", ".join(throttle_reason_names(started))
            out.append(
                self._gpu_event(
                    now_ns,
                    g,
                    "throttle_start",
                    message=f"clocks throttled: {names} (active: {active})",
                )
            )
        if stopped:
            names = ", ".join(throttle_reason_names(stopped))
            out.append(
                self._gpu_event(
                    now_ns,
                    g,
                    "throttle_stop",
                    message=f"throttle ended: {names} (active: {active})",
                )
            )
        g.throttle = cur

    def _ecc_event(
        self, g: _Gpu, what: str, prev: int | None, cur: int, now_ns: int, out: list[Event]
    ) -> int:
        if prev is not None and cur > prev:
            out.append(
                self._gpu_event(
                    now_ns,
                    g,
                    "ecc",
                    count=cur - prev,
                    message=f"{what} ECC errors +{cur - prev} (volatile total {cur})",
                )
            )
        return cur  # a decrease is a driver reload: new baseline

    def _remap_events(
        self, g: _Gpu, pending: bool, failure: bool, now_ns: int, out: list[Event]
    ) -> None:
        if pending and not g.remap_pending:
            out.append(
                self._gpu_event(
                    now_ns, g, "other", message="row remapping pending: GPU reset required"
                )
            )
        if failure and not g.remap_failure:
            out.append(self._gpu_event(now_ns, g, "other", message="row remapping failed"))
        g.remap_pending, g.remap_failure = pending, failure

    # -- process -> job/rank mapping ------------------------------------------------------------

    def _map_gpu(self, g: _Gpu, procs: Sequence[ProcessInfo], seen: set[int]) -> None:
        best: JobBinding | None = None
        cache = self._env_cache
        for p in procs:
            pid = int(p.pid)
            seen.add(pid)
            b = cache.get(pid, _MISSING)
            if b is _MISSING:
                b = cache[pid] = self._binding_for_pid(pid)
            if isinstance(b, JobBinding) and (
                best is None or (best.rank is None and b.rank is not None)
            ):
                best = b  # prefer a process that knows its rank (not a helper process)
        if best != g.binding:
            self._factory.jobs.bind_gpu(g.index, best)
            g.binding = best

    def _binding_for_pid(self, pid: int) -> JobBinding | None:
        try:
            raw = (self._proc_root / str(pid) / "environ").read_bytes()
        except OSError:  # gone, or not ours to read: skip quietly
            return None
        env: dict[str, str] = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        return binding_from_environ(env)

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
            count=count,
            message=message,
        )
        return self._factory.make(
            GpuEventEvent, payload, ts, gpu=g.index if g is not None else None
        )

    def _fabric_event(self, ts: int, g: _Gpu, payload: FabricEvent) -> FabricEventEvent:
        return self._factory.make(FabricEventEvent, payload, ts, gpu=g.index)

    # -- NVML event thread (XID, ECC) -----------------------------------------------------------

    def start(self, emit: Emit) -> None:
        if not self.config.events or self._thread is not None:
            return
        self._stop_evt.clear()
        try:
            self._event_set = self._build_event_set()
        except NVMLError as e:
            self._event_set = None
            reason = _err_text(e)
        else:
            reason = "no GPU supports XID events"
        if self._event_set is None:
            self._safe_emit(emit, [self._monitoring_stopped(f"not started: {reason}")])
            return
        self._thread = threading.Thread(
            target=self._event_loop, args=(emit,), name="rankscope-gpu-events", daemon=True
        )
        self._thread.start()

    def _build_event_set(self) -> Any:
        """A new event set with every answering GPU registered for the event types it
        supports; None (and the set freed) when no GPU could be registered."""
        nv = self._nvml
        es = nv.nvmlEventSetCreate()
        registered = 0
        for g in self._gpus:
            if g.handle is None or not g.responsive:
                continue
            try:
                mask = nv.nvmlDeviceGetSupportedEventTypes(g.handle) & _EVENT_MASK
                if not mask & _EV_XID:
                    log.warning("GPU %d: XID events not supported", g.index)
                if mask:
                    nv.nvmlDeviceRegisterEvents(g.handle, mask, es)
                    registered += 1
            except NVMLError as e:
                log.warning("GPU %d: NVML events not available: %s", g.index, _err_text(e))
        if registered == 0:
            self._free_event_set(es)
            return None
        return es

    def _free_event_set(self, es: Any) -> None:
        try:
            self._nvml.nvmlEventSetFree(es)
        except NVMLError as e:
            log.warning("nvmlEventSetFree failed: %s", _err_text(e))

    def _event_loop(self, emit: Emit) -> None:
        nv = self._nvml
        wait_ms = self.config.event_wait_ms
        errors = 0
        rebuilds = 0
        why = "stopped by an unexpected error"
        try:
            while not self._stop_evt.is_set():
                try:
                    data = nv.nvmlEventSetWait_v2(self._event_set, wait_ms)
                except NVMLError as e:
                    if _code(e) == _E_TIMEOUT:
                        errors = rebuilds = 0
                        continue
                    errors += 1
                    if errors == 1:
                        log.warning("nvmlEventSetWait_v2 failing: %s", _err_text(e))
                    if errors < _WAIT_ERRORS_BEFORE_REBUILD:
                        self._stop_evt.wait(_WAIT_ERROR_BACKOFF_S)  # no busy loop
                        continue
                    # e.g. a GPU of the set fell off the bus: rebuild without the lost GPUs
                    rebuilds += 1
                    errors = 0
                    if rebuilds > _MAX_REBUILDS:
                        why = f"wait keeps failing: {_err_text(e)}"
                        break
                    self._free_event_set(self._event_set)
                    self._event_set = None
                    try:
                        self._event_set = self._build_event_set()
                    except NVMLError as e2:
                        why = f"cannot recreate the event set: {_err_text(e2)}"
                        break
                    if self._event_set is None:
                        why = "no GPU left to register"
                        break
                    log.warning("NVML event set rebuilt after errors: %s", _err_text(e))
                    continue
                errors = rebuilds = 0
                # NVML event data carries no timestamp: the event time is when the wait
                # returned (at most the wait latency after the driver saw it).
                ts = self._factory.clock_ns()
                self._safe_emit(emit, [self._event_from_nvml(data, ts)])
            else:
                return  # stopped on request
        except Exception as e:
            why = f"stopped by an unexpected error: {type(e).__name__}: {e}"
            log.exception("GPU event thread failed")
        log.error("XID monitoring %s", why)
        self._safe_emit(emit, [self._monitoring_stopped(why)])

    def _event_from_nvml(self, data: EventData, ts: int) -> GpuEventEvent:
        g = self._by_handle.get(_handle_key(data.device))
        etype = int(data.eventType)
        value = int(data.eventData)
        if etype & _EV_XID:
            return self._gpu_event(ts, g, "xid", xid=value, message=f"XID {value}")
        if etype & (_EV_SBE | _EV_DBE):
            kind = "double-bit" if etype & _EV_DBE else "single-bit"
            return self._gpu_event(ts, g, "ecc", message=f"nvml event: {kind} ECC error")
        return self._gpu_event(ts, g, "other", message=f"nvml event type 0x{etype:x} data {value}")

    def _monitoring_stopped(self, why: str) -> GpuEventEvent:
        return self._gpu_event(
            self._factory.clock_ns(), None, "other", message=f"XID monitoring {why}"
        )

    @staticmethod
    def _safe_emit(emit: Emit, events: list[Event]) -> None:
        try:
            emit(events)
        except Exception:
            log.exception("emit failed; %d GPU event(s) lost", len(events))

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
