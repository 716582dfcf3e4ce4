"""The CLI's layout and what its commands need from the package (issue 12): one module per
command group importing only the shared options (no import cycle), and the packaged example
agent config, reference corpus and dashboards used from outside the repository."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.grafana import packaged_dashboards

ROOT = Path(__file__).resolve().parents[1]
CLI_DIR = ROOT / "rankscope" / "cli"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_command_modules_import_only_the_shared_options_of_the_cli() -> None:
    commands = [p for p in CLI_DIR.glob("*.py") if p.name not in ("__init__.py", "options.py")]
    assert len(commands) >= 8
    for path in commands:
        cli = {m for m in _imported_modules(path) if m.split(".")[:2] == ["rankscope", "cli"]}
        assert all(m.startswith("rankscope.cli.options") for m in cli), (path.name, cli)
    options = _imported_modules(CLI_DIR / "options.py")
    assert not any(m.startswith("rankscope.cli") for m in options), options


def test_only_the_entry_point_imports_the_cli() -> None:
    """The CLI is the top layer: the demo, the evaluation, the stack and the rest never reach
    up into it."""
    for path in sorted((ROOT / "rankscope").glob("*.py")):
        if path.name == "__main__.py":
            continue
        cli = [m for m in _imported_modules(path) if m.startswith("rankscope.cli")]
        assert cli == [], (path.name, cli)


def test_the_packaged_example_agent_config_passes_its_own_check(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rankscope", "agent", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    example = run("--example-config")
    assert example.returncode == 0, example.stderr
    assert example.stdout.startswith("# rankscope node agent")
    config = tmp_path / "agent.yaml"
    config.write_text(example.stdout)
    checked = run("--config", str(config), "--check")
    assert checked.returncode == 0, checked.stderr
    assert "config OK" in checked.stderr


def test_the_review_asks_for_a_corpus_when_none_is_packaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankscope.cli import redaction

    assert redaction.REFERENCE_CORPUS.is_file()
    monkeypatch.setattr(redaction, "REFERENCE_CORPUS", tmp_path / "absent.jsonl")
    result = CliRunner().invoke(app, ["redaction", "review", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "pass --corpus PATH" in " ".join(result.output.replace("│", " ").split())


def test_grafana_build_writes_under_home_by_default(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["grafana", "build", "--home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    packaged = {p.name: p.read_text() for p in packaged_dashboards()}
    written = {p.name: p.read_text() for p in (tmp_path / "dashboards").glob("*.json")}
    assert packaged and written == packaged
