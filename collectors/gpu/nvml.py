"""The NVML seam: the function table the collector calls (:class:`NvmlApi`, ``pynvml`` in
production, ``tests/fakes/nvml.py`` in tests) and how its errors are read (unsupported, lost).
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable, Sequence
from typing import Any, Final, Protocol

import pynvml

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
