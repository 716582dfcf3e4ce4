"""The local stack the demo and the evaluation run on: the backing services (the local broker
and engine, or the ones the settings name), the pipeline's topics and migrations, and the
pipeline's stage processes (``Stack.pipeline``).

``rankscope demo`` and ``rankscope eval`` both start here, so that what they measure runs on
the same set-up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from rankscope.kafka_admin import create_pipeline_topics, release_admins
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.settings import Settings
from rankscope.sinks.clickhouse import connect, migrate


@dataclass(frozen=True)
class Stack:
    """Endpoints of running services whose topics exist and whose database is migrated."""

    settings: Settings
    bootstrap: str
    clickhouse_url: str
    client: Client
    #: extra environment for the stage processes (settings such as RANKSCOPE_RECOVERY_POLICY)
    env: dict[str, str] = field(default_factory=dict)
    #: the sink's own environment: its ClickHouse writer login on the local engine
    sink_env: dict[str, str] = field(default_factory=dict)

    def pipeline(self, workers: int = 1, validators: int = 0) -> Pipeline:
        """The stream workers (and validators), sink and actuator processes on this stack (a
        context manager)."""
        return Pipeline(
            PipelineConfig(
                bootstrap=self.bootstrap,
                clickhouse_url=self.clickhouse_url,
                topic_prefix=self.settings.topic_prefix,
                database=self.settings.database,
                home=self.settings.home,
                env=dict(self.env),
                sink_env=dict(self.sink_env),
                workers=workers,
                validators=validators,
            )
        )


@contextlib.contextmanager
def _services(
    settings: Settings, keep: bool, progress: Callable[[str], None]
) -> Iterator[tuple[str, str]]:
    from rankscope.services import ServiceManager, local_services

    if keep:
        eps = ServiceManager(settings.home, database=settings.database).up(
            kafka_bootstrap=settings.bootstrap,
            clickhouse_url=settings.clickhouse_url,
            progress=progress,
        )
        yield eps.kafka_bootstrap, eps.clickhouse_url
        return
    with local_services(
        settings.home,
        kafka_bootstrap=settings.bootstrap,
        clickhouse_url=settings.clickhouse_url,
        progress=progress,
        database=settings.database,
    ) as eps:
        yield eps.kafka_bootstrap, eps.clickhouse_url


@contextlib.contextmanager
def local_stack(
    settings: Settings,
    progress: Callable[[str], None],
    *,
    keep_services: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """Services up (started here unless the settings name them or they already run), topics
    created, migrations applied. Services this call started stop at the end, unless
    ``keep_services`` (then they are left running, as ``rankscope services up`` leaves them)."""
    with _services(settings, keep_services, progress) as (bootstrap, clickhouse_url):
        try:
            create_pipeline_topics(bootstrap, settings.topics, settings.partitions)
            client = connect(clickhouse_url)
            migrate(client, settings.database)
            sink_env: dict[str, str] = {}
            if settings.clickhouse_url is None:  # the local engine: the sink logs in as writer
                sink_env = _local_writer_env(settings, clickhouse_url, progress)
            yield Stack(settings, bootstrap, clickhouse_url, client, dict(env or {}), sink_env)
        finally:
            release_admins()  # before the services stop (kafka_admin.release_admins)


def _local_writer_env(
    settings: Settings, clickhouse_url: str, progress: Callable[[str], None]
) -> dict[str, str]:
    """The environment that makes the sink log in to the local engine as its writer, once a
    probe shows that login may read the database (an engine started before it served users,
    or for another database, keeps the admin login, and says so)."""
    from rankscope.services import ServiceManager
    from rankscope.sinks.access import AccessSettings, local_env, url_for

    home = ServiceManager(settings.home).state_dir
    env = local_env(home, ["writer"])
    access = AccessSettings(
        writer_user=env["RANKSCOPE_CLICKHOUSE_WRITER_USER"],
        writer_password_file=env["RANKSCOPE_CLICKHOUSE_WRITER_PASSWORD_FILE"],
    )
    try:
        probe = connect(url_for(clickhouse_url, "writer", access))
        probe.query(f"SELECT count() FROM {settings.database}.schema_migrations")
        probe.close()
    except Exception as exc:  # any refusal: keep the admin login rather than fail the stack
        progress(f"sink keeps the admin ClickHouse login ({type(exc).__name__})")
        return {}
    return env
