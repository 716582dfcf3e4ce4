"""Collectors: the components that turn node and job telemetry into events on Kafka.

Each component follows the OpenTelemetry Collector model: a typed pydantic config plus a small
factory (``create_*``). The simulator produces the same events real node agents would, through the
same :class:`Publisher`, so every downstream stage is exercised on one path whether the data is
real or synthetic (with known ground truth).
"""

from collectors.publisher import (
    BrokerUnreachableError,
    KafkaProducerLike,
    Publisher,
    PublisherConfig,
    PublishError,
    PublisherStats,
    batch_events,
    create_publisher,
    producer_settings,
)
from collectors.simulator import (
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
    "BrokerUnreachableError",
    "GpuProfile",
    "KafkaProducerLike",
    "PhaseDurations",
    "PublishError",
    "Publisher",
    "PublisherConfig",
    "PublisherStats",
    "RankState",
    "SimulationConfig",
    "SimulationSummary",
    "TrainingJobSimulator",
    "batch_events",
    "create_publisher",
    "create_simulator",
    "pace",
    "producer_settings",
    "simulate",
    "summarize",
]
