"""Probe the GPU collector against the real NVML (run on a machine with an NVIDIA driver).

    python bench/device/nvml_probe.py [--cycles 5] [--interval 1.0] [--json out.json]

Runs ``rankscope.collectors.gpu`` with the real ``pynvml`` for N polls, with the XID event thread
running
for the same time, and prints one JSON document: driver and NVML versions, per GPU the sample
fields that came back non-null and the ones NotSupported, the events seen (poll and thread), the
CPU time of each poll (``time.process_time`` delta, all threads) and the latency of the NVLink
calls (most of a cycle's NVML calls; sets ``nvlink_every``). Without NVML it prints why and
exits 0. Needs only pydantic and nvidia-ml-py besides the repository.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml

from rankscope.collectors.base import EventFactory
from rankscope.collectors.gpu import (
    GpuCollectorConfig,
    GpuCollectorUnavailable,
    create_gpu_collector,
)
from rankscope.schemas.events import GpuSampleEvent


def _brief(e: Any) -> dict[str, Any]:
    p = e.payload.model_dump(exclude_defaults=True)
    return {"kind": e.kind, "gpu": e.gpu, "rank": e.rank, "job_id": e.job_id, **p}


def _call_latency_us(fn: Any, *args: Any, n: int = 200) -> float | None:
    try:
        fn(*args)
    except pynvml.NVMLError:
        return None
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()

    factory = EventFactory("probe", "probe-node")
    config = GpuCollectorConfig(interval_s=args.interval, event_wait_ms=500)
    try:
        collector = create_gpu_collector(config, factory)
    except GpuCollectorUnavailable as e:
        print(json.dumps({"nvml": "not present", "message": str(e)}))
        return 0

    out: dict[str, Any] = {}
    for key, fn in (
        ("driver_version", "nvmlSystemGetDriverVersion"),
        ("nvml_version", "nvmlSystemGetNVMLVersion"),
    ):
        try:
            out[key] = str(getattr(pynvml, fn)())
        except pynvml.NVMLError as e:
            out[key] = f"error: {e}"

    thread_events: list[Any] = []
    lock = threading.Lock()

    def emit(events: Any) -> None:
        with lock:
            thread_events.extend(events)

    poll_events: list[Any] = []
    last_sample: dict[int, GpuSampleEvent] = {}
    cpu_s: list[float] = []
    wall_s: list[float] = []
    gpus: list[dict[str, Any]] = []
    latency: dict[str, float | None] = {}
    collector.start(emit)
    try:
        next_t = time.monotonic()
        for _ in range(args.cycles):
            c0, w0 = time.process_time(), time.perf_counter()
            events = collector.poll(time.time_ns())
            cpu_s.append(time.process_time() - c0)
            wall_s.append(time.perf_counter() - w0)
            for e in events:
                if isinstance(e, GpuSampleEvent):
                    last_sample[e.gpu or 0] = e
                else:
                    poll_events.append(e)
            next_t += args.interval
            time.sleep(max(0.0, next_t - time.monotonic()))
        # latency of one NVLink state / error-counter call on the first GPU's first link
        gpus = collector.describe()
        if gpus and gpus[0]["nvlinks"]:
            h = pynvml.nvmlDeviceGetHandleByIndex(gpus[0]["index"])
            link = gpus[0]["nvlinks"][0]
            latency["nvmlDeviceGetNvLinkState_us"] = _call_latency_us(
                pynvml.nvmlDeviceGetNvLinkState, h, link
            )
            latency["nvmlDeviceGetNvLinkErrorCounter_us"] = _call_latency_us(
                pynvml.nvmlDeviceGetNvLinkErrorCounter, h, link, 0
            )
            latency["nvmlDeviceGetUtilizationRates_us"] = _call_latency_us(
                pynvml.nvmlDeviceGetUtilizationRates, h
            )
    finally:
        collector.stop()

    out["gpus"] = []
    for g in gpus:
        s = last_sample.get(g["index"])
        fields = s.payload.model_dump() if s is not None else {}
        out["gpus"].append(
            {
                **g,
                "non_null": sorted(k for k, v in fields.items() if v is not None),
                "null": sorted(k for k, v in fields.items() if v is None),
                "sample": fields,
            }
        )
    with lock:
        out["events"] = [_brief(e) for e in poll_events + thread_events]
    out["poll_cpu_ms"] = [round(x * 1e3, 3) for x in cpu_s]
    out["poll_wall_ms"] = [round(x * 1e3, 3) for x in wall_s]
    out["poll_cpu_ms_mean_after_first"] = (
        round(sum(cpu_s[1:]) / len(cpu_s[1:]) * 1e3, 3) if len(cpu_s) > 1 else None
    )
    out["call_latency"] = latency
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
