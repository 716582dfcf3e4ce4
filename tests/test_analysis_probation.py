"""A new job's first events wait on probation before it gets an analyzer (issue 15): a flood of
one-event job ids then costs a list append each. The analyzer is fed them in order when the job
is admitted, so it finds exactly what an analyzer fed from the first event finds."""

from __future__ import annotations

from typing import Any

from rankscope.simulation.faults import scenario_suite, simulate_with_faults
from rankscope.streams.analysis.job import JobAnalyzer
from rankscope.streams.config import StreamsConfig
from rankscope.streams.stages.analysis import AnalysisStage
from rankscope.streams.stages.shared import StageCounters
from tests.factories import NOW_NS, span


def _stage(**settings: Any) -> AnalysisStage:
    config = StreamsConfig(bootstrap="unused:9092", **settings)  # nothing is sent here
    return AnalysisStage(config, None, StageCounters(), None)  # type: ignore[arg-type]


def _keys(found: tuple[list[Any], list[Any]]) -> tuple[list[Any], list[Any]]:
    detections, incidents = found
    return (
        sorted((d.detection_id, d.detection_type, d.node, d.rank, d.onset_ts) for d in detections),
        sorted(
            (i.incident_id, i.revision, i.cause_class, i.node, i.first_cause_ts, i.attributed_ts)
            for i in incidents
        ),
    )


def test_an_admitted_job_finds_what_a_job_analyzed_from_its_first_event_finds() -> None:
    case = next(c for c in scenario_suite(16, [0], duration_s=40) if c.name.startswith("gpu_fell"))
    stream, _labels = simulate_with_faults(case.config, case.faults)
    events = [e for e in stream if e.job_id]
    job = events[0].job_id
    direct = JobAnalyzer(events[0].cluster, job, StreamsConfig(bootstrap="x:1").analysis)
    stage = _stage(analysis_admit_events=50)
    direct_found: tuple[list[Any], list[Any]] = ([], [])
    staged_found: tuple[list[Any], list[Any]] = ([], [])
    for i, ev in enumerate(events):
        direct.observe(ev)
        stage.observe(ev, now=0.0)
        if i < 49:
            assert job in stage.probation and job not in stage.analyzers
        for into, analyzer in ((direct_found, direct), (staged_found, stage.analyzers.get(job))):
            if analyzer is not None:
                d, n = analyzer.take()
                into[0].extend(d)
                into[1].extend(n)
    for into, analyzer in ((direct_found, direct), (staged_found, stage.analyzers[job])):
        d, n = analyzer.flush()
        into[0].extend(d)
        into[1].extend(n)
    assert staged_found[1], "the scenario must produce an incident for this test to mean much"
    assert _keys(staged_found) == _keys(direct_found)


def test_one_event_jobs_make_no_analyzer_until_they_go_quiet_or_are_snapshotted() -> None:
    stage = _stage()
    for j in range(1_000):
        stage.observe(span(0, NOW_NS + j, job=f"flood-{j}"), now=0.0)
    assert len(stage.probation) == 1_000 and stage.analyzers == {}
    # a snapshot of their partition admits them (the snapshot holds analyzers)
    stage.partition_of.update({f"flood-{j}": "tp0" for j in range(10)})
    state = stage.export("tp0")  # type: ignore[arg-type]
    assert sorted(state.analyzers) == sorted(f"flood-{j}" for j in range(10))
    assert len(stage.probation) == 990 and len(stage.analyzers) == 10
