"""The pages people open (the incident report, the redaction review) in real headless Chromium.

Each page is written by the same code the CLI runs, opened from disk in Debian's ``chromium``
(installed by ``make browser``, part of ``make test``), and must render completely: every
section the builder lists is laid out with content, the incident timeline is drawn (its pixels
in the screenshot carry the cause and symptom colours), nothing is logged as an error, and the
page asks for nothing but itself. At 4,096 ranks the page stays bounded in bytes and pixels.
"""

from __future__ import annotations

import functools
import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from rankscope.cli.redaction import REFERENCE_CORPUS
from rankscope.incident_report import (
    _ROLE_COLOUR,
    INCIDENT_SECTIONS,
    JOB_SECTIONS,
    write_report_files,
)
from rankscope.redaction.engine import PresidioRedactor
from rankscope.redaction.report import review_sections, write_review
from rankscope.redaction.review import diff_rules, evaluate, load_corpus
from rankscope.redaction.rules import DEFAULT_RULES_PATH, load_rules
from rankscope.simulation.faults import scenario_suite, simulate_with_faults
from rankscope.sinks.rows import DETECTION_TABLE, INCIDENT_TABLE
from tests.headless_chromium import LOCAL_SCHEMES, PageLoad, find_chromium, load_page
from tests.test_analysis_suite import analyse

VIEWPORT_W = 1280
#: bounds a page must stay within whatever the job's size: the evidence chain is capped at 256
#: items by the analysis and the table shows 40 symptoms, so neither grows with the rank count
MAX_HTML_BYTES = 256 * 1024
MAX_PAGE_HEIGHT_PX = 8_000
#: the review grows with the rules (one row per rule, regexes shown in full), never with ranks
MAX_REVIEW_HEIGHT_PX = 32_000


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser binary; a missing browser fails the test (it is never skipped, in CI or not)."""
    path = find_chromium()
    if path is None:
        pytest.fail(
            "headless Chromium not found: run `make browser` (installs Debian's chromium "
            "package) or set CHROMIUM=/path/to/chromium",
            pytrace=False,
        )
    return path


Rows = list[dict[str, Any]]


@functools.cache
def _incident_job(ranks: int) -> tuple[str, Rows, Rows]:
    """A simulated job whose GPU falls off the bus, analysed, as rows of the sink's tables."""
    duration = 60 if ranks <= 64 else 40  # the cascade is complete well before 40 s
    case = next(
        c
        for c in scenario_suite(ranks, [0], duration_s=duration)
        if c.name == "gpu_fell_off_bus/s0"
    )
    events, _ = simulate_with_faults(case.config, case.faults)
    dets, incs = analyse(case, events)
    inc_rows = [
        dict(zip(INCIDENT_TABLE.columns, INCIDENT_TABLE.to_row(i), strict=True))
        for i in incs.values()
    ]
    det_rows = [
        dict(zip(DETECTION_TABLE.columns, DETECTION_TABLE.to_row(d), strict=True))
        for d in dets.values()
    ]
    assert inc_rows, "the simulated fault produced no incident"
    return case.config.job_id, inc_rows, det_rows


def _assert_clean_load(load: PageLoad, page: Path) -> None:
    assert load.errors == [], load.errors
    assert load.blocked == [], f"external requests: {load.blocked}"
    assert page.resolve().as_uri() in load.requests
    assert all(u.startswith(LOCAL_SCHEMES) for u in load.requests), load.requests


def _assert_sections(load: PageLoad, expected: dict[str, int]) -> None:
    """Each named section is there as often as expected, laid out with visible content."""
    found = load.layout["sections"]
    assert {n: len(found.get(n, [])) for n in expected} == expected
    for name, boxes in found.items():
        for box in boxes:
            assert box["width"] > 0 and box["height"] > 0 and box["text"] > 0, (name, box)


def _save(load: PageLoad, path: Path, max_height: int = MAX_PAGE_HEIGHT_PX) -> Image.Image:
    path.write_bytes(load.png)
    img = Image.open(io.BytesIO(load.png)).convert("RGB")
    page = load.layout["page"]
    assert img.size == (page["width"], page["height"])  # the whole page, not just the viewport
    # no sideways scrolling (the vertical scrollbar takes its share), and a bounded length
    assert img.width <= VIEWPORT_W and img.height <= max_height, img.size
    return img


def _colours(img: Image.Image) -> Counter[tuple[int, int, int]]:
    return Counter({c: n for n, c in img.getcolors(maxcolors=1 << 24) or []})


def _near(colours: Counter[tuple[int, int, int]], hex_colour: str, tol: int = 40) -> int:
    """Pixels within ``tol`` of a colour (circles are drawn at 80% opacity on white)."""
    want = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        n
        for c, n in colours.items()
        if all(abs(a - b) <= tol for a, b in zip(c, want, strict=True))
    )


@pytest.mark.parametrize("ranks", [16, 4096])
def test_incident_report_renders_completely_in_chromium(
    chromium: str, ranks: int, tmp_path: Path
) -> None:
    job, incidents, detections = _incident_job(ranks)
    page = write_report_files(job, incidents, detections, tmp_path)  # the CLI's writer
    assert page.stat().st_size <= MAX_HTML_BYTES, page.stat().st_size
    load = load_page(chromium, page, width=VIEWPORT_W)
    _assert_clean_load(load, page)
    expected = {name: len(incidents) for name, _ in INCIDENT_SECTIONS}
    expected |= {name: 1 for name, _ in JOB_SECTIONS}
    _assert_sections(load, expected)
    img = _save(load, tmp_path / f"incident-report-{ranks}.png")
    assert len(load.layout["timelines"]) == len(incidents)
    for box in load.layout["timelines"]:
        assert box["width"] > 0 and box["height"] > 0, box
        x, y = int(box["x"]), int(box["y"])
        crop = img.crop((x, y, x + int(box["width"]), y + int(box["height"])))
        colours = _colours(crop)
        assert len(colours) > 8, "the timeline region is blank"
        assert _near(colours, _ROLE_COLOUR["cause"]) > 20, "the cause is not drawn"
        assert _near(colours, _ROLE_COLOUR["symptom"]) > 20, "the symptoms are not drawn"


def test_incident_report_stays_bounded_with_a_finding_on_every_rank(
    chromium: str, tmp_path: Path
) -> None:
    """A straggler finding on each of 4,096 ranks: counted past the first ones, not listed."""
    job, incidents, detections = _incident_job(4096)
    one = detections[0]
    per_rank = [one | {"rank": r, "onset_ts_ns": int(one["onset_ts_ns"]) + r} for r in range(4096)]
    page = write_report_files(job, incidents, per_rank, tmp_path)
    assert page.stat().st_size <= MAX_HTML_BYTES, page.stat().st_size
    assert "more findings" in page.read_text(encoding="utf-8")
    load = load_page(chromium, page, width=VIEWPORT_W)
    _assert_clean_load(load, page)
    _save(load, tmp_path / "incident-report-4096-findings.png")


def test_redaction_review_renders_completely_in_chromium(chromium: str, tmp_path: Path) -> None:
    # what `rankscope redaction review --since OLDER` runs: the "changes" section is there too
    older = yaml.safe_load(DEFAULT_RULES_PATH.read_text())
    older["recognizers"] = [r for r in older["recognizers"] if r["name"] != "jwt"]
    older_path = tmp_path / "older.yaml"
    older_path.write_text(yaml.safe_dump(older))
    rules, items = load_rules(), load_corpus(REFERENCE_CORPUS)
    ev = evaluate(PresidioRedactor(rules, key=b"review-only-key-not-a-secret"), items)
    changes = diff_rules(load_rules(older_path), rules)
    since = str(older_path)
    page = write_review(tmp_path / "report", rules, "default", ev, items, changes, since).html
    assert page.stat().st_size <= MAX_HTML_BYTES, page.stat().st_size
    load = load_page(chromium, page, width=VIEWPORT_W)
    _assert_clean_load(load, page)
    sections = review_sections(ev, since)
    assert {"gates", "changes", "benign"} <= set(sections)
    _assert_sections(load, dict.fromkeys(sections, 1))
    img = _save(load, tmp_path / "redaction-review.png", MAX_REVIEW_HEIGHT_PX)
    assert len(_colours(img)) > 8  # text and the verdict badge, not a blank page


def test_the_harness_sees_external_requests_and_errors(chromium: str, tmp_path: Path) -> None:
    """What the page tests rely on: a page that breaks the rules is caught, not passed."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<link rel='stylesheet' href='https://fonts.example.com/inter.css'></head><body>"
        "<section data-section='timeline'><svg width='200' height='40'></svg></section>"
        "<script>console.error('boom'); null.x;</script></body></html>",
        encoding="utf-8",
    )
    load = load_page(chromium, page, width=VIEWPORT_W)
    assert load.blocked == ["https://fonts.example.com/inter.css"]
    assert any(e == "console.error: boom" for e in load.errors), load.errors
    assert any(e.startswith("uncaught: TypeError") for e in load.errors), load.errors
    assert load.layout["timelines"] == [{"x": 8, "y": 8, "width": 200, "height": 40}]


def test_chromium_is_looked_up_from_the_environment_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-browser"))
    assert find_chromium() is None  # a wrong CHROMIUM is an error, not a silent fallback
