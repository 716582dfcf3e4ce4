"""Recording reference baselines (issue 19): a job's profile from ClickHouse, published as an
event to the compacted ``<p>.baselines`` topic; listing them back from the topic.

Why the topic and not a table write: Kafka is the source of truth. The sink's ``baselines``
table and every worker's lookup are rebuilt from the topic, so a baseline survives a database
rebuild and a replay compares against the same references. ``rankscope baseline`` and the
simulation's scenario (``rankscope.simulation.baseline_gap``) share these functions.
"""

from __future__ import annotations

import math
from typing import Any

from clickhouse_connect.driver.client import Client

from rankscope.schemas.baselines import (
    PROFILE_PHASES,
    Baseline,
    ConfigFingerprint,
    JobProfile,
    ModelKey,
    PhaseStat,
    nccl_env_of,
)
from rankscope.schemas.topics import Topics
from rankscope.sinks.named_queries import run_query


class BaselineError(ValueError):
    """A baseline cannot be recorded or found (one line for the CLI)."""


def profile_from_clickhouse(
    client: Client, database: str, job_id: str, skip_steps: int = 2
) -> JobProfile:
    """The job's profile from its stored spans, inventory and GPU samples (``job_profile`` and
    ``job_config``, sinks/sql/)."""
    rows = list(
        run_query(
            client, "job_profile", database, {"job_id": job_id, "skip_steps": str(skip_steps)}
        ).named_results()
    )
    stats = {r["phase"]: r for r in rows}
    if "step" not in stats:
        raise BaselineError(
            f"job {job_id!r} has no complete steps in {database} (phase spans with a collective)"
        )
    (cfg,) = list(run_query(client, "job_config", database, {"job_id": job_id}).named_results())
    if not cfg["model"]:
        raise BaselineError(
            f"job {job_id!r} has no rankscope.model span attribute: its model/config key is unknown"
        )
    step = stats["step"]
    phases = {
        p: PhaseStat(median_s=float(stats[p]["median_s"]), spread_s=float(stats[p]["spread_s"]))
        for p in PROFILE_PHASES
        if p in stats
    }
    step_s = float(step["median_s"])
    collective = phases["collective"].median_s if "collective" in phases else 0.0

    def per_s(value: Any) -> float | None:
        rate = _maybe(value)
        return rate / step_s if rate and step_s > 0 else None

    def top(values: list[str]) -> str:
        return values[0] if values else ""

    config = ConfigFingerprint(
        driver_version=top(cfg["driver_version"]),
        cuda_version=top(cfg["cuda_version"]),
        nccl_version=top(cfg["nccl_version"]),
        kernel=top(cfg["kernel"]),
        nccl_env=dict(sorted(nccl_env_of(cfg["env"] or {}).items())),
        sm_clock_mhz=_maybe(cfg["sm_clock_mhz"]),
        mem_clock_mhz=_maybe(cfg["mem_clock_mhz"]),
        gpus_per_node=int(cfg["gpus_per_node"] or 0),
        nodes=int(cfg["nodes"] or 0),
        hcas_per_node=int(cfg["hcas_per_node"] or 0),
    )
    return JobProfile(
        cluster=_cluster_of(client, database, job_id),
        job_id=job_id,
        model_key=ModelKey(
            model=cfg["model"],
            ranks=max(1, int(step["ranks"])),
            gpu_model=top(cfg["gpu_model"]),
            global_batch=int(cfg["global_batch"]) or None,
        ),
        steps=int(step["steps"]),
        phases=phases,
        step=PhaseStat(median_s=step_s, spread_s=float(step["spread_s"])),
        comm_share=min(1.0, collective / step_s) if step_s > 0 else 0.0,
        power_w_per_gpu=_maybe(cfg["power_w"]),
        samples_per_s=per_s(cfg["samples_per_step"]),
        tokens_per_s=per_s(cfg["tokens_per_step"]),
        config=config,
    )


def _maybe(value: Any) -> float | None:
    """ClickHouse's quantile of nothing is NaN; a profile says None."""
    if value is None:
        return None
    f = float(value)
    return None if math.isnan(f) or f <= 0 else f


def _cluster_of(client: Client, database: str, job_id: str) -> str:
    rows = client.query(
        f"SELECT any(cluster) FROM {database}.spans WHERE job_id = {{j:String}}",
        parameters={"j": job_id},
    ).result_rows
    return str(rows[0][0]) if rows and rows[0][0] else ""


def publish_baseline(bootstrap: str, topics: Topics, baseline: Baseline) -> None:
    """The baseline as an event on the compacted topic, keyed by its model/config key."""
    from confluent_kafka import Producer

    from rankscope.kafka_security import check_access, kafka_config

    check_access(bootstrap)  # a refused login: one line, not a 30 s wait for the flush
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True}))
    producer.produce(
        topics.baselines, key=baseline.key.encode(), value=baseline.model_dump_json().encode()
    )
    if producer.flush(30) != 0:
        raise BaselineError(f"the baseline was not confirmed by Kafka on {topics.baselines}")


def record_baseline(
    client: Client,
    database: str,
    bootstrap: str,
    topics: Topics,
    job_id: str,
    name: str,
    recorded_ts: int,
    recorded_by: str = "",
) -> Baseline:
    """Profile ``job_id`` from ClickHouse and publish it as baseline ``name``."""
    profile = profile_from_clickhouse(client, database, job_id)
    baseline = Baseline.of(name, profile, recorded_ts=recorded_ts, recorded_by=recorded_by)
    publish_baseline(bootstrap, topics, baseline)
    return baseline


def current_baselines(bootstrap: str, topics: Topics) -> list[Baseline]:
    """The reference per model/config key, as the worker sees it: the topic read whole, the
    latest record per key winning (what compaction keeps), in name order."""
    from rankscope.kafka_admin import read_topic

    by_key: dict[str, Baseline] = {}
    for value in read_topic(bootstrap, topics.baselines):
        if value is None:
            continue
        b = Baseline.model_validate_json(value)
        by_key[b.key] = b
    return sorted(by_key.values(), key=lambda b: (b.name, b.key))
