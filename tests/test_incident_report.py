"""The reviewer-facing incident report, built from a real analysis of a simulated cascade."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from rankscope.incident_report import WHY_OTHERS_FAILED, incident_html, incident_markdown
from rankscope.schemas.derived import Detection, Incident
from rankscope.simulation.faults import scenario_suite, simulate_with_faults
from rankscope.sinks.rows import DETECTION_TABLE, INCIDENT_TABLE
from tests.test_analysis_suite import analyse


def _analyse(scenario: str) -> tuple[str, list[Incident], list[Detection]]:
    case = next(c for c in scenario_suite(64, [0], duration_s=60) if c.name == scenario)
    events, _ = simulate_with_faults(case.config, case.faults)
    dets, incs = analyse(case, events)
    return case.config.job_id, list(incs.values()), list(dets.values())


def _as_table_row(spec: Any, obj: Any) -> dict[str, Any]:
    """The row exactly as the sink stores it, keyed by column (what the report reads back)."""
    return dict(zip(spec.columns, spec.to_row(obj), strict=True))


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def xid_report() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    job, incs, dets = _analyse("gpu_fell_off_bus/s0")
    assert len(incs) == 1
    inc_rows = [_as_table_row(INCIDENT_TABLE, i) for i in incs]
    det_rows = [_as_table_row(DETECTION_TABLE, d) for d in dets]
    return job, inc_rows, det_rows


def test_html_names_the_first_failure_and_explains_the_cascade(
    xid_report: tuple[str, list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    job, incs, dets = xid_report
    page = incident_html(job, incs, dets)
    parser = _Collect()
    parser.feed(page)
    text = " ".join(parser.text)
    inc = incs[0]
    assert inc["cause_class"] == "gpu_xid"
    assert f"gpu_xid on {inc['node']} GPU {inc['gpu']} (rank {inc['rank']})" in text
    assert "XID" in text and "79" in text
    assert WHY_OTHERS_FAILED["gpu_xid"] in text  # the mechanism, in words
    assert "svg" in parser.tags and parser.tags.count("circle") == len(
        json.loads(inc["evidence_json"])
    )
    # the cause row is first in the evidence table and sits at +0.000 s
    cause_rows = re.findall(r"<tr class='cause'><td>([^<]+)</td>", page)
    assert cause_rows and cause_rows[0] == "+0.000 s"
    # symptoms are collapsed, not one line per rank, yet every rank is accounted for
    assert f"{len(inc['symptom_ranks'])}: " in text
    assert "<script" not in page  # self-contained and safe to open


def test_markdown_carries_the_same_story(
    xid_report: tuple[str, list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    job, incs, dets = xid_report
    md = incident_markdown(job, incs, dets)
    assert md.startswith(f"# Incident report for job `{job}`")
    assert "### Why the other ranks failed" in md
    assert "| +0.000 s |" in md
    assert incs[0]["summary"] in md


def test_text_from_telemetry_is_escaped() -> None:
    job, incs, _ = _analyse("gpu_fell_off_bus/s0")
    row = _as_table_row(INCIDENT_TABLE, incs[0])
    row["summary"] = "<img src=x onerror=alert(1)>"
    page = incident_html(job, [row], [])
    assert "<img" not in page and "&lt;img" in page
