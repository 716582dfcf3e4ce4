"""The training-job simulator and labelled fault catalogue: synthetic telemetry with known truth.

Not a collector: it produces the events real node agents would (through the same publisher), so
the demo, the evaluation suite and the tests exercise one path. The node agent never imports it.

Import from :mod:`~rankscope.simulation.simulator` (the healthy job) and
:mod:`~rankscope.simulation.faults` (faults and their labels); the other modules are their parts:
``config``, ``timing``, ``fastmodel``, ``hooks``, ``builders`` and ``pacing`` for the simulator,
``fault_specs``, ``fault_labels``, ``fault_injection``, ``fault_effects``, ``fault_cascade``,
``fault_hooks`` and ``fault_suite`` for the fault catalogue.
"""

from rankscope.simulation.simulator import (
    GpuProfile,
    PhaseDurations,
    RankState,
    SimulationConfig,
    SimulationSummary,
    TrainingJobSimulator,
    create_simulator,
    pace,
    simulate,
    summarize,
)

__all__ = [
    "GpuProfile",
    "PhaseDurations",
    "RankState",
    "SimulationConfig",
    "SimulationSummary",
    "TrainingJobSimulator",
    "create_simulator",
    "pace",
    "simulate",
    "summarize",
]
