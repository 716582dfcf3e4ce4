"""Record what a real OpenTelemetry Collector's kafkaexporter writes, for tests/data/otlp_collector.

Runs a Collector built from ``examples/otel-collector/builder-manifest.yaml`` with the example
configuration (``examples/otel-collector/config.yaml``; only the broker, the OTLP port, and
``resourcedetection``, which that build leaves out, changed) against a local broker; a second
kafka exporter writes the other encoding of each signal. It posts one span over OTLP/HTTP,
lets the filelog receiver read ``rank0.log``/``rank1.log`` from ``<logs-dir>/job-7/rank-N.log``,
and saves the first record of each topic as ``<signal>.<encoding>.{bin,json}``::

    builder --config examples/otel-collector/builder-manifest.yaml   # Go module proxy
    python -m tests.data.otlp_collector.record_collector_output BINARY LOGS_DIR OUT_DIR

Not part of the suite (it needs the built binary); the recorded files are.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from confluent_kafka import Consumer

from rankscope.kafka_admin import create_pipeline_topics
from rankscope.schemas.topics import Topics
from rankscope.services import local_services
from tests.otlp_payloads import DATA, encode, resource, span, traces

ROOT = Path(__file__).resolve().parents[3]
#: topic -> file name (the example writes traces as otlp_proto and logs as otlp_json)
TOPICS = {
    "otlp_spans": "traces.otlp_proto.bin",
    "otlp_spans_json": "traces.otlp_json.json",
    "otlp_logs": "logs.otlp_json.json",
    "otlp_logs_proto": "logs.otlp_proto.bin",
}


def collector_config(bootstrap: str, logs_dir: Path) -> str:
    c = yaml.safe_load((ROOT / "examples" / "otel-collector" / "config.yaml").read_text())
    c["receivers"]["otlp"]["protocols"] = {"http": {"endpoint": "127.0.0.1:14318"}}
    filelog = c["receivers"]["filelog/training"]
    filelog["include"] = [f"{logs_dir}/*/rank-*.log"]
    filelog["start_at"] = "beginning"
    filelog["resource"]["k8s.node.name"] = "gpu-a03"
    del c["processors"]["resourcedetection"]
    c["exporters"]["kafka"]["brokers"] = [bootstrap]
    c["exporters"]["kafka/other"] = {
        "brokers": [bootstrap],
        "traces": {"topic": "otlp_spans_json", "encoding": "otlp_json"},
        "logs": {"topic": "otlp_logs_proto", "encoding": "otlp_proto"},
    }
    for pipeline in c["service"]["pipelines"].values():
        pipeline["processors"] = ["batch"]
        pipeline["exporters"] = ["kafka", "kafka/other"]
    c["service"]["telemetry"] = {"metrics": {"level": "none"}}
    return yaml.safe_dump(c)


def main(binary: Path, logs_dir: Path, out: Path) -> None:
    (logs_dir / "job-7").mkdir(parents=True, exist_ok=True)
    for n in (0, 1):
        shutil.copy(DATA / f"rank{n}.log", logs_dir / "job-7" / f"rank-{n}.log")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, local_services(Path(tmp) / "svc") as eps:
        boot = eps.kafka_bootstrap
        topics = Topics(
            "record",
            otlp_traces_topics=("otlp_spans", "otlp_spans_json"),
            otlp_logs_topics=("otlp_logs", "otlp_logs_proto"),
        )
        create_pipeline_topics(boot, topics, partitions=1)
        config = Path(tmp) / "config.yaml"
        config.write_text(collector_config(boot, logs_dir))
        col = subprocess.Popen([str(binary), "--config", str(config)])
        try:
            now = time.time_ns()
            res = resource(rankscope__job_id="job-7", host__name="gpu-a03")
            body = encode(
                traces((res, [span(0xABC, 0xDEF, now - 5 * 10**9, step=3)])), "otlp_proto"
            )
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.post(
                        "http://127.0.0.1:14318/v1/traces",
                        content=body,
                        headers={"Content-Type": "application/x-protobuf"},
                    ).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
            consumer = Consumer(
                {"bootstrap.servers": boot, "group.id": "record", "auto.offset.reset": "earliest"}
            )
            consumer.subscribe(list(TOPICS))
            got: set[str] = set()
            deadline = time.monotonic() + 90
            while got != set(TOPICS) and time.monotonic() < deadline:
                msg = consumer.poll(1)
                if msg is None or msg.error() or msg.topic() in got:
                    continue
                print(msg.topic(), "key", msg.key(), "headers", msg.headers())
                (out / TOPICS[msg.topic()]).write_bytes(msg.value())
                got.add(msg.topic())
            consumer.close()
        finally:
            col.terminate()
            col.wait(30)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
