"""GPU collector against an injected NVML table (tests/fakes/nvml.py): exact events asserted."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest

from rankscope.collectors.base import EventFactory, JobRegistry
from rankscope.collectors.gpu import (
    GpuCollector,
    GpuCollectorConfig,
    GpuCollectorUnavailable,
    NvmlApi,
    create_gpu_collector,
    real_nvml,
)
from rankscope.schemas.events import (
    EVENT_LIST_ADAPTER,
    Event,
    FabricEventEvent,
    GpuEventEvent,
    GpuSampleEvent,
    dump_events,
)
from tests.fakes.nvml import FakeGpu, FakeNvml, cycle_cost, write_proc_environ

XID = pynvml.nvmlEventTypeXidCriticalError
SBE = pynvml.nvmlEventTypeSingleBitEccError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
DEADLINE_S = 5.0


# --- helpers -----------------------------------------------------------------------------------


def make(nv: FakeNvml, proc: Path, **cfg: Any) -> tuple[GpuCollector, EventFactory]:
    cfg.setdefault("events", False)
    factory = EventFactory("c1", "node-a", JobRegistry())
    config = GpuCollectorConfig(proc_root=proc, **cfg)
    return create_gpu_collector(config, factory, nv), factory


def valid(events: Sequence[Event]) -> list[Event]:
    """Every event survives the wire format unchanged (the models validate on the way in)."""
    assert EVENT_LIST_ADAPTER.validate_json(dump_events(list(events))) == list(events)
    return list(events)


def samples(events: Sequence[Event]) -> dict[int, GpuSampleEvent]:
    out = {e.gpu: e for e in events if isinstance(e, GpuSampleEvent)}
    assert len(out) == sum(isinstance(e, GpuSampleEvent) for e in events)  # one per GPU
    return out  # type: ignore[return-value]


def gpu_events(events: Sequence[Event]) -> list[GpuEventEvent]:
    return [e for e in events if isinstance(e, GpuEventEvent)]


def fabric_events(events: Sequence[Event]) -> list[FabricEventEvent]:
    return [e for e in events if isinstance(e, FabricEventEvent)]


def bind(nv: FakeNvml, proc: Path, job: str = "4242", base_rank: int = 8) -> None:
    """Process 1000+i on GPU i with Slurm/torchrun environment (rank base_rank+i)."""
    for g in nv.gpus:
        pid = 1000 + g.index
        g.pids = [pid]
        write_proc_environ(
            proc,
            pid,
            {
                "PATH": "/usr/bin",
                "SLURM_JOB_ID": job,
                "RANK": str(base_rank + g.index),
                "LOCAL_RANK": str(g.index),
            },
        )


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    p = tmp_path / "proc"
    p.mkdir()
    return p


# --- samples and process mapping ---------------------------------------------------------------


def test_samples_carry_job_and_rank_from_proc(proc: Path) -> None:
    nv = FakeNvml(8)
    bind(nv, proc)
    nv.gpus[3].power_mw = 412_345
    nv.gpus[3].reasons = pynvml.nvmlClocksEventReasonGpuIdle
    c, _ = make(nv, proc)
    t = time.time_ns()
    evs = valid(c.poll(t))
    s = samples(evs)
    assert sorted(s) == list(range(8))
    assert len(evs) == 8  # nothing else on a healthy first poll
    for i, e in s.items():
        assert (e.job_id, e.rank, e.local_rank, e.gpu, e.node, e.ts) == (
            "4242",
            8 + i,
            i,
            i,
            "node-a",
            t,
        )
        assert e.payload.gpu_uuid == nv.gpus[i].uuid
    p = s[3].payload
    assert p.power_w == pytest.approx(412.345)
    assert (p.sm_util_pct, p.mem_util_pct, p.sm_clock_mhz, p.mem_clock_mhz) == (90, 40, 1980, 2619)
    assert (p.mem_used_bytes, p.mem_total_bytes) == (60 * 2**30, 141 * 2**30)
    assert (p.energy_mj, p.temperature_c, p.throttle_reasons) == (10_000_000, 55, 1)
    assert (p.pcie_replay_count, p.ecc_sbe_total, p.ecc_dbe_total, p.remapped_rows) == (0, 0, 0, 0)
    assert p.nvlink_errors_total == 0


def test_process_mapping_cache_unbind_and_unreadable_environ(proc: Path) -> None:
    nv = FakeNvml(3)
    bind(nv, proc, job="777")
    # GPU 0 also runs a helper process without a rank: the ranked process wins
    write_proc_environ(proc, 2000, {"SLURM_JOB_ID": "777"})
    nv.gpus[0].pids = [2000, 1000]
    # GPU 2's process cannot be read (gone / not ours): skipped quietly
    nv.gpus[2].pids = [3000]
    # non-UTF-8 bytes in an environment do not break the parse
    (proc / "1001" / "environ").write_bytes(
        b"JUNK=\xff\xfe\0SLURM_JOB_ID=777\0RANK=9\0LOCAL_RANK=1\0"
    )
    c, factory = make(nv, proc)
    s = samples(valid(c.poll(time.time_ns())))
    assert (s[0].rank, s[0].local_rank, s[0].job_id) == (8, 0, "777")
    assert (s[1].rank, s[1].local_rank) == (9, 1)
    assert (s[2].rank, s[2].job_id) == (None, "777")  # node's job, no rank
    assert factory.jobs.for_gpu(2) is None
    assert c.cached_pids == {1000, 1001, 2000, 3000}

    # environ is read once per pid: a change on disk is not seen while the pid lives
    write_proc_environ(proc, 1001, {"SLURM_JOB_ID": "777", "RANK": "99", "LOCAL_RANK": "1"})
    assert samples(c.poll(time.time_ns()))[1].rank == 9

    # the process leaves GPU 1: unbound, cache entry dropped
    nv.gpus[1].pids = []
    s = samples(valid(c.poll(time.time_ns())))
    assert (s[1].rank, s[1].local_rank) == (None, None)
    assert factory.jobs.for_gpu(1) is None
    assert c.cached_pids == {1000, 2000, 3000}

    # a new process with that pid is read afresh
    nv.gpus[1].pids = [1001]
    assert samples(c.poll(time.time_ns()))[1].rank == 99


def test_map_processes_off_reads_no_processes(proc: Path) -> None:
    nv = FakeNvml(2)
    bind(nv, proc)
    c, _ = make(nv, proc, map_processes=False)
    s = samples(valid(c.poll(time.time_ns())))
    assert s[0].rank is None
    assert nv.calls["nvmlDeviceGetComputeRunningProcesses"] == 0


# --- NotSupported and transient fields ---------------------------------------------------------

NOT_SUPPORTED_FNS = (
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetComputeRunningProcesses",
)


def test_not_supported_fields_are_none_and_not_retried(proc: Path) -> None:
    nv = FakeNvml([FakeGpu(0, unsupported=set(NOT_SUPPORTED_FNS))])
    c, _ = make(nv, proc)
    first = samples(valid(c.poll(time.time_ns())))[0].payload
    after_first = {fn: nv.calls[fn] for fn in NOT_SUPPORTED_FNS}
    # each failing call made once (NVLink: once per counter type, ECC: once per error type)
    assert after_first == {
        "nvmlDeviceGetTotalEnergyConsumption": 1,
        "nvmlDeviceGetPcieReplayCounter": 1,
        "nvmlDeviceGetRemappedRows": 1,
        "nvmlDeviceGetTotalEccErrors": 2,
        "nvmlDeviceGetNvLinkErrorCounter": 4,
        "nvmlDeviceGetComputeRunningProcesses": 1,
    }
    for _ in range(3):
        p = samples(valid(c.poll(time.time_ns())))[0].payload
        assert p == first
    assert {fn: nv.calls[fn] for fn in NOT_SUPPORTED_FNS} == after_first
    assert (p.energy_mj, p.pcie_replay_count, p.remapped_rows) == (None, None, None)
    assert (p.ecc_sbe_total, p.ecc_dbe_total, p.nvlink_errors_total) == (None, None, None)
    assert (p.sm_util_pct, p.power_w, p.temperature_c) == (90, 650, 55)  # the rest is there
    assert c.describe()[0]["unsupported"] == sorted(
        [
            "ecc_dbe_total",
            "ecc_sbe_total",
            "energy_mj",
            "nvlink_dl_crc_data",
            "nvlink_dl_crc_flit",
            "nvlink_dl_recovery",
            "nvlink_dl_replay",
            "pcie_replay_count",
            "processes",
            "remapped_rows",
        ]
    )


def test_transient_field_error_is_none_then_retried(proc: Path) -> None:
    nv = FakeNvml(1)
    nv.gpus[0].errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NO_DATA
    c, _ = make(nv, proc)
    evs = valid(c.poll(time.time_ns()))
    assert samples(evs)[0].payload.power_w is None
    assert gpu_events(evs) == []  # not a lost GPU
    del nv.gpus[0].errors["nvmlDeviceGetPowerUsage"]
    assert samples(c.poll(time.time_ns()))[0].payload.power_w == 650
    assert nv.calls["nvmlDeviceGetPowerUsage"] == 2


def test_legacy_throttle_reasons_name_used_on_old_drivers(proc: Path) -> None:
    nv = FakeNvml(1)
    nv.gpus[0].errors["nvmlDeviceGetCurrentClocksEventReasons"] = (
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    )
    nv.gpus[0].reasons = pynvml.nvmlClocksThrottleReasonHwSlowdown
    c, _ = make(nv, proc)
    evs = valid(c.poll(time.time_ns()))
    assert samples(evs)[0].payload.throttle_reasons == pynvml.nvmlClocksThrottleReasonHwSlowdown
    assert [e.payload.event_type for e in gpu_events(evs)] == ["throttle_start"]
    c.poll(time.time_ns())
    assert nv.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert nv.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_utilization_not_supported_gives_events_but_no_sample(proc: Path) -> None:
    nv = FakeNvml(2)
    nv.gpus[1].unsupported.add("nvmlDeviceGetUtilizationRates")  # e.g. MIG mode
    c, _ = make(nv, proc)
    assert sorted(samples(valid(c.poll(time.time_ns())))) == [0]
    nv.gpus[1].ecc_dbe = 1
    evs = valid(c.poll(time.time_ns()))
    assert [(e.gpu, e.payload.event_type) for e in gpu_events(evs)] == [(1, "ecc")]
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == 2 + 1  # GPU 0 twice, GPU 1 once


def test_poll_survives_a_bad_value_on_one_gpu(proc: Path) -> None:
    nv = FakeNvml(3)
    nv.gpus[1].power_mw = -5  # fails GpuSample validation (power_w >= 0)
    c, _ = make(nv, proc)
    assert sorted(samples(valid(c.poll(time.time_ns())))) == [0, 2]
    nv.gpus[1].power_mw = 500_000
    assert sorted(samples(c.poll(time.time_ns()))) == [0, 1, 2]


# --- state-change events -----------------------------------------------------------------------


def test_throttle_start_and_stop_name_the_reasons(proc: Path) -> None:
    nv = FakeNvml(1)
    bind(nv, proc)
    g = nv.gpus[0]
    c, _ = make(nv, proc)

    def step(reasons: int) -> list[tuple[str, str]]:
        g.reasons = reasons
        evs = valid(c.poll(time.time_ns()))
        assert samples(evs)[0].payload.throttle_reasons == reasons
        for e in gpu_events(evs):
            assert (e.gpu, e.rank, e.job_id, e.payload.gpu_uuid) == (0, 8, "4242", g.uuid)
        return [(e.payload.event_type, e.payload.message) for e in gpu_events(evs)]

    idle = pynvml.nvmlClocksEventReasonGpuIdle
    apps = pynvml.nvmlClocksEventReasonApplicationsClocksSetting
    cap = pynvml.nvmlClocksEventReasonSwPowerCap
    hot = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert step(0) == []
    assert step(idle | apps) == []  # not interesting
    assert step(cap | idle) == [
        ("throttle_start", "clocks throttled: sw_power_cap (active: sw_power_cap)")
    ]
    assert step(cap) == []  # same interesting set
    assert step(cap | hot) == [
        (
            "throttle_start",
            "clocks throttled: hw_thermal_slowdown (active: sw_power_cap, hw_thermal_slowdown)",
        )
    ]
    assert step(idle) == [
        ("throttle_stop", "throttle ended: sw_power_cap, hw_thermal_slowdown (active: none)")
    ]
    assert step(idle) == []


def test_ecc_increase_gives_one_event_with_the_delta(proc: Path) -> None:
    nv = FakeNvml(1)
    g = nv.gpus[0]
    g.ecc_sbe, g.ecc_dbe = 3, 0
    c, _ = make(nv, proc)
    assert gpu_events(valid(c.poll(time.time_ns()))) == []  # baseline

    g.ecc_dbe = 2
    evs = valid(c.poll(time.time_ns()))
    assert [
        (e.payload.event_type, e.payload.count, e.payload.message) for e in gpu_events(evs)
    ] == [("ecc", 2, "double-bit (uncorrected) ECC errors +2 (volatile total 2)")]
    assert samples(evs)[0].payload.ecc_dbe_total == 2

    g.ecc_sbe = 10
    evs = valid(c.poll(time.time_ns()))
    assert [(e.payload.count, e.payload.message) for e in gpu_events(evs)] == [
        (7, "single-bit (corrected) ECC errors +7 (volatile total 10)")
    ]
    assert gpu_events(c.poll(time.time_ns())) == []  # no change, no event

    g.ecc_sbe = g.ecc_dbe = 0  # driver reload: new baseline, nothing negative
    assert gpu_events(valid(c.poll(time.time_ns()))) == []
    g.ecc_dbe = 1
    assert [e.payload.count for e in gpu_events(c.poll(time.time_ns()))] == [1]


def test_remapped_rows_sum_and_pending_event(proc: Path) -> None:
    nv = FakeNvml(1)
    nv.gpus[0].remap = (2, 1, 0, 0)
    c, _ = make(nv, proc)
    evs = valid(c.poll(time.time_ns()))
    assert samples(evs)[0].payload.remapped_rows == 3
    nv.gpus[0].remap = (2, 2, 1, 0)
    evs = valid(c.poll(time.time_ns()))
    assert [(e.payload.event_type, e.payload.message) for e in gpu_events(evs)] == [
        ("other", "row remapping pending: GPU reset required")
    ]
    assert gpu_events(c.poll(time.time_ns())) == []


def test_nvlink_down_and_error_increase(proc: Path) -> None:
    nv = FakeNvml(2)
    bind(nv, proc)
    g = nv.gpus[1]
    g.nvlink_state[17] = 0  # never connected: no counters read, no event
    c, _ = make(nv, proc)
    assert c.describe()[1]["nvlinks"] == list(range(18))
    assert fabric_events(valid(c.poll(time.time_ns()))) == []

    g.nvlink_state[3] = 0
    evs = valid(c.poll(time.time_ns()))
    (down,) = fabric_events(evs)
    assert (down.gpu, down.rank, down.job_id) == (1, 9, "4242")
    p = down.payload
    assert (p.event_type, p.device, p.port, p.old_state, p.new_state) == (
        "nvlink_down",
        g.uuid,
        3,
        "active",
        "inactive",
    )
    assert fabric_events(c.poll(time.time_ns())) == []  # still down: not repeated

    g.nvlink_state[3] = 1
    (up,) = fabric_events(valid(c.poll(time.time_ns())))
    assert (up.payload.event_type, up.payload.port, up.payload.new_state) == (
        "state_change",
        3,
        "active",
    )

    g.nvlink_errors[(5, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)] = 7
    evs = valid(c.poll(time.time_ns()))
    (err,) = fabric_events(evs)
    p = err.payload
    assert (p.event_type, p.device, p.port, p.counter, p.delta) == (
        "nvlink_error",
        g.uuid,
        5,
        "dl_crc_flit",
        7,
    )
    assert samples(evs)[1].payload.nvlink_errors_total == 7
    assert samples(evs)[0].payload.nvlink_errors_total == 0

    g.nvlink_errors[(5, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 3
    g.nvlink_errors[(2, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY)] = 1
    evs = valid(c.poll(time.time_ns()))
    assert sorted(
        (e.payload.port, e.payload.counter, e.payload.delta) for e in fabric_events(evs)
    ) == [
        (2, "dl_recovery", 1),
        (5, "dl_replay", 3),
    ]
    assert samples(evs)[1].payload.nvlink_errors_total == 11


def test_nvlink_every_n_polls(proc: Path) -> None:
    nv = FakeNvml(1)
    nv.gpus[0].nvlink_errors[(0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 4
    c, _ = make(nv, proc, nvlink_every=3)
    setup_calls = nv.calls["nvmlDeviceGetNvLinkState"]
    totals = [samples(c.poll(time.time_ns()))[0].payload.nvlink_errors_total for _ in range(4)]
    assert totals == [4, 4, 4, 4]  # repeated between reads
    assert nv.calls["nvmlDeviceGetNvLinkState"] - setup_calls == 2 * 18  # polls 1 and 4


def test_no_nvlink_gpu(proc: Path) -> None:
    nv = FakeNvml([FakeGpu(0, unsupported={"nvmlDeviceGetNvLinkState"})])
    c, _ = make(nv, proc)
    assert c.describe()[0]["nvlinks"] == []
    assert nv.calls["nvmlDeviceGetNvLinkState"] == 1  # stopped at link 0
    assert samples(c.poll(time.time_ns()))[0].payload.nvlink_errors_total is None


# --- GPU not answering -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_NO_DATA],
)
def test_gpu_unresponsive_once_then_recovered(proc: Path, code: int) -> None:
    nv = FakeNvml(4)
    bind(nv, proc)
    c, _ = make(nv, proc)
    samples(c.poll(time.time_ns()))

    nv.gpus[2].errors["nvmlDeviceGetUtilizationRates"] = code
    seen: list[Event] = []
    for _ in range(3):
        evs = valid(c.poll(time.time_ns()))
        assert sorted(samples(evs)) == [0, 1, 3]  # no sample for the silent GPU
        seen += evs
    (ev,) = gpu_events(seen)
    assert (ev.payload.event_type, ev.gpu, ev.rank, ev.job_id) == (
        "gpu_unresponsive",
        2,
        10,
        "4242",
    )
    assert ev.payload.gpu_uuid == nv.gpus[2].uuid
    assert f"({code})" in ev.payload.message
    assert c.describe()[2]["responsive"] is False

    del nv.gpus[2].errors["nvmlDeviceGetUtilizationRates"]
    evs = valid(c.poll(time.time_ns()))
    assert [(e.payload.event_type, e.gpu) for e in gpu_events(evs)] == [("gpu_recovered", 2)]
    assert sorted(samples(evs)) == [0, 1, 2, 3]
    assert gpu_events(c.poll(time.time_ns())) == []


def test_gpu_fallen_off_the_bus_all_calls_fail(proc: Path) -> None:
    nv = FakeNvml(2)
    c, _ = make(nv, proc)
    c.poll(time.time_ns())
    nv.gpus[0].lost = True
    nv.calls.clear()
    evs = [e for _ in range(5) for e in valid(c.poll(time.time_ns()))]
    assert [(e.payload.event_type, e.gpu) for e in gpu_events(evs)] == [("gpu_unresponsive", 0)]
    assert "GPU is lost" in gpu_events(evs)[0].payload.message
    assert sorted({e.gpu for e in evs if isinstance(e, GpuSampleEvent)}) == [1]
    # while lost, one cheap call per cycle on that GPU (5 cycles) + GPU 1's normal one
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == 5 + 5


def test_gpu_lost_at_start_reported_once_then_attached(proc: Path) -> None:
    nv = FakeNvml(2)
    nv.handle_errors[1] = pynvml.NVML_ERROR_GPU_IS_LOST
    c, _ = make(nv, proc)
    evs = valid(c.poll(time.time_ns())) + valid(c.poll(time.time_ns()))
    assert [(e.payload.event_type, e.gpu) for e in gpu_events(evs)] == [("gpu_unresponsive", 1)]
    assert sorted({e.gpu for e in evs if isinstance(e, GpuSampleEvent)}) == [0]
    del nv.handle_errors[1]
    evs = valid(c.poll(time.time_ns()))
    assert [(e.payload.event_type, e.gpu) for e in gpu_events(evs)] == [("gpu_recovered", 1)]
    assert samples(evs)[1].payload.gpu_uuid == nv.gpus[1].uuid


# --- the XID event thread ----------------------------------------------------------------------


class Sink:
    """emit() target: events land in a queue the test reads with deadlines."""

    def __init__(self) -> None:
        self.q: queue.Queue[Event] = queue.Queue()

    def __call__(self, events: Sequence[Event]) -> None:
        for e in valid(events):
            self.q.put(e)

    def take(self, n: int) -> list[Event]:
        deadline = time.monotonic() + DEADLINE_S
        return [self.q.get(timeout=max(0.0, deadline - time.monotonic())) for _ in range(n)]

    def empty_for(self, seconds: float) -> bool:
        try:
            self.q.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


def wait_until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_each_xid_is_its_own_event(proc: Path) -> None:
    nv = FakeNvml(4)
    bind(nv, proc)
    c, _ = make(nv, proc, events=True, event_wait_ms=100)
    c.poll(time.time_ns())  # job/rank bindings
    sink = Sink()
    before = time.time_ns()
    c.start(sink)
    try:
        assert nv.registered() == {i: XID | SBE | DBE for i in range(4)}  # not PState
        nv.queue_xid(1, 79)
        nv.queue_xid(1, 79)
        nv.queue_xid(3, 74)
        nv.queue_ecc(2, double=True)
        got = sink.take(4)
    finally:
        c.stop()
    after = time.time_ns()
    assert all(isinstance(e, GpuEventEvent) for e in got)
    assert [
        (e.gpu, e.rank, e.payload.event_type, e.payload.xid, e.payload.count, e.payload.gpu_uuid)
        for e in got  # type: ignore[union-attr]
    ] == [
        (1, 9, "xid", 79, 1, nv.gpus[1].uuid),
        (1, 9, "xid", 79, 1, nv.gpus[1].uuid),
        (3, 11, "xid", 74, 1, nv.gpus[3].uuid),
        (2, 10, "ecc", None, 1, nv.gpus[2].uuid),
    ]
    assert got[3].payload.message == "nvml event: double-bit ECC error"  # type: ignore[union-attr]
    # the XID catalogue's bucket travels with NVML's XIDs too (none for a non-XID event)
    buckets = [e.payload.xid_bucket for e in got]  # type: ignore[union-attr]
    assert buckets == ["RESTART_BM", "RESTART_BM", "WORKFLOW_NVLINK_ERR", ""]
    assert all(before <= e.ts <= after for e in got)
    assert len({e.event_id for e in got}) == 4


def test_stop_ends_the_thread_promptly_and_frees_the_set(proc: Path) -> None:
    nv = FakeNvml(2)
    c, _ = make(nv, proc, events=True, event_wait_ms=200)
    c.start(Sink())
    wait_until(nv.waiting.is_set, "the thread to block in nvmlEventSetWait_v2")
    t0 = time.monotonic()
    c.stop()
    elapsed = time.monotonic() - t0
    assert elapsed < 0.2 + 0.5
    assert not [t for t in threading.enumerate() if t.name == "rankscope-gpu-events"]
    assert nv.freed_sets == [1]
    assert (nv.init_count, nv.shutdown_count) == (1, 1)
    c.stop()  # idempotent
    assert nv.shutdown_count == 1


def test_events_not_supported_on_one_gpu_skips_it(proc: Path) -> None:
    nv = FakeNvml(3)
    nv.gpus[1].unsupported.add("nvmlDeviceGetSupportedEventTypes")
    nv.gpus[2].supported_events = SBE | DBE  # no XID on this one: ECC still registered
    c, _ = make(nv, proc, events=True, event_wait_ms=50)
    sink = Sink()
    c.start(sink)
    try:
        assert nv.registered() == {0: XID | SBE | DBE, 2: SBE | DBE}
        nv.queue_xid(0, 13)
        (e,) = sink.take(1)
        assert (e.gpu, e.payload.xid) == (0, 13)  # type: ignore[union-attr]
    finally:
        c.stop()


def test_no_gpu_with_events_says_xid_monitoring_is_off(proc: Path) -> None:
    nv = FakeNvml(2)
    for g in nv.gpus:
        g.supported_events = 0
    c, _ = make(nv, proc, events=True, event_wait_ms=50)
    sink = Sink()
    c.start(sink)
    (e,) = sink.take(1)
    assert (e.payload.event_type, e.payload.message) == (  # type: ignore[union-attr]
        "other",
        "XID monitoring not started: no GPU supports XID events",
    )
    assert nv.freed_sets == [1]
    c.stop()


def test_wait_errors_rebuild_the_set_without_the_lost_gpu(proc: Path) -> None:
    nv = FakeNvml(3)
    c, _ = make(nv, proc, events=True, event_wait_ms=50)
    sink = Sink()
    c.start(sink)
    try:
        nv.gpus[0].lost = True
        with nv._lock:
            nv.wait_errors.extend([pynvml.NVML_ERROR_GPU_IS_LOST] * 5)
        wait_until(lambda: nv.freed_sets == [1] and len(nv.event_sets) == 2, "the rebuild")
        assert nv.registered() == {1: XID | SBE | DBE, 2: XID | SBE | DBE}
        nv.queue_xid(2, 31)
        (e,) = sink.take(1)
        assert (e.gpu, e.payload.event_type, e.payload.xid) == (2, "xid", 31)  # type: ignore[union-attr]
    finally:
        c.stop()
    assert nv.freed_sets == [1, 2]


def test_thread_that_must_stop_says_so(proc: Path) -> None:
    nv = FakeNvml(2)
    c, _ = make(nv, proc, events=True, event_wait_ms=50)
    sink = Sink()
    c.start(sink)
    try:
        nv.fail_event_set_create = True
        with nv._lock:
            nv.wait_errors.extend([pynvml.NVML_ERROR_UNKNOWN] * 5)
        (e,) = sink.take(1)
        assert e.payload.event_type == "other"  # type: ignore[union-attr]
        assert e.payload.message.startswith("XID monitoring cannot recreate the event set")  # type: ignore[union-attr]
        assert e.gpu is None
        wait_until(
            lambda: not [t for t in threading.enumerate() if t.name == "rankscope-gpu-events"],
            "the thread to end",
        )
    finally:
        c.stop()


def test_emit_failure_does_not_kill_the_thread(proc: Path) -> None:
    nv = FakeNvml(1)
    c, _ = make(nv, proc, events=True, event_wait_ms=50)
    sink = Sink()
    calls = {"n": 0}

    def flaky(events: Sequence[Event]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("agent queue full")
        sink(events)

    c.start(flaky)
    try:
        nv.queue_xid(0, 43)
        nv.queue_xid(0, 45)
        (e,) = sink.take(1)
        assert e.payload.xid == 45  # type: ignore[union-attr]
    finally:
        c.stop()


# --- NVML availability and the function table --------------------------------------------------


def test_library_missing_raises_unavailable(proc: Path) -> None:
    with pytest.raises(GpuCollectorUnavailable, match=r"libnvidia-ml\.so\.1\) not found"):
        make(FakeNvml(library_missing=True), proc)


def test_real_nvml_on_this_node(proc: Path) -> None:
    """Without a driver (CI) the real library gives GpuCollectorUnavailable; with one, a poll."""
    factory = EventFactory("c1", "node-a")
    try:
        c = create_gpu_collector(GpuCollectorConfig(events=False, proc_root=proc), factory)
    except GpuCollectorUnavailable as e:
        assert "NVML" in str(e)
        return
    try:
        valid(c.poll(time.time_ns()))
    finally:
        c.stop()


def test_function_table_names_exist_in_pynvml_and_the_fake() -> None:
    names = [n for n in vars(NvmlApi) if n.startswith("nvml")]
    assert len(names) == 24
    assert real_nvml() is pynvml
    for n in names:
        assert callable(getattr(pynvml, n)), n
        assert callable(getattr(FakeNvml, n)), n


# --- cost --------------------------------------------------------------------------------------


def test_cycle_cost_for_8_gpus(proc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nv = FakeNvml(8)
    bind(nv, proc)
    c, _ = make(nv, proc)
    cost = cycle_cost(c, 50)
    with capsys.disabled():
        print(f"\nGPU collector, 8 fake GPUs x 18 NVLinks: {cost * 1e3:.3f} ms CPU per poll")
    assert cost < 0.02  # generous guard; see the reported figure


def test_event_device_matches_its_gpu_for_real_ctypes_handles() -> None:
    """pynvml handles are ctypes pointers, equal only by identity: the event's device field is
    a new pointer object to the same device and must still find its GPU."""
    import ctypes

    from rankscope.collectors.gpu.nvml import _handle_key

    h = pynvml.c_nvmlDevice_t()
    ctypes.cast(ctypes.byref(h), ctypes.POINTER(ctypes.c_void_p))[0] = 0x1234
    data = pynvml.c_nvmlEventData_t()
    data.device = h
    assert data.device is not h
    assert _handle_key(data.device) == _handle_key(h)
