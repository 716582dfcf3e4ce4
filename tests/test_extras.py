"""The per-role extras of pyproject.toml and the one-line error that names a missing one.

``tests/test_wheel_agent_extra.py`` installs the agent extra for real; here: every module that
``rankscope.extras`` attributes to an extra really comes with that extra (directly or as a
dependency of one of its packages, in this full development install), and the CLI turns a
missing package into the line that says which extra to install.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError, packages_distributions, requires

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rankscope.cli.errors import explain
from rankscope.extras import PROVIDED_BY, MissingExtraError, extra_for, missing_extra
from tests.test_wheel import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]


@cache
def _installed() -> dict[str, list[str]]:
    return dict(packages_distributions())


def _direct(extra: str) -> set[str]:
    """The distributions an extra names, its self-references (``rankscope[worker]``) expanded."""
    out: set[str] = set()
    for spec in EXTRAS[extra]:
        req = Requirement(spec)
        if canonicalize_name(req.name) == "rankscope":
            for inner in req.extras:
                out |= _direct(inner)
        else:
            out.add(canonicalize_name(req.name))
    return out


def _closure(names: set[str]) -> set[str]:
    """``names`` and what they require, as installed here (unconditional requirements)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        for spec in reqs:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_every_extra_is_in_all_and_make_venv_installs_all() -> None:
    roles = set(EXTRAS) - {"all", "dev"}
    assert roles == {"agent", "tracing", "redact", "worker", "sink", "local"}
    assert _direct("all") == set().union(*(_direct(r) for r in roles))
    assert "-e '.[all,dev]'" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("module", sorted(PROVIDED_BY))
def test_each_module_comes_with_the_extra_named_for_it(module: str) -> None:
    extra = PROVIDED_BY[module]
    top = module.split(".", maxsplit=1)[0]
    dists = {canonicalize_name(d) for d in _installed().get(top, [])}
    assert dists, f"{top} is not installed in the development venv"
    assert dists & _closure(_direct(extra)), f"{module}: none of {dists} comes with [{extra}]"
    assert not dists & _closure(_base()), f"{module} comes with the base install already"


def _base() -> set[str]:
    return {canonicalize_name(Requirement(s).name) for s in PROJECT["dependencies"]}


def test_the_agent_path_needs_no_heavy_package_from_the_base() -> None:
    base = _closure(_base() | _direct("agent"))
    heavy = {"chdb-core", "faust-streaming", "presidio-analyzer", "spacy", "clickhouse-connect"}
    assert not base & heavy


def test_the_longest_known_prefix_names_the_extra() -> None:
    assert extra_for("opentelemetry.sdk.trace") == "tracing"
    assert extra_for("opentelemetry.proto.trace.v1") == "worker"
    assert extra_for("faust.types") == "worker"
    assert extra_for("numpy") is None


def test_a_missing_package_of_an_extra_is_one_line_naming_the_extra() -> None:
    code, line = explain(ModuleNotFoundError("No module named 'faust'", name="faust"), "x")
    assert code == 2
    assert line == "x needs the 'worker' extra (faust is not installed): pip install " + (
        "'rankscope[worker]'"
    )


def test_commands_that_run_the_local_services_ask_for_the_local_extra() -> None:
    exc = ModuleNotFoundError("No module named 'clickhouse_connect'", name="clickhouse_connect")
    known = explain(exc, "rankscope demo")
    assert known is not None and "'rankscope[local]'" in known[1]
    known = explain(exc, "rankscope query")
    assert known is not None and "'rankscope[sink]'" in known[1]


def test_an_unknown_missing_module_stays_a_bug_with_its_traceback() -> None:
    assert explain(ModuleNotFoundError("No module named 'nope'", name="nope"), "x") is None
    assert missing_extra(ValueError("x"), "x") is None


def test_a_missing_extra_raised_deeper_keeps_its_own_words() -> None:
    exc = MissingExtraError("source redaction", "redact", "phonenumbers", " (or turn it off)")
    known = explain(exc, "rankscope agent")
    assert known == (
        2,
        "rankscope agent: source redaction needs the 'redact' extra (phonenumbers is not "
        "installed): pip install 'rankscope[redact]' (or turn it off)",
    )
