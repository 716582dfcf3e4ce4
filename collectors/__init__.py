"""Collectors: the components that turn node and job telemetry into events on Kafka.

Each component follows the OpenTelemetry Collector model: a typed pydantic config plus a small
factory (``create_*``). The simulator (:mod:`rankscope.simulation`) publishes through the same
:class:`Publisher`, but no collector imports it: the node agent ships without it.
"""

from rankscope.collectors.publisher import (
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

__all__ = [
    "BrokerUnreachableError",
    "KafkaProducerLike",
    "PublishError",
    "Publisher",
    "PublisherConfig",
    "PublisherStats",
    "batch_events",
    "create_publisher",
    "producer_settings",
]
