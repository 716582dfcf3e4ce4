"""Issue 18: the demo's heatmap PNG stays within a fixed size at any job size.

At 4,096 ranks it used to be 1100 x 112,805 px (one row per rank). Jobs of 16 and 4,096 ranks are
written into the engine and drawn; Pillow reads the image size back from the file.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client
from PIL import Image

from rankscope.plots import HEATMAP_DPI, HEATMAP_ROWS, HEATMAP_SIZE_IN, heatmap_grid, heatmap_png
from rankscope.sinks.clickhouse import connect, migrate
from rankscope.sinks.named_queries import run_query
from tests.conftest import Services

#: the bound: the configured figure, never more
MAX_PX = (round(HEATMAP_SIZE_IN[0] * HEATMAP_DPI), round(HEATMAP_SIZE_IN[1] * HEATMAP_DPI))
WINDOWS = 24


@pytest.fixture(scope="module")
def jobs(services: Services) -> tuple[Client, str]:
    """Jobs ``j16`` and ``j4096``: every rank a window each 5 s, rank 7 of each slow."""
    db = f"pb{uuid.uuid4().hex[:10]}"
    client = connect(services.clickhouse_url)
    migrate(client, db)
    for ranks in (16, 4096):
        client.command(
            f"INSERT INTO {db}.rank_windows (window_id, cluster, job_id, rank, node, "
            "window_start_ns, window_end_ns, step_count, step_time_mean_s, event_count, "
            "emitted_ts_ns) "
            f"SELECT toString(number), 'sim', 'j{ranks}', toInt32(number % {ranks}), "
            f"concat('node', toString(intDiv(number % {ranks}, 8))), "
            f"(1796292000 + intDiv(number, {ranks}) * 5) * 1000000000, "
            f"(1796292005 + intDiv(number, {ranks}) * 5) * 1000000000, 1, "
            f"if(number % {ranks} = 7, 2.0, 1.0), 1, 0 FROM numbers({ranks * WINDOWS})"
        )
    return client, db


@pytest.mark.parametrize("ranks", [16, 4096])
def test_the_heatmap_png_is_bounded_whatever_the_job_size(
    jobs: tuple[Client, str], ranks: int, tmp_path: Path
) -> None:
    client, db = jobs
    png = heatmap_png(client, db, f"j{ranks}", tmp_path / "h.png")
    assert png is not None
    with Image.open(png) as img:
        width, height = img.size
    assert width <= MAX_PX[0] and height <= MAX_PX[1], (ranks, img.size)
    assert width >= 600 and height >= 300  # still a picture, not a thumbnail


@pytest.mark.parametrize(
    ("ranks", "rows", "first", "slow"),
    [
        (16, 16, "rank 00", "rank 07"),
        (4096, HEATMAP_ROWS, "ranks 0000-0063", "ranks 0000-0063"),
    ],
)
def test_the_rows_are_runs_of_ranks_labelled_by_range(
    jobs: tuple[Client, str], ranks: int, rows: int, first: str, slow: str
) -> None:
    """What the picture draws: one row per rank up to 64 ranks, then 64 runs; the run holding
    the slow rank shows its step time (the worst rank of the run, not the average)."""
    client, db = jobs
    params = {"job_id": f"j{ranks}", "buckets": str(HEATMAP_ROWS)}
    result = list(run_query(client, "rank_heatmap_buckets", db, params).named_results())
    starts, labels, grid = heatmap_grid(result)
    assert (len(starts), len(labels)) == (WINDOWS, rows)
    assert labels[0] == first and labels[-1].endswith(str(ranks - 1))
    assert all(v == 2.0 for v in grid[labels.index(slow)])
    assert all(v == 1.0 for v in grid[labels.index(slow) + 1])
