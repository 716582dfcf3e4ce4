"""``rankscope schemas-export``: the JSON Schema files, written from the pydantic models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def schemas_export(
    out: Annotated[
        Path,
        typer.Option(
            help="Directory to write to (relative to the working directory). "
            "In a checkout, `--out schemas/json` refreshes the committed files."
        ),
    ] = Path("schemas-json"),
) -> None:
    """Write the JSON Schema of every event and derived record from the pydantic models."""
    from rankscope.schemas.export import main as export_main

    raise typer.Exit(export_main(out))
