"""Pictures of a job from the named SQL library: the per-rank heatmap and the incident timeline.

The same queries as the Grafana panels (``rank_heatmap_buckets``, ``incident_timeline``), drawn with
matplotlib into PNG files that the demo writes next to its report, so a person sees the
picture without a Grafana server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from clickhouse_connect.driver.client import Client

from rankscope.sinks.named_queries import run_query

_ROLE_STYLE = {
    "cause": ("#d1242f", "o", 90),
    "precursor": ("#bf8700", "D", 50),
    "symptom": ("#57606a", "x", 30),
}


#: the heatmap PNG's size (inches at ``HEATMAP_DPI``): fixed, whatever the job size
HEATMAP_SIZE_IN, HEATMAP_DPI = (10.0, 6.0), 110
#: the most rows: ranks are folded into runs (``rank_heatmap_buckets``), as in Grafana
HEATMAP_ROWS = 64


def heatmap_grid(rows: list[dict[str, Any]]) -> tuple[list[Any], list[str], list[list[float]]]:
    """(window starts, run labels, grid[run][window]) from ``rank_heatmap_buckets`` rows."""
    starts = sorted({r["time"] for r in rows})
    runs = sorted({(int(r["bucket"]), str(r["ranks"])) for r in rows})
    col = {s: i for i, s in enumerate(starts)}
    row = {bucket: i for i, (bucket, _) in enumerate(runs)}
    grid: list[list[float]] = [[float("nan")] * len(starts) for _ in runs]
    for r in rows:
        if r["value"] is not None:
            grid[row[int(r["bucket"])]][col[r["time"]]] = float(r["value"])
    return starts, [label for _, label in runs], grid


def heatmap_png(client: Client, database: str, job_id: str, path: Path) -> Path | None:
    """Step time per run of ranks (the worst rank of each) and window; None when the job has no
    windows. At most ``HEATMAP_ROWS`` rows in a fixed-size image: a 4,096-rank job once made a
    picture 112,805 px high, one row per rank."""
    params = {"job_id": job_id, "buckets": str(HEATMAP_ROWS)}
    rows = list(run_query(client, "rank_heatmap_buckets", database, params).named_results())
    if not rows:
        return None
    starts, labels, grid = heatmap_grid(rows)
    t0 = starts[0]
    fig, ax = plt.subplots(figsize=HEATMAP_SIZE_IN, dpi=HEATMAP_DPI)
    extent = (0, (starts[-1] - t0).total_seconds() + 5, len(labels) - 0.5, -0.5)
    img = ax.imshow(grid, aspect="auto", cmap="viridis", extent=extent, interpolation="nearest")
    fig.colorbar(img, ax=ax, label="mean step time, worst rank of the run (s)")
    step = max(1, len(labels) // 16)  # at most ~16 tick labels
    ticks = list(range(0, len(labels), step))
    ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=7)
    ax.set_xlabel(f"seconds since {t0:%H:%M:%S} UTC (5 s windows)")
    ax.set_ylabel("rank" if labels[0].startswith("rank ") else "runs of adjacent ranks")
    ax.set_title(f"{job_id}: step time per rank and window")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=HEATMAP_DPI)
    plt.close(fig)
    return path


def timeline_png(client: Client, database: str, job_id: str, path: Path) -> Path | None:
    """Every evidence item of the job's incidents against time from the first cause."""
    rows = list(
        run_query(client, "incident_timeline", database, {"job_id": job_id}).named_results()
    )
    if not rows:
        return None
    lanes = _lanes(rows)
    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.3 * len(lanes) + 1.5)), dpi=110)
    for role, (color, marker, size) in _ROLE_STYLE.items():
        pts = [r for r in rows if r["role"] == role]
        if pts:
            ax.scatter(
                [float(r["offset_s"]) for r in pts],
                [lanes[_lane(r)] for r in pts],
                c=color,
                marker=marker,
                s=size,
                label=role,
                zorder=3,
            )
    cause = next((r for r in rows if r["role"] == "cause"), None)
    if cause is not None:
        ax.annotate(
            str(cause["what"])[:70],
            (float(cause["offset_s"]), lanes[_lane(cause)]),
            xytext=(8, 8),
            textcoords="offset points",
            fontsize=8,
            color="#d1242f",
        )
    ax.set_yticks(list(lanes.values()), list(lanes))
    ax.invert_yaxis()
    ax.axvline(0, color="#d1242f", linewidth=0.8, linestyle="--")
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel("seconds after the first cause (corrected clocks)")
    ax.set_title(f"{job_id}: incident timeline ({rows[0]['cause_class']})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _lane(r: dict[str, Any]) -> str:
    return f"{r['node']} rank {r['rank']}" if r["rank"] is not None else f"{r['node']} (node)"


def _lanes(rows: list[dict[str, Any]]) -> dict[str, int]:
    order = sorted({_lane(r) for r in rows}, key=lambda s: (s.split(" ")[0], len(s), s))
    return {name: i for i, name in enumerate(order)}
