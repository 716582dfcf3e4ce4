"""``rankscope capacity``: what a fleet of N GPUs needs, from the measured inputs of
``bench/capacity_inputs.py`` (docs/capacity.md), with a platform team's own figures on top."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from rankscope.cli.options import console


def capacity(
    gpus: Annotated[list[int], typer.Option("--gpus", min=1, help="Fleet size (repeat).")],
    inputs: Annotated[
        Path, typer.Option(help="The measured inputs (bench/capacity_inputs.py's JSON).")
    ] = Path("bench/results/capacity_inputs.json"),
    events_per_gpu_s: Annotated[
        float | None, typer.Option(help="Your event rate per GPU (default: the measured mix).")
    ] = None,
    gpus_per_job: Annotated[int, typer.Option(min=1)] = 512,
    replication_factor: Annotated[int, typer.Option(min=1)] = 3,
    utilisation: Annotated[
        float, typer.Option(min=0.01, max=1.0, help="The busiest a core should run.")
    ] = 0.5,
) -> None:
    """Print worker and sink cores, partitions, broker MB/s and storage per day for --gpus."""
    from rankscope.capacity import inputs_from_json, plan

    if not inputs.is_file():
        raise typer.BadParameter(
            f"{inputs} not found: run bench/capacity_inputs.py in a checkout", param_hint="--inputs"
        )
    overrides: dict[str, Any] = {
        "gpus_per_job": gpus_per_job,
        "replication_factor": replication_factor,
        "target_utilisation": utilisation,
    }
    if events_per_gpu_s is not None:
        overrides["events_per_gpu_s"] = events_per_gpu_s
    model = inputs_from_json(json.loads(inputs.read_text()), **overrides)
    console.print(f"inputs: {model.source}")
    for n in gpus:
        console.print_json(plan(model, n).model_dump_json())
