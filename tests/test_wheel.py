"""The wheel as users install it: built from the tree, installed into a fresh virtualenv outside
the repository, used from a temporary working directory.

`make demo` and the rest of the suite run an editable install inside the repository, which hides
everything a wheel leaves out (a data file that is not package data, a path that points into the
source tree, a second top-level module). This test is the one place that sees the package the
way `pip install rankscope` or the compose image does.

Third-party dependencies are not downloaded again (about 1.5 GB): the fresh environment sees the
test environment's site-packages through a path file, which adds the directory to ``sys.path``
without running that environment's own path files, so the editable install of this repository
stays invisible there. ``pip check`` then proves the wheel's requirements are met.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL_FOLDERS = ("collectors", "streams", "schemas", "sinks", "redaction")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _source_copy(dest: Path) -> Path:
    """The files git would commit (tracked and untracked-not-ignored), links kept as links.

    Built from a copy, never in place: setuptools' build/ directory keeps modules that were
    deleted from the tree and would put them in the wheel."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        rel = Path(os.fsdecode(raw))
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = _source_copy(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(src),
        ],
        cwd=src,
    )
    (whl,) = out.glob("rankscope-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv outside the repository with the wheel installed; yields its python."""
    env_dir = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(env_dir)], cwd=env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=env_dir,
        ).strip()
    )
    (site / "_rankscope_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        cwd=env_dir,
    )
    yield python


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory far from the repository."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


def _clean_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKSCOPE_", "PYTHON"))}
    env["HOME"] = str(workdir)
    return env


def test_the_wheel_installs_rankscope_and_nothing_else_at_top_level(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"rankscope"}
    for folder in TOP_LEVEL_FOLDERS:
        assert f"rankscope/{folder}/__init__.py" in names, folder
    assert not any("/tests/" in n or n.startswith("tests/") for n in names)
    assert not any("simulator" in n for n in names if n.startswith("rankscope/collectors/"))


def test_commands_start_from_any_directory(installed: Path, workdir: Path) -> None:
    rankscope = installed.parent / "rankscope"
    env = _clean_env(workdir)
    assert "worker" in _run([str(rankscope), "--help"], cwd=workdir, env=env)
    assert "--help" in _run([str(rankscope), "worker", "--help"], cwd=workdir, env=env)
    assert "Usage" in _run([str(installed), "-m", "rankscope", "--help"], cwd=workdir, env=env)


def test_packaged_resources_load_through_the_installed_package(
    installed: Path, workdir: Path
) -> None:
    probe = textwrap.dedent(
        """
        import importlib, json, sys
        from pathlib import Path

        import rankscope
        site = Path(rankscope.__file__).resolve().parent
        out = {"site": str(site)}

        from rankscope.streams.recovery.policy import DEFAULT_POLICY_PATH, load_policy
        policy = load_policy()
        out["policy"] = [str(DEFAULT_POLICY_PATH.resolve()), len(policy.rules)]

        from rankscope.schemas.xid_catalogue import CATALOGUE_PATH, xid_catalogue
        out["xid_catalogue"] = [str(CATALOGUE_PATH.resolve()), len(xid_catalogue())]

        from rankscope.redaction.rules import DEFAULT_RULES_PATH, load_rules
        rules = load_rules()
        out["rules"] = [str(DEFAULT_RULES_PATH.resolve()), len(rules.recognizers)]

        from rankscope.sinks.clickhouse import available_migrations
        migrations = available_migrations()
        out["migrations"] = [[str(m.path.resolve()), len(m.path.read_text())] for m in migrations]

        from rankscope.sinks.named_queries import SQL_DIR, load_queries
        out["queries"] = [str(SQL_DIR.resolve()), sorted(load_queries())]

        from rankscope.schemas.export import JSON_DIR, schema_documents
        docs = schema_documents()
        on_disk = {p.name: p.read_text() for p in JSON_DIR.glob("*.json")}
        out["schemas"] = [str(JSON_DIR.resolve()), sorted(docs), sorted(on_disk)]

        from rankscope.grafana import packaged_dashboards
        dash = packaged_dashboards()
        out["dashboards"] = {p.name: json.loads(p.read_text())["uid"] for p in dash}
        out["dashboard_paths"] = [str(p.resolve()) for p in dash]

        from rankscope.cli.agent import EXAMPLE_CONFIG as example
        out["example"] = [str(example.resolve()), example.read_text()]

        for name in ("schemas", "collectors", "streams", "sinks", "redaction"):
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                out.setdefault("absent", []).append(name)

        print(json.dumps(out))
        """
    )
    got = json.loads(_run([str(installed), "-c", probe], cwd=workdir, env=_clean_env(workdir)))
    site = Path(got["site"])
    assert not site.is_relative_to(ROOT) and "site-packages" in site.parts

    def inside(path: str) -> bool:
        return Path(path).is_relative_to(site)

    assert inside(got["policy"][0]) and got["policy"][1] > 0
    assert inside(got["rules"][0]) and got["rules"][1] > 0
    assert inside(got["xid_catalogue"][0]) and got["xid_catalogue"][1] == 161
    assert got["migrations"] and all(inside(p) and size > 0 for p, size in got["migrations"])
    assert inside(got["queries"][0]) and got["queries"][1]
    json_dir, documents, on_disk = got["schemas"]
    assert inside(json_dir) and documents and sorted(documents) == on_disk
    assert got["dashboards"] and all(inside(p) for p in got["dashboard_paths"])
    assert all(got["dashboards"].values())
    example_path, example_text = got["example"]
    assert inside(example_path) and "collectors" in example_text
    assert sorted(got["absent"]) == sorted(TOP_LEVEL_FOLDERS)


def test_the_node_agent_does_not_load_the_simulator(installed: Path, workdir: Path) -> None:
    probe = (
        "import sys, rankscope.collectors.agent, rankscope.cli.agent; "
        "print(sorted(m for m in sys.modules if m.startswith('rankscope.simulation')))"
    )
    out = _run([str(installed), "-c", probe], cwd=workdir, env=_clean_env(workdir))
    assert out.strip() == "[]"


def test_pip_check_finds_the_requirements_met(installed: Path, workdir: Path) -> None:
    _run([str(installed), "-m", "pip", "check"], cwd=workdir, env=_clean_env(workdir))


def test_grafana_build_writes_under_the_working_directory(installed: Path, workdir: Path) -> None:
    rankscope = installed.parent / "rankscope"
    env = _clean_env(workdir)
    _run([str(rankscope), "grafana", "build"], cwd=workdir, env=env)
    written = sorted(workdir.rglob("*.json"))
    assert written, "grafana build wrote nothing under the working directory"
    site_dash = Path(
        _run(
            [
                str(installed),
                "-c",
                "from rankscope.grafana import packaged_dashboards as p; print(p()[0].parent)",
            ],
            cwd=workdir,
            env=env,
        ).strip()
    )
    packaged = {p.name: p.read_text() for p in site_dash.rglob("*.json")}  # health/ too
    assert {p.name for p in written} == set(packaged)
    assert all(p.read_text() == packaged[p.name] for p in written)


def test_schemas_export_writes_under_the_working_directory(installed: Path, workdir: Path) -> None:
    rankscope = installed.parent / "rankscope"
    _run([str(rankscope), "schemas-export"], cwd=workdir, env=_clean_env(workdir))
    written = sorted(p.name for p in (workdir / "schemas-json").glob("*.json"))
    assert "span.v1.json" in written and "incident.v1.json" in written
