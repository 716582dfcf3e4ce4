"""``rankscope incidents``: incidents from ClickHouse as readable timelines, and the job's report
(HTML and Markdown) on request."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_DATABASE,
    DEFAULT_HOME,
    ClickHouseOpt,
    DatabaseOpt,
    FormatOpt,
    HomeOpt,
    OutputFormat,
    console,
    local_clickhouse_url,
    render,
)


def incidents(
    job: Annotated[str | None, typer.Option(help="Only this job.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many incidents, newest first.")] = 20,
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = DEFAULT_DATABASE,
    report_dir: Annotated[
        Path | None,
        typer.Option(help="Also write the job's report (HTML and Markdown) here; needs --job."),
    ] = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Print incidents as readable timelines (--format table: what failed first, and why the
    others failed), or their rows as json or csv."""
    from rankscope.incident_report import write_incident_report
    from rankscope.report import incident_rows, print_incidents
    from rankscope.sinks.clickhouse import connect

    url = clickhouse_url or local_clickhouse_url(home)
    client = connect(url)
    if fmt is OutputFormat.table:
        print_incidents(client, database, console, job_id=job, limit=limit)
    else:
        rows = incident_rows(client, database, job, limit)
        columns = list(rows[0]) if rows else []
        render(columns, [list(r.values()) for r in rows], fmt)
    if report_dir is not None:
        if not job:
            raise typer.BadParameter("--report-dir needs --job", param_hint="--report-dir")
        path = write_incident_report(client, database, job, report_dir)
        console.print(f"report written to [bold]{path}[/] (and .md)")
