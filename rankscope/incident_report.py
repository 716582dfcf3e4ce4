"""A job's incidents as a document a reviewer can open: HTML (one self-contained file) and Markdown.

The terminal timeline (``rankscope.report``) is for the operator at the console; this is for the
postmortem: which component failed first, *why* the other ranks failed (the mechanism, in plain
words), the evidence chain in corrected time relative to the first cause, a picture of the
cascade, the clock corrections that were applied, and the detectors' other findings for the job.
Input is the rows of the ``incidents`` and ``detections`` tables, so a report can be rebuilt
from ClickHouse at any time.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clickhouse_connect.driver.client import Client

from rankscope.report import incident_rows, location, rank_ranges

S = 1_000_000_000

#: why the other ranks failed, per cause class: the mechanism a reviewer needs to believe it
WHY_OTHERS_FAILED: dict[str, str] = {
    "gpu_xid": (
        "A GPU that reports a fatal XID (79: fallen off the bus; 48/63/64/94/95: uncorrectable "
        "memory errors) stops executing kernels, so its rank never enters the next collective. "
        "Data-parallel training synchronises every step: all other ranks block in that collective "
        "until NCCL's watchdog timeout fires, and then fail with timeouts that name the "
        "collective, not the GPU."
    ),
    "gpu_ecc": (
        "Uncorrectable ECC errors crash or stall the process on that GPU; the other ranks wait for "
        "it in the next collective and time out."
    ),
    "nvlink": (
        "A failing NVLink stalls or corrupts the intra-node transfers of the ranks on that node; "
        "the collective cannot complete and the other ranks time out waiting for it."
    ),
    "ib_link": (
        "When an InfiniBand port goes down, the ranks that use it lose their peers: their "
        "transfers fail first (ibv completion errors, remote-process errors), and every other "
        "rank then waits in the collective those ranks can no longer join until it times out."
    ),
    "scheduler_preemption": (
        "The scheduler ended or preempted the job's allocation (or a node of it); the processes "
        "were killed from outside, so the ranks' own errors are consequences."
    ),
    "host_oom": (
        "The kernel's OOM killer ended a rank's process on that host; the surviving ranks wait for "
        "it in the next collective and time out."
    ),
    "node_unresponsive": (
        "The node stopped reporting anything (heartbeats, GPU samples, spans); its ranks stopped "
        "with it, and the other ranks wait for them in the collective until they time out."
    ),
    "hang": (
        "No step completed within the adaptive timeout. A synchronous job advances only when "
        "every rank enters the collective: the rank that did not is what all others wait for."
    ),
    "application": (
        "The training code itself raised an error on one rank; the others wait for it in the next "
        "collective and time out."
    ),
    "communication": (
        "Communication errors on one rank (NCCL/transport) came first; the remaining ranks fail "
        "when the collective with that rank cannot complete."
    ),
    "unknown": "No precursor explains the failure; the evidence below is what was observed.",
}

_ROLE_COLOUR = {"cause": "#c62828", "precursor": "#ef8f00", "symptom": "#607d8b"}
_LANES = ("cause", "precursor", "symptom")


def _clock(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / S, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _rel(ts_ns: int, zero_ns: int) -> str:
    return f"{(ts_ns - zero_ns) / S:+.3f} s"


def _attributed(attributed_ns: int, first_symptom_ns: int) -> str:
    lead = (attributed_ns - first_symptom_ns) / S
    if lead < 0:
        return (
            f"{-lead:.1f} s (event time) before any rank failed: the stall it caused was "
            "detected first"
        )
    return f"{lead:.1f} s (event time) after the first failure signal"


@dataclass(frozen=True)
class IncidentView:
    """One incident row, with its evidence parsed and the times made relative."""

    row: dict[str, Any]
    evidence: list[dict[str, Any]]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> IncidentView:
        evidence = json.loads(row.get("evidence_json") or "[]")
        evidence.sort(key=lambda e: int(e["ts"]))
        return cls(row, evidence)

    @property
    def zero(self) -> int:
        return int(self.row["first_cause_ts_ns"])

    @property
    def why(self) -> str:
        """The mechanism by which the other ranks failed, for this cause class."""
        return WHY_OTHERS_FAILED.get(str(self.row["cause_class"]), WHY_OTHERS_FAILED["unknown"])

    @property
    def symptom_ranks(self) -> list[int]:
        return list(self.row.get("symptom_ranks") or [])

    @property
    def offsets(self) -> dict[str, int]:
        return {k: int(v) for k, v in (self.row.get("clock_offsets_ns") or {}).items() if v}

    def facts(self) -> list[tuple[str, str]]:
        r = self.row
        facts = [
            ("Primary cause", f"{r['cause_class']} on {location(r)}"),
            ("Failed first at", f"{_clock(self.zero)} UTC (corrected time)"),
            (
                "First failure signal",
                f"{_clock(int(r['first_symptom_ts_ns']))} UTC "
                f"({_rel(int(r['first_symptom_ts_ns']), self.zero)} after the cause)",
            ),
            ("Attributed", _attributed(int(r["attributed_ts_ns"]), int(r["first_symptom_ts_ns"]))),
            ("Confidence", f"{float(r['confidence']):.2f}"),
            (
                "Symptom ranks",
                f"{len(self.symptom_ranks)}: {rank_ranges(self.symptom_ranks)}",
            ),
        ]
        if r.get("xid") is not None:
            facts.insert(1, ("XID", str(r["xid"])))
        if self.offsets:
            facts.append(
                (
                    "Clock corrections applied",
                    ", ".join(f"{n} {o / S:+.3f} s" for n, o in sorted(self.offsets.items())),
                )
            )
        facts.append(("Incident", f"{r['incident_id']} (revision {r.get('revision', 0)})"))
        return facts


def timeline_svg(view: IncidentView, width: int = 960) -> str:
    """The cascade as a picture: one lane per role, time relative to the first cause."""
    ev = view.evidence
    if not ev:
        return ""
    zero = view.zero
    times = [(int(e["ts"]) - zero) / S for e in ev]
    lo, hi = min(0.0, *times), max(0.0, *times)
    span = max(hi - lo, 1e-3)
    left, right, top, lane_h = 110, 30, 24, 46
    plot_w = width - left - right
    height = top + lane_h * len(_LANES) + 40

    def x(t: float) -> float:
        return left + (t - lo) / span * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="incident timeline">',
        "<style>text{font:12px sans-serif;fill:#333}</style>",
    ]
    for i, lane in enumerate(_LANES):
        y = top + i * lane_h + lane_h / 2
        n = sum(1 for e in ev if e.get("role", "precursor") == lane)
        parts.append(f'<text x="8" y="{y + 4:.0f}">{lane} ({n})</text>')
        parts.append(
            f'<line x1="{left}" y1="{y:.0f}" x2="{width - right}" y2="{y:.0f}" '
            'stroke="#ddd" stroke-width="1"/>'
        )
    for e, t in zip(ev, times, strict=True):
        role = e.get("role", "precursor")
        lane_i = _LANES.index(role) if role in _LANES else 1
        y = top + lane_i * lane_h + lane_h / 2
        who = e.get("node", "") + ("" if e.get("rank") is None else f" rank {e['rank']}")
        tip = html.escape(f"{t:+.3f} s {who}: {e.get('what', '')}")
        r = 7 if role == "cause" else 5
        parts.append(
            f'<circle cx="{x(t):.1f}" cy="{y:.0f}" r="{r}" fill="{_ROLE_COLOUR.get(role, "#999")}"'
            f' fill-opacity="0.8"><title>{tip}</title></circle>'
        )
    axis_y = top + lane_h * len(_LANES) + 8
    parts.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{width - right}" y2="{axis_y}" stroke="#333"/>'
    )
    step = _nice_step(span)
    tick = step * (int(lo / step) - (1 if lo < 0 else 0))
    while tick <= hi + 1e-9:
        if tick >= lo - 1e-9:
            parts.append(
                f'<line x1="{x(tick):.1f}" y1="{axis_y}" x2="{x(tick):.1f}" y2="{axis_y + 5}" '
                'stroke="#333"/>'
                f'<text x="{x(tick):.1f}" y="{axis_y + 18}" text-anchor="middle">'
                f"{tick:+g} s</text>"
            )
        tick += step
    parts.append(
        f'<line x1="{x(0):.1f}" y1="{top}" x2="{x(0):.1f}" y2="{axis_y}" stroke="#c62828" '
        'stroke-dasharray="4 3"/>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _nice_step(span: float) -> float:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if span / step <= 10:
            return float(step)
    return 3600.0


def _evidence_rows(view: IncidentView, max_symptoms: int) -> tuple[list[dict[str, Any]], int]:
    """Causes and precursors in full; symptoms up to ``max_symptoms`` (the rest are counted)."""
    shown: list[dict[str, Any]] = []
    hidden = 0
    symptoms = 0
    for e in view.evidence:
        if e.get("role") == "symptom":
            symptoms += 1
            if symptoms > max_symptoms:
                hidden += 1
                continue
        shown.append(e)
    return shown, hidden


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1040px;margin:2em auto;color:#222;line-height:1.45}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;width:100%;font-size:.92em}
td,th{border-bottom:1px solid #eee;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f5f5f5}.cause{color:#c62828;font-weight:600}.precursor{color:#b26a00}
.symptom{color:#607d8b}.why{background:#fff8e1;border-left:4px solid #ef8f00;padding:.6em 1em}
.summary{font-size:1.1em;font-weight:600}dl{display:grid;grid-template-columns:14em 1fr;gap:.2em}
dt{color:#555}dd{margin:0}code{background:#f3f3f3;padding:0 .2em}
"""


#: the sections of each incident, in page order: (``data-section`` name, heading). The page and
#: the browser test (tests/test_report_pages_browser.py) both read this list.
INCIDENT_SECTIONS: tuple[tuple[str, str], ...] = (
    ("facts", ""),  # headed by the cause and its location
    ("why", "Why the other ranks failed"),
    ("timeline", "Timeline"),
    ("evidence", "Evidence chain"),
)
#: the sections of the page itself, after the incidents
JOB_SECTIONS: tuple[tuple[str, str], ...] = (("findings", "Other findings for this job"),)
_HEADING = dict(INCIDENT_SECTIONS + JOB_SECTIONS)


def incident_html(
    job_id: str,
    incidents: list[dict[str, Any]],
    detections: list[dict[str, Any]],
    max_symptoms: int = 40,
    max_findings: int = 30,
) -> str:
    """One self-contained HTML page (no scripts, no external assets) for a job's incidents.

    Bounded whatever the job's size: symptoms beyond ``max_symptoms`` per incident and findings
    beyond ``max_findings`` are counted, not listed (a straggler on each of 4,096 ranks would
    otherwise be 4,096 rows); the timeline draws the evidence chain, which the analysis caps.
    """
    e = html.escape
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>rankscope incident report: {e(job_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Incident report for job <code>{e(job_id)}</code></h1>",
        f"<p>{len(incidents)} incident(s), {len(detections)} detection(s). Times are corrected "
        "for each node's clock offset and shown relative to the first cause.</p>",
    ]
    for inc in incidents:
        view = IncidentView.from_row(inc)
        r = view.row
        out.append(f"<article data-incident='{e(str(r['incident_id']))}'>")
        out.append(
            f"<section data-section='facts'><h2>{e(r['cause_class'])} on {e(location(r))}</h2>"
        )
        out.append(f"<p class='summary'>{e(r['summary'])}</p>")
        out.append("<dl>")
        for k, v in view.facts():
            out.append(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>")
        out.append("</dl></section>")
        out.append(
            f"<section data-section='why'><h3>{_HEADING['why']}</h3>"
            f"<p class='why'>{e(view.why)}</p></section>"
        )
        out.append(
            f"<section data-section='timeline'><h3>{_HEADING['timeline']}</h3>"
            + (timeline_svg(view) or "<p>(no evidence recorded)</p>")
            + "</section>"
        )
        shown, hidden = _evidence_rows(view, max_symptoms)
        out.append(
            f"<section data-section='evidence'><h3>{_HEADING['evidence']}</h3>"
            "<table><tr><th>after cause</th><th>time (UTC, corrected)"
            "</th><th>node</th><th>rank</th><th>role</th><th>source</th><th>what</th></tr>"
        )
        for item in shown:
            role = item.get("role", "")
            out.append(
                f"<tr class='{e(role)}'><td>{_rel(int(item['ts']), view.zero)}</td>"
                f"<td>{_clock(int(item['ts']))}</td><td>{e(item.get('node', ''))}</td>"
                f"<td>{'' if item.get('rank') is None else item['rank']}</td><td>{e(role)}</td>"
                f"<td>{e(item.get('kind', ''))}</td><td>{e(item.get('what', ''))}</td></tr>"
            )
        if hidden:
            out.append(
                f"<tr><td colspan='7'>... and {hidden} more symptoms of the same kind "
                "(all in the <code>incidents</code> table)</td></tr>"
            )
        out.append("</table></section></article>")
    out.append(
        f"<section data-section='findings'><h2>{_HEADING['findings']}</h2>"
        "<table><tr><th>onset (UTC)</th><th>type</th><th>node</th><th>rank</th>"
        "<th>summary</th></tr>"
    )
    for d in detections[:max_findings]:
        rank = d.get("rank")
        out.append(
            f"<tr><td>{_clock(int(d['onset_ts_ns']))}</td>"
            f"<td>{e(d['detection_type'])}"
            f"{' (' + e(d['straggler_class']) + ')' if d.get('straggler_class') else ''}</td>"
            f"<td>{e(d.get('node') or '')}</td>"
            f"<td>{'' if rank is None or rank < 0 else rank}</td>"
            f"<td>{e(d.get('summary') or '')}</td></tr>"
        )
    if not detections:
        out.append("<tr><td colspan='5'>(none)</td></tr>")
    elif len(detections) > max_findings:
        out.append(
            f"<tr><td colspan='5'>... and {len(detections) - max_findings} more findings "
            "(all in the <code>detections</code> table)</td></tr>"
        )
    out.append("</table></section>")
    out.append(
        "<p><small>Generated by rankscope from the <code>incidents</code> and "
        "<code>detections</code> tables.</small></p></body></html>"
    )
    return "\n".join(out)


def incident_markdown(
    job_id: str,
    incidents: list[dict[str, Any]],
    detections: list[dict[str, Any]],
    max_symptoms: int = 40,
    max_findings: int = 30,
) -> str:
    md = [f"# Incident report for job `{job_id}`", ""]
    md.append(f"{len(incidents)} incident(s), {len(detections)} detection(s); corrected times.")
    for inc in incidents:
        view = IncidentView.from_row(inc)
        r = view.row
        md += ["", f"## {r['cause_class']} on {location(r)}", "", f"**{r['summary']}**", ""]
        md += [f"- **{k}:** {v}" for k, v in view.facts()]
        md += ["", f"### {_HEADING['why']}", "", view.why, "", f"### {_HEADING['evidence']}", ""]
        md += ["| after cause | node | rank | role | what |", "|---|---|---|---|---|"]
        shown, hidden = _evidence_rows(view, max_symptoms)
        for item in shown:
            what = str(item.get("what", "")).replace("|", "\\|")
            rank = "" if item.get("rank") is None else item["rank"]
            md.append(
                f"| {_rel(int(item['ts']), view.zero)} | {item.get('node', '')} | {rank} | "
                f"{item.get('role', '')} | {what} |"
            )
        if hidden:
            md.append(f"| | | | | ... and {hidden} more symptoms |")
    if detections:
        md += ["", f"## {_HEADING['findings']}", ""]
        for d in detections[:max_findings]:
            md.append(f"- {d['detection_type']} {d.get('node') or ''}: {d.get('summary') or ''}")
        if len(detections) > max_findings:
            md.append(f"- ... and {len(detections) - max_findings} more findings")
    return "\n".join(md) + "\n"


def job_rows(
    client: Client, database: str, job_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(incidents, detections) of one job, latest revisions, in time order."""

    incidents = incident_rows(client, database, job_id, limit=10_000)[::-1]
    detections = list(
        client.query(
            f"SELECT detection_type, straggler_class, node, rank, onset_ts_ns, summary "
            f"FROM {database}.detections FINAL WHERE job_id = %(j)s ORDER BY onset_ts_ns",
            parameters={"j": job_id},
        ).named_results()
    )
    return incidents, detections


def write_incident_report(client: Client, database: str, job_id: str, out_dir: Path) -> Path:
    """Write ``<job>.incidents.html`` and ``.md`` under ``out_dir``; returns the HTML path."""
    incidents, detections = job_rows(client, database, job_id)
    return write_report_files(job_id, incidents, detections, out_dir)


def write_report_files(
    job_id: str, incidents: list[dict[str, Any]], detections: list[dict[str, Any]], out_dir: Path
) -> Path:
    """The files of ``write_incident_report`` from rows already read (tests write them too)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id)
    html_path = out_dir / f"{safe}.incidents.html"
    html_path.write_text(incident_html(job_id, incidents, detections), encoding="utf-8")
    (out_dir / f"{safe}.incidents.md").write_text(
        incident_markdown(job_id, incidents, detections), encoding="utf-8"
    )
    return html_path
