"""The deployment artifacts (deploy/): the agent's systemd unit and the Kubernetes manifests.

Nothing here can be started on a real fleet, so each artifact is checked against what its
consumer would check: ``systemd-analyze verify`` for the unit, the Kubernetes API's JSON schemas
(shipped by the ``kubernetes-validate`` package, no download) for the manifests, ``kubectl
kustomize`` for the kustomization where kubectl exists. And against the code: the paths the
agent's config reads and writes (derived from its pydantic models, not listed here) must be
reachable in the unit's sandbox and mounted in the DaemonSet, and the RBAC rules must grant
exactly the API requests the Kubernetes collector and actuator make (derived by running their
code), with no wildcard.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from rankscope.collectors.agent.config import AgentConfig, env_overrides
from rankscope.collectors.agent.registry import COLLECTORS

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "rankscope-agent.service"
ENV_EXAMPLE = DEPLOY / "systemd" / "agent.env.example"
KUBE = DEPLOY / "kubernetes"
EXAMPLE_CONFIG = ROOT / "rankscope" / "examples" / "agent.yaml"

# -- what the agent's config makes it read and write ------------------------------------------

#: config fields the agent WRITES (everything else that is a path is only read):
#: spool.dir (collectors/spool: segment files and the lock), kernel_log.state_path
#: (collectors/kernel_log: the kmsg sequence / journal cursor).
WRITTEN: frozenset[tuple[str, str]] = frozenset({("spool", "dir"), ("kernel_log", "state_path")})

#: kernel_log reads only the fields of its source (collectors/kernel_log/readers.py); "auto"
#: tries kmsg, then the journal, then the files, so it needs all of them.
KERNEL_LOG_SOURCE_FIELDS: dict[str, frozenset[str]] = {
    "kmsg": frozenset({"kmsg_path", "boot_id_path", "state_path"}),
    "journal": frozenset({"state_path"}),
    "file": frozenset({"paths"}),
}


@dataclass(frozen=True)
class AgentPath:
    section: str
    field: str
    path: PurePosixPath  # a directory for globs: their fixed leading part
    write: bool


def _glob_root(pattern: str) -> PurePosixPath:
    """The fixed directory a glob (with NCCL_DEBUG_FILE's %h/%p) can match under."""
    parts = PurePosixPath(pattern).parts
    fixed: list[str] = []
    for part in parts[:-1]:
        if re.search(r"[*?\[%]", part):
            break
        fixed.append(part)
    return PurePosixPath(*fixed) if fixed else PurePosixPath("/")


def agent_paths(env: Mapping[str, str], config_file: Path = EXAMPLE_CONFIG) -> list[AgentPath]:
    """Every file system path the agent touches with ``config_file`` plus the ``env`` overrides,
    every registered collector enabled (an absent section at its defaults): the values of the
    Path fields and of the ``paths`` globs of each section's pydantic config."""
    raw = yaml.safe_load(config_file.read_text())
    for section in COLLECTORS:
        raw.setdefault(section, {})
    merged = AgentConfig.model_validate(_merge(raw, env_overrides(env)))
    out: list[AgentPath] = []
    spool_dir = merged.spool.dir
    out.append(AgentPath("spool", "dir", PurePosixPath(spool_dir), True))
    for section, cfg in merged.collector_configs().items():
        wanted: frozenset[str] | None = None
        if section == "kernel_log" and getattr(cfg, "source", "auto") != "auto":
            wanted = KERNEL_LOG_SOURCE_FIELDS[cfg.source]  # type: ignore[attr-defined]
        for name in type(cfg).model_fields:
            if wanted is not None and name not in wanted:
                continue
            value = getattr(cfg, name)
            write = (section, name) in WRITTEN
            if isinstance(value, Path):
                out.append(AgentPath(section, name, PurePosixPath(value), write))
            elif name == "paths" and isinstance(value, list):
                out.extend(AgentPath(section, name, _glob_root(v), write) for v in value)
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _under(path: PurePosixPath, root: str | PurePosixPath) -> bool:
    return path == PurePosixPath(root) or PurePosixPath(root) in path.parents


# == systemd ==================================================================================


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's unit syntax: sections of ``Key=value`` lines; a key may repeat."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def _words(service: dict[str, list[str]], key: str) -> list[str]:
    return [w for v in service.get(key, []) for w in v.split()]


def _flag(service: dict[str, list[str]], key: str, default: str = "no") -> str:
    return (service.get(key) or [default])[-1]


def unit_env(unit_text: str, env_file: Path) -> dict[str, str]:
    """The agent's environment under the unit: Environment= lines, then the env file's."""
    service = parse_unit(unit_text)["Service"]
    env: dict[str, str] = {}
    for value in service.get("Environment", []):
        key, _, val = value.partition("=")
        env[key] = val
    for line in env_file.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, val = line.partition("=")
            env[key.strip()] = val.strip()
    return env


def sandbox_problems(unit_text: str, paths: list[AgentPath]) -> list[str]:
    """Why a path the agent needs is out of reach under the unit's sandbox (empty: none)."""
    service = parse_unit(unit_text)["Service"]
    workdir = PurePosixPath(_flag(service, "WorkingDirectory", "/"))
    writable = [PurePosixPath(p.lstrip("-")) for p in _words(service, "ReadWritePaths")]
    writable += [PurePosixPath("/var/lib") / d for d in _words(service, "StateDirectory")]
    inaccessible = [PurePosixPath(p.lstrip("-")) for p in _words(service, "InaccessiblePaths")]
    caps = set(_words(service, "AmbientCapabilities"))
    if service.get("CapabilityBoundingSet"):
        caps &= set(_words(service, "CapabilityBoundingSet"))
    allowed_devices = {v.split()[0] for v in service.get("DeviceAllow", [])}
    problems: list[str] = []
    for p in paths:
        path = p.path if p.path.is_absolute() else workdir / p.path
        what = f"{p.section}.{p.field} ({path})"
        if any(_under(path, i) for i in inaccessible):
            problems.append(f"{what} is under InaccessiblePaths")
        if _under(path, "/tmp") and _flag(service, "PrivateTmp") == "yes":
            problems.append(f"{what} is hidden by PrivateTmp")
        if any(_under(path, h) for h in ("/home", "/root", "/run/user")) and _flag(
            service, "ProtectHome"
        ) in ("yes", "tmpfs"):
            problems.append(f"{what} is hidden by ProtectHome")
        if _under(path, "/proc") and (
            _flag(service, "ProcSubset", "all") != "all"
            or _flag(service, "ProtectProc", "default") != "default"
        ):
            problems.append(f"{what} is hidden by ProcSubset/ProtectProc")
        if _under(path, "/dev"):
            if _flag(service, "PrivateDevices") == "yes":
                problems.append(f"{what} is hidden by PrivateDevices")
            if _flag(service, "DevicePolicy", "auto") != "auto" and str(path) not in (
                allowed_devices
            ):
                problems.append(f"{what} is not in DeviceAllow")
        if path == PurePosixPath("/dev/kmsg"):
            if _flag(service, "ProtectKernelLogs") == "yes":
                problems.append(f"{what} is denied by ProtectKernelLogs")
            if _flag(service, "User", "root") != "root" and "CAP_SYSLOG" not in caps:
                problems.append(f"{what} needs CAP_SYSLOG (kernel.dmesg_restrict=1)")
        sealed = _flag(service, "ProtectSystem") in ("strict", "full", "yes")
        if p.write and sealed and not any(_under(path, w) for w in writable):
            problems.append(f"{what} is written but not under ReadWritePaths/StateDirectory")
    return problems


@pytest.fixture(scope="module")
def unit_text() -> str:
    return UNIT.read_text()


def test_the_unit_runs_the_agent_with_restart_backoff_and_resource_limits(unit_text: str) -> None:
    unit = parse_unit(unit_text)
    service = unit["Service"]
    assert _flag(service, "ExecStart").split()[1:] == [
        "agent",
        "--config",
        "/etc/rankscope/agent.yaml",
    ]
    assert _flag(service, "Restart") == "on-failure"
    assert _flag(unit["Unit"], "StartLimitIntervalSec") == "0"  # never gives up
    assert service.get("RestartSec") and service.get("RestartMaxDelaySec")
    for key in ("CPUQuota", "MemoryMax", "Nice", "OOMScoreAdjust"):
        assert service.get(key), key
    assert int(_flag(service, "Nice")) > 0
    assert _flag(service, "User") not in ("", "root", "0")
    assert _flag(service, "NoNewPrivileges") == "yes"
    assert _flag(service, "ProtectSystem") == "strict"
    assert set(_words(service, "CapabilityBoundingSet")) <= {"CAP_SYSLOG", "CAP_SYS_PTRACE"}


def test_every_path_the_agent_config_names_is_reachable_in_the_sandbox(unit_text: str) -> None:
    paths = agent_paths(unit_env(unit_text, ENV_EXAMPLE))
    found = {(p.section, p.field) for p in paths}
    # the derivation sees what it must, or this test would check nothing
    assert {("spool", "dir"), ("fabric", "sysfs_root"), ("gpu", "proc_root")} <= found
    assert {("kernel_log", "kmsg_path"), ("nccl_log", "paths")} <= found
    assert sandbox_problems(unit_text, paths) == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("PrivateTmp=no", "PrivateTmp=yes"), "hidden by PrivateTmp"),
        (("ProtectKernelLogs=no", "ProtectKernelLogs=yes"), "ProtectKernelLogs"),
        (("DeviceAllow=/dev/kmsg r\n", ""), "not in DeviceAllow"),
        (("ReadWritePaths=/var/lib/rankscope\n", ""), "ReadWritePaths"),
        (("StateDirectory=rankscope\n", ""), "ReadWritePaths"),
        (("AmbientCapabilities=CAP_SYSLOG CAP_SYS_PTRACE", "AmbientCapabilities="), "CAP_SYSLOG"),
        (("ProcSubset=all", "ProcSubset=pid"), "ProcSubset"),
    ],
)
def test_the_sandbox_check_notices_a_setting_that_cuts_the_agent_off(
    unit_text: str, change: tuple[str, str], why: str
) -> None:
    old, new = change
    assert old in unit_text
    broken = unit_text.replace(old, new)
    if "ReadWritePaths" in why:  # either one alone still makes the state directory writable
        broken = broken.replace("ReadWritePaths=/var/lib/rankscope\n", "").replace(
            "StateDirectory=rankscope\n", ""
        )
    problems = sandbox_problems(broken, agent_paths(unit_env(broken, ENV_EXAMPLE)))
    assert any(why in p for p in problems), problems


def _systemd_version() -> int:
    out = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True)
    match = re.search(r"systemd (\d+)", out.stdout)
    return int(match.group(1)) if match else 0


def verify_complaints(unit_text: str, tmp_path: Path) -> list[str]:
    """What ``systemd-analyze verify`` says about the unit, beyond keys newer than this systemd.
    ExecStart must be executable for verify: this environment's rankscope stands in for
    /usr/local/bin/rankscope."""
    exe = shutil.which("rankscope") or str(ROOT / ".venv" / "bin" / "rankscope")
    unit = tmp_path / "rankscope-agent.service"
    unit.write_text(unit_text.replace("/usr/local/bin/rankscope", exe))
    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True
    )
    # Warnings do not change the exit status ("Failed to parse ..., ignoring"), so they are
    # read; only the exponential restart backoff's keys (systemd 254) may be unknown.
    newer = {"RestartSteps", "RestartMaxDelaySec"} if _systemd_version() < 254 else set()
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    complaints = [ln for ln in lines if not any(f"Unknown key '{k}'" in ln for k in newer)]
    return complaints if out.returncode == 0 else [*complaints, f"exit {out.returncode}"]


needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze here"
)


@needs_systemd
def test_systemd_analyze_verify_accepts_the_unit(unit_text: str, tmp_path: Path) -> None:
    assert verify_complaints(unit_text, tmp_path) == []


@needs_systemd
def test_systemd_analyze_verify_would_catch_a_bad_value(unit_text: str, tmp_path: Path) -> None:
    broken = unit_text.replace("DevicePolicy=closed", "DevicePolicy=closd")
    assert any("device policy" in c for c in verify_complaints(broken, tmp_path))
