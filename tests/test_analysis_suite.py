"""Every catalogue scenario through one JobAnalyzer, scored like `rankscope eval` scores.

A fast regression guard (in-process, 64 ranks, one seed); `rankscope eval` runs the full suite
through the real broker, workers and ClickHouse.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from rankscope.evaluate import score_findings
from rankscope.evaluation_sweep import det_row, inc_row
from rankscope.schemas.derived import Detection, Incident
from rankscope.schemas.events import Event
from rankscope.simulation.faults import SuiteCase, scenario_suite, simulate_with_faults
from rankscope.streams.analysis.job import JobAnalyzer

CASES = scenario_suite(64, [0], duration_s=60)


def analyse(
    case: SuiteCase, events: Iterable[Event]
) -> tuple[dict[str, Detection], dict[str, Incident]]:
    """The worker's analysis of one run, in process: latest version of each finding by id."""
    analyzer = JobAnalyzer(case.config.cluster, case.config.job_id, clock_ns=lambda: 0)
    dets: dict[str, Detection] = {}
    incs: dict[str, Incident] = {}
    for n, ev in enumerate(events, 1):
        analyzer.observe(ev)
        if n % 256 == 0:
            d, i = analyzer.take()
            dets.update((x.detection_id, x) for x in d)
            incs.update((x.incident_id, x) for x in i)  # revisions replace, as in ClickHouse
    d, i = analyzer.flush()
    dets.update((x.detection_id, x) for x in d)
    incs.update((x.incident_id, x) for x in i)
    return dets, incs


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario_is_attributed_correctly(case: SuiteCase) -> None:
    events, labels = simulate_with_faults(case.config, case.faults)
    dets, incs = analyse(case, events)
    label = labels[0]
    correct, fps, detect_s, found = score_findings(
        label, [det_row(x) for x in dets.values()], [inc_row(x) for x in incs.values()]
    )
    assert correct, (
        f"expected {label.outcome} {label.cause_class} on {label.node}/{label.rank}; found {found}"
    )
    assert fps == 0, found
    if label.outcome == "root_cause":
        assert len(incs) == 1, "one incident per cascade"
    if label.outcome == "straggler":
        assert detect_s is not None and detect_s <= 15.0  # within 3 windows of 5 s


def test_a_skewed_node_is_learnt_in_a_large_job() -> None:
    """One node of 32 runs 5 s ahead. The reorder buffer releases its spans late until its
    offset is known, and the other 97% of the ranks finalise each step without it: the offset
    must still be learnt (from its late collective ends), or its events stay misordered."""
    case = next(
        c for c in scenario_suite(256, [0], duration_s=20) if c.name == "ib_link_flap+clock_skew/s0"
    )
    events, labels = simulate_with_faults(case.config, case.faults)
    skewed = labels[0].skewed_node
    assert skewed is not None and labels[0].skew_offset_ns == 5 * 10**9
    analyzer = JobAnalyzer(case.config.cluster, case.config.job_id, clock_ns=lambda: 0)
    for n, ev in enumerate(events, 1):
        analyzer.observe(ev)
        if n % 256 == 0:
            analyzer.take()
    analyzer.flush()
    assert abs(analyzer.clock.offset(skewed) - 5 * 10**9) < 50 * 10**6
    others = [n for n in analyzer.clock.offsets if n != skewed]
    assert others and all(abs(analyzer.clock.offset(n)) < 50 * 10**6 for n in others)
