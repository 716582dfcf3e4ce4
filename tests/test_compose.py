"""The compose stack is not run here (no Docker engine); it must stay consistent with the CLI."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.main import get_command

from rankscope.cli import app

COMPOSE = Path(__file__).resolve().parents[1] / "compose" / "docker-compose.yml"


def test_compose_services_run_commands_the_cli_has() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    cli = get_command(app)
    commands = set(cli.commands)  # type: ignore[attr-defined]
    built = {n: s for n, s in doc["services"].items() if "build" in s}
    assert {"worker", "sink", "migrate", "simulator"} <= set(built)
    for name, svc in built.items():
        assert svc["command"][0] in commands, f"{name} runs unknown command {svc['command'][0]}"
        env = svc["environment"]
        assert env["RANKSCOPE_BOOTSTRAP"] == "kafka:9092"


def test_compose_pins_the_tested_kafka_version() -> None:
    from rankscope.services import KAFKA_VERSION

    doc = yaml.safe_load(COMPOSE.read_text())
    assert doc["services"]["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
