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

from rankscope.collectors.gpu.collector import GpuCollector, create_gpu_collector
from rankscope.collectors.gpu.config import GpuCollectorConfig, GpuCollectorUnavailable
from rankscope.collectors.gpu.nvml import NvmlApi, real_nvml
from rankscope.collectors.gpu.sampling import INTERESTING_THROTTLE_MASK, throttle_reason_names

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
