"""Kafka and ClickHouse in Docker (testcontainers), for machines that have a Docker engine.

Kafka uses Apache's own image at the version the local broker pins (see `kafka.KAFKA_VERSION`).
testcontainers' `KafkaContainer` cannot run it: its start script calls Confluent-image-only
scripts (`/etc/confluent/docker/...`). So a small container class does what testcontainers-java
does for `apache/kafka`: wait for a start script, which exports the advertised listener (known
only once the host port is mapped) and runs the image's own `/etc/kafka/docker/run`.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from rankscope.services._common import ServiceError
from rankscope.services.kafka import KAFKA_VERSION, kafka_healthy, new_cluster_id
from rankscope.services.manager import Endpoints

KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
CLICKHOUSE_IMAGE = "clickhouse/clickhouse-server:25.8"
_START_SCRIPT = "/tmp/rankscope-kafka-start.sh"
_KAFKA_PORT = 9092  # advertised to the host as the mapped port
_BROKER_PORT = 9093  # inter-broker, inside the container
_CONTROLLER_PORT = 9094


def _apache_kafka_container(image: str) -> Any:
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image)
    container.with_exposed_ports(_KAFKA_PORT)
    env = {
        "CLUSTER_ID": new_cluster_id(),
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": (
            f"PLAINTEXT://0.0.0.0:{_KAFKA_PORT},BROKER://0.0.0.0:{_BROKER_PORT},"
            f"CONTROLLER://0.0.0.0:{_CONTROLLER_PORT}"
        ),
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": (
            "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"
        ),
        "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@localhost:{_CONTROLLER_PORT}",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "8",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_NUM_PARTITIONS": "4",
        "KAFKA_LOG_DIRS": "/tmp/kraft-combined-logs",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "true",
        "KAFKA_MESSAGE_MAX_BYTES": "8388608",
        "KAFKA_REPLICA_FETCH_MAX_BYTES": "8388608",
    }
    for key, value in env.items():
        container.with_env(key, value)
    container.with_command(
        [
            "sh",
            "-c",
            f"while [ ! -f {_START_SCRIPT} ]; do sleep 0.1; done; exec bash {_START_SCRIPT}",
        ]
    )
    return container


def _put_file(container: Any, path: str, content: bytes) -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(name=path.lstrip("/"))
        info.size = len(content)
        info.mode = 0o755
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(content))
    container.get_wrapped_container().put_archive("/", archive.getvalue())


def _start_kafka(container: Any, timeout_s: float) -> str:
    container.start()
    host = container.get_container_host_ip()
    port = container.get_exposed_port(_KAFKA_PORT)
    bootstrap = f"{host}:{port}"
    script = (
        "#!/bin/bash\n"
        f"export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://{bootstrap},"
        f"BROKER://localhost:{_BROKER_PORT}\n"
        "exec /etc/kafka/docker/run\n"
    )
    _put_file(container, _START_SCRIPT, script.encode())
    deadline = time.monotonic() + timeout_s
    while not kafka_healthy(bootstrap, timeout_s=2.0):
        if time.monotonic() >= deadline:
            logs = b"".join(container.get_logs()).decode(errors="replace")[-4000:]
            raise ServiceError(f"Kafka container not ready after {timeout_s:.0f} s\n{logs}")
        time.sleep(0.5)
    return bootstrap


@contextlib.contextmanager
def container_services(
    kafka_image: str = KAFKA_IMAGE,
    clickhouse_image: str = CLICKHOUSE_IMAGE,
    timeout_s: float = 120,
) -> Iterator[Endpoints]:
    """Kafka + ClickHouse containers for the duration of the block (removed afterwards)."""
    try:
        from testcontainers.community.clickhouse import ClickHouseContainer
    except ImportError:  # testcontainers before the `community` package split
        from testcontainers.clickhouse import ClickHouseContainer

    with contextlib.ExitStack() as stack:
        kafka = _apache_kafka_container(kafka_image)
        stack.callback(kafka.stop)
        bootstrap = _start_kafka(kafka, timeout_s)
        clickhouse = stack.enter_context(ClickHouseContainer(clickhouse_image))
        url = (
            f"http://{quote(clickhouse.username, safe='')}:{quote(clickhouse.password, safe='')}@"
            f"{clickhouse.get_container_host_ip()}:{clickhouse.get_exposed_port(8123)}"
        )
        yield Endpoints(kafka_bootstrap=bootstrap, clickhouse_url=url, managed=True)
