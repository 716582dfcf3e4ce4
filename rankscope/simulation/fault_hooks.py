"""The fault injector's overrides of the simulator's hooks: where the planned faults show.

Why a module of its own: this is the seam between the fault catalogue and the healthy simulator
(:mod:`rankscope.simulation.hooks`); each override asks the default first (so the per-rank
random streams stay aligned with a healthy run of the same seed) and then applies what the
effects and the failure recorded: slower phases, throttled or erroring GPU samples, scheduled
events, silent or departed nodes, a port that is down, drifted inventory.
"""

from __future__ import annotations

from typing import Any

from rankscope.schemas import Event
from rankscope.schemas.payloads import GpuSample, SpanPhase
from rankscope.simulation.fault_injection import FaultInjectorBase
from rankscope.simulation.timing import PhaseDurations, RankState

__all__ = ["FaultHooks"]


class FaultHooks(FaultInjectorBase):
    """The hook overrides (a layer of the fault injector)."""

    # ----------------------------------------------------------------- hooks

    def phase_durations(self, step: int, rank: RankState) -> PhaseDurations:
        d = super().phase_durations(step, rank)  # always: keeps the per-rank streams aligned
        start = self.step_start_ns
        cf = df = 1.0
        for from_ns, factor in self._compute_mods.get(rank.rank, ()):
            if start >= from_ns:
                cf *= factor
        for from_ns, factor, jitter in self._data_mods.get(rank.rank, ()):
            if start >= from_ns:
                df *= factor * jitter.uniform(0.85, 1.15)
        transient = self._transient.get((rank.rank, step))
        if transient is not None:
            if transient[0] == "data":
                df *= transient[1]
            else:
                cf *= transient[1]
        if cf == 1.0 and df == 1.0:
            return d
        return PhaseDurations(
            max(1, round(d.data_ns * df)),
            max(1, round(d.forward_ns * cf)),
            max(1, round(d.backward_ns * cf)),
            max(1, round(d.optimizer_ns * cf)),
        )

    def gpu_sample_payload(self, rank: RankState, phase: SpanPhase, t_ns: int) -> GpuSample:
        p = super().gpu_sample_payload(rank, phase, t_ns)
        mods = self._sample_mods.get(rank.rank)
        if not mods:
            return p
        update: dict[str, Any] = {}
        throttle, clock, sbe, dbe, hot = 0, 1.0, 0, 0, False
        for m in mods:
            if t_ns >= m.from_ns and (m.to_ns is None or t_ns < m.to_ns):
                throttle |= m.throttle
                clock *= m.clock_factor
                sbe, dbe, hot = sbe + m.sbe, dbe + m.dbe, hot or m.hot
        if throttle:
            update["throttle_reasons"] = throttle
        if clock != 1.0:
            update["sm_clock_mhz"] = float(round(self.gpu_profile.sm_clock_mhz * clock))
        if hot:
            update["temperature_c"] = round(87.0 + 0.05 * p.sm_util_pct, 1)
        if sbe:
            update["ecc_sbe_total"] = sbe
        if dbe:
            update["ecc_dbe_total"] = dbe
        return p.model_copy(update=update) if update else p

    def extra_events(self, step: int, start_ns: int, end_ns: int) -> list[Event]:
        out: list[Event] = []
        pending, i = self._pending, self._pending_pos
        while i < len(pending) and pending[i][0] < end_ns:
            t, _, ev = pending[i]
            silent = self._silent.get(ev.node)
            if silent is None or t < silent:
                out.append(ev)
            i += 1
        self._pending_pos = i
        return out

    def node_job(self, node: str, t_ns: int) -> str | None:
        silent = self._silent.get(node)
        if silent is not None and t_ns >= silent:
            return None
        left = self._left.get(node)
        if left is not None and t_ns >= left:
            return ""  # the agent keeps running but the node no longer belongs to the job
        return self.config.job_id

    def fabric_port_state(self, node: str, hca: int, t_ns: int) -> tuple[str, str]:
        down = self._port_down.get((node, hca))
        if down is not None and down[0] <= t_ns < down[1]:
            return "1: DOWN", "2: Polling"
        return super().fabric_port_state(node, hca, t_ns)

    def fabric_deltas(self, node: str, hca: int, t_ns: int, interval_ns: int) -> dict[str, int]:
        d = super().fabric_deltas(node, hca, t_ns, interval_ns)
        stall = self.stall_ns
        if stall is not None and t_ns > stall:
            # no collective completes after the stall: traffic drops to keep-alives
            moving = max(0, stall - (t_ns - interval_ns)) / interval_ns
            scale = moving + (1.0 - moving) * 0.01
            d = {k: round(v * scale) for k, v in d.items()}
        for at, deltas in self._port_errors.get((node, hca), ()):
            if t_ns - interval_ns < at <= t_ns:
                for k, v in deltas.items():
                    d[k] = d.get(k, 0) + v
        return d

    def inventory_fields(self, node: str) -> dict[str, Any]:
        fields = super().inventory_fields(node)
        fields.update(self._inventory.get(node, {}))
        return fields
