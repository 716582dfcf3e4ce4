"""Human-readable incident timelines, from the ``incidents`` and ``detections`` tables.

A reviewer should see which component failed first and why the other ranks failed without
reading code: the primary cause, the evidence chain in corrected time, and the symptom ranks
collapsed into one line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from clickhouse_connect.driver.client import Client
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

_ROLE_STYLE = {"cause": "bold red", "precursor": "yellow", "symptom": "dim"}


def _clock(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def rank_ranges(ranks: list[int]) -> str:
    """[0,1,2,3,7,8] -> '0-3, 7-8' so a 999-rank cascade stays one line."""
    if not ranks:
        return "none"
    ranks = sorted(set(ranks))
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(parts)


def location(row: dict[str, Any]) -> str:
    """Where an incident (a row of the ``incidents`` table) says the failure was."""
    where = str(row.get("node") or "unknown node")
    gpu, rank = row.get("gpu"), row.get("rank")
    if gpu is not None and int(gpu) >= 0:
        where += f" GPU {gpu}"
    if rank is not None and int(rank) >= 0:
        where += f" (rank {rank})"
    if row.get("device"):
        where += f", {row['device']}"
    return where


def incident_rows(
    client: Client, database: str, job_id: str | None, limit: int
) -> list[dict[str, Any]]:
    from rankscope.sinks.named_queries import run_query

    values = {"job_id": job_id or "", "limit": str(int(limit))}
    return list(run_query(client, "incidents", database, values).named_results())


def render_incident(row: dict[str, Any], max_evidence: int = 25) -> Panel:
    evidence = json.loads(row["evidence_json"] or "[]")
    table = Table(show_header=True, box=None, pad_edge=False)
    for col in ("time (aligned)", "node", "rank", "", "what"):
        table.add_column(col)
    shown = evidence[:max_evidence]
    for item in shown:
        style = _ROLE_STYLE.get(item.get("role", ""), "")
        table.add_row(
            _clock(int(item["ts"])),
            item.get("node", ""),
            "" if item.get("rank") is None else str(item["rank"]),
            item.get("role", ""),
            item.get("what", ""),
            style=style,
        )
    if len(evidence) > len(shown):
        table.add_row("", "", "", "", f"... {len(evidence) - len(shown)} more in incidents table")
    offsets = {k: v for k, v in (row.get("clock_offsets_ns") or {}).items() if v}
    lines = [
        f"[bold]{row['summary']}[/]",
        "",
        f"primary cause: [bold]{row['cause_class']}[/] on {location(row)}   "
        f"confidence {row['confidence']:.2f}",
        f"symptom ranks ({len(row['symptom_ranks'])}): {rank_ranges(list(row['symptom_ranks']))}",
    ]
    if offsets:
        lines.append(
            "clock offsets corrected: "
            + ", ".join(f"{n} {o / 1e9:+.3f}s" for n, o in sorted(offsets.items()))
        )
    from rich.console import Group

    return Panel(
        Group(*lines, "", table),
        title=f"incident {row['incident_id']}  job {row['job_id']}",
        subtitle=f"first cause {_clock(row['first_cause_ts_ns'])} UTC",
    )


def print_incidents(
    client: Client, database: str, console: Console, job_id: str | None = None, limit: int = 20
) -> int:
    rows = incident_rows(client, database, job_id, limit)
    if not rows:
        console.print("no incidents" + (f" for job {job_id}" if job_id else ""))
    for row in rows:
        console.print(render_incident(row))
    return len(rows)
