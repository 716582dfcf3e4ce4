"""Pictures of a job from the named SQL library: the per-rank heatmap and the incident timeline.

The same queries as the Grafana panels (``rank_heatmap``, ``incident_timeline``), drawn with
matplotlib into PNG files that the demo writes next to its report, so a person sees the
picture without a Grafana server. Both stay bounded in pixels whatever the job's size: past
``MAX_HEATMAP_ROWS`` ranks a heatmap row is the worst (max) of a block of ranks, so a straggler
still shows; past ``MAX_TIMELINE_LANES`` lanes the timeline has one lane per role.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from clickhouse_connect.driver.client import Client

from rankscope.sinks.named_queries import run_query

MAX_HEATMAP_ROWS = 256
MAX_TIMELINE_LANES = 40

_ROLE_STYLE = {
    "cause": ("#d1242f", "o", 90),
    "precursor": ("#bf8700", "D", 50),
    "symptom": ("#57606a", "x", 30),
}


def heatmap_png(client: Client, database: str, job_id: str, path: Path) -> Path | None:
    """Step time per rank and event-time window; None when the job has no windows."""
    rows = list(run_query(client, "rank_heatmap", database, {"job_id": job_id}).named_results())
    return draw_heatmap(rows, job_id, path) if rows else None


def draw_heatmap(rows: list[dict[str, Any]], job_id: str, path: Path) -> Path:
    """The rows of ``rank_heatmap`` as a PNG; ranks in blocks of ``block`` past 256 rows."""
    starts = sorted({r["window_start"] for r in rows})
    ranks = sorted({int(r["rank"]) for r in rows})
    block = -(-len(ranks) // MAX_HEATMAP_ROWS)  # ranks per picture row (1 up to 256 ranks)
    col = {s: i for i, s in enumerate(starts)}
    row = {r: i // block for i, r in enumerate(ranks)}
    n_rows = row[ranks[-1]] + 1
    grid: list[list[float]] = [[float("nan")] * len(starts) for _ in range(n_rows)]
    for r in rows:
        if r["value"] is not None:
            i, j = row[int(r["rank"])], col[r["window_start"]]
            value = float(r["value"])
            grid[i][j] = value if math.isnan(grid[i][j]) else max(grid[i][j], value)
    t0 = starts[0]
    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.25 * min(n_rows, 40) + 1.5)), dpi=110)
    extent = (0, (starts[-1] - t0).total_seconds() + 5, ranks[-1] + 0.5, ranks[0] - 0.5)
    img = ax.imshow(grid, aspect="auto", cmap="viridis", extent=extent, interpolation="nearest")
    label = "mean step time (s)" + (f", worst of each {block} ranks" if block > 1 else "")
    fig.colorbar(img, ax=ax, label=label)
    ax.set_xlabel(f"seconds since {t0:%H:%M:%S} UTC (5 s windows)")
    ax.set_ylabel("rank")
    ax.set_title(f"{job_id}: step time per rank and window")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def timeline_png(client: Client, database: str, job_id: str, path: Path) -> Path | None:
    """Every evidence item of the job's incidents against time from the first cause."""
    rows = list(
        run_query(client, "incident_timeline", database, {"job_id": job_id}).named_results()
    )
    return draw_timeline(rows, job_id, path) if rows else None


def draw_timeline(rows: list[dict[str, Any]], job_id: str, path: Path) -> Path:
    """The rows of ``incident_timeline`` as a PNG: a lane per node and rank, or per role."""
    lane = _lane if len({_lane(r) for r in rows}) <= MAX_TIMELINE_LANES else _role_lane
    lanes = _lanes(rows, lane)
    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.3 * len(lanes) + 1.5)), dpi=110)
    for role, (color, marker, size) in _ROLE_STYLE.items():
        pts = [r for r in rows if r["role"] == role]
        if pts:
            ax.scatter(
                [float(r["offset_s"]) for r in pts],
                [lanes[lane(r)] for r in pts],
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
            (float(cause["offset_s"]), lanes[lane(cause)]),
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


def _role_lane(r: dict[str, Any]) -> str:
    return str(r["role"])


def _lanes(rows: list[dict[str, Any]], lane: Callable[[dict[str, Any]], str]) -> dict[str, int]:
    present = {lane(r) for r in rows}
    if lane is _role_lane:
        return {role: i for i, role in enumerate(x for x in _ROLE_STYLE if x in present)}
    order = sorted(present, key=lambda s: (s.split(" ")[0], len(s), s))
    return {name: i for i, name in enumerate(order)}


def draw_sweep_axis(rows: list[dict[str, Any]], axis: str, path: Path) -> Path:
    """One axis of ``rankscope eval --sweep`` (rows of ``axis_table``) as a PNG: right % of the
    faulted runs per value (bars) and false positives per 100 runs (line), so a value where a
    detector breaks stands out."""
    rows = sorted((r for r in rows if r["axis"] == axis), key=lambda r: float(r["value"]))
    labels = [f"{r['value']:g}" for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows) + 2), 3.5), dpi=110)
    right = [float("nan") if r["right_pct"] is None else float(r["right_pct"]) for r in rows]
    bars = ax.bar(x, right, color="#2da44e", label="right % (faulted runs)")
    for b, r in zip(bars, rows, strict=True):
        ax.annotate(
            f"{r['right']}/{r['faulted_runs']}",
            (b.get_x() + b.get_width() / 2, b.get_height()),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            fontsize=7,
        )
    ax.axhline(97, color="#57606a", linewidth=0.8, linestyle="--", label="97 % bar")
    ax.set_ylim(0, 110)
    ax.set_ylabel("right %")
    ax.set_xticks(x, labels)
    ax.set_xlabel(axis)
    fp = ax.twinx()
    fp.plot(x, [r["fp_per_100_runs"] for r in rows], color="#d1242f", marker="o", label="FP/100")
    fp.set_ylabel("false positives per 100 runs", color="#d1242f")
    fp.set_ylim(0, max(5.0, 1.2 * max(r["fp_per_100_runs"] for r in rows)))
    ax.set_title(f"rankscope eval --sweep: {axis}")
    fig.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
