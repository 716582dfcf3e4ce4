"""One settings model for flags and environment (issue 18 point 8): every command's common
options read the one environment name of their ``Settings`` field, --bootstrap is optional
everywhere, and the documented precedence holds: flag > specific env > common env > config file
> default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from rankscope.cli import app
from rankscope.cli.options import EXIT_INPUT, EXIT_UNREACHABLE, env_name
from rankscope.collectors.agent.config import COMMON_ENV, AgentConfig
from rankscope.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

#: option -> the Settings field it sets
COMMON = {
    "--bootstrap": "bootstrap",
    "--clickhouse-url": "clickhouse_url",
    "--database": "database",
    "--topic-prefix": "topic_prefix",
    "--home": "home",
    "--rules": "redaction_rules",
}


def _commands(group: Any, path: str = "") -> dict[str, Any]:
    """Every leaf command by its full name (typer ships its own click: duck-typed here)."""
    out: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        full = f"{path} {name}".strip()
        if hasattr(cmd, "commands"):
            out |= _commands(cmd, full)
        else:
            out[full] = cmd
    return out


COMMANDS = _commands(typer.main.get_group(app))


def test_every_common_option_reads_its_settings_field_env_name() -> None:
    seen: set[str] = set()
    for name, cmd in COMMANDS.items():
        for param in cmd.params:
            flag = next((o for o in param.opts if o in COMMON), None)
            if flag is None:
                continue
            seen.add(flag)
            field = COMMON[flag]
            assert field in Settings.model_fields
            assert param.envvar == env_name(field) == f"RANKSCOPE_{field.upper()}", (name, flag)
            assert not param.required, (name, flag)
            if flag in ("--bootstrap", "--clickhouse-url"):
                assert param.default is None, (name, flag)
    assert seen == set(COMMON)


def test_bootstrap_is_offered_by_every_command_that_talks_to_kafka() -> None:
    kafka_commands = {
        "worker", "sink", "demo", "simulate", "eval", "replay", "kafka-acls",
        "recovery pause", "recovery resume", "recovery status", "recovery run",
    }  # fmt: skip
    for name in kafka_commands:
        opts = {o for p in COMMANDS[name].params for o in p.opts}
        assert "--bootstrap" in opts, name


def test_the_agent_reads_the_same_common_names() -> None:
    fields = {name.removeprefix("RANKSCOPE_").lower() for name in COMMON_ENV}
    assert {env_name(f) for f in fields} == set(COMMON_ENV)


def _agent(tmp_path: Path, env: dict[str, str], bootstrap: str | None) -> AgentConfig:
    kafka = f"kafka:\n  bootstrap: {bootstrap}\n" if bootstrap else "kafka: {}\n"
    config = tmp_path / "agent.yaml"
    config.write_text(f"cluster: c1\nnode: n1\n{kafka}")
    return AgentConfig.load(config, env=env)


def test_agent_precedence_specific_env_over_common_env_over_file(tmp_path: Path) -> None:
    specific, common = "RANKSCOPE_AGENT__KAFKA__BOOTSTRAP", "RANKSCOPE_BOOTSTRAP"
    both = {specific: "specific:9092", common: "common:9092"}
    assert _agent(tmp_path, both, "file:9092").kafka.bootstrap == "specific:9092"
    assert _agent(tmp_path, {common: "common:9092"}, "file:9092").kafka.bootstrap == "common:9092"
    assert _agent(tmp_path, {}, "file:9092").kafka.bootstrap == "file:9092"
    prefixed = _agent(tmp_path, {"RANKSCOPE_TOPIC_PREFIX": "team-a"}, "file:9092")
    assert prefixed.kafka.topic_prefix == "team-a"
    assert _agent(tmp_path, {}, "file:9092").kafka.topic_prefix == "rankscope"  # the default


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RANKSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "COLUMNS": "200", **env},
        check=False,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_precedence_flag_over_env_over_default(tmp_path: Path) -> None:
    """Which ClickHouse a command tried shows in its error line: two closed ports tell the
    flag's URL from the environment's, and with neither the local engine of --home is used."""
    from_env, from_flag = (f"http://localhost:{_closed_port()}" for _ in range(2))
    home = {"RANKSCOPE_HOME": str(tmp_path / "home")}

    env_only = _cli("query", "SELECT 1", env={"RANKSCOPE_CLICKHOUSE_URL": from_env, **home})
    assert env_only.returncode == EXIT_UNREACHABLE, env_only.stderr
    assert f"cannot reach ClickHouse at {from_env}:" in env_only.stderr

    both = _cli(
        "query",
        "SELECT 1",
        "--clickhouse-url",
        from_flag,
        env={"RANKSCOPE_CLICKHOUSE_URL": from_env, **home},
    )
    assert both.returncode == EXIT_UNREACHABLE, both.stderr
    assert f"cannot reach ClickHouse at {from_flag}:" in both.stderr

    neither = _cli("query", "SELECT 1", env=home)  # default: the (absent) local engine
    assert neither.returncode == EXIT_INPUT, neither.stderr
    assert str(tmp_path / "home") in " ".join(neither.stderr.replace("│", " ").split())


@pytest.mark.parametrize("command", [["worker"], ["recovery", "status"]], ids=" ".join)
def test_no_bootstrap_and_no_local_broker_is_a_usage_error(
    command: list[str], tmp_path: Path
) -> None:
    done = _cli(*command, "--home", str(tmp_path), env={})
    assert done.returncode == EXIT_INPUT, done.stderr
    text = " ".join(done.stderr.replace("│", " ").split())
    assert "no local broker runs under" in text and "RANKSCOPE_BOOTSTRAP" in text
