"""The capacity model (docs/capacity.md, issue 21): what a fleet of N GPUs needs, from measured
per-event costs.

The inputs come from ``bench/results/capacity_inputs.json`` (written by
``bench/capacity_inputs.py``) so that the plan follows the code: re-measure after a change to the
worker and the plan and the doc's tables change with it. Every input can be overridden by a
platform team with its own figures (its event mix, its job sizes, its headroom).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas.topics import RAW_RETENTION_MS

__all__ = [
    "DEFAULT_INPUTS",
    "RAW_RETENTION_DAYS",
    "CapacityInputs",
    "Plan",
    "inputs_from_json",
    "plan",
]

#: where bench/capacity_inputs.py writes its measurements (relative to the repository root)
DEFAULT_INPUTS = Path("bench/results/capacity_inputs.json")
DAY_S = 86_400
#: the raw topic's retention (schemas/topics.py), in days
RAW_RETENTION_DAYS = RAW_RETENTION_MS // (DAY_S * 1000)


class CapacityInputs(BaseModel):
    """Per-event costs and the fleet's shape. Defaults are placeholders; the measured values
    come from :func:`inputs_from_json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: events per GPU per second (GPU samples, spans, heartbeats, fabric counters, inventory)
    events_per_gpu_s: float = Field(gt=0)
    #: events one worker CPU core validates, redacts, windows and analyses per second
    worker_events_per_core_s: float = Field(gt=0)
    #: ClickHouse rows the sink writes per sink CPU second, and rows per event (raw + derived)
    sink_rows_per_core_s: float = Field(gt=0)
    sink_rows_per_event: float = Field(gt=0)
    #: bytes per event written to the raw topic (producer-compressed)
    kafka_raw_bytes_per_event: float = Field(gt=0)
    #: bytes per raw event the worker writes to the events topic
    kafka_events_bytes_per_event: float = Field(ge=0)
    #: bytes per raw event the worker writes to its other outputs (windows, findings, ...,
    #: snapshots), read by the sink (snapshots only on a takeover)
    kafka_outputs_bytes_per_event: float = Field(ge=0)
    #: ClickHouse bytes per event after compression: raw event tables, rollups, derived tables
    ch_raw_bytes_per_event: float = Field(gt=0)
    ch_rollup_bytes_per_event: float = Field(ge=0)
    ch_derived_bytes_per_event: float = Field(ge=0)
    #: the fleet's shape and the operator's choices
    gpus_per_job: int = Field(default=512, ge=1)
    replication_factor: int = Field(default=3, ge=1)
    #: run cores at most this busy: room for catch-up after an outage and for replays
    target_utilisation: float = Field(default=0.5, gt=0, le=1)
    #: partitions are fixed for a keyed topic's life (adding some moves jobs between them):
    #: size them for this many times today's worker count
    partition_growth: int = Field(default=4, ge=1)
    #: progress notes per job per second on the decider's one partition (one per 5 s of event
    #: time, streams/recovery/progress.py)
    decider_notes_per_job_s: float = Field(default=0.2, ge=0)
    #: where the figures were measured (commit, file)
    source: str = "given"


class Plan(BaseModel):
    """What ``gpus`` GPUs need, with the intermediate rates the figures rest on."""

    model_config = ConfigDict(frozen=True)

    gpus: int
    events_per_s: float
    worker_cores: int
    sink_cores: int
    partitions: int
    #: the biggest job one worker core keeps up with (a job's events share one partition)
    max_gpus_per_job: int
    jobs: int
    decider_records_per_s: float
    broker_in_mb_s: float
    broker_replication_mb_s: float
    broker_out_mb_s: float
    ch_raw_gb_day: float
    ch_rollup_gb_day: float
    ch_derived_gb_day: float
    kafka_raw_gb_day: float


def _cores(load: float, per_core: float, utilisation: float) -> int:
    return max(1, math.ceil(load / (per_core * utilisation)))


def plan(inputs: CapacityInputs, gpus: int) -> Plan:
    """The resources ``gpus`` GPUs need under ``inputs`` (pure arithmetic)."""
    if gpus < 1:
        raise ValueError("gpus must be >= 1")
    i = inputs
    rate = gpus * i.events_per_gpu_s
    worker_cores = _cores(rate, i.worker_events_per_core_s, i.target_utilisation)
    sink_cores = _cores(rate * i.sink_rows_per_event, i.sink_rows_per_core_s, i.target_utilisation)
    # one worker process per core, each owning at least one partition; fixed for good, so sized
    # for growth and rounded up to a power of two (even spreading over 2, 4, 8, ... workers)
    partitions = 2 ** math.ceil(math.log2(worker_cores * i.partition_growth))
    jobs = math.ceil(gpus / i.gpus_per_job)
    mb = 1e6
    written = i.kafka_raw_bytes_per_event + i.kafka_events_bytes_per_event
    written += i.kafka_outputs_bytes_per_event
    # consumers: the worker reads raw + events; the sink reads events + the outputs
    read = i.kafka_raw_bytes_per_event + 2 * i.kafka_events_bytes_per_event
    read += i.kafka_outputs_bytes_per_event
    gb_day = rate * DAY_S / 1e9
    return Plan(
        gpus=gpus,
        events_per_s=rate,
        worker_cores=worker_cores,
        sink_cores=sink_cores,
        partitions=partitions,
        max_gpus_per_job=int(
            i.worker_events_per_core_s * i.target_utilisation / i.events_per_gpu_s
        ),
        jobs=jobs,
        decider_records_per_s=jobs * i.decider_notes_per_job_s,
        broker_in_mb_s=rate * written / mb,
        broker_replication_mb_s=rate * written * (i.replication_factor - 1) / mb,
        broker_out_mb_s=rate * read / mb,
        ch_raw_gb_day=gb_day * i.ch_raw_bytes_per_event,
        ch_rollup_gb_day=gb_day * i.ch_rollup_bytes_per_event,
        ch_derived_gb_day=gb_day * i.ch_derived_bytes_per_event,
        kafka_raw_gb_day=gb_day * i.kafka_raw_bytes_per_event * i.replication_factor,
    )


def inputs_from_json(
    data: dict[str, Any], dataset: str = "eval", **overrides: Any
) -> CapacityInputs:
    """The model's inputs from capacity_inputs.json's figures for ``dataset`` (demo or eval)."""
    run = data["pipeline"][dataset]
    topics: dict[str, float] = run["kafka_bytes_per_event_by_topic"]
    raw = next(v for k, v in topics.items() if k.endswith("raw.events"))
    events = topics.get("events", 0.0)
    ch = run["clickhouse"]
    values: dict[str, Any] = {
        "events_per_gpu_s": data["event_mix"]["eval_like"]["per_gpu_per_s"]["total"],
        "worker_events_per_core_s": run["events_per_worker_cpu_second"],
        "sink_rows_per_core_s": run["sink_rows_per_sink_cpu_second"],
        "sink_rows_per_event": run["sink_rows"] / run["events"],
        "kafka_raw_bytes_per_event": raw,
        "kafka_events_bytes_per_event": events,
        "kafka_outputs_bytes_per_event": sum(topics.values()) - raw - events,
        "ch_raw_bytes_per_event": ch["raw_event_tables_bytes_per_event"],
        "ch_rollup_bytes_per_event": ch["rollups_bytes_per_event"],
        "ch_derived_bytes_per_event": ch["derived_bytes_per_event"],
        "source": f"{data.get('command', 'bench/capacity_inputs.py')} at {data.get('commit', '?')}",
    }
    values.update(overrides)
    return CapacityInputs(**values)


def load_inputs(
    path: Path = DEFAULT_INPUTS, dataset: str = "eval", **overrides: Any
) -> CapacityInputs:
    return inputs_from_json(json.loads(path.read_text()), dataset, **overrides)
