"""dcgm-exporter as a GPU source: the parser on real page formats, the collector, and the page
served over HTTP through the agent, Kafka, the worker and the sink into ClickHouse.

Data: ``tests/data/dcgm/dcgm_exporter_metrics.txt`` is a page recorded on a Kubernetes node
(source named in the file). Smaller pages below reuse its label set and value formats, and the
MIG label shape (``GPU_I_PROFILE``/``GPU_I_ID``) of a recorded A800 page, and the DCGM blank
value of NVIDIA/dcgm-exporter's README (``DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794``).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankscope.collectors.agent import Agent, AgentConfig
from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.collectors.dcgm import (
    DcgmCollector,
    DcgmCollectorConfig,
    DcgmPageError,
    DcgmScrapeError,
    parse_page,
)
from rankscope.pipeline import Pipeline, PipelineConfig
from rankscope.schemas.events import GpuEventEvent, GpuSampleEvent, dump_events
from rankscope.sinks.clickhouse import connect
from tests.test_agent import StaticInventory, Tap, wait_for
from tests.test_agent_integration import _wait_drained

DATA = Path(__file__).parent / "data" / "dcgm"
PAGE = (DATA / "dcgm_exporter_metrics.txt").read_text()
A800_MIG = (DATA / "dcgm_exporter_a800_mig_excerpt.txt").read_text()
NODE = "lke529760-766837-0a634ab30000"  # the page's Hostname label
UUID0 = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"
T0 = 1_760_000_000 * 10**9

_LABELS = (
    'gpu="{gpu}",UUID="GPU-{gpu}",pci_bus_id="00000000:{bus}:00.0",device="nvidia{gpu}",'
    'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",container="{container}",'
    'namespace="{ns}",pod="{pod}",pod_uid=""'
)


def series(name: str, value: str, gpu: int = 0, pod: str = "", extra: str = "") -> str:
    labels = _LABELS.format(
        gpu=gpu,
        bus=f"{0x17 + gpu:02x}",
        node=NODE,
        container="trainer" if pod else "",
        ns="ml" if pod else "",
        pod=pod,
    )
    return f"{name}{{{labels}{extra}}} {value}\n"


def collector(
    pages: list[str] | str, jobs: JobRegistry | None = None, **cfg: object
) -> DcgmCollector:
    todo = [pages] if isinstance(pages, str) else list(pages)

    def fetch() -> str:
        page = todo.pop(0) if len(todo) > 1 else todo[0]
        if isinstance(page, Exception):
            raise page
        return page

    factory = EventFactory("c1", NODE, jobs=jobs or JobRegistry(default_job_id="node-job"))
    return DcgmCollector(DcgmCollectorConfig(**cfg), factory, fetch=fetch)


def samples(events: list[object]) -> list[GpuSampleEvent]:
    return [e for e in events if isinstance(e, GpuSampleEvent)]


# -- parser and mapping on the recorded page ---------------------------------------------------


def test_recorded_page_maps_to_one_sample_with_units_converted() -> None:
    (ev,) = samples(collector(PAGE).poll(T0))
    p = ev.payload
    assert (p.gpu_uuid, p.source, ev.gpu, ev.node) == (UUID0, "dcgm-exporter", 0, NODE)
    assert p.sm_util_pct == 0.0 and p.mem_util_pct == 0.0  # DCGM_FI_DEV_GPU_UTIL, not SM active
    assert (p.sm_clock_mhz, p.mem_clock_mhz, p.temperature_c) == (2310.0, 9001.0, 48.0)
    assert p.power_w == pytest.approx(40.979)
    assert p.energy_mj == 455_497_156  # a counter family: read despite the parser's _total
    assert p.mem_used_bytes == 1 * 2**20
    assert p.mem_total_bytes == (1 + 20015 + 457) * 2**20  # used + free + reserved
    assert p.gr_engine_active_pct == pytest.approx(0.4656)  # ratio 0.004656 -> percent
    assert p.dram_active_pct == pytest.approx(0.3074)
    assert p.tensor_active_pct == 0.0
    assert p.pcie_tx_bytes_per_s == 78_398_480 and p.pcie_rx_bytes_per_s == 45_987_793
    assert p.remapped_rows == 0 and p.pcie_replay_count == 0
    assert p.sm_active_pct is None and p.sm_occupancy_pct is None  # not on this page
    assert p.ecc_sbe_total is None and p.throttle_reasons is None
    dump_events([ev])  # wire-valid


def test_pod_labels_become_the_job_and_rank_the_agent_stamps() -> None:
    jobs = JobRegistry(default_job_id="node-job")
    (ev,) = samples(collector(PAGE, jobs=jobs).poll(T0))
    # a Deployment pod <replicaset>-<5 chars>: the job is the owner, a one-pod job's rank
    assert (ev.job_id, ev.rank, ev.local_rank) == ("cuda-75454ffb9f", 0, 0)
    binding = jobs.for_gpu(0)
    assert binding is not None and binding.pod == "cuda-75454ffb9f-8ljq7"
    assert jobs.node_job() == "cuda-75454ffb9f"  # node-level events (fabric) follow


def test_training_operator_pods_get_global_ranks() -> None:
    page = "".join(
        series("DCGM_FI_DEV_GPU_UTIL", "97", gpu=g, pod=f"llama-worker-{1 + g // 2}")
        for g in range(4)
    )
    events = samples(collector(page).poll(T0))
    got = [(e.gpu, e.job_id, e.rank, e.local_rank) for e in events]
    # two pods of two GPUs each on this node: worker-1 holds ranks 2,3, worker-2 ranks 4,5
    assert got == [(0, "llama", 2, 0), (1, "llama", 3, 1), (2, "llama", 4, 0), (3, "llama", 5, 1)]


def test_a_binding_from_process_environments_wins_over_pod_labels() -> None:
    jobs = JobRegistry()
    jobs.bind_gpu(0, JobBinding("slurm-77", rank=13, local_rank=0))  # the NVML collector's
    (ev,) = samples(collector(PAGE, jobs=jobs).poll(T0))
    assert (ev.job_id, ev.rank) == ("slurm-77", 13)
    assert jobs.for_gpu(0) == JobBinding("slurm-77", rank=13, local_rank=0)


def test_profiling_fields_where_present() -> None:
    page = (
        series("DCGM_FI_DEV_GPU_UTIL", "100")
        + series("DCGM_FI_PROF_SM_ACTIVE", "0.823")
        + series("DCGM_FI_PROF_SM_OCCUPANCY", "0.41")
        + series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.612")
        + series("DCGM_FI_PROF_DRAM_ACTIVE", "1.0000004")  # a ratio a hair above 1
        + series("DCGM_FI_PROF_NVLINK_TX_BYTES", "123456789")
        + series("DCGM_FI_PROF_NVLINK_RX_BYTES", "2.5e9")
        + series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "1")
        + series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "2")
        + series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "3")
        + series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "4")
    )
    (ev,) = samples(collector(page).poll(T0))
    p = ev.payload
    assert p.sm_util_pct == 100.0 and p.sm_active_pct == pytest.approx(82.3)
    assert p.sm_occupancy_pct == pytest.approx(41.0)
    assert p.tensor_active_pct == pytest.approx(61.2)
    assert p.dram_active_pct == 100.0
    assert p.nvlink_tx_bytes_per_s == 123_456_789 and p.nvlink_rx_bytes_per_s == 2.5e9
    assert p.throttle_reasons == 1 and p.ecc_dbe_total == 2
    assert p.nvlink_errors_total == 7  # replay + CRC flit, as the NVML collector sums them


def test_missing_fields_nan_blanks_and_unknown_metrics() -> None:
    page = (
        "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n"
        "# TYPE node_cpu_seconds_total counter\n"
        'node_cpu_seconds_total{cpu="0",mode="idle"} 1.5e6\n'
        + series("DCGM_FI_DEV_GPU_UTIL", "55")
        + series("DCGM_FI_DEV_POWER_USAGE", "NaN")
        + series("DCGM_FI_DEV_MEMORY_TEMP", "9223372036854775794")  # DCGM's int64 blank
        + series("DCGM_FI_DEV_GPU_TEMP", "140737488355328.000000")  # DCGM's fp64 blank
        + series("DCGM_FI_DEV_FB_USED", "1024")  # FB_FREE missing: no total
        + series("DCGM_FI_DEV_ENC_UTIL", "3")  # a DCGM field we do not map
        + series("DCGM_FI_DEV_GPU_UTIL", "60", gpu=1)
        + series("DCGM_FI_PROF_SM_ACTIVE", "0.5", gpu=2)  # no utilization: no sample
        + series(
            "DCGM_FI_PROF_SM_ACTIVE", "0.3", extra=',GPU_I_PROFILE="2g.20gb",GPU_I_ID="3"'
        )  # a MIG instance's series
    )
    parsed = parse_page(page)
    assert parsed.other_metrics == 1 and parsed.blank_values == 3 and parsed.mig_series == 1
    c = collector(page)
    events = samples(c.poll(T0))
    assert [(e.gpu, e.payload.sm_util_pct) for e in events] == [(0, 55.0), (1, 60.0)]
    p = events[0].payload
    assert p.power_w is None and p.temperature_c is None and p.sm_active_pct is None
    assert p.mem_used_bytes == 2**30 and p.mem_total_bytes is None
    assert c.stats.no_utilization == 1


def test_recorded_8_gpu_page_with_a_mig_gpu() -> None:
    parsed = parse_page(A800_MIG)
    assert sorted(parsed.gpus) == list(range(8))
    assert parsed.mig_series == 21  # GPU 0's series, once per GPU instance (3, 5, 6)
    gpu0 = parsed.gpus[0]
    assert gpu0.mig and gpu0.values["DCGM_FI_DEV_SM_CLOCK"] == 1410.0  # device value, read once
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" not in gpu0.values  # per instance: not the GPU's

    c = collector(A800_MIG)
    events = samples(c.poll(T0))
    # MIG mode has no GPU utilization (as in NVML): GPUs 1-7 get samples, GPU 0 none
    assert [e.gpu for e in events] == list(range(1, 8))
    assert c.stats.no_utilization == 1
    p = events[0].payload
    assert (p.gpu_uuid, p.sm_clock_mhz, p.temperature_c) == (
        "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6",
        210.0,
        27.0,
    )
    assert p.energy_mj == 187_554_325 and p.mem_total_bytes == (81226 + 2) * 2**20
    assert events[0].job_id == "node-job" and events[0].rank is None  # no pod labels, no binding

    xid48 = A800_MIG.replace(
        'GPU_I_ID="3",Hostname="msxf-hpc-64-35-ai",DCGM_FI_DRIVER_VERSION="535.129.03",'
        'DCGM_FI_PROCESS_NAME="/usr/bin/dcgm-exporter"} 0\n',
        'GPU_I_ID="3",Hostname="msxf-hpc-64-35-ai",DCGM_FI_DRIVER_VERSION="535.129.03",'
        'DCGM_FI_PROCESS_NAME="/usr/bin/dcgm-exporter"} 48\n',
        1,
    )
    c = collector([A800_MIG, xid48])
    c.poll(T0)
    (ev,) = [e for e in c.poll(T0 + 1) if isinstance(e, GpuEventEvent)]
    assert (ev.gpu, ev.payload.xid) == (0, 48)  # the MIG GPU's XID still reaches us


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        ("<html><body><h1>502 Bad Gateway</h1></body></html>\n", "not Prometheus text"),
        ('# TYPE up gauge\nup{job="node"} 1\n', "no DCGM_FI_\\* metric"),
        ("", "no DCGM_FI_\\* metric"),
    ],
)
def test_a_page_that_is_not_dcgm_is_a_one_line_error_and_the_collector_goes_on(
    page: str, reason: str
) -> None:
    c = collector([page, PAGE])
    with pytest.raises(DcgmPageError, match=reason) as info:
        c.poll(T0)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300
    assert len(samples(c.poll(T0 + 10**9))) == 1  # the next scrape works
    assert c.stats.page_errors == 1 and c.stats.samples == 1


def test_unreachable_endpoint_is_a_one_line_error() -> None:
    c = DcgmCollector(
        DcgmCollectorConfig(url="http://127.0.0.1:9/metrics", timeout_s=2),
        EventFactory("c1", NODE),
    )
    with pytest.raises(DcgmScrapeError, match="unreachable") as info:
        c.poll(T0)
    assert "\n" not in str(info.value)


def test_xid_gauge_changes_become_gpu_events() -> None:
    def page(code: int, text: str) -> str:
        extra = f',err_code="{code}",err_msg="{text}"'
        return series("DCGM_FI_DEV_GPU_UTIL", "90") + series(
            "DCGM_FI_DEV_XID_ERRORS", str(code), extra=extra
        )

    c = collector([page(13, "Graphics Engine Exception"), page(13, "x"), page(79, "fell off")])
    assert not [e for e in c.poll(T0) if isinstance(e, GpuEventEvent)]  # first value: baseline
    assert not [e for e in c.poll(T0 + 1) if isinstance(e, GpuEventEvent)]  # unchanged
    (ev,) = [e for e in c.poll(T0 + 2) if isinstance(e, GpuEventEvent)]
    p = ev.payload
    assert (p.event_type, p.xid, p.source, p.pci_bus_id) == (
        "xid",
        79,
        "dcgm-exporter",
        "0000:17:00.0",
    )
    assert "13 -> 79" in p.message and "fell off" in p.message
    assert p.xid_bucket == "RESTART_BM"  # the XID catalogue's bucket, as from NVML and the kernel


def test_config_refuses_a_pod_pattern_without_a_job_group() -> None:
    with pytest.raises(ValueError, match="no \\(\\?P<job>"):
        DcgmCollectorConfig(pod_patterns=[r"^(?P<name>.+)$"])
    with pytest.raises(ValueError, match="http:// or https://"):
        DcgmCollectorConfig(url="file:///etc/shadow")  # urllib would read local files


# -- acceptance: the page over HTTP, through the agent and the pipeline into ClickHouse -------


class _PageHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def exporter() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PageHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_served_page_reaches_clickhouse_with_job_and_rank(
    pipeline_config: PipelineConfig, tmp_path: Path, exporter: str
) -> None:
    cfg = pipeline_config
    config = AgentConfig.model_validate(
        {
            "cluster": "it",
            "node": NODE,
            "kafka": {"bootstrap": cfg.bootstrap, "topic_prefix": cfg.topic_prefix, "linger_ms": 5},
            "spool": {
                "dir": str(tmp_path / "spool"),
                "max_bytes": 8 << 20,
                "segment_bytes": 1 << 20,
            },
            "heartbeat_interval_s": 1,
            "inventory_interval_s": 60,
            "shutdown_timeout_s": 20,
            "dcgm": {"url": exporter, "interval_s": 0.2},
        }
    )
    tap = Tap()
    agent = Agent(config, inventory=StaticInventory(), tap=tap)
    assert [c.name for c in agent.collectors] == ["dcgm"]  # built from the config section
    agent.start()
    try:
        wait_for(lambda: len(tap.of("gpu_sample")) >= 3, 30, "3 dcgm samples")
    finally:
        stats = agent.stop()
    assert stats.pending == 0 and stats.collector_errors == 0, stats
    sampled = len(tap.of("gpu_sample"))

    with Pipeline(cfg) as pipeline:
        _wait_drained(pipeline, 120)

    rows = (
        connect(cfg.clickhouse_url)
        .query(
            "SELECT job_id, rank, local_rank, gpu, gpu_uuid, source, count(), "
            "any(tensor_active_pct), any(gr_engine_active_pct), any(dram_active_pct), "
            f"any(pcie_tx_bytes_per_s), any(sm_active_pct) FROM {cfg.database}.gpu_samples FINAL "
            "GROUP BY job_id, rank, local_rank, gpu, gpu_uuid, source"
        )
        .result_rows
    )
    assert [r[:7] for r in rows] == [
        ("cuda-75454ffb9f", 0, 0, 0, UUID0, "dcgm-exporter", sampled)
    ], rows
    tensor, gr_engine, dram, pcie_tx, sm_active = rows[0][7:]
    assert tensor == 0.0 and pcie_tx == 78_398_480.0  # profiling fields stored
    assert gr_engine == pytest.approx(0.4656, rel=1e-6)  # Float32 columns
    assert dram == pytest.approx(0.3074, rel=1e-6)
    assert sm_active is None  # not on the recorded page: NULL, not 0
