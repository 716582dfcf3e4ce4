"""The simulator's hooks and their healthy defaults, and the HCA ports' sysfs counters.

Why a module of its own: these are the methods a fault injector overrides (phase timings, the
collective, GPU samples, discrete events, node liveness, fabric counters and port state, node
inventory, the failing step), so what a healthy job looks like is in one place, apart from how
events are built (:mod:`rankscope.simulation.builders`) and generated
(:mod:`rankscope.simulation.simulator`).
"""

from __future__ import annotations

import random
from typing import Any

from rankscope.schemas import Event
from rankscope.schemas.payloads import GpuSample, SpanPhase
from rankscope.simulation.config import GpuProfile, SimulationConfig
from rankscope.simulation.fastmodel import fast_model
from rankscope.simulation.timing import PhaseDurations, RankState, StepPlan

__all__ = ["ERROR_COUNTERS", "SimulatorHooks"]


#: PMA/sysfs error counters of an IB port (``/sys/class/infiniband/<dev>/ports/<n>/counters``).
ERROR_COUNTERS: tuple[str, ...] = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
_TRAFFIC_COUNTERS: tuple[str, ...] = (
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_wait",
)
#: rate names of the two data counters (bytes/s = 4-byte words x 4), as the fabric collector
_BYTE_RATES = {"port_xmit_data": "xmit_bytes", "port_rcv_data": "rcv_bytes"}
#: every counter's rate, before a poll fills in the ones that moved
_ZERO_RATES: dict[str, float] = {
    _BYTE_RATES.get(name, name): 0.0 for name in (*_TRAFFIC_COUNTERS, *ERROR_COUNTERS)
}
_NS = 1_000_000_000
_GIB = 1 << 30
#: average all-reduce traffic per port while the job makes progress (4-byte words/s, ~15 GB/s)
_TRAFFIC_WORDS_PER_S = 3.75e9


class _PortState:
    """One HCA port's cumulative sysfs counters (monotonic, like the kernel's)."""

    __slots__ = ("counters", "device", "prev_ns", "rng")

    def __init__(self, config: SimulationConfig, node: str, hca: int) -> None:
        self.device = f"mlx5_{hca}"
        hw = random.Random(f"{config.seed}:{config.cluster}:{node}:{self.device}:hw")
        self.counters: dict[str, int] = {
            "port_xmit_data": hw.randrange(10**11, 10**13),
            "port_rcv_data": hw.randrange(10**11, 10**13),
            "port_xmit_packets": hw.randrange(10**8, 10**10),
            "port_rcv_packets": hw.randrange(10**8, 10**10),
            "port_xmit_wait": hw.randrange(10**5, 10**7),
            **dict.fromkeys(ERROR_COUNTERS, 0),
        }
        self.prev_ns: int | None = None
        self.rng = random.Random(f"{config.seed}:fabric:{node}:{self.device}")


class SimulatorHooks:
    """The overridable behaviour of :class:`~rankscope.simulation.simulator.TrainingJobSimulator`.

    A base of the simulator, not used alone: the attributes below are set by the simulator's
    constructor.
    """

    config: SimulationConfig
    gpu_profile: GpuProfile
    sample_ns: int
    node_index: dict[str, int]
    _nominal: dict[SpanPhase, int]
    _collective_rng: random.Random
    _thermal_decay: float
    _ports: list[list[_PortState]]

    # ----------------------------------------------------------------- hooks (fault injection)

    def phase_durations(self, step: int, rank: RankState) -> PhaseDurations:
        """How long ``rank`` spends in each compute phase of ``step`` (starting at
        :attr:`step_start_ns`).

        Hook for stragglers: thermal throttling and config drift stretch forward/backward,
        input stragglers stretch ``data_ns``.
        """
        rng, jitter, nominal = rank.timing_rng, self.config.jitter, self._nominal

        def jittered(phase: SpanPhase) -> int:
            return max(1, round(nominal[phase] * max(0.2, 1.0 + jitter * rng.gauss(0.0, 1.0))))

        return PhaseDurations(
            jittered("data"), jittered("forward"), jittered("backward"), jittered("optimizer")
        )

    def collective_duration(self, step: int) -> int:
        """The all-reduce itself, once the last rank has arrived (ns). Hook for fabric faults."""
        factor = max(0.2, 1.0 + self.config.jitter * self._collective_rng.gauss(0.0, 1.0))
        return max(1, round(self._nominal["collective"] * factor))

    def gpu_sample_payload(self, rank: RankState, phase: SpanPhase, t_ns: int) -> GpuSample:
        """One NVML-like sample of ``rank``'s GPU while it is in ``phase``.

        ``phase="other"`` means no kernel runs (the process hangs or has exited). Hook for
        thermal faults (clocks, throttle_reasons) and ECC/XID counters. Advances the rank's
        energy counter and temperature by one sample interval.
        """
        rng, gpu = rank.rng, self.gpu_profile
        if phase in ("forward", "backward"):
            util, mem_util, mem_extra = rng.uniform(90.0, 99.0), rng.uniform(35.0, 55.0), 14
        elif phase == "optimizer":
            util, mem_util, mem_extra = rng.uniform(60.0, 85.0), rng.uniform(25.0, 40.0), 10
        elif phase == "data":
            util, mem_util, mem_extra = rng.uniform(5.0, 25.0), rng.uniform(2.0, 10.0), 6
        elif phase == "other":
            util, mem_util, mem_extra = rng.uniform(0.0, 3.0), rng.uniform(0.0, 1.0), 6
        else:  # waiting in / running the collective
            util, mem_util, mem_extra = rng.uniform(20.0, 40.0), rng.uniform(8.0, 20.0), 8
        interval_s = self.sample_ns / _NS
        power = gpu.idle_power_w + (gpu.max_power_w - gpu.idle_power_w) * util / 100.0
        power = min(gpu.max_power_w, power * rng.uniform(0.96, 1.02))
        rank.energy_mj += max(1, round(power * interval_s * 1000.0))
        target = gpu.ambient_c + gpu.load_rise_c * util / 100.0
        rank.temperature_c += (target - rank.temperature_c) * self._thermal_decay
        return fast_model(
            GpuSample,
            {
                "gpu_uuid": rank.gpu_uuid,
                "sm_util_pct": round(util, 1),
                "mem_util_pct": round(mem_util, 1),
                "mem_used_bytes": rank.mem_base_bytes + mem_extra * _GIB,
                "mem_total_bytes": gpu.mem_total_bytes,
                "sm_clock_mhz": gpu.sm_clock_mhz,
                "mem_clock_mhz": gpu.mem_clock_mhz,
                "power_w": round(power, 1),
                "energy_mj": rank.energy_mj,
                "temperature_c": round(rank.temperature_c, 1),
                "throttle_reasons": 0,
                "pcie_replay_count": None,
                "ecc_sbe_total": 0,
                "ecc_dbe_total": 0,
                "remapped_rows": None,
                "nvlink_errors_total": None,
            },
        )

    def extra_events(self, step: int, start_ns: int, end_ns: int) -> list[Event]:
        """Discrete events (XIDs, link flaps, scheduler actions) with true ts in
        [start_ns, end_ns).

        Build them with the ``*_event`` builders below. The default job is healthy: none.
        """
        return []

    def node_job(self, node: str, t_ns: int) -> str | None:
        """The job a node's agent tags its node-level events (heartbeats, fabric counters) with
        at ``t_ns``; ``None``: the node sends nothing (it is dead)."""
        return self.config.job_id

    def fabric_port_state(self, node: str, hca: int, t_ns: int) -> tuple[str, str]:
        """(``state``, ``phys_state``) of the port as sysfs shows it. Hook for link flaps."""
        return "4: ACTIVE", "5: LinkUp"

    def fabric_deltas(self, node: str, hca: int, t_ns: int, interval_ns: int) -> dict[str, int]:
        """Counter increases of one port since its previous poll. Hook for link errors."""
        rng = self._ports[self.node_index[node]][hca].rng
        words = round(_TRAFFIC_WORDS_PER_S * interval_ns / _NS * rng.uniform(0.9, 1.1))
        rcv = round(words * rng.uniform(0.98, 1.02))
        return {
            "port_xmit_data": words,
            "port_rcv_data": rcv,
            "port_xmit_packets": words // 1024,  # 4 KiB MTU = 1024 words
            "port_rcv_packets": rcv // 1024,
            "port_xmit_wait": round(words * rng.uniform(1e-4, 5e-4)),
        }

    def inventory_fields(self, node: str) -> dict[str, Any]:
        """What a node runs (``NodeInventory`` fields but the fingerprint). Hook for drift."""
        hcas = [f"mlx5_{h}" for h in range(self.config.hcas_per_node)]
        return {
            "driver_version": "535.161.08",
            "cuda_version": "12.2",
            "nccl_version": "2.21.5",
            "kernel": "5.15.0-105-generic",
            "os": "Ubuntu 22.04.4 LTS",
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_count": self.config.gpus_per_node,
            "gpu_vbios": {str(g): "96.00.74.00.0C" for g in range(self.config.gpus_per_node)},
            "hca_firmware": dict.fromkeys(hcas, "28.39.1002"),
            # like the agent: nothing node-specific, so identical nodes share a fingerprint
            "extra": {"arch": "x86_64"},
        }

    def failing_step(self, plan: StepPlan) -> list[Event]:
        """All remaining events once the collective of ``plan`` can never complete (because
        :attr:`stall_ns` falls inside it). Fault injectors implement it."""
        raise NotImplementedError("stall_ns is set but failing_step is not implemented")
