"""The capacity model's arithmetic (rankscope/capacity.py), on hand-picked inputs with results
worked out by hand, and the mapping from bench/capacity_inputs.py's JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rankscope.capacity import CapacityInputs, inputs_from_json, plan
from rankscope.cli import app

INPUTS = CapacityInputs(
    events_per_gpu_s=7.0,
    worker_events_per_core_s=15_000,
    sink_rows_per_core_s=100_000,
    sink_rows_per_event=1.2,
    kafka_raw_bytes_per_event=20,
    kafka_events_bytes_per_event=30,
    kafka_outputs_bytes_per_event=10,
    ch_raw_bytes_per_event=10,
    ch_rollup_bytes_per_event=0.5,
    ch_derived_bytes_per_event=2,
)


def test_plan_for_ten_thousand_gpus_worked_by_hand() -> None:
    p = plan(INPUTS, 10_000)
    assert p.events_per_s == 70_000
    assert p.worker_cores == 10  # 70,000 / (15,000 x 0.5) = 9.33
    assert p.sink_cores == 2  # 84,000 rows/s / (100,000 x 0.5) = 1.68
    assert p.partitions == 64  # 10 workers x 4 growth = 40 -> next power of two
    assert p.jobs == 20  # 10,000 / 512 = 19.5
    assert p.max_gpus_per_job == 1071  # 7,500 events/s on one core / 7 per GPU
    assert p.decider_records_per_s == pytest.approx(4.0)
    assert p.broker_in_mb_s == pytest.approx(4.2)  # 70,000 x (20 + 30 + 10) B
    assert p.broker_replication_mb_s == pytest.approx(8.4)  # two more copies
    assert p.broker_out_mb_s == pytest.approx(6.3)  # 70,000 x (20 + 2 x 30 + 10) B
    assert p.ch_raw_gb_day == pytest.approx(60.48)  # 6.048e9 events/day x 10 B
    assert p.ch_rollup_gb_day == pytest.approx(3.024)
    assert p.ch_derived_gb_day == pytest.approx(12.096)
    assert p.kafka_raw_gb_day == pytest.approx(362.88)  # x 20 B x 3 replicas


def test_plan_scales_linearly_but_never_below_one_core() -> None:
    assert plan(INPUTS, 100_000).worker_cores == 94  # 700,000 / 7,500 = 93.3
    assert plan(INPUTS, 100_000).partitions == 512
    small = plan(INPUTS, 1)
    assert (small.worker_cores, small.sink_cores, small.partitions) == (1, 1, 4)
    with pytest.raises(ValueError):
        plan(INPUTS, 0)


BENCH_JSON: dict[str, Any] = {
    "command": "bench/capacity_inputs.py",
    "commit": "abc1234",
    "event_mix": {"eval_like": {"per_gpu_per_s": {"total": 6.5}}},
    "pipeline": {
        "eval": {
            "events": 1000,
            "events_per_worker_cpu_second": 12_000,
            "sink_rows": 1500,
            "sink_rows_per_sink_cpu_second": 80_000,
            "kafka_bytes_per_event_by_topic": {
                "x.raw.events": 25.0,
                "events": 40.0,
                "windows": 3.0,
                "worker_state": 2.0,
            },
            "clickhouse": {
                "raw_event_tables_bytes_per_event": 9.0,
                "rollups_bytes_per_event": 0.25,
                "derived_bytes_per_event": 1.5,
            },
        }
    },
}


def test_inputs_from_the_bench_json() -> None:
    i = inputs_from_json(BENCH_JSON, gpus_per_job=1024)
    assert i.events_per_gpu_s == 6.5
    assert i.sink_rows_per_event == 1.5
    assert (i.kafka_raw_bytes_per_event, i.kafka_events_bytes_per_event) == (25.0, 40.0)
    assert i.kafka_outputs_bytes_per_event == 5.0
    assert i.gpus_per_job == 1024
    assert "abc1234" in i.source


def test_cli_prints_the_plan_from_an_inputs_file(tmp_path: Path) -> None:
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(BENCH_JSON))
    result = CliRunner().invoke(
        app, ["capacity", "--gpus", "10000", "--inputs", str(path), "--events-per-gpu-s", "7"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output[result.output.index("{") :])
    # 70,000 events/s / (12,000 x 0.5) = 11.7 -> 12 worker cores; 48 -> 64 partitions
    assert (body["worker_cores"], body["partitions"]) == (12, 64)
    missing = CliRunner().invoke(app, ["capacity", "--gpus", "1", "--inputs", str(tmp_path / "x")])
    assert missing.exit_code != 0
    assert "not found" in missing.output
