"""The training-job simulator and labelled fault catalogue: synthetic telemetry with known truth.

Not a collector: it produces the events real node agents would (through the same publisher), so
the demo, the evaluation suite and the tests exercise one path. The node agent never imports it.
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
