"""The CLI's failure contract (issue 18 point 8): a service that cannot be reached is one
readable line on stderr and exit code 3, with the traceback only under ``--debug``; and
``--version`` says what is installed. Run as an operator runs it: a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from rankscope.cli.options import EXIT_INPUT, EXIT_UNREACHABLE

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RANKSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "COLUMNS": "200", **(env or {})},
        check=False,
    )


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A local port nobody listens on: bound, then released (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [["query", "SELECT 1"], ["migrate"], ["incidents"], ["recovery", "history"]],
    ids=lambda c: c[0] if isinstance(c, list) else str(c),
)
def test_an_unreachable_clickhouse_is_one_line_and_exit_3(
    command: list[str], closed_port: int
) -> None:
    url = f"http://localhost:{closed_port}"
    done = _cli(*command, "--clickhouse-url", url)
    assert done.returncode == EXIT_UNREACHABLE, done.stderr
    line = _one_line(done)
    assert line == f"rankscope: error: cannot reach ClickHouse at {url}: connection refused"


def test_the_password_of_an_unreachable_clickhouse_is_not_printed(closed_port: int) -> None:
    done = _cli("migrate", "--clickhouse-url", f"http://admin:s3cret-pw@localhost:{closed_port}")
    assert done.returncode == EXIT_UNREACHABLE
    line = _one_line(done)
    assert "s3cret-pw" not in line and "admin" not in line
    assert f"at http://localhost:{closed_port}:" in line


def test_an_unreachable_broker_is_one_line_and_exit_3(closed_port: int) -> None:
    done = _cli("recovery", "status", "--bootstrap", f"127.0.0.1:{closed_port}")
    assert done.returncode == EXIT_UNREACHABLE, done.stderr
    line = _one_line(done)
    assert line.startswith(f"rankscope: error: Kafka at 127.0.0.1:{closed_port} did not answer")
    assert "Connection refused" in line


def test_debug_keeps_the_traceback(closed_port: int) -> None:
    url = f"http://localhost:{closed_port}"
    for done in (
        _cli("--debug", "query", "SELECT 1", "--clickhouse-url", url),
        _cli("query", "SELECT 1", "--clickhouse-url", url, env={"RANKSCOPE_DEBUG": "1"}),
    ):
        assert done.returncode == 1
        assert "Traceback" in done.stderr or "OperationalError" in done.stderr
        assert "rankscope: error:" not in done.stderr


def test_a_missing_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _cli("redaction", "hash", "10.0.0.1", "--rules", str(tmp_path / "absent.yaml"))
    assert done.returncode == EXIT_INPUT, done.stderr
    line = _one_line(done)
    assert line.startswith("rankscope: error:") and "absent.yaml" in line


def test_version_is_the_installed_distribution() -> None:
    done = _cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"rankscope {version('rankscope')}\n"
