"""What each fault changes before the first step is planned: events, timings, samples, counters.

Why a module of its own: a fault's precursors (the XID, the link going down, the preemption, the
OOM kill) and its lasting effects (a throttled GPU's slower compute and hot samples, a drifted
node's inventory, a flapping port's error counters, noise) are all scheduled up front, so that
the labels are known before any event is rendered; this layer holds that per-family set-up.
"""

from __future__ import annotations

import random

from rankscope.schemas.payloads import CommEvent, FabricEvent
from rankscope.simulation.fault_injection import (
    _IB_PORT,
    FaultInjectorBase,
    _Resolved,
    _SampleMod,
)
from rankscope.simulation.fault_specs import (
    ConfigDrift,
    EccDbe,
    GpuFellOffBus,
    HostOom,
    IbLinkFlap,
    InputStraggler,
    NodeUnresponsive,
    Noise,
    NvlinkError,
    Preemption,
    ThermalStraggler,
)

__all__ = ["FaultEffects"]


_NS = 1_000_000_000
_MS = 1_000_000
# NVML clocks-event reason bits (nvmlClocksEventReason*; checked against pynvml).
_SW_POWER_CAP = 0x4
_SW_THERMAL = 0x20
_HW_THERMAL = 0x40


class FaultEffects(FaultInjectorBase):
    """The up-front effects of each fault (a layer of the fault injector)."""

    # ----------------------------------------------------------------- effects

    def _apply(self, res: _Resolved) -> None:
        """Set up what a fault changes before any step is planned (timings, samples, events)."""
        spec, rank, t0 = res.spec, res.rank, res.onset_ns
        if isinstance(spec, GpuFellOffBus):
            assert rank is not None
            self._add(t0, self.gpu_event(rank, t0, "xid", xid=79, message="XID 79"))
            lost = self._next_tick(t0, self.sample_ns)
            msg = f"GPU {rank.gpu} not answering NVML: GPU is lost"
            self._add(lost, self.gpu_event(rank, lost, "gpu_unresponsive", message=msg))
        elif isinstance(spec, EccDbe):
            assert rank is not None
            self._add(t0, self.gpu_event(rank, t0, "xid", xid=48, message="XID 48"))
            t1 = t0 + res.rng.randint(1 * _MS, 5 * _MS)
            msg = "nvml event: double-bit ECC error"
            self._add(t1, self.gpu_event(rank, t1, "ecc", message=msg))
            t2 = self._next_tick(t1, self.sample_ns)
            msg = "double-bit (uncorrected) ECC errors +1 (volatile total 1)"
            self._add(t2, self.gpu_event(rank, t2, "ecc", count=1, message=msg))
            self._sample_mods.setdefault(rank.rank, []).append(_SampleMod(t0, dbe=1))
        elif isinstance(spec, NvlinkError):
            assert rank is not None
            self._add(t0, self.gpu_event(rank, t0, "xid", xid=74, message="XID 74"))
            link = res.link = spec.link if spec.link is not None else res.rng.randrange(18)
            delta = res.rng.randint(20, 800)
            t1 = self._next_tick(t0, self.sample_ns)
            payload = FabricEvent(
                event_type="nvlink_error",
                device=rank.gpu_uuid,
                port=link,
                counter="dl_crc_flit",
                delta=delta,
                message=f"GPU {rank.gpu} NVLink {link} dl_crc_flit +{delta} (total {delta})",
            )
            self._add(t1, self.fabric_event(rank.node, t1, payload, rank))
        elif isinstance(spec, IbLinkFlap):
            self._apply_ib_flap(res)
        elif isinstance(spec, ThermalStraggler):
            assert rank is not None
            self._compute_mods.setdefault(rank.rank, []).append((t0, res.magnitude))
            reasons = _SW_THERMAL | _HW_THERMAL
            mod = _SampleMod(t0, throttle=reasons, clock_factor=1 / res.magnitude, hot=True)
            self._sample_mods.setdefault(rank.rank, []).append(mod)
            names = "sw_thermal_slowdown, hw_thermal_slowdown"
            msg = f"clocks throttled: {names} (active: {names})"
            self._add(t0, self.gpu_event(rank, t0, "throttle_start", message=msg))
        elif isinstance(spec, InputStraggler):
            assert rank is not None
            jitter = random.Random(f"{self.config.seed}:input:{rank.rank}")
            self._data_mods.setdefault(rank.rank, []).append((t0, res.magnitude, jitter))
        elif isinstance(spec, ConfigDrift):
            assert res.node is not None
            self.emit_inventory = True
            self._inventory[res.node] = {
                "driver_version": spec.driver_version,
                "nccl_version": spec.nccl_version,
                "cuda_version": spec.cuda_version,
            }
            for r in self._node_ranks(res.node):
                self._compute_mods.setdefault(r.rank, []).append((self.start_ns, res.magnitude))
        elif isinstance(spec, Preemption):
            assert res.node is not None
            reason = f"node {res.node} preempted: capacity reclaimed for a higher-priority job"
            self._add(
                t0, self.scheduler_event(res.node, t0, "preempted", "PREEMPTED", reason=reason)
            )
            self._left[res.node] = t0
        elif isinstance(spec, HostOom):
            assert rank is not None
            pid = self._pids[rank.rank]
            vm = res.rng.randint(900, 1400) * 1024 * 1024
            rss = res.rng.randint(400, 900) * 1024 * 1024
            reason = (
                f"Out of memory: Killed process {pid} (python3) total-vm:{vm}kB, "
                f"anon-rss:{rss}kB, file-rss:0kB, shmem-rss:0kB, UID:1000 oom_score_adj:0"
            )
            ev = self.scheduler_event(
                rank.node,
                t0,
                "oom_killed",
                "OUT_OF_MEMORY",
                exit_code=137,
                reason=reason,
                rank=rank,
            )
            self._add(t0, ev)
        elif isinstance(spec, NodeUnresponsive):
            assert res.node is not None
            self._silent[res.node] = t0
        elif isinstance(spec, Noise):
            self._apply_noise(res)
        # Hang, ClockSkew: nothing up front (hang is all in the failing step).

    def _apply_ib_flap(self, res: _Resolved) -> None:
        assert res.node is not None and res.hca is not None
        node, hca, port, t0 = res.node, res.hca, _IB_PORT, res.onset_ns
        device = f"mlx5_{hca}"
        up = t0 + round(res.magnitude * _NS)
        self._port_down[(node, hca)] = (t0, up)
        down = FabricEvent(
            event_type="link_down",
            device=device,
            port=port,
            old_state="4: ACTIVE",
            new_state="1: DOWN",
            message=f"{device} port {port}: 4: ACTIVE -> 1: DOWN",
        )
        self._add(t0, self.fabric_event(node, t0, down))
        back = FabricEvent(
            event_type="link_up",
            device=device,
            port=port,
            old_state="1: DOWN",
            new_state="4: ACTIVE",
            message=f"{device} port {port}: 1: DOWN -> 4: ACTIVE",
        )
        self._add(up, self.fabric_event(node, up, back))
        deltas = {
            "symbol_error": res.rng.randint(50, 5000),
            "link_downed": 1,
            "link_error_recovery": 1,
            "port_rcv_errors": res.rng.randint(5, 200),
        }
        self._port_errors.setdefault((node, hca), []).append((t0, deltas))
        poll = self._next_tick(t0, self.fabric_ns or _NS)  # the poll that sees it
        for counter, delta in deltas.items():
            ev = FabricEvent(
                event_type="error_counter_increase",
                device=device,
                port=port,
                counter=counter,
                delta=delta,
                message=f"{counter} +{delta}",
            )
            self._add(poll, self.fabric_event(node, poll, ev))

    def _apply_noise(self, res: _Resolved) -> None:
        """Transient slowdowns and benign events: each is real, none is a fault."""
        spec, rng, cfg = res.spec, res.rng, self.config
        assert isinstance(spec, Noise)
        est_steps = max(1, int(cfg.duration_s / cfg.step_time_s * 0.9))
        count = spec.slowdowns if spec.slowdowns is not None else rng.randint(3, 6)
        ranks = rng.sample(range(cfg.ranks), min(count, cfg.ranks))
        ranks += [rng.randrange(cfg.ranks) for _ in range(count - len(ranks))]
        for r in ranks:
            step = rng.randrange(min(2, est_steps - 1), max(3, est_steps - 2))
            what = "data" if rng.random() < 0.3 else "compute"
            factor = rng.uniform(3.0, 6.0) if what == "data" else rng.uniform(1.3, 2.0)
            for s in range(step, step + rng.randint(1, 2)):
                self._transient[(r, s)] = (what, factor)
        if not spec.benign_events:
            return
        span = self.end_limit_ns - self.start_ns

        def when() -> int:  # well inside the run: the last full step ends before end_limit
            return self.start_ns + round(rng.uniform(0.1, 0.75) * span)

        # one corrected (single-bit) ECC error: NVML event, then the poll's counter increase
        rank, t = self.ranks[rng.randrange(cfg.ranks)], when()
        self._add(t, self.gpu_event(rank, t, "ecc", message="nvml event: single-bit ECC error"))
        t2 = self._next_tick(t, self.sample_ns)
        msg = "single-bit (corrected) ECC errors +1 (volatile total 1)"
        self._add(t2, self.gpu_event(rank, t2, "ecc", count=1, message=msg))
        self._sample_mods.setdefault(rank.rank, []).append(_SampleMod(t, sbe=1))
        # a short power-cap throttle (no slowdown)
        rank, t = self.ranks[rng.randrange(cfg.ranks)], when()
        stop = t + round(rng.uniform(1.0, 2.0) * _NS)
        msg = "clocks throttled: sw_power_cap (active: sw_power_cap)"
        self._add(t, self.gpu_event(rank, t, "throttle_start", message=msg))
        msg = "throttle ended: sw_power_cap (active: none)"
        self._add(stop, self.gpu_event(rank, stop, "throttle_stop", message=msg))
        self._sample_mods.setdefault(rank.rank, []).append(
            _SampleMod(t, stop, throttle=_SW_POWER_CAP)
        )
        # one IB symbol error on some port
        node, hca, t = (
            self.node_names[rng.randrange(cfg.nodes)],
            rng.randrange(cfg.hcas_per_node),
            when(),
        )
        self._port_errors.setdefault((node, hca), []).append((t, {"symbol_error": 1}))
        poll = self._next_tick(t, self.fabric_ns or _NS)
        ev = FabricEvent(
            event_type="error_counter_increase",
            device=f"mlx5_{hca}",
            port=1,
            counter="symbol_error",
            delta=1,
            message="symbol_error +1",
        )
        self._add(poll, self.fabric_event(node, poll, ev))
        # NCCL INFO chatter
        for _ in range(2):
            rank, t = self.ranks[rng.randrange(cfg.ranks)], when()
            text = (
                f"NCCL INFO comm 0x{rng.getrandbits(44):x} rank {rank.rank} nranks {cfg.ranks} "
                f"cudaDev {rank.gpu} busId {0x1B + rank.gpu * 0x20:x}000 - Init COMPLETE"
            )
            payload = CommEvent(
                source="nccl", event_type="other", pid=self._pids[rank.rank], message=text
            )
            self._add(t, self.comm_event(rank, t, payload))
