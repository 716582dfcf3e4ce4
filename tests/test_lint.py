"""Lint and types are part of the suite, so CI (which runs `make test`) enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check_is_clean() -> None:
    r = _run("ruff", "check", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_is_clean() -> None:
    r = _run("ruff", "format", "--check", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_is_clean() -> None:
    r = _run("mypy")
    assert r.returncode == 0, r.stdout + r.stderr
