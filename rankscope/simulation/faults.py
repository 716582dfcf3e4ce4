"""The fault catalogue as typed, composable specs, injected into the job simulator with labels.

Why: every detector (stragglers, hangs, unresponsive nodes) and the root-cause stage is judged
against ground truth, and the hard part of real incidents is the *cascade*: one GPU falls off the
bus and ten seconds later every other rank logs an NCCL watchdog timeout, so the last exception
points at the wrong place. This module reproduces those cascades with realistic event shapes and
ordering (the same kinds, fields and message texts the GPU, fabric, NCCL-log and scheduler
collectors produce), and says for each run what the right answer is (:class:`FaultLabel`).

Usage::

    events, labels = simulate_with_faults(config, [GpuFellOffBus(), ClockSkew()])
    write_labels(path, labels, config=config, faults=faults)

Composition: any number of non-terminal faults (stragglers, config drift), at most one terminal
fault (one that kills or hangs the job), at most one ``clock_skew`` (a modifier: it changes only
timestamps) and at most one ``noise``. Unset targets, onsets and magnitudes are drawn from a
random stream seeded by (config seed, scenario, occurrence), so a run is a pure function of
(config, faults) and a different seed moves the fault to another rank/node, time and size.

Time is compressed (``SimulationConfig.nccl_timeout_s`` defaults to 10 s instead of PyTorch's
600 s) but the order of events is the real one: precursor (XID, link down, preemption, OOM kill)
at the onset, then the collective that never completes, then the watchdog timeouts of the
surviving ranks ``nccl_timeout_s`` after each entered it, then ``job_failed``.

Onset markers (an event whose *true* time is exactly ``FaultLabel.onset_ns``):
gpu_fell_off_bus/ecc_dbe/nvlink_error: the ``gpu_event`` ``xid``; ib_link_flap: ``fabric_event``
``link_down``; thermal_straggler: ``gpu_event`` ``throttle_start``; preemption: ``scheduler_event``
``preempted``; host_oom: ``scheduler_event`` ``oom_killed``; hang: the hung rank's last span ends
at or before it; node_unresponsive: the node's last event is before it; input_straggler: the
first slowed data span is the first one starting at or after it; config_drift: the job start.

Layout: the catalogue of fault specs (:mod:`~rankscope.simulation.fault_specs`), the labels
(:mod:`~rankscope.simulation.fault_labels`) and the suite (:mod:`~rankscope.simulation.fault_suite`)
are modules of their own, and so are the injector's layers: its shared state
(:mod:`~rankscope.simulation.fault_injection`), the up-front effects
(:mod:`~rankscope.simulation.fault_effects`), the failure cascade
(:mod:`~rankscope.simulation.fault_cascade`) and the hook overrides
(:mod:`~rankscope.simulation.fault_hooks`). This module assembles the injector, resolves and
labels the faults of a run, and re-exports the names its importers use.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from rankscope.schemas import Event
from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.fault_cascade import FailureCascade
from rankscope.simulation.fault_effects import FaultEffects
from rankscope.simulation.fault_hooks import FaultHooks
from rankscope.simulation.fault_injection import _IB_PORT, _OP, _Resolved
from rankscope.simulation.fault_labels import (
    _ANSWER,
    OUTCOMES,
    FaultLabel,
    LabelCause,
    LabelFile,
    Outcome,
    read_labels,
    write_labels,
)
from rankscope.simulation.fault_specs import (
    SCENARIOS,
    TERMINAL_SCENARIOS,
    ClockSkew,
    ConfigDrift,
    EccDbe,
    Fault,
    GpuFellOffBus,
    Hang,
    HostOom,
    IbLinkFlap,
    InputStraggler,
    NodeUnresponsive,
    Noise,
    NvlinkError,
    Preemption,
    ScenarioName,
    ThermalStraggler,
    _OnNode,
    _OnRank,
    _Timed,
    parse_faults,
)
from rankscope.simulation.fault_suite import SuiteCase, scenario_suite

__all__ = [
    "OUTCOMES",
    "SCENARIOS",
    "TERMINAL_SCENARIOS",
    "ClockSkew",
    "ConfigDrift",
    "EccDbe",
    "Fault",
    "FaultInjectingSimulator",
    "FaultLabel",
    "GpuFellOffBus",
    "Hang",
    "HostOom",
    "IbLinkFlap",
    "InputStraggler",
    "LabelCause",
    "LabelFile",
    "NodeUnresponsive",
    "Noise",
    "NvlinkError",
    "Outcome",
    "Preemption",
    "ScenarioName",
    "SuiteCase",
    "ThermalStraggler",
    "parse_faults",
    "read_labels",
    "scenario_suite",
    "simulate_with_faults",
    "write_labels",
]

_NS = 1_000_000_000


class FaultInjectingSimulator(FaultHooks, FailureCascade, FaultEffects):
    """The job simulator with faults applied; :attr:`labels` is known before :meth:`run`."""

    def __init__(self, config: SimulationConfig, faults: Sequence[Fault]) -> None:
        super().__init__(config, faults)
        resolved = self._resolve()
        skew = next((r for r in resolved if r.spec.scenario == "clock_skew"), None)
        if skew is not None and skew.node is not None:
            self.clock_offsets[skew.node] = round(skew.magnitude * _NS)
        for res in resolved:
            self._apply(res)
        terminal = next((r for r in resolved if r.spec.scenario in TERMINAL_SCENARIOS), None)
        if terminal is not None:
            self.failure = self._plan_failure(terminal)
            self.stall_ns = self.failure.onset_ns
        self._pending.sort(key=lambda p: (p[0], p[1]))
        self.labels = self._labels(resolved, skew)

    # ----------------------------------------------------------------- resolution

    def _resolve(self) -> list[_Resolved]:
        cfg = self.config
        seen: dict[str, int] = {}
        out: list[_Resolved] = []
        for spec in self.faults:
            k = seen.get(spec.scenario, 0)
            seen[spec.scenario] = k + 1
            rng = random.Random(f"{cfg.seed}:fault:{spec.scenario}:{k}")
            res = _Resolved(spec, rng, self.start_ns)
            if isinstance(spec, _OnRank):
                r = spec.rank if spec.rank is not None else rng.randrange(cfg.ranks)
                res.rank = self.ranks[r]
                res.node = res.rank.node
            elif isinstance(spec, (_OnNode, ConfigDrift)):
                n = spec.node if spec.node is not None else rng.randrange(cfg.nodes)
                res.node = self.node_names[n]
            if isinstance(spec, _Timed):
                res.onset_ns = self._onset(spec, rng)
            if isinstance(spec, ThermalStraggler):
                res.magnitude = spec.slowdown or rng.uniform(1.2, 1.4)
            elif isinstance(spec, InputStraggler):
                res.magnitude = spec.factor or rng.uniform(3.0, 10.0)
            elif isinstance(spec, ConfigDrift):
                res.magnitude = spec.slowdown or rng.uniform(1.05, 1.10)
            elif isinstance(spec, IbLinkFlap):
                assert res.node is not None
                present = len(self._node_ranks(res.node))
                res.hca = (
                    spec.hca
                    if spec.hca is not None
                    else rng.randrange(min(cfg.hcas_per_node, present))
                )
                res.magnitude = spec.down_s or rng.uniform(0.5, 3.0)
            elif isinstance(spec, ClockSkew):
                res.magnitude = spec.offset_s
            out.append(res)
        for res in out:
            if isinstance(res.spec, ClockSkew):
                res.node = self._skew_node(res.spec, res.rng, out)
        return out

    def _onset(self, spec: Fault, rng: random.Random) -> int:
        """Terminal faults in 30-55 % of the run, stragglers in 15-35 % (enough windows after),
        never in the first two steps (the job needs a baseline)."""
        duration = self.config.duration_s
        if isinstance(spec, _Timed) and spec.onset_s is not None:
            return self.start_ns + round(spec.onset_s * _NS)
        lo, hi = (0.3, 0.55) if spec.scenario in TERMINAL_SCENARIOS else (0.15, 0.35)
        at = rng.uniform(lo, hi) * duration
        floor = 2 * self.config.step_time_s
        if at < floor < duration * 0.9:
            at = floor + rng.uniform(0.0, 0.5) * self.config.step_time_s
        return self.start_ns + round(at * _NS)

    def _skew_node(self, spec: ClockSkew, rng: random.Random, resolved: list[_Resolved]) -> str:
        if spec.node is not None:
            return self.node_names[spec.node]
        culprit = next(
            (
                r.node
                for r in sorted(resolved, key=lambda r: r.spec.scenario not in TERMINAL_SCENARIOS)
                if r.node is not None and not isinstance(r.spec, (ClockSkew, Noise))
            ),
            None,
        )
        if spec.target == "culprit" and culprit is not None:
            return culprit
        others = [n for n in self.node_names if n != culprit] or self.node_names
        return others[rng.randrange(len(others))]

    # ----------------------------------------------------------------- labels

    def _labels(self, resolved: list[_Resolved], skew: _Resolved | None) -> list[FaultLabel]:
        cfg = self.config
        common: dict[str, Any] = {"cluster": cfg.cluster, "job_id": cfg.job_id, "seed": cfg.seed}
        if skew is not None:
            common |= {
                "skewed_node": skew.node,
                "skew_offset_ns": round(skew.magnitude * _NS),
                "modifiers": ["clock_skew"],
            }
        every = [r.rank for r in self.ranks]
        out: list[FaultLabel] = []
        for res in resolved:
            spec = res.spec
            if isinstance(spec, ClockSkew):
                continue
            rank = res.rank
            label: dict[str, Any] = {**common, "scenario": spec.scenario, "node": res.node}
            if rank is not None:
                label |= {"rank": rank.rank, "gpu": rank.gpu, "fault_ranks": [rank.rank]}
            f = self.failure if spec.scenario in TERMINAL_SCENARIOS else None
            if f is not None:
                hit = set(label.get("fault_ranks", []))
                if spec.scenario in ("node_unresponsive", "preemption"):
                    hit = set(f.stop)
                    label["fault_ranks"] = sorted(hit)
                label |= {
                    "onset_ns": f.onset_ns,
                    "collective_op": _OP,
                    "collective_seq": f.seq,
                    "step": f.plan.step,
                    "failure_ns": f.end_ns if f.job_failed is not None else None,
                    "symptom_ranks": [r for r in every if r not in hit],
                }
            else:
                label["onset_ns"] = res.onset_ns
            label |= _ANSWER[spec.scenario]
            if isinstance(spec, IbLinkFlap):
                assert res.node is not None
                label |= {
                    "hca_device": f"mlx5_{res.hca}",
                    "hca_port": _IB_PORT,
                    "details": {
                        "peer_address": self.node_address(res.node),
                        "down_s": round(res.magnitude, 3),
                    },
                }
            elif isinstance(spec, NvlinkError):
                label["details"] = {"nvlink": res.link if res.link is not None else -1}
            elif isinstance(spec, (ThermalStraggler, InputStraggler)):
                label["symptom_ranks"] = [r for r in every if r != label["rank"]]
                label["details"] = {"magnitude": round(res.magnitude, 4)}
            elif isinstance(spec, ConfigDrift):
                assert res.node is not None
                node_ranks = [r.rank for r in self._node_ranks(res.node)]
                label |= {
                    "onset_ns": self.start_ns,
                    "fault_ranks": node_ranks,
                    "symptom_ranks": [r for r in every if r not in node_ranks],
                    "details": {
                        "magnitude": round(res.magnitude, 4),
                        "driver_version": spec.driver_version,
                        "nccl_version": spec.nccl_version,
                    },
                }
            elif isinstance(spec, Hang):
                label["details"] = {"hang_abort": spec.hang_abort}
            elif isinstance(spec, Noise):
                label |= {"onset_ns": None, "node": None}
                ranks = sorted({r for r, _ in self._transient})
                label["details"] = {"transient_ranks": ",".join(map(str, ranks))}
            out.append(FaultLabel(**label))
        if not out:  # clock skew alone: nothing to find, but the skew is recorded
            out.append(FaultLabel(**common, scenario="clock_skew", onset_ns=None, outcome="none"))
        return out


def simulate_with_faults(
    config: SimulationConfig, faults: Sequence[Fault], *, background: bool = True
) -> tuple[Iterator[Event], list[FaultLabel]]:
    """The events of a job with ``faults`` applied (a lazy iterator) and their labels.

    ``background``: also send what real agents send besides the job's own telemetry
    (``node_inventory`` at start, ``fabric_counters`` every ``fabric_interval_s``, 2 s if unset).
    """
    if background:
        config = config.model_copy(
            update={"inventory": True, "fabric_interval_s": config.fabric_interval_s or 2.0}
        )
    sim = FaultInjectingSimulator(config, faults)
    return sim.run(), list(sim.labels)
