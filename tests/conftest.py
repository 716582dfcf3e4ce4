"""Fixtures: real services for the integration tests.

Order of preference: endpoints given in the environment (``RANKSCOPE_TEST_BOOTSTRAP`` and
``RANKSCOPE_TEST_CLICKHOUSE_URL``, e.g. a team's staging cluster), then testcontainers when a
Docker engine answers, then the project's own local services (Kafka from Apache's jars, the
chDB engine serving ClickHouse's HTTP interface). Nothing is mocked and nothing is skipped.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rankscope.kafka_admin import create_pipeline_topics
from rankscope.pipeline import PipelineConfig
from rankscope.settings import Settings
from rankscope.sinks.clickhouse import connect, migrate


@dataclass(frozen=True)
class Services:
    bootstrap: str
    clickhouse_url: str
    how: str


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    given_kafka = os.environ.get("RANKSCOPE_TEST_BOOTSTRAP")
    given_ch = os.environ.get("RANKSCOPE_TEST_CLICKHOUSE_URL")
    if given_kafka and given_ch:
        yield Services(given_kafka, given_ch, "given")
        return
    from rankscope.services import docker_available, local_services

    if docker_available() and not os.environ.get("RANKSCOPE_TEST_NO_DOCKER"):
        from rankscope.services.containers import container_services

        with container_services() as eps:
            yield Services(eps.kafka_bootstrap, eps.clickhouse_url, "testcontainers")
        return
    home = tmp_path_factory.mktemp("services")
    with local_services(home, kafka_bootstrap=given_kafka, clickhouse_url=given_ch) as eps:
        yield Services(eps.kafka_bootstrap, eps.clickhouse_url, "local")
        # Kafka clients the tests dropped are freed while the broker still answers; freed at
        # exit instead, they log "connection refused" after pytest's summary line.
        gc.collect()


@pytest.fixture
def pipeline_config(services: Services, tmp_path: Path) -> PipelineConfig:
    """A private namespace per test: its own topics, consumer groups and database."""
    tag = f"t{uuid.uuid4().hex[:10]}"
    cfg = PipelineConfig(
        bootstrap=services.bootstrap,
        clickhouse_url=services.clickhouse_url,
        topic_prefix=tag,
        database=tag,
        home=tmp_path / "home",
    )
    create_pipeline_topics(cfg.bootstrap, cfg.topics, partitions=2)
    migrate(connect(cfg.clickhouse_url), cfg.database)
    return cfg


@pytest.fixture
def eval_settings(services: Services, tmp_path: Path) -> Settings:
    """Settings for ``run_eval`` in a private namespace: its own home, topics and database."""
    tag = f"e{uuid.uuid4().hex[:10]}"
    return Settings(
        home=tmp_path / "home",
        bootstrap=services.bootstrap,
        clickhouse_url=services.clickhouse_url,
        topic_prefix=tag,
        database=tag,
    )
