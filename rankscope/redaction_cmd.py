"""``rankscope redaction``: review the rules, read the audit, hash a value like the workers do."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

redaction_app = typer.Typer(
    help="Redaction rules: security review report, audit counts, hashed values.",
    no_args_is_help=True,
)
console = Console()

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO_ROOT / "tests" / "data" / "redaction" / "corpus.jsonl"

RulesOpt = Annotated[
    Path | None,
    typer.Option(
        "--rules", envvar="RANKSCOPE_REDACTION_RULES", help="Rules file (default: packaged)."
    ),
]


@redaction_app.command()
def review(
    out: Annotated[Path, typer.Option(help="Directory for the HTML, Markdown and JSON.")] = Path(
        ".rankscope/reports"
    ),
    rules_path: RulesOpt = None,
    corpus: Annotated[Path, typer.Option(help="Labelled corpus (JSON lines).")] = DEFAULT_CORPUS,
    since: Annotated[
        str | None,
        typer.Option(
            help="Earlier rules to compare with: a file, or git:REV[:PATH] "
            "(e.g. git:HEAD~5 or git:v0.1.0)."
        ),
    ] = None,
) -> None:
    """Measure the rules on the labelled corpus and write the security review report.

    Exits 1 when a recall or false-positive threshold of the rules file is not met, so CI can
    gate on it.
    """
    from rankscope.redaction.engine import PresidioRedactor
    from rankscope.redaction.report import write_review
    from rankscope.redaction.review import diff_rules, evaluate, load_corpus
    from rankscope.redaction.rules import DEFAULT_RULES_PATH, load_rules, load_rules_at

    rules = load_rules(rules_path)
    redactor = PresidioRedactor(rules, key=b"review-only-key-not-a-secret")
    items = load_corpus(corpus)
    with console.status(f"evaluating {len(items)} corpus items"):
        ev = evaluate(redactor, items)
    changes = diff_rules(load_rules_at(since), rules) if since else []
    source = str(rules_path or DEFAULT_RULES_PATH.relative_to(REPO_ROOT))
    paths = write_review(out, rules, source, ev, items, changes, since)
    table = Table("gate", "threshold", "measured", "result")
    for g in ev.gates:
        sign = ">=" if g.kind == "recall" else "<="
        measured = "n/a" if g.measured is None else f"{g.measured:.3f}"
        table.add_row(
            g.name,
            f"{sign} {g.threshold:g}",
            measured,
            "[green]PASS[/]" if g.passed else "[red]FAIL[/]",
        )
    console.print(table)
    if ev.prefilter_disagreements:
        console.print(
            f"[red]pre-filter changed findings on {len(ev.prefilter_disagreements)} items:[/] "
            f"{', '.join(ev.prefilter_disagreements[:10])}"
        )
    if changes:
        console.print(f"{len(changes)} change(s) since {since}")
    console.print(f"report: [bold]{paths.html}[/] (and .md, .json)")
    raise typer.Exit(0 if ev.passed else 1)


@redaction_app.command()
def audit(
    job: Annotated[str | None, typer.Option(help="Only this job.")] = None,
    hours: Annotated[float, typer.Option(help="Look back this many hours.")] = 24.0,
    by: Annotated[
        str, typer.Option(help="Group by: entity, field, kind, rule (comma-separated).")
    ] = "kind,field,entity,action",
    clickhouse_url: Annotated[
        str | None, typer.Option("--clickhouse-url", envvar="RANKSCOPE_CLICKHOUSE_URL")
    ] = None,
    home: Annotated[Path, typer.Option("--home", envvar="RANKSCOPE_HOME")] = Path(".rankscope"),
    database: Annotated[str, typer.Option("--database", envvar="RANKSCOPE_DATABASE")] = (
        "rankscope"
    ),
) -> None:
    """What redaction found and did: counts per kind, field, entity and rule (never values)."""
    from rankscope.cli import local_clickhouse_url
    from rankscope.sinks.clickhouse import check_database_name, connect

    allowed = {"kind", "field", "entity", "rule", "action", "job_id", "cluster", "rules_version"}
    cols = [c.strip() for c in by.split(",") if c.strip()]
    bad = [c for c in cols if c not in allowed]
    if bad or not cols:
        raise typer.BadParameter(f"--by takes {sorted(allowed)}", param_hint="--by")
    db = check_database_name(database)
    client = connect(clickhouse_url or local_clickhouse_url(home))
    where = "window_start >= now() - toIntervalSecond({secs:UInt64})"
    params: dict[str, object] = {"secs": int(hours * 3600)}
    if job:
        where += " AND job_id = {job:String}"
        params["job"] = job
    group = ", ".join(cols)
    sql = (
        f"SELECT {group}, sum(count) AS findings, min(window_start) AS first, "
        f"max(window_start) AS last FROM {db}.redaction_audit FINAL WHERE {where} "
        f"GROUP BY {group} ORDER BY findings DESC, {group}"
    )
    rows = list(client.query(sql, parameters=params).named_results())
    quarantined = client.query(
        f"SELECT count() FROM {db}.redaction_quarantine FINAL WHERE "
        + ("job_id = {job:String}" if job else "1")
        + " AND ts >= now() - toIntervalSecond({secs:UInt64})",
        parameters=params,
    ).result_rows[0][0]
    table = Table(*cols, "findings", "windows (UTC)", title="redaction audit")
    for r in rows:
        first, last = (f"{r[k]:%m-%d %H:%M}" for k in ("first", "last"))
        span = first if first == last else f"{first} .. {last}"
        table.add_row(*(str(r[c]) for c in cols), f"{r['findings']:,}", span)
    console.print(table)
    total = sum(int(r["findings"]) for r in rows)
    console.print(
        f"{total:,} findings in {len(rows)} group(s); {quarantined:,} event(s) quarantined"
    )


@redaction_app.command("hash")
def hash_value(
    value: Annotated[str, typer.Argument(help="The raw value, e.g. an IP address.")],
    entity: Annotated[str, typer.Option(help="Entity type, e.g. IP_ADDRESS.")] = "IP_ADDRESS",
    rules_path: RulesOpt = None,
    home: Annotated[Path, typer.Option("--home", envvar="RANKSCOPE_HOME")] = Path(".rankscope"),
) -> None:
    """Print the token the workers write for a hashed value (to search for it, or to map a
    peer address to a node in the analysis config)."""
    from rankscope.redaction.keys import hash_token, load_key
    from rankscope.redaction.rules import load_rules

    rules = load_rules(rules_path)
    key = load_key(rules.settings.key_env, home / "redaction.key")
    if key is None:
        raise typer.BadParameter(
            f"no key: set ${rules.settings.key_env} or run a worker with --home {home} first"
        )
    console.print(hash_token(key, entity, value, rules.settings.hash_hex_chars))
