"""``rankscope grafana build``: the dashboards as code, written as JSON for Grafana."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rankscope.cli.options import DEFAULT_HOME, HomeOpt, console

grafana_app = typer.Typer(help="Grafana dashboards as code.", no_args_is_help=True)


@grafana_app.command("build")
def grafana_build(
    out: Annotated[
        Path | None,
        typer.Option(
            help="Directory (default: HOME/dashboards). The copy shipped in the package and "
            "provisioned by compose is rankscope/dashboards."
        ),
    ] = None,
    home: HomeOpt = DEFAULT_HOME,
) -> None:
    """Write the dashboards (JSON for Grafana's file provisioning) from rankscope/grafana.py."""
    from rankscope.grafana import write_dashboards

    for path in write_dashboards(out or home / "dashboards"):
        console.print(f"wrote {path}")
