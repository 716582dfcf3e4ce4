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
    HomeOpt,
    console,
    local_clickhouse_url,
)


def incidents(
    job: Annotated[str | None, typer.Option(help="Only this job.")] = None,
    limit: int = 20,
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = DEFAULT_DATABASE,
    report_dir: Annotated[
        Path | None,
        typer.Option(help="Also write the job's report (HTML and Markdown) here; needs --job."),
    ] = None,
) -> None:
    """Print incidents as readable timelines: what failed first, and why the others failed."""
    from rankscope.incident_report import write_incident_report
    from rankscope.report import print_incidents
    from rankscope.sinks.clickhouse import connect

    url = clickhouse_url or local_clickhouse_url(home)
    client = connect(url)
    print_incidents(client, database, console, job_id=job, limit=limit)
    if report_dir is not None:
        if not job:
            raise typer.BadParameter("--report-dir needs --job", param_hint="--report-dir")
        path = write_incident_report(client, database, job, report_dir)
        console.print(f"report written to [bold]{path}[/] (and .md)")
