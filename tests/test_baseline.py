"""Reference baselines (issue 19) on hand-built steps: the profile a job's analyzer freezes, and
the ``throughput_gap`` finding against a recorded baseline (pure; no Kafka, no ClickHouse)."""

from __future__ import annotations

import asyncio

import pytest

from rankscope.schemas.baselines import (
    Baseline,
    ConfigFingerprint,
    JobProfile,
    ModelKey,
    PhaseStat,
    nccl_env_attributes,
    nccl_env_of,
)
from rankscope.schemas.derived import Detection
from rankscope.schemas.events import Event, NodeInventoryEvent, SpanEvent
from rankscope.schemas.payloads import NodeInventory, inventory_fingerprint
from rankscope.streams.analysis.baseline import BaselineConfig, compare, throughput_gap
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.stages.baselines import BaselineBook
from tests.factories import NOW_NS, eid, span

S = 10**9
MS = 10**6
T0 = (NOW_NS // S) * S
RANKS = 16
REF_ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_IB_HCA": "mlx5"}
# compute phases (ms): data, forward, backward, optimizer
COMPUTE_MS = {"data": 50.0, "forward": 200.0, "backward": 400.0, "optimizer": 50.0}


def inventory(node: str, job: str, ts: int) -> NodeInventoryEvent:
    fields = {
        "driver_version": "535.161.08",
        "cuda_version": "12.2",
        "nccl_version": "2.21.5",
        "kernel": "5.15.0-105-generic",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "hca_firmware": {f"mlx5_{h}": "28.39.1002" for h in range(8)},
    }
    return NodeInventoryEvent(
        event_id=eid(),
        schema="node_inventory/1",
        kind="node_inventory",
        cluster="c1",
        job_id=job,
        node=node,
        ts=ts,
        observed_ts=ts + 1000,
        payload=NodeInventory(**fields, fingerprint=inventory_fingerprint(fields)),
    )


def job_events(
    job: str,
    collective_ms: float,
    env: dict[str, str],
    steps: int = 30,
    model: str = "llama-8b",
) -> list[Event]:
    """``steps`` synchronous steps of ``RANKS`` ranks; the step span carries the model, the
    global batch and the NCCL environment, as instrumented code sets them."""
    attrs: dict[str, str | int | float | bool] = {
        "rankscope.model": model,
        "rankscope.global_batch": 1024,
        "rankscope.samples": 1024 // RANKS,
        **nccl_env_attributes(env),
    }
    out: list[Event] = [inventory(f"node{n:03d}", job, T0 - S) for n in range(RANKS // 8)]
    t = T0
    for s in range(steps):
        jitter = 1 + 0.01 * ((s * 7) % 3 - 1)  # -1%, 0, +1%: a real spread
        for r in range(RANKS):
            mark = t
            for name, ms in COMPUTE_MS.items():
                end = mark + int(ms * jitter * MS)
                out.append(span(r, end, (end - mark) / S, phase=name, job=job, step=s))
                mark = end
            end = mark + int(collective_ms * MS)
            out.append(span(r, end, (end - mark) / S, phase="collective", job=job, step=s))
            step_span = span(r, end, (end - t) / S, phase="step", job=job, step=s)
            out.append(
                step_span.model_copy(
                    update={"payload": step_span.payload.model_copy(update={"attributes": attrs})}
                )
            )
        t = end + 1 * MS
    return sorted(out, key=lambda e: e.ts)


def _clock() -> int:
    """The findings' emitted stamp (metadata), fixed so findings compare equal."""
    return 42


def analyze(events: list[Event], job: str, chunk: int | None = None) -> JobAnalyzer:
    """Feed a job's events to its analyzer (in ``chunk``-sized reads when given) and flush."""
    analyzer = JobAnalyzer("c1", job, clock_ns=_clock)
    for i, ev in enumerate(events):
        analyzer.observe(ev)
        if chunk and i % chunk == 0:
            analyzer.take()
    analyzer.flush()
    return analyzer


def reference() -> Baseline:
    ref = analyze(job_events("ref-1", 300.0, REF_ENV), "ref-1")
    assert ref.baseline.profile is not None
    return Baseline.of("llama-8b-h100", ref.baseline.profile, recorded_ts=1)


def book_of(*baselines: Baseline) -> BaselineBook:
    book = BaselineBook()
    for b in baselines:
        book.put(b.model_dump_json().encode(), b.key.encode())
    return book


def gap_findings(job: str, collective_ms: float, env: dict[str, str]) -> list[Detection]:
    analyzer = analyze(job_events(job, collective_ms, env), job)
    return book_of(reference()).findings(analyzer)


def test_profile_of_the_reference_job() -> None:
    profile = reference().profile
    assert profile.model_key == ModelKey(
        model="llama-8b", ranks=16, gpu_model="NVIDIA H100 80GB HBM3", global_batch=1024
    )
    assert profile.steps == 20
    assert profile.phases["collective"].median_s == pytest.approx(0.300, abs=1e-6)
    assert profile.phases["backward"].median_s == pytest.approx(0.400, rel=0.011)
    assert profile.phases["backward"].spread_s > 0
    assert profile.step.median_s == pytest.approx(1.0, rel=0.01)
    assert profile.comm_share == pytest.approx(0.3, rel=0.01)
    assert profile.samples_per_s == pytest.approx(1024 / profile.step.median_s, rel=1e-6)
    config = profile.config
    assert config.nccl_env == REF_ENV
    assert (config.nodes, config.gpus_per_node, config.hcas_per_node) == (2, 8, 8)
    assert config.driver_version == "535.161.08" and config.nccl_version == "2.21.5"


def test_job_10pct_below_for_a_nccl_setting_names_collective_and_the_setting() -> None:
    # the collective takes 411 ms instead of 300: step 1.111 s, throughput 90% of the baseline
    slow_env = {**REF_ENV, "NCCL_ALGO": "Tree"}
    (found,) = gap_findings("slow-1", 411.1, slow_env)
    assert found.detection_type == "throughput_gap"
    assert found.job_id == "slow-1"
    assert found.details["gap_pct"] == pytest.approx(10.0, abs=0.3)
    assert found.details["phases"] == "collective"
    assert found.details["settings"] == "NCCL_ALGO"
    assert found.details["diff.NCCL_ALGO"] == "Ring -> Tree"
    assert found.details["delta_s.collective"] == pytest.approx(0.1111, abs=1e-4)
    assert "collective" in found.summary and "NCCL_ALGO: Ring -> Tree" in found.summary
    assert found.detection_id == f"slow-1/throughput_gap/{reference().baseline_id}"


def test_job_within_the_margin_yields_nothing() -> None:
    # 3% slower collective share only: 1 - 1.0/1.03 = 2.9% < 5%, though a setting differs
    assert gap_findings("ok-1", 330.0, {**REF_ENV, "NCCL_PROTO": "LL128"}) == []


def test_the_reference_itself_and_other_models_yield_nothing() -> None:
    ref_events = job_events("ref-1", 300.0, REF_ENV)
    assert book_of(reference()).findings(analyze(ref_events, "ref-1")) == []
    other = analyze(job_events("x-1", 450.0, REF_ENV, model="gpt-2"), "x-1")
    assert book_of(reference()).findings(other) == []


def test_same_finding_whatever_the_read_pattern_and_when_the_baseline_arrives() -> None:
    events = job_events("slow-2", 420.0, {**REF_ENV, "NCCL_IB_HCA": "mlx5_0,mlx5_1"})
    book = book_of(reference())
    first = book.findings(analyze(events, "slow-2"))
    again = book.findings(analyze(events, "slow-2", chunk=97))
    # the baseline read only after the job's profile froze (a worker behind on the topic)
    late = analyze(events, "slow-2")
    assert BaselineBook().findings(late) == []
    assert book.findings(late) == first == again
    assert len(first) == 1 and first[0].details["settings"] == "NCCL_IB_HCA"


def test_emitted_once_per_job_and_baseline() -> None:
    analyzer = analyze(job_events("slow-3", 411.1, REF_ENV), "slow-3")
    ref = reference()
    book = book_of(ref)
    assert len(book.findings(analyzer)) == 1
    assert book.findings(analyzer) == []
    rerecorded = Baseline.of("llama-8b-h100-v2", ref.profile, recorded_ts=2)
    book.put(rerecorded.model_dump_json().encode(), rerecorded.key.encode())
    (second,) = book.findings(analyzer)  # a new baseline for the key: judged against it once
    assert second.details["baseline"] == "llama-8b-h100-v2"


def _profile(job: str, phases: dict[str, float], env: dict[str, str]) -> JobProfile:
    return JobProfile(
        cluster="c1",
        job_id=job,
        model_key=ModelKey(model="m", ranks=8),
        steps=20,
        phases={p: PhaseStat(median_s=v) for p, v in phases.items()},
        step=PhaseStat(median_s=sum(phases.values())),
        comm_share=phases["collective"] / sum(phases.values()),
        config=ConfigFingerprint(nccl_env=env, driver_version="535", sm_clock_mhz=1980),
    )


def test_compare_ranks_phases_by_their_share_of_the_difference() -> None:
    base = {"data": 0.05, "forward": 0.2, "backward": 0.4, "optimizer": 0.05, "collective": 0.3}
    slow = {**base, "backward": 0.45, "collective": 0.45}  # 0.05 + 0.15 of a 0.2 s difference
    ref = Baseline.of("b", _profile("ref", base, {"NCCL_PROTO": "Simple"}), recorded_ts=1)
    job = _profile("j", slow, {})
    found = compare(job, ref, BaselineConfig(), 1, 2, 3)
    assert found is not None
    assert found.details["phases"] == "collective,backward"
    assert found.details["diff.NCCL_PROTO"] == "Simple -> (unset)"
    assert found.evidence[0].startswith("collective:") and "75%" in found.evidence[0]
    assert throughput_gap(job, ref.profile) == pytest.approx(1 - 1.0 / 1.2)
    assert compare(job, ref, BaselineConfig(margin=0.2), 1, 2, 3) is None


def test_config_differences_cover_versions_clocks_and_topology() -> None:
    a = ConfigFingerprint(driver_version="535", nccl_version="2.21.5", sm_clock_mhz=1980, nodes=4)
    b = a.model_copy(update={"nccl_version": "2.18.3", "sm_clock_mhz": 1755.0, "nodes": 8})
    assert [str(d) for d in a.differences(b)] == [
        "nccl_version: 2.21.5 -> 2.18.3",
        "sm_clock_mhz: 1980 -> 1755",
        "nodes: 4 -> 8",
    ]
    assert a.differences(a.model_copy(update={"sm_clock_mhz": 1990.0})) == []


def test_nccl_env_allow_list() -> None:
    env = {"NCCL_ALGO": "Tree", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x", "PATH": "/bin"}
    attrs = nccl_env_attributes(env)
    assert attrs == {"rankscope.env.NCCL_ALGO": "Tree"}
    assert nccl_env_of({**attrs, "rankscope.env.HOME": "/root"}) == {"NCCL_ALGO": "Tree"}


def test_book_keeps_the_latest_per_key_and_skips_bad_records() -> None:
    ref = reference()
    book = book_of(ref)
    assert asyncio.run(book.poll()) is True
    book.put(b"not json")
    book.put(ref.model_dump_json().encode())
    assert asyncio.run(book.poll()) is False  # the same record again changes nothing
    book.put(None, ref.key.encode())  # a tombstone
    assert book.by_key == {} and asyncio.run(book.poll()) is True


def test_span_events_without_attributes_build_no_profile() -> None:
    events = [e for e in job_events("bare-1", 300.0, REF_ENV) if not isinstance(e, SpanEvent)]
    events += [
        span(r, T0 + s * S + 900 * MS, 0.3, phase="collective", job="bare-1", step=s)
        for s in range(30)
        for r in range(RANKS)
    ]
    analyzer = analyze(sorted(events, key=lambda e: e.ts), "bare-1")
    assert analyzer.baseline.profile is None
    assert book_of(reference()).findings(analyzer) == []


def test_a_restored_snapshot_reaches_the_same_finding() -> None:
    """A worker restarted from a snapshot taken mid-job (before or after the profile froze)
    judges the job as one that never stopped: same id, same figures."""
    import pickle

    events = job_events("slow-4", 411.1, {**REF_ENV, "NCCL_ALGO": "Tree"})
    book = book_of(reference())
    (whole,) = book.findings(analyze(events, "slow-4"))
    for cut in (len(events) // 4, 3 * len(events) // 4):
        first = JobAnalyzer("c1", "slow-4", clock_ns=_clock)
        for ev in events[:cut]:
            first.observe(ev)
        restored: JobAnalyzer = pickle.loads(pickle.dumps(first))
        for ev in events[cut:]:
            restored.observe(ev)
        restored.flush()
        assert book.findings(restored) == [whole]
