"""The XID/ECC event thread: blocks in ``nvmlEventSetWait_v2`` and emits one ``GpuEventEvent``
per NVML event, rebuilding the event set when a GPU of it is lost."""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

import pynvml

from rankscope.collectors.base import Emit
from rankscope.collectors.gpu.nvml import (
    _E_TIMEOUT,
    EventData,
    NVMLError,
    _code,
    _err_text,
    _handle_key,
)
from rankscope.collectors.gpu.state import _GpuCollectorBase
from rankscope.schemas.events import Event, GpuEventEvent

log = logging.getLogger("rankscope.collectors.gpu")  # one logger for the package, as before

_EV_XID: Final[int] = pynvml.nvmlEventTypeXidCriticalError
_EV_SBE: Final[int] = pynvml.nvmlEventTypeSingleBitEccError
_EV_DBE: Final[int] = pynvml.nvmlEventTypeDoubleBitEccError
_EVENT_MASK: Final[int] = _EV_XID | _EV_SBE | _EV_DBE

#: consecutive non-timeout errors from nvmlEventSetWait before the event set is rebuilt
_WAIT_ERRORS_BEFORE_REBUILD: Final[int] = 5
#: rebuilds without a single successful wait before XID monitoring gives up (and says so)
_MAX_REBUILDS: Final[int] = 3
_WAIT_ERROR_BACKOFF_S: Final[float] = 0.2


class _EventThread(_GpuCollectorBase):
    """The NVML event-thread half of :class:`~rankscope.collectors.gpu.GpuCollector`."""

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
