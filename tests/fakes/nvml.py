"""A fake NVML function table for tests and benchmarks of the GPU collector.

``FakeNvml`` implements the functions of ``rankscope.collectors.gpu.NvmlApi`` with the names,
arguments and
return shapes of ``pynvml``, over plain per-GPU state (``FakeGpu``) that a test changes between
polls. Errors are real ``pynvml.NVMLError`` instances (``pynvml.NVMLError(code)`` maps to the
per-code subclass, e.g. ``NVMLError_NotSupported``), so the collector's error handling is the one
that runs against the real library.

Failure injection:

- ``gpu.lost = True``: every call on that GPU raises GPU_IS_LOST (fell off the bus);
- ``gpu.unsupported``: names of NVML functions (``"nvmlDeviceGetTotalEnergyConsumption"``) that
  raise NotSupported on that GPU;
- ``gpu.errors``: function name -> error code raised on every call (e.g. a transient one);
- ``FakeNvml(library_missing=True)``: ``nvmlInit`` raises LibraryNotFound;
- ``nvml.wait_errors``: error codes ``nvmlEventSetWait_v2`` raises, one per call, before it
  goes back to the event queue.

Events: ``queue_xid(gpu, xid)`` / ``queue_ecc(gpu, double=...)`` put NVML events in a queue that
``nvmlEventSetWait_v2`` serves (blocking up to its timeout, then NVML_ERROR_TIMEOUT).

``calls`` counts every call by function name (to assert that unsupported fields are not retried).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

N_LINKS = 18  # H100/H200 SXM


@dataclass
class FakeUtilization:
    gpu: int
    memory: int


@dataclass
class FakeMemory:
    total: int
    free: int
    used: int


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None = None


@dataclass
class FakeEventData:
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0
    computeInstanceId: int = 0


@dataclass(eq=False)  # a handle: compared by identity, like a device
class FakeGpu:
    index: int
    uuid: str = ""
    sm_util: int = 90
    mem_util: int = 40
    mem_total: int = 141 * 2**30
    mem_used: int = 60 * 2**30
    sm_clock: int = 1980
    mem_clock: int = 2619
    power_mw: int = 650_000
    energy_mj: int = 10_000_000
    temperature: int = 55
    reasons: int = 0
    pcie_replay: int = 0
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    remap: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: NVLink state per link (1 active, 0 inactive)
    nvlink_state: list[int] = field(default_factory=lambda: [1] * N_LINKS)
    #: (link, counter id) -> value
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    #: pids with a compute context on this GPU
    pids: list[int] = field(default_factory=list)
    supported_events: int = (
        pynvml.nvmlEventTypeXidCriticalError
        | pynvml.nvmlEventTypeSingleBitEccError
        | pynvml.nvmlEventTypeDoubleBitEccError
        | pynvml.nvmlEventTypePState
    )
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.uuid:
            self.uuid = f"GPU-{self.index:08x}-fake-0000-0000-{self.index:012x}"


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """NVML for N fake GPUs; see the module docstring."""

    def __init__(
        self,
        gpus: int | list[FakeGpu] = 8,
        *,
        library_missing: bool = False,
        driver_version: str = "550.54.15",
        nvml_version: str = "12.550.54.15",
    ) -> None:
        self.gpus = [FakeGpu(i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
        self.library_missing = library_missing
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.calls: Counter[str] = Counter()
        self.init_count = 0
        self.shutdown_count = 0
        self.events: queue.Queue[FakeEventData] = queue.Queue()
        self.wait_errors: list[int] = []
        self.event_sets: dict[int, dict[int, int]] = {}  # set id -> {gpu index: mask}
        self.freed_sets: list[int] = []
        self.fail_event_set_create = False
        self.handle_errors: dict[int, int] = {}  # index -> code for GetHandleByIndex
        self._next_set = 1
        self._lock = threading.Lock()
        #: set while a thread blocks in nvmlEventSetWait_v2
        self.waiting = threading.Event()

    # -- helpers for tests -----------------------------------------------------------------------

    def queue_xid(self, gpu: int, xid: int) -> None:
        self.events.put(FakeEventData(self.gpus[gpu], pynvml.nvmlEventTypeXidCriticalError, xid))

    def queue_ecc(self, gpu: int, *, double: bool = True) -> None:
        etype = (
            pynvml.nvmlEventTypeDoubleBitEccError
            if double
            else pynvml.nvmlEventTypeSingleBitEccError
        )
        self.events.put(FakeEventData(self.gpus[gpu], etype, 0))

    def _dev(self, handle: FakeGpu, fn: str) -> FakeGpu:
        self.calls[fn] += 1
        if self.init_count <= self.shutdown_count:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if handle.lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in handle.unsupported:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        code = handle.errors.get(fn)
        if code is not None:
            raise _err(code)
        return handle

    # -- init, system ----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.library_missing:
            raise _err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        self.shutdown_count += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self.calls["nvmlDeviceGetCount"] += 1
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self.calls["nvmlDeviceGetHandleByIndex"] += 1
        if index >= len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        code = self.handle_errors.get(index)
        if code is not None:
            raise _err(code)
        return self._dev(self.gpus[index], "nvmlDeviceGetHandleByIndex")

    # -- device queries --------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self._dev(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> FakeUtilization:
        g = self._dev(handle, "nvmlDeviceGetUtilizationRates")
        return FakeUtilization(g.sm_util, g.mem_util)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> FakeMemory:
        g = self._dev(handle, "nvmlDeviceGetMemoryInfo")
        return FakeMemory(g.mem_total, g.mem_total - g.mem_used, g.mem_used)

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, type: int) -> int:
        g = self._dev(handle, "nvmlDeviceGetClockInfo")
        if type == pynvml.NVML_CLOCK_SM:
            return g.sm_clock
        if type == pynvml.NVML_CLOCK_MEM:
            return g.mem_clock
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        return self._dev(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        return self._dev(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        g = self._dev(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        return self._dev(handle, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpu) -> int:
        return self._dev(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").reasons

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeGpu) -> int:
        return self._dev(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replay

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, errorType: int, counterType: int) -> int:
        g = self._dev(handle, "nvmlDeviceGetTotalEccErrors")
        if counterType not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return g.ecc_sbe
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return g.ecc_dbe
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetRemappedRows(self, device: FakeGpu) -> tuple[int, int, int, int]:
        return self._dev(device, "nvmlDeviceGetRemappedRows").remap

    def nvmlDeviceGetNvLinkState(self, device: FakeGpu, link: int) -> int:
        g = self._dev(device, "nvmlDeviceGetNvLinkState")
        if not 0 <= link < len(g.nvlink_state):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlink_state[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, device: FakeGpu, link: int, counter: int) -> int:
        g = self._dev(device, "nvmlDeviceGetNvLinkErrorCounter")
        if not 0 <= link < len(g.nvlink_state):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[FakeProcess]:
        g = self._dev(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [FakeProcess(pid, 1 << 30) for pid in g.pids]

    # -- events ----------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> int:
        self.calls["nvmlEventSetCreate"] += 1
        if self.fail_event_set_create:
            raise _err(pynvml.NVML_ERROR_UNKNOWN)
        with self._lock:
            es = self._next_set
            self._next_set += 1
            self.event_sets[es] = {}
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeGpu) -> int:
        return self._dev(handle, "nvmlDeviceGetSupportedEventTypes").supported_events

    def nvmlDeviceRegisterEvents(self, handle: FakeGpu, eventTypes: int, eventSet: int) -> None:
        g = self._dev(handle, "nvmlDeviceRegisterEvents")
        if eventTypes & ~g.supported_events:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # as NVML: any unsupported type fails
        self.event_sets[eventSet][g.index] = eventTypes

    def nvmlEventSetWait_v2(self, eventSet: int, timeoutms: int) -> FakeEventData:
        self.calls["nvmlEventSetWait_v2"] += 1
        if eventSet not in self.event_sets or eventSet in self.freed_sets:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._lock:
            code = self.wait_errors.pop(0) if self.wait_errors else None
        if code is not None:
            raise _err(code)
        registered = self.event_sets[eventSet]
        self.waiting.set()
        deadline = time.monotonic() + timeoutms / 1000
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _err(pynvml.NVML_ERROR_TIMEOUT)
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                raise _err(pynvml.NVML_ERROR_TIMEOUT) from None
            if ev.device.index in registered and ev.eventType & registered[ev.device.index]:
                return ev
            # not registered in this set: NVML would not deliver it; drop it

    def nvmlEventSetFree(self, eventSet: int) -> None:
        self.calls["nvmlEventSetFree"] += 1
        self.freed_sets.append(eventSet)

    def registered(self, event_set: int | None = None) -> dict[int, int]:
        """GPU index -> registered event mask of the live (or given) event set."""
        if event_set is None:
            live = [s for s in self.event_sets if s not in self.freed_sets]
            if not live:
                return {}
            event_set = live[-1]
        return dict(self.event_sets[event_set])


def write_proc_environ(proc_root: Any, pid: int, env: dict[str, str]) -> None:
    """A ``<proc_root>/<pid>/environ`` file as Linux writes it (NUL-separated)."""
    d = proc_root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def cycle_cost(collector: Any, cycles: int, clock_ns: Callable[[], int] = time.time_ns) -> float:
    """Seconds of process CPU time per ``collector.poll`` (after one warm-up poll).

    ``time.process_time`` counts every thread of the process, so an event thread blocked in its
    wait costs nothing and one that spins shows up here.
    """
    if cycles < 1:
        raise ValueError("cycles must be >= 1")
    collector.poll(clock_ns())
    t0 = time.process_time()
    for _ in range(cycles):
        collector.poll(clock_ns())
    return (time.process_time() - t0) / cycles
