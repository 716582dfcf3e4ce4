"""The security review report: one self-contained HTML page, the same in Markdown, and JSON.

No scripts and no external assets, so it opens from a ticket attachment. Labelled secrets are
never printed (a missed value is named by its corpus item id); benign look-alikes that were
flagged are shown, since they are what a reviewer has to judge.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rankscope.redaction.policy import FieldPolicy
from rankscope.redaction.review import (
    CorpusItem,
    Evaluation,
    GroupMetrics,
    RuleChange,
    write_json,
)
from rankscope.redaction.rules import RuleSet


@dataclass(frozen=True)
class ReportPaths:
    html: Path
    markdown: Path
    json: Path


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _fail_closed(rules: RuleSet) -> list[tuple[str, str]]:
    s = rules.settings
    return [
        (
            "Regex timeout per recognizer",
            f"{s.regex_timeout_ms:g} ms: the value's event is quarantined",
        ),
        (
            "Analysis budget per value",
            f"{s.field_budget_ms:g} ms: slower analysis counts as a failure (Presidio's own "
            "recognizers skip a timed-out pattern silently, which would fail open)",
        ),
        (
            "On failure",
            "the event's scanned and dropped fields are emptied; a record goes to the "
            "quarantine topic and the redaction_quarantine table with the reason (never the "
            "content); only the emptied copy continues downstream",
        ),
        ("Stage failure", "every event of the record is quarantined the same way"),
        (
            "Hash key",
            f"from ${s.key_env}, else the worker's key file (created 0600 when missing)",
        ),
        (
            "Value cache per field",
            f"{s.cache_entries_per_field:,} entries (results, not raw values, are reused)",
        ),
        (
            "NLP engine",
            f"{s.nlp.engine}"
            + (f" ({s.nlp.model})" if s.nlp.engine != "none" else " (offline, no model)"),
        ),
    ]


def _rows(
    rules: RuleSet, ev: Evaluation, policy: FieldPolicy, changes: list[RuleChange]
) -> dict[str, list[list[str]]]:
    """Every table of the report as plain rows; both renderers use them."""
    entities = []
    for name, m in ev.entities.items():
        spec = rules.entities.get(name)
        entities.append(
            [
                name,
                m.group,
                m.action,
                f"{spec.min_score:g}" if spec else "",
                str(m.labelled),
                str(m.caught),
                _pct(m.recall),
                str(m.findings),
                _pct(m.precision),
                str(m.leaked),
                ", ".join(m.missed[:8]) + (" ..." if len(m.missed) > 8 else ""),
            ]
        )
    recognizers = []
    for r in rules.recognizers:
        measured = ev.rules.get(r.name)
        if r.presidio:
            what = f"Presidio {r.presidio}" + (
                f" (patterns: {', '.join(r.presidio_patterns)})" if r.presidio_patterns else ""
            )
            if r.presidio_args:
                what += f" {r.presidio_args}"
        else:
            what = "\n".join(f"{p.name} (score {p.score:g}): {p.regex}" for p in r.patterns)
        recognizers.append(
            [
                r.name,
                r.entity,
                rules.entities[r.entity].action,
                r.description,
                what,
                ", ".join(r.context),
                ", ".join(r.keywords + r.triggers) or "(its patterns)",
                str(measured.findings if measured else 0),
                str(measured.findings - measured.true_findings if measured else 0),
            ]
        )
    allow = [
        [
            a.name,
            a.regex,
            "all" if a.applies_to == "all" else ", ".join(a.applies_to),
            a.description,
        ]
        for a in rules.allow
    ]
    fields = [
        [
            f.kind,
            f.path,
            f.action,
            "explicit" if f.explicit else f"default ({rules.fields.default})",
            f.shape,
        ]
        for f in policy.coverage()
    ]
    gates = [
        [
            g.name,
            f"{'>=' if g.kind == 'recall' else '<='} {g.threshold:g}",
            _pct(g.measured),
            "PASS" if g.passed else "FAIL",
        ]
        for g in ev.gates
    ]
    gates.append(
        [
            "pre-filter gives Presidio's findings",
            "all items",
            f"{ev.corpus_items - len(ev.prefilter_disagreements)}/{ev.corpus_items}",
            "PASS" if not ev.prefilter_disagreements else "FAIL",
        ]
    )
    return {
        "gates": gates,
        "entities": entities,
        "recognizers": recognizers,
        "allow": allow,
        "fields": fields,
        "changes": [[c.area, c.name, c.change, c.detail] for c in changes],
        "fail_closed": [list(r) for r in _fail_closed(rules)],
        "kinds": _group_rows(ev.by_label),
        "syntaxes": _group_rows(ev.by_syntax),
    }


def _group_rows(groups: dict[str, GroupMetrics]) -> list[list[str]]:
    return [
        [
            g.name,
            str(g.secrets),
            str(g.caught),
            _pct(g.recall),
            str(g.benign),
            str(g.flagged),
            _pct(g.false_positive_rate),
            ", ".join((g.missed + g.flagged_ids)[:6]),
        ]
        for g in groups.values()
    ]


_GROUP_HEADERS = [
    "name",
    "secrets",
    "caught",
    "recall",
    "look-alikes",
    "flagged",
    "false positives",
    "missed or flagged items",
]

_HEADERS = {
    "kinds": ["kind", *_GROUP_HEADERS[1:]],
    "syntaxes": ["syntax", *_GROUP_HEADERS[1:]],
    "gates": ["gate", "threshold", "measured", "result"],
    "entities": [
        "entity",
        "group",
        "action",
        "min score",
        "labelled",
        "caught",
        "recall",
        "findings",
        "precision",
        "still readable",
        "missed (corpus ids)",
    ],
    "recognizers": [
        "rule",
        "entity",
        "action",
        "what it is for",
        "matches",
        "context words",
        "pre-filter",
        "findings",
        "false findings",
    ],
    "allow": ["allow rule", "regex", "protects from", "why"],
    "fields": ["kind", "field", "action", "set by", "shape"],
    "changes": ["area", "name", "change", "detail"],
    "fail_closed": ["setting", "value"],
}

_TITLES = {
    "kinds": "Recall and false positives per credential kind",
    "syntaxes": "Recall and false positives per syntax",
    "gates": "Verdict",
    "entities": "Entities: precision and recall on the labelled corpus",
    "recognizers": "Rules",
    "allow": "Allow-lists (text that must survive)",
    "fields": "Field coverage (scan = free text analysed; pass = kept; drop = emptied)",
    "changes": "Changes since the earlier version",
    "fail_closed": "Fail-closed settings",
}

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem;max-width:1400px;color:#1b1f24}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;width:100%;margin:.5rem 0}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}
td.mono{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;word-break:break-all;
min-width:22ch}
td.wrap{overflow-wrap:anywhere;min-width:20ch}
.PASS{background:#dafbe1}.FAIL{background:#ffebe9}
.badge{padding:2px 8px;border-radius:4px;font-weight:600}
.loosened{background:#fff8c5}.removed{background:#ffebe9}.added,.tightened{background:#dafbe1}
code{font-family:ui-monospace,monospace}
"""

#: every section the page can have, in page order (``data-section`` names); "kinds" and
#: "syntaxes" need a corpus with labels, "changes" needs ``since`` (see ``review_sections``)
REVIEW_SECTIONS: tuple[str, ...] = (
    "gates",
    "entities",
    "kinds",
    "syntaxes",
    "recognizers",
    "allow",
    "changes",
    "fields",
    "fail_closed",
    "benign",
)


def review_sections(ev: Evaluation, since: str | None) -> list[str]:
    """The sections this evaluation's page has, in page order."""
    skip = set() if since else {"changes"}
    if not (ev.by_label or ev.by_syntax):
        skip |= {"kinds", "syntaxes"}
    return [name for name in REVIEW_SECTIONS if name not in skip]


_MONO_COLUMNS = {("recognizers", 4), ("recognizers", 6), ("allow", 1)}
_WRAP_COLUMNS = {("recognizers", 3)}  # prose that quotes long tokens (addresses, versions)
_TWO_PART_KEYS = {"fields", "changes"}  # a row is named by its first two cells


def _html_table(name: str, rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _HEADERS[name])
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = ""
            if (name, i) in _MONO_COLUMNS:
                cls = "mono"
            elif (name, i) in _WRAP_COLUMNS:
                cls = "wrap"
            elif v in ("PASS", "FAIL", "loosened", "removed", "added", "tightened"):
                cls = v
            cells.append(
                f'<td class="{cls}">{html.escape(v)}</td>' if cls else f"<td>{html.escape(v)}</td>"
            )
        key = f"{row[0]}.{row[1]}" if name in _TWO_PART_KEYS else row[0]
        body.append(f'<tr data-row="{html.escape(key)}">{"".join(cells)}</tr>')
    if not rows:
        body.append(f'<tr><td colspan="{len(_HEADERS[name])}">(none)</td></tr>')
    return (
        f'<section data-section="{name}"><h2 id="{name}">{html.escape(_TITLES[name])}</h2>'
        f'<table id="table-{name}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )


def _md_table(name: str, rows: list[list[str]]) -> str:
    def cell(v: str) -> str:
        return v.replace("|", "\\|").replace("\n", "<br>")

    lines = [f"## {_TITLES[name]}", "", "| " + " | ".join(_HEADERS[name]) + " |"]
    lines.append("|" + "---|" * len(_HEADERS[name]))
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows] or ["| (none) |"]
    return "\n".join(lines)


def write_review(
    out_dir: Path,
    rules: RuleSet,
    rules_source: str,
    ev: Evaluation,
    corpus: list[CorpusItem],
    changes: list[RuleChange],
    since: str | None,
) -> ReportPaths:
    out_dir.mkdir(parents=True, exist_ok=True)
    policy = FieldPolicy(rules)
    tables = _rows(rules, ev, policy, changes)
    order = [name for name in review_sections(ev, since) if name != "benign"]
    verdict = "PASS" if ev.passed else "FAIL"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    by_id = {i.id: i for i in corpus}
    flagged = [by_id[i] for i in ev.benign_flagged if i in by_id]
    active = {r.entity for r in rules.recognizers}
    if rules.settings.nlp.engine != "none":
        active |= set(rules.settings.nlp.entities)
    uncovered = sorted(set(rules.entities) - active)
    summary = (
        f"Rules version {rules.version} ({rules_source}); corpus of {ev.corpus_items} labelled "
        f"telemetry strings, {ev.benign_items} of them benign look-alikes; "
        f"{ev.prefilter_skipped} skipped Presidio through the pre-filter. Generated {when}."
    )
    if uncovered:
        summary += (
            f" Not detected in this configuration (no recognizer): {', '.join(uncovered)}"
            " (names need settings.nlp.engine: spacy and an installed model)."
        )
    html_parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>rankscope redaction review {html.escape(rules.version)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Redaction review: rules {html.escape(rules.version)} "
        f'<span class="badge {verdict}">{verdict}</span></h1>',
        f"<p>{html.escape(summary)}</p>",
        f"<p>{html.escape(rules.description)}</p>",
    ]
    md_parts = [
        f"# Redaction review: rules {rules.version} ({verdict})",
        "",
        summary,
        "",
        rules.description,
    ]
    for name in order:
        html_parts.append(_html_table(name, tables[name]))
        md_parts += ["", _md_table(name, tables[name])]
    flagged_rows = [[i.id, i.kind, i.field, i.text[:400]] for i in flagged]
    html_parts.append('<section data-section="benign">')
    html_parts.append("<h2 id=benign>Benign look-alikes that were flagged</h2>")
    html_parts.append(
        "<table><thead><tr><th>id</th><th>kind</th><th>field</th><th>text</th></tr></thead><tbody>"
        + "".join(
            "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>"
            for r in flagged_rows
        )
        + ("" if flagged_rows else "<tr><td colspan=4>(none)</td></tr>")
        + "</tbody></table></section>"
    )
    md_parts += ["", "## Benign look-alikes that were flagged", ""]
    md_parts += [f"- `{r[0]}` ({r[1]}.{r[2]}): `{r[3]}`" for r in flagged_rows] or ["(none)"]
    html_parts.append("</body></html>")
    paths = ReportPaths(
        out_dir / "redaction-review.html",
        out_dir / "redaction-review.md",
        out_dir / "redaction-review.json",
    )
    paths.html.write_text("\n".join(html_parts), encoding="utf-8")
    paths.markdown.write_text("\n".join(md_parts) + "\n", encoding="utf-8")
    write_json(paths.json, ev, changes, since)
    return paths
