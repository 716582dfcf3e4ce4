"""The demo's pictures stay bounded in pixels at 4,096 ranks, and a straggler still shows.

The rows have the columns of the named queries (``rank_heatmap``, ``incident_timeline``); the
timeline's come from the simulator's 4,096-rank cascade analysed in process, mapped the way
``sinks/sql/incident_timeline.sql`` maps the ``incidents`` table.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from rankscope.plots import MAX_TIMELINE_LANES, draw_heatmap, draw_timeline
from tests.test_report_pages_browser import _incident_job

VIRIDIS_TOP = (0xFD, 0xE7, 0x25)  # the colour of the largest value


def _timeline_rows(ranks: int) -> list[dict[str, Any]]:
    _, incidents, _ = _incident_job(ranks)
    rows = []
    for inc in incidents:
        for item in json.loads(inc["evidence_json"]):
            rows.append(
                {
                    "cause_class": inc["cause_class"],
                    "offset_s": round((int(item["ts"]) - inc["first_cause_ts_ns"]) / 1e9, 3),
                    "role": item["role"],
                    "node": item["node"],
                    "rank": item.get("rank"),
                    "kind": item["kind"],
                    "what": item["what"],
                }
            )
    return rows


@pytest.mark.parametrize("ranks", [16, 4096])
def test_the_timeline_picture_is_bounded(ranks: int, tmp_path: Path) -> None:
    rows = _timeline_rows(ranks)
    lanes = {(r["node"], r["rank"]) for r in rows}
    png = draw_timeline(rows, "job", tmp_path / "t.png")
    w, h = Image.open(png).size
    assert w == 1100 and h <= 110 * (0.3 * MAX_TIMELINE_LANES + 1.5), (w, h)
    if ranks == 4096:
        assert len(lanes) > MAX_TIMELINE_LANES and h <= 400  # one lane per role


def test_the_heatmap_is_bounded_and_keeps_a_straggler(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    slow = 2749
    rows = [
        {
            "window_start": t0 + timedelta(seconds=5 * w),
            "rank": r,
            "node": f"node{r // 8:03d}",
            "value": 1.6 if r == slow and w >= 6 else 1.0 + (r % 7) * 0.01,
        }
        for w in range(12)
        for r in range(4096)
    ]
    png = draw_heatmap(rows, "job", tmp_path / "h.png")
    img = Image.open(png).convert("RGB")
    assert img.width == 1100 and img.height <= 1300, img.size  # was 112,805 px tall
    plot = img.crop((0, 0, int(img.width * 0.75), img.height))  # left of the colour bar
    top = [c for _, c in plot.getcolors(1 << 24) or [] if _near(c, VIRIDIS_TOP)]
    assert top, "the straggler's row was averaged or resampled away"


def _near(c: tuple[int, int, int], want: tuple[int, int, int], tol: int = 12) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(c, want, strict=True))
