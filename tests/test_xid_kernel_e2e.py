"""Root cause from a kernel line alone (issue 17), on a real broker and a real ClickHouse engine.

A simulated job's GPU falls off the bus and its ranks die with NCCL watchdog timeouts; NVML says
nothing (every NVML ``gpu_event`` is removed from the run), and the only GPU fact is the driver's
``NVRM: Xid ... 79`` line, turned into a ``gpu_event`` by the real kernel-log collector mapping
the line's PCI address to the GPU. The stored incident must name that node, GPU and XID 79.
"""

from __future__ import annotations

import time
from pathlib import Path

from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.collectors.kernel_log import (
    KernelLogCollector,
    KernelLogCollectorConfig,
    KernelLogGpu,
)
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.evaluate import rebase
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import Event, GpuEventEvent
from rankscope.simulation.faults import scenario_suite, simulate_with_faults
from rankscope.sinks.clickhouse import connect

#: the driver's Xid 79 form with pid and name (the same shape as NVIDIA/open-gpu-kernel-modules
#: reports and `tests/data/kernel_log/heldout.log`; Modal's GPU-health guide prints it verbatim:
#: "NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus.")
#: with our PCI address and pid
LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2210, name=python3, GPU has fallen off the bus."
PCI = "0000:3b:00.0"


def _kernel_event(
    tmp_path: Path, cluster: str, node: str, gpu: int, uuid: str, job: str, rank: int, ts: int
) -> GpuEventEvent:
    """The kernel-log collector on that node reads the line (file source, inventory mapping)."""
    log = tmp_path / "kern.log"
    log.write_text(f"Dec  4 15:00:00 {node} kernel: [ 812.504] {LINE}\n")
    jobs = JobRegistry()
    jobs.bind_gpu(gpu, JobBinding(job_id=job, rank=rank))
    config = KernelLogCollectorConfig(
        source="file",
        paths=[str(log)],
        from_start=True,
        use_nvml=False,
        inventory=[KernelLogGpu(pci_bus_id=PCI, index=gpu, uuid=uuid)],
    )
    collector = KernelLogCollector(config, EventFactory(cluster, node, jobs, clock_ns=lambda: ts))
    (event,) = collector.poll(ts)  # file mode stamps the read time: the fault's onset here
    assert isinstance(event, GpuEventEvent)
    return event


def test_root_cause_names_the_gpu_from_a_kernel_xid_line_alone(
    pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    cfg = pipeline_config
    by_name = {c.name: c for c in scenario_suite(16, [0], duration_s=40)}
    (case,) = rebase([by_name["gpu_fell_off_bus/s0"]], time.time_ns())
    events, (label,) = simulate_with_faults(case.config, case.faults)
    stream: list[Event] = list(events)
    (nvml_xid,) = [
        e for e in stream if isinstance(e, GpuEventEvent) and e.payload.event_type == "xid"
    ]
    assert (label.node, label.gpu, label.xid) == (nvml_xid.node, nvml_xid.gpu, 79)
    assert nvml_xid.gpu is not None and nvml_xid.rank is not None
    # NVML silent: no gpu_event at all (neither the XID nor "GPU not answering NVML")
    stream = [e for e in stream if not isinstance(e, GpuEventEvent)]
    kernel = _kernel_event(
        tmp_path,
        nvml_xid.cluster,
        nvml_xid.node,
        nvml_xid.gpu,
        nvml_xid.payload.gpu_uuid,
        nvml_xid.job_id,
        nvml_xid.rank,
        nvml_xid.ts,
    )
    assert (kernel.payload.pci_bus_id, kernel.payload.source) == (PCI, "file")
    assert (kernel.job_id, kernel.rank, kernel.payload.xid_bucket) == (
        case.config.job_id,
        nvml_xid.rank,
        "RESTART_BM",
    )
    stream.append(kernel)
    stream.sort(key=lambda e: e.ts)
    # the ranks die with NCCL timeouts after it: the symptoms root cause must explain
    assert any(e.kind == "comm_event" and e.ts > kernel.ts for e in stream)

    config = PublisherConfig(
        bootstrap=cfg.bootstrap, topic_prefix=cfg.topic_prefix, max_batch_event_span_s=1.0
    )
    with Publisher(config) as pub:
        pub.publish(stream)
        assert pub.flush(60).events_delivered == len(stream)
    with Pipeline(cfg) as pipeline:
        pipeline.wait_drained(timeout_s=300)

    client = connect(cfg.clickhouse_url)
    db = cfg.database
    incidents = client.query(
        f"SELECT cause_class, node, gpu, rank, device, xid, summary FROM {db}.incidents FINAL "
        "WHERE job_id = %(j)s",
        parameters={"j": case.config.job_id},
    ).result_rows
    assert len(incidents) == 1, incidents
    cause, node, gpu, rank, device, xid, summary = incidents[0]
    assert (cause, node, gpu, rank, xid) == ("gpu_xid", label.node, label.gpu, label.rank, 79)
    assert device == nvml_xid.payload.gpu_uuid
    assert f"GPU {label.gpu} on {label.node}" in summary and "(XID 79)" in summary
    # the one XID row stored is the kernel's, with its PCI address and catalogue bucket
    rows = client.query(
        f"SELECT source, pci_bus_id, xid, xid_bucket, gpu FROM {db}.gpu_events FINAL "
        "WHERE job_id = %(j)s",
        parameters={"j": case.config.job_id},
    ).result_rows
    assert rows == [("file", PCI, 79, "RESTART_BM", label.gpu)]
