"""Throughput per GPU, per joule and per dollar (issue 19): the ``efficiency`` named query on a
known dataset, exact results against real chDB.

Relative to T (whole seconds), price 2.4 per GPU-hour:

* job ``e1``, model llama-7b, 2 ranks on node h1 (an H100 node; its earlier inventory said
  A100): 10 ok steps of 10 s (T+0..100), each with rankscope.samples 64 and rankscope.tokens
  131072 on both ranks (a step counts once). GPUs at 500 W: 50 kJ each. 640 samples over 200
  GPU-seconds: 3.2 samples/s/GPU; 640 / 100 kJ = 0.0064 per J; 200 GPU-s cost 0.1333: 4800 per $.
* job ``e2``, model llama-7b, 2 ranks on node a1 (A100): 5 steps of 20 s, step 3 failed (its
  samples do not count), the attributes on rank 0 only: 32 samples, 65536 tokens; only rank 0's
  GPU reports energy: 40 kJ.
  128 samples over 200 GPU-s: 0.64/s/GPU; 0.0032 per J; 960 per $.
* by model: 768 samples over 400 GPU-s and 140 kJ: 1.92/s/GPU, 0.005486 per J, 2880 per $.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client

from rankscope.schemas.envelope import Envelope
from rankscope.schemas.events import GpuSampleEvent, NodeInventoryEvent, SpanEvent
from rankscope.schemas.payloads import GpuSample, NodeInventory, Span, inventory_fingerprint
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.named_queries import run_query
from rankscope.sinks.rows import TableSpec, event_spec
from tests.conftest import Services

S = 1_000_000_000
T = (time.time_ns() // S - 3600) * S
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
_n = iter(range(1, 10**7))


def _env(kind: str, ts: int, job: str, node: str, rank: int | None, gpu: int | None = None) -> Any:
    return {
        "event_id": f"f{next(_n):010d}",
        "schema": f"{kind}/1",
        "kind": kind,
        "cluster": "c1",
        "job_id": job,
        "node": node,
        "rank": rank,
        "gpu": gpu,
        "ts": ts,
        "observed_ts": ts,
    }


def _step(job: str, node: str, rank: int, step: int, start_s: int, dur_s: int,
          attrs: dict[str, str | int], status: str = "ok") -> SpanEvent:  # fmt: skip
    return SpanEvent(
        **_env("span", T + (start_s + dur_s) * S, job, node, rank),
        payload=Span(
            name="step",
            phase="step",
            trace_id=f"{step:032x}",
            span_id=f"{next(_n):016x}",
            start_ns=T + start_s * S,
            end_ns=T + (start_s + dur_s) * S,
            step=step,
            status=status,  # type: ignore[arg-type]
            attributes={"rankscope.model": "llama-7b", **attrs},
        ),
    )


def _inventory(node: str, gpu_model: str, at_s: int) -> NodeInventoryEvent:
    fields: dict[str, Any] = {"gpu_model": gpu_model, "gpu_count": 8, "driver_version": "550"}
    return NodeInventoryEvent(
        **_env("node_inventory", T + at_s * S, "", node, None),
        payload=NodeInventory(**fields, fingerprint=inventory_fingerprint(fields)),
    )


def _sample(job: str, node: str, gpu: int, at_s: int, mj: int) -> GpuSampleEvent:
    return GpuSampleEvent(
        **_env("gpu_sample", T + at_s * S, job, node, None, gpu=gpu),
        payload=GpuSample(gpu_uuid=f"GPU-{node}-{gpu}", sm_util_pct=90, energy_mj=mj),
    )


def _events() -> list[Envelope]:
    ev: list[Envelope] = []
    work = {"rankscope.samples": 64, "rankscope.tokens": 131072}
    for rank in (0, 1):
        ev += [_step("e1", "h1", rank, k, 10 * (k - 1), 10, work) for k in range(1, 11)]
        ev += [_sample("e1", "h1", rank, at, mj) for at, mj in ((0, 0), (100, 50_000_000))]
    # a sample after the last step: not the steps' energy
    ev.append(_sample("e1", "h1", 0, 160, 80_000_000))
    for k in range(1, 6):
        status = "error" if k == 3 else "ok"
        rank0 = {"rankscope.samples": 32, "rankscope.tokens": 65536}
        ev.append(_step("e2", "a1", 0, k, 20 * (k - 1), 20, rank0, status))
        ev.append(_step("e2", "a1", 1, k, 20 * (k - 1), 20, {}, status))
    ev += [_sample("e2", "a1", 0, at, mj) for at, mj in ((0, 1_000_000), (100, 41_000_000))]
    ev += [_inventory("h1", A100, -86400), _inventory("h1", H100, -60), _inventory("a1", A100, 0)]
    return ev


@pytest.fixture(scope="module")
def eff(services: Services) -> Iterator[tuple[Client, str]]:
    db = f"eff{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    by_table: dict[str, tuple[TableSpec, list[Any]]] = {}
    for e in _events():
        spec = event_spec(e)  # type: ignore[arg-type]
        by_table.setdefault(spec.table, (spec, []))[1].append(spec.to_row(e))
    for spec, rows in by_table.values():
        client.insert(f"{db}.{spec.table}", rows, column_names=spec.columns)
    yield client, db
    client.command(f"DROP DATABASE IF EXISTS {db}")


def _rows(eff: tuple[Client, str], **params: str) -> list[dict[str, Any]]:
    client, db = eff
    values = {"price_per_gpu_hour": "2.4", "hours": "0", **params}
    return list(run_query(client, "efficiency", db, values).named_results())


E1 = {
    "key": "e1", "jobs": 1, "models": "llama-7b", "gpu_models": H100, "gpus": 2,
    "gpu_hours": 0.0556, "energy_kwh": 0.0278, "samples": 640.0, "tokens": 1_310_720.0,
    "samples_per_s_per_gpu": 3.2, "tokens_per_s_per_gpu": 6553.6, "samples_per_joule": 0.0064,
    "tokens_per_joule": 13.1072, "samples_per_dollar": 4800.0, "tokens_per_dollar": 9_830_400.0,
    "power_w_per_gpu": 500.0,
}  # fmt: skip
E2 = {
    "key": "e2", "jobs": 1, "models": "llama-7b", "gpu_models": A100, "gpus": 2,
    "gpu_hours": 0.0556, "energy_kwh": 0.0111, "samples": 128.0, "tokens": 262_144.0,
    "samples_per_s_per_gpu": 0.64, "tokens_per_s_per_gpu": 1310.72, "samples_per_joule": 0.0032,
    "tokens_per_joule": 6.5536, "samples_per_dollar": 960.0, "tokens_per_dollar": 1_966_080.0,
    "power_w_per_gpu": 200.0,
}  # fmt: skip


def test_efficiency(eff: tuple[Client, str]) -> None:
    assert _rows(eff) == [E1, E2]
    assert _rows(eff, job_id="e2") == [E2]
    assert _rows(eff, by="gpu_model") == [{**E2, "key": A100}, {**E1, "key": H100}]
    (model,) = _rows(eff, by="model")
    assert model == {
        "key": "llama-7b", "jobs": 2, "models": "llama-7b", "gpu_models": f"{A100},{H100}",
        "gpus": 4, "gpu_hours": 0.1111, "energy_kwh": 0.0389, "samples": 768.0,
        "tokens": 1_572_864.0, "samples_per_s_per_gpu": 1.92, "tokens_per_s_per_gpu": 3932.16,
        "samples_per_joule": 0.005486, "tokens_per_joule": 11.2347, "samples_per_dollar": 2880.0,
        "tokens_per_dollar": 5_898_240.0, "power_w_per_gpu": 350.0,
    }  # fmt: skip
