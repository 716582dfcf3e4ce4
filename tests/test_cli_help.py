"""Help texts that are current (issue 18 point 8): every registered command's ``--help`` lists
every option it really has (typer's own parameters compared with the printed help), says what
the command does, and ``worker --help`` names the stages a worker runs today."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import rankscope.streams.app as streams_app
from rankscope.cli import app

#: rich draws help in boxes; wide enough that no option name is cut
RUNNER = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240", "NO_COLOR": "1"})


def _commands(group: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out |= _commands(cmd, (*path, name))
        else:
            out[(*path, name)] = cmd
    return out


COMMANDS = _commands(typer.main.get_group(app))


def _help(*path: str) -> str:
    result = RUNNER.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.replace("│", " ").split())


def test_every_command_is_covered() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"worker", "sink", "query", "eval", "recovery history", "redaction review"} <= names
    assert len(names) >= 25


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_help_lists_every_option_and_says_what_the_command_does(path: tuple[str, ...]) -> None:
    text = _help(*path)
    cmd = COMMANDS[path]
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            assert str(param.name).upper() in text.upper(), (path, param.name)
            continue
        for opt in param.opts:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), (path, opt)
    summary = (cmd.help or "").split("\n")[0].strip()
    assert len(summary) > 15, path  # a sentence, not a placeholder
    assert " ".join(summary.split())[:40] in text, path


def test_the_root_help_offers_version_and_debug() -> None:
    text = _help()
    assert "--version" in text and "--debug" in text


def test_worker_help_describes_the_stages_a_worker_runs_today() -> None:
    """The stages wired in ``rankscope.streams.app`` and the word the help uses for each."""
    stages = {
        "ValidateStage": "validate",
        "build_redaction": "redact",
        "WindowsStage": "windows",
        "AnalysisStage": "incidents",
        "DeciderHost": "recovery",
    }
    text = _help("worker").lower()
    for stage, word in stages.items():
        assert hasattr(streams_app, stage), stage  # a stage renamed or gone: update the help
        assert word in text, (stage, word)
    assert "opentelemetry" in text and "dead letter" in text
