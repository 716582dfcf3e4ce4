"""``rankscope replay``: rebuild the derived tables from the raw topics into an empty database.

Kafka's raw topics are the source of truth; everything else is derived. A replay runs stream
workers in a consumer group of its own, reading the deployment's raw topics from their start,
writing derived topics under a prefix of its own (``<prefix>-replay-<database>``) and a sink into
the target database. It decides no recovery action and runs no actuator: the past is not acted
on again. It stops once the workers have read the raw topics up to where they ended when it
started (a live deployment keeps writing; later records are the live pipeline's business) and the
sink has stored everything, and prints what each table holds. Findings are a function of the log
(docs/decisions.md), so the replayed detections and incidents equal the live ones, ids included.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clickhouse_connect.driver.client import Client
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from rankscope.kafka_admin import (
    committed_offsets,
    create_pipeline_topics,
    end_offsets,
    watermarks,
)
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.sinks.clickhouse import connect, migrate, storage_tables

if TYPE_CHECKING:
    from rich.console import Console

    from rankscope.settings import Settings

#: the live workers' redaction key, handed to the replay's workers so replayed rows hash alike
_REDACTION_KEY_ENV = "RANKSCOPE_REDACTION_KEY"


class ReplayError(RuntimeError):
    """A replay that cannot start (a database with data in it) or did not finish in time."""


@dataclass(frozen=True)
class ReplayReport:
    raw_records: int
    wall_s: float
    rows: dict[str, int]


def replay_prefix(prefix: str, database: str) -> str:
    """Where a replay into ``database`` writes its derived topics (never the live ones)."""
    return f"{prefix}-replay-{database}"


def run_replay(
    settings: Settings,
    console: Console,
    *,
    workers: int = 1,
    validators: int = 0,
    drop: bool = False,
    timeout_s: float = 3600.0,
) -> ReplayReport:
    if settings.bootstrap is None or settings.clickhouse_url is None:
        raise ReplayError("a replay needs --bootstrap and --clickhouse-url (the deployment's)")
    source = settings.topics
    client = connect(settings.clickhouse_url)
    db = settings.database
    if _has_rows(client, db):
        if not drop:
            raise ReplayError(
                f"database {db!r} already holds rows; replay into an empty database, or pass "
                "--drop to empty it first"
            )
        client.command(f"DROP DATABASE IF EXISTS {db}")
    migrate(client, db)
    derived = replay_prefix(settings.topic_prefix, db)
    cfg = PipelineConfig(
        bootstrap=settings.bootstrap,
        clickhouse_url=settings.clickhouse_url,
        topic_prefix=derived,
        database=db,
        home=settings.home / "replay" / db,
        workers=workers,
        validators=validators,
        actuators=False,
        env={
            "RANKSCOPE_RAW_TOPIC_PREFIX": settings.topic_prefix,
            "RANKSCOPE_RECOVERY_ENABLED": "false",
            **_redaction_key(settings),
        },
    )
    create_pipeline_topics(cfg.bootstrap, cfg.topics, settings.partitions)
    # records already deleted or expired (below the low watermark) are not there to be read: a
    # partition whose records are all gone is never consumed, so nothing commits an offset on it
    marks = watermarks(cfg.bootstrap, source.all_raw)
    ends = {tp: high for tp, (_, high) in marks.items()}
    total = sum(high - low for low, high in marks.values())
    t0 = time.monotonic()
    with (
        Pipeline(cfg) as pipeline,
        Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        task = progress.add_task("raw records read", total=total)
        group = cfg.validate_group  # whoever reads the raw topics: workers or validators
        while True:
            read = committed_offsets(cfg.bootstrap, group, list(ends))
            done = records_read(marks, read)
            progress.update(task, completed=done)
            worker_lag, sink_lag = pipeline.lag()
            # the events topic is the replay's own: all of it processed, and the sink caught up
            if done >= total and worker_lag <= _raw_since(cfg.bootstrap, ends) and sink_lag == 0:
                break
            for stage in (*pipeline.validators, *pipeline.workers, pipeline.sink):
                if not stage.alive:
                    raise ReplayError(f"the {stage.name} stopped:\n{stage.log_tail(15)}")
            if time.monotonic() - t0 > timeout_s:
                raise ReplayError(f"the replay did not finish in {timeout_s:.0f} s")
            time.sleep(0.5)
    rows = {t: _count(client, db, t) for t in storage_tables(client, db)}
    return ReplayReport(total, time.monotonic() - t0, {t: n for t, n in rows.items() if n})


def records_read(
    marks: dict[tuple[str, int], tuple[int, int]], committed: dict[tuple[str, int], int]
) -> int:
    """Records of ``marks`` (low, high per partition) a group has committed past.

    A partition with no commit counts from its low watermark: one whose records were all
    deleted or expired is never consumed, so no offset is ever committed on it, and counting it
    from 0 would keep a replay waiting for records that are not there.
    """
    return sum(
        min(max(committed.get(tp, low), low), high) - low for tp, (low, high) in marks.items()
    )


def _redaction_key(settings: Settings) -> dict[str, str]:
    """The live workers' key (their environment's, else their key file), for the replay's."""
    if os.environ.get(_REDACTION_KEY_ENV):
        return {}  # inherited by the stage processes
    key_file = settings.home / "redaction.key"
    return {_REDACTION_KEY_ENV: key_file.read_text().strip()} if key_file.exists() else {}


def _raw_since(bootstrap: str, ends: dict[tuple[str, int], int]) -> int:
    """Raw records written after the replay started (the live pipeline's, not the replay's)."""
    now = end_offsets(bootstrap, sorted({t for t, _ in ends}))
    return sum(max(0, now.get(tp, 0) - end) for tp, end in ends.items())


def _has_rows(client: Client, db: str) -> bool:
    found = client.query(
        "SELECT sum(total_rows) FROM system.tables WHERE database = %(d)s", parameters={"d": db}
    ).result_rows
    return bool(found and found[0][0])


def _count(client: Client, db: str, table: str) -> int:
    return int(client.query(f"SELECT count() FROM {db}.{table}").result_rows[0][0])
