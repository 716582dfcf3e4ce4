"""The evaluation suite: every catalogue scenario (and its clock-skew variants) for each seed.

Why a module of its own: ``rankscope eval`` and the analysis-suite tests run the same fixed list
of (config, faults, name) cases, replayable from fixed start times; the list is data about the
catalogue, not part of injecting a fault.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from rankscope.simulation.config import SimulationConfig
from rankscope.simulation.fault_specs import (
    _NEEDS_NODES,
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
    ThermalStraggler,
)

__all__ = ["SuiteCase", "scenario_suite"]

_NS = 1_000_000_000


class SuiteCase(NamedTuple):
    """One run of the evaluation suite."""

    config: SimulationConfig
    faults: list[Fault]
    name: str


#: variant name -> faults; every catalogue scenario plus clock-skew variants and a hang that the
#: watchdog aborts. ``+clock_skew`` skews the culprit's node by +5 s (less than the NCCL timeout);
#: ``+clock_skew_large`` by +15 s (more, so the raw order of precursor and timeouts is inverted);
#: ``+clock_skew_other`` skews another node by -15 s (its timeouts then appear before the onset).
_VARIANTS: tuple[tuple[str, tuple[Fault, ...]], ...] = (
    ("gpu_fell_off_bus", (GpuFellOffBus(),)),
    ("ecc_dbe", (EccDbe(),)),
    ("nvlink_error", (NvlinkError(),)),
    ("ib_link_flap", (IbLinkFlap(),)),
    ("thermal_straggler", (ThermalStraggler(),)),
    ("input_straggler", (InputStraggler(),)),
    ("hang", (Hang(),)),
    ("hang_abort", (Hang(hang_abort=True),)),
    ("node_unresponsive", (NodeUnresponsive(),)),
    ("preemption", (Preemption(),)),
    ("host_oom", (HostOom(),)),
    ("config_drift", (ConfigDrift(),)),
    ("gpu_fell_off_bus+clock_skew", (GpuFellOffBus(), ClockSkew())),
    ("gpu_fell_off_bus+clock_skew_large", (GpuFellOffBus(), ClockSkew(offset_s=15.0))),
    (
        "gpu_fell_off_bus+clock_skew_other",
        (GpuFellOffBus(), ClockSkew(offset_s=-15.0, target="other")),
    ),
    ("ib_link_flap+clock_skew", (IbLinkFlap(), ClockSkew())),
    ("thermal_straggler+clock_skew", (ThermalStraggler(), ClockSkew())),
    ("noise", (Noise(),)),
)
#: 2026-01-01T00:00:00Z: suite runs start at fixed times so they replay identically.
_SUITE_EPOCH_NS = 1_767_225_600 * _NS


def scenario_suite(
    ranks: int,
    seeds: Sequence[int] | int,
    *,
    duration_s: float = 60.0,
    gpus_per_node: int = 8,
    step_time_s: float = 1.0,
    nccl_timeout_s: float = 10.0,
    cluster: str = "sim",
) -> list[SuiteCase]:
    """Every scenario variant for every seed, as (config, faults, name) cases.

    Variants that need two nodes (IB, unresponsive node, config drift, an "other" skewed node)
    are left out of a single-node job. Each case has its own job id (``<variant>-s<seed>``) and
    start time (an hour per seed), with background telemetry on.
    """
    seed_list = range(seeds) if isinstance(seeds, int) else list(seeds)
    nodes = -(-ranks // gpus_per_node)
    out: list[SuiteCase] = []
    for seed in seed_list:
        for name, faults in _VARIANTS:
            if nodes < 2 and (
                any(f.scenario in _NEEDS_NODES for f in faults) or name.endswith("_other")
            ):
                continue
            job = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{name}-s{seed}")
            config = SimulationConfig(
                cluster=cluster,
                job_id=job,
                ranks=ranks,
                gpus_per_node=gpus_per_node,
                duration_s=duration_s,
                step_time_s=step_time_s,
                nccl_timeout_s=nccl_timeout_s,
                seed=seed,
                start_ns=_SUITE_EPOCH_NS + seed * 3600 * _NS,
                inventory=True,
                fabric_interval_s=2.0,
            )
            out.append(SuiteCase(config, list(faults), f"{name}/s{seed}"))
    return out
