"""DCGM field -> ``gpu_sample`` field, in one table (docs/dcgm-exporter.md lists the same).

Why these conversions: ``gpu_sample`` fields keep the units the NVML collector writes, so a
query does not care which source sampled a GPU. DCGM profiling ratios (0..1) become percent;
framebuffer MiB become bytes; ``remapped_rows`` and ``nvlink_errors_total`` are the same sums
the NVML collector forms (correctable + uncorrectable rows; replay + recovery + CRC flit + CRC
data errors). ECC totals are the *volatile* ones, as from NVML.
"""

from __future__ import annotations

from typing import Any, Final

from rankscope.collectors.dcgm.parsing import GpuReading

__all__ = ["DIRECT_FIELDS", "INT_FIELDS", "MAPPED", "SUMMED_FIELDS", "XID_FIELD", "sample_fields"]

_MIB: Final = 1024 * 1024
XID_FIELD: Final = "DCGM_FI_DEV_XID_ERRORS"

#: DCGM field -> (gpu_sample field, factor)
DIRECT_FIELDS: Final[dict[str, tuple[str, float]]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("sm_util_pct", 1.0),  # GPU utilization, NOT SM activity
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),  # DCGM < 3.3 name
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", 1.0),  # DCGM >= 3.3 name
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay_count", 1.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_total", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_total", 1.0),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("nvlink_bandwidth_total", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_pct", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_pct", 100.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active_pct", 100.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_per_s", 1.0),
}
#: gpu_sample field -> DCGM fields summed into it (present ones; None when none is)
SUMMED_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "remapped_rows": (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ),
    "nvlink_errors_total": (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    ),
}
_MEMORY: Final = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
_FB_TOTAL: Final = "DCGM_FI_DEV_FB_TOTAL"
#: fields stored as integers (counters, bitmasks)
INT_FIELDS: Final = frozenset(
    {
        "energy_mj",
        "throttle_reasons",
        "pcie_replay_count",
        "ecc_sbe_total",
        "ecc_dbe_total",
        "remapped_rows",
        "nvlink_errors_total",
        "mem_used_bytes",
        "mem_total_bytes",
    }
)
_PCT: Final = frozenset(
    {"sm_util_pct", "mem_util_pct"} | {f for f, k in DIRECT_FIELDS.values() if k == 100.0}
)
#: every DCGM field this collector reads (the rest of a page is ignored)
MAPPED: Final = frozenset(
    {*DIRECT_FIELDS, *(n for names in SUMMED_FIELDS.values() for n in names), *_MEMORY}
    | {_FB_TOTAL, XID_FIELD}
)


def _fix(name: str, value: float) -> Any:
    if value < 0:
        return None  # no field of gpu_sample is negative except temperature
    if name in _PCT:
        return min(value, 100.0)  # a ratio a hair above 1 is rounding, not 101 %
    if name in INT_FIELDS:
        return int(value)
    return value


def sample_fields(reading: GpuReading) -> dict[str, Any]:
    """The gpu_sample fields a reading gives (absent DCGM fields are simply left out)."""
    v = reading.values
    out: dict[str, Any] = {}
    for dcgm, (name, factor) in DIRECT_FIELDS.items():
        if dcgm in v:
            if name == "temperature_c":
                out[name] = v[dcgm]
                continue
            fixed = _fix(name, v[dcgm] * factor)
            if fixed is not None:
                out[name] = fixed
    for name, parts in SUMMED_FIELDS.items():
        present = [v[p] for p in parts if p in v]
        if present:
            fixed = _fix(name, sum(present))
            if fixed is not None:
                out[name] = fixed
    if "DCGM_FI_DEV_FB_USED" in v:
        out["mem_used_bytes"] = _fix("mem_used_bytes", v["DCGM_FI_DEV_FB_USED"] * _MIB)
    if _FB_TOTAL in v:
        total: float | None = v[_FB_TOTAL]
    elif "DCGM_FI_DEV_FB_USED" in v and "DCGM_FI_DEV_FB_FREE" in v:
        total = sum(v.get(n, 0.0) for n in _MEMORY)  # used + free + reserved = the board's
    else:
        total = None
    if total is not None:
        out["mem_total_bytes"] = _fix("mem_total_bytes", total * _MIB)
    return {k: val for k, val in out.items() if val is not None}
