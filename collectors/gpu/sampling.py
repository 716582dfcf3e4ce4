"""One poll: NVML reads per GPU -> ``GpuSampleEvent`` plus the state-change events (throttle,
ECC, row remapping, NVLink, unresponsive/recovered), and the GPU -> job/rank mapping from
``/proc/<pid>/environ``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

import pynvml

from rankscope.collectors.base import JobBinding, binding_from_environ
from rankscope.collectors.gpu.nvml import (
    _E_FUNCTION_NOT_FOUND,
    _LOST_CODES,
    _UNSUPPORTED_CODES,
    MemoryInfo,
    NVMLError,
    ProcessInfo,
    Utilization,
    _code,
    _err_text,
    _GpuLost,
    _handle_key,
)
from rankscope.collectors.gpu.state import _Gpu, _GpuCollectorBase, _Link
from rankscope.schemas.events import Event, GpuSampleEvent
from rankscope.schemas.payloads import FabricEvent, GpuSample

log = logging.getLogger("rankscope.collectors.gpu")  # one logger for the package, as before

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


def throttle_reason_names(mask: int) -> list[str]:
    """Names of the interesting throttle reasons set in an NVML clocks-event bitmask."""
    return [name for bit, name in _THROTTLE_NAMES if mask & bit]


_MISSING: Final = object()


class _Sampling(_GpuCollectorBase):
    """The polling half of :class:`~rankscope.collectors.gpu.GpuCollector`."""

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
