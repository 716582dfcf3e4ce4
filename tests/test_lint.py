"""Lint and types are part of the suite, so CI (which runs `make test`) enforces them."""

from __future__ import annotations

import ast
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


def test_code_imports_the_installed_namespace_only() -> None:
    """collectors/, streams/, schemas/, sinks/ and redaction/ install as rankscope.*; a bare
    ``import schemas`` works only inside this checkout and loads a second copy of the module."""
    bare = {"collectors", "streams", "schemas", "sinks", "redaction"}
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    offenders = []
    for rel in tracked:
        path = ROOT / rel
        if path.is_symlink() or not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in bare]
    assert not offenders, "\n".join(offenders)
