"""Backing services the pipeline needs (Kafka, ClickHouse): local ones we run, or the user's own."""

from rankscope.services._common import ServiceError, default_cache_dir
from rankscope.services.clickhouse_local import LocalClickHouse, clickhouse_healthy
from rankscope.services.containers import container_services
from rankscope.services.kafka import (
    KAFKA_VERSION,
    LocalKafka,
    ensure_kafka_jars,
    ensure_topics,
    kafka_healthy,
)
from rankscope.services.manager import (
    Endpoints,
    ServiceManager,
    default_state_dir,
    docker_available,
    local_services,
)

__all__ = [
    "KAFKA_VERSION",
    "Endpoints",
    "LocalClickHouse",
    "LocalKafka",
    "ServiceError",
    "ServiceManager",
    "clickhouse_healthy",
    "container_services",
    "default_cache_dir",
    "default_state_dir",
    "docker_available",
    "ensure_kafka_jars",
    "ensure_topics",
    "kafka_healthy",
    "local_services",
]
