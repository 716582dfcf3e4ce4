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

import json
import re
import shutil
import subprocess
import sys
import typing
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
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
#: the CLI installed beside the interpreter running the tests (the venv's)
RANKSCOPE = Path(sys.executable).parent / "rankscope"

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
        source = getattr(cfg, "source", "auto") if section == "kernel_log" else "auto"
        if source != "auto":
            wanted = KERNEL_LOG_SOURCE_FIELDS[source]
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
    exe = str(RANKSCOPE)
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


# == Kubernetes ===============================================================================

#: Kubernetes versions whose API schemas (from kubernetes-validate) the manifests must pass:
#: the oldest release still in wide use on GPU fleets we target, and the newest it ships.
KUBE_VERSIONS = ("1.30", kubernetes_validate.latest_version())


def kustomization() -> dict[str, Any]:
    doc = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def render_offline() -> list[dict[str, Any]]:
    """kustomize's build, for what this kustomization uses: its resources, the image tag, and
    configMapGenerator (files read from the repository, literals), without the hash suffix.
    Used where kubectl is absent; test_kubectl_kustomize_renders_the_same_objects compares."""
    kz = kustomization()
    docs: list[dict[str, Any]] = []
    for name in kz["resources"]:
        docs.extend(d for d in yaml.safe_load_all((KUBE / name).read_text()) if d)
    for gen in kz.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for item in gen.get("files", []):
            key, _, rel = item.partition("=")
            data[key] = (KUBE / rel).read_text()  # a missing file fails here, as in kustomize
        for item in gen.get("literals", []):
            key, _, value = item.partition("=")
            data[key] = value
        meta = {"name": gen["name"], "namespace": gen["namespace"]}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    tags = {i["name"]: i.get("newTag") for i in kz.get("images", [])}
    for _, container in _containers(docs):
        if container["image"] in tags:
            container["image"] = f"{container['image']}:{tags[container['image']]}"
    return docs


def _containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        if spec:
            for c in spec.get("containers", []):
                yield doc, c


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _base_name(name: str) -> str:
    """A generated ConfigMap's name without kustomize's content hash."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render_offline()


def test_every_manifest_passes_the_kubernetes_api_schema(docs: list[dict[str, Any]]) -> None:
    kinds = {d["kind"] for d in docs}
    assert {"DaemonSet", "Deployment", "ClusterRole", "Role", "ConfigMap", "Namespace"} <= kinds
    for version in KUBE_VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_rejects_a_misspelt_field(docs: list[dict[str, Any]]) -> None:
    ds = json.loads(json.dumps(_one(docs, "DaemonSet", "rankscope-agent")))
    container = ds["spec"]["template"]["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBE_VERSIONS[-1], strict=True)


def test_the_configmaps_are_the_repository_files(docs: list[dict[str, Any]]) -> None:
    """One place per fact: the policy, the rules and the agent config are generated from the
    files the package ships, never copied into deploy/."""
    expected = {
        "rankscope-recovery-policy": ("policy.yaml", ROOT / "streams/recovery/policy.yaml"),
        "rankscope-redaction-rules": ("rules.yaml", ROOT / "redaction/rules.yaml"),
        "rankscope-agent-config": ("agent.yaml", EXAMPLE_CONFIG),
    }
    for name, (key, path) in expected.items():
        assert _one(docs, "ConfigMap", name)["data"] == {key: path.read_text()}
    assert not list(KUBE.rglob("policy.yaml")) and not list(KUBE.rglob("rules.yaml"))


def test_secrets_are_referenced_never_embedded(docs: list[dict[str, Any]]) -> None:
    assert not [d for d in docs if d["kind"] == "Secret"]
    endpoints = _one(docs, "ConfigMap", "rankscope-endpoints")["data"]
    assert not [k for k in endpoints if re.search(r"PASSWORD$|SECRET|_KEY$", k)]
    assert not [v for v in endpoints.values() if "@" in v]  # no login in a URL


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl (kustomize) here")
def test_kubectl_kustomize_renders_the_same_objects(docs: list[dict[str, Any]]) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(KUBE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    real = [d for d in yaml.safe_load_all(out.stdout) if d]

    def key(d: dict[str, Any]) -> tuple[str, str | None, str]:
        return d["kind"], d["metadata"].get("namespace"), _base_name(d["metadata"]["name"])

    assert sorted(map(key, real)) == sorted(map(key, docs))
    for doc in real:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)
        if doc["kind"] == "ConfigMap":
            mine = _one(docs, "ConfigMap", _base_name(doc["metadata"]["name"]))
            assert doc["data"] == mine["data"]
    # kustomize renamed the generated ConfigMaps and every reference to them
    names = {d["metadata"]["name"] for d in real if d["kind"] == "ConfigMap"}
    refs = set(re.findall(r"name: (rankscope-(?:endpoints|agent-config|recovery-policy|"
                          r"redaction-rules)\S*)", out.stdout))  # fmt: skip
    assert refs == names


# -- the agent DaemonSet mounts what the collectors read --------------------------------------


def container_env(container: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """The container's environment as the kubelet would set it (fieldRefs: a node name)."""
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        if "configMapRef" in src:
            env.update(_one(docs, "ConfigMap", src["configMapRef"]["name"])["data"])
    for var in container.get("env", []):
        ref = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "fieldRef" in ref:
            env[var["name"]] = "gpu-node-017"
        elif "configMapKeyRef" in ref:
            cm = _one(docs, "ConfigMap", ref["configMapKeyRef"]["name"])
            env[var["name"]] = cm["data"][ref["configMapKeyRef"]["key"]]
    return env


def _agent_config_file(ds: dict[str, Any], docs: list[dict[str, Any]], tmp: Path) -> Path:
    """The agent config the DaemonSet's --config names, taken from its ConfigMap volume."""
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    config = PurePosixPath(container["args"][container["args"].index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if _under(config, m["mountPath"]))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    data = _one(docs, "ConfigMap", volume["configMap"]["name"])["data"]
    path = tmp / "agent.yaml"
    path.write_text(data[config.name])
    return path


def daemonset_problems(ds: dict[str, Any], docs: list[dict[str, Any]], tmp: Path) -> list[str]:
    """Why the DaemonSet does not give the agent what its effective config reads or writes."""
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    env = container_env(container, docs)
    paths = agent_paths(env, _agent_config_file(ds, docs, tmp))
    volumes = {v["name"]: v for v in spec["volumes"]}
    problems: list[str] = []
    for p in paths:
        what = f"{p.section}.{p.field} ({p.path})"
        if p.section == "kubernetes" and _under(p.path, "/var/run/secrets/kubernetes.io"):
            sa = _one(docs, "ServiceAccount", spec["serviceAccountName"])
            if (
                spec.get("automountServiceAccountToken", sa.get("automountServiceAccountToken"))
                is False
            ):
                problems.append(f"{what}: the service-account token is not mounted")
            continue
        mounts = [m for m in container.get("volumeMounts", []) if _under(p.path, m["mountPath"])]
        if not mounts:
            problems.append(f"{what} is not mounted")
            continue
        mount = max(mounts, key=lambda m: len(m["mountPath"]))
        host = volumes[mount["name"]].get("hostPath")
        if host is None:
            problems.append(f"{what} is mounted from {mount['name']}, not from the host")
            continue
        if mount["mountPath"].startswith("/host/") and host["path"] != mount["mountPath"][5:]:
            problems.append(f"{what}: /host{host['path']} is not {mount['mountPath']}")
        if p.write and mount.get("readOnly"):
            problems.append(f"{what} is written but mounted read-only")
        if not p.write and not mount.get("readOnly"):
            problems.append(f"{what} is only read but mounted writable")
    configured = _merge(
        yaml.safe_load(_agent_config_file(ds, docs, tmp).read_text()), env_overrides(env)
    )
    nvidia = spec.get("runtimeClassName") == "nvidia" and env.get("NVIDIA_VISIBLE_DEVICES") == "all"
    if configured.get("gpu") is not None and not nvidia:
        problems.append("gpu: NVML needs the NVIDIA runtime and NVIDIA_VISIBLE_DEVICES=all")
    return problems


def test_the_agent_daemonset_mounts_what_the_collectors_read(
    docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    ds = _one(docs, "DaemonSet", "rankscope-agent")
    env = container_env(ds["spec"]["template"]["spec"]["containers"][0], docs)
    found = {(p.section, p.field) for p in agent_paths(env, _agent_config_file(ds, docs, tmp_path))}
    assert {("spool", "dir"), ("gpu", "proc_root"), ("fabric", "sysfs_root")} <= found
    assert {("nccl_log", "paths"), ("kernel_log", "paths")} <= found
    assert daemonset_problems(ds, docs, tmp_path) == []


def _agent_mount_names(docs: list[dict[str, Any]]) -> list[str]:
    ds = _one(docs, "DaemonSet", "rankscope-agent")
    spec = ds["spec"]["template"]["spec"]
    hostpaths = {v["name"] for v in spec["volumes"] if "hostPath" in v}
    return [m["name"] for m in spec["containers"][0]["volumeMounts"] if m["name"] in hostpaths]


@pytest.mark.parametrize("mount", _agent_mount_names(render_offline()))
def test_removing_a_host_mount_is_noticed(
    docs: list[dict[str, Any]], mount: str, tmp_path: Path
) -> None:
    ds = json.loads(json.dumps(_one(docs, "DaemonSet", "rankscope-agent")))
    container = ds["spec"]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != mount]
    assert daemonset_problems(ds, docs, tmp_path) != []


def test_removing_the_nvidia_runtime_is_noticed(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    ds = json.loads(json.dumps(_one(docs, "DaemonSet", "rankscope-agent")))
    del ds["spec"]["template"]["spec"]["runtimeClassName"]
    assert any("NVML" in p for p in daemonset_problems(ds, docs, tmp_path))


def test_the_agent_runs_with_least_privilege_and_bounded_resources(
    docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    ds = _one(docs, "DaemonSet", "rankscope-agent")
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    kernel_log = AgentConfig.model_validate(
        _merge(
            yaml.safe_load(_agent_config_file(ds, docs, tmp_path).read_text()),
            env_overrides(container_env(container, docs)),
        )
    ).collector_configs()["kernel_log"]
    # SYSLOG only where /dev/kmsg is read; SYS_PTRACE for /proc/<pid>/environ (GPU -> job)
    kmsg = getattr(kernel_log, "source", "auto") in ("kmsg", "auto")
    allowed = {"SYS_PTRACE"} | ({"SYSLOG"} if kmsg else set())
    assert set(sc["capabilities"]["add"]) <= allowed
    assert container["resources"]["limits"]["cpu"] and container["resources"]["limits"]["memory"]
    assert (
        spec["priorityClassName"]
        == _one(docs, "PriorityClass", spec["priorityClassName"])["metadata"]["name"]
    )
    assert spec["nodeSelector"] and spec["tolerations"]
    assert not spec.get("hostPID") and not spec.get("hostNetwork")


# -- RBAC: exactly the requests the code makes ------------------------------------------------

#: (apiGroup, resource, verb, namespace or "*" for the whole cluster)
Grant = tuple[str, str, str, str]


def request_grant(method: str, path_query: str) -> Grant:
    """The RBAC attributes of a REST request, as the API server derives them (Kubernetes docs,
    "Authorization": request verbs; GET on a collection is list, or watch with ?watch=1;
    DELETE on a collection is deletecollection)."""
    split = urllib.parse.urlsplit(path_query)
    query = urllib.parse.parse_qs(split.query)
    parts = split.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespace = "*"
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    single = len(rest) > 1
    verbs = {
        ("GET", False): "watch" if query.get("watch") == ["1"] else "list",
        ("GET", True): "get",
        ("PATCH", True): "patch",
        ("PUT", True): "update",
        ("POST", False): "create",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }
    return group, resource, verbs[(method, single)], namespace


def collector_requests(cfg: Any) -> list[tuple[str, str]]:
    """The kubernetes collector's requests: each resource of ``_Watches.resources`` listed
    (watch.py ``_list``) and then watched (``_watch``: ``watch=1``)."""
    from rankscope.collectors.kubernetes.watch import _Watches

    out: list[tuple[str, str]] = []
    # resources() reads only self.config
    for res in _Watches.resources(SimpleNamespace(config=cfg)):  # type: ignore[arg-type]
        out.append(("GET", f"{res.path}?{urllib.parse.urlencode(res.params)}"))
        watch = dict(res.params, watch="1")
        out.append(("GET", f"{res.path}?{urllib.parse.urlencode(watch)}"))
    return out


def actuator_requests(namespace: str) -> list[tuple[str, str]]:
    """Every request the kubernetes actuator sends for every action (verification included),
    recorded from the actuator itself answering as an API server that knows the node and job."""
    from rankscope.schemas.derived import RecoveryAction, RecoveryEvent
    from rankscope.sinks.actuators.cluster import KubernetesActuator, KubernetesConfig

    sent: list[tuple[str, str]] = []

    class Recording(KubernetesActuator):
        def _call(
            self, method: str, path: str, body: dict[str, object] | None
        ) -> tuple[int | None, object]:
            sent.append((method, path))
            if path.startswith("/api/v1/nodes/"):
                return 200, {"metadata": {"name": "node003"}}
            return 200, {"items": [{"metadata": {"labels": {self.config.job_label: "81234"}}}]}

    actuator = Recording(KubernetesConfig(namespace=namespace))
    for action in typing.get_args(RecoveryAction):
        decision = RecoveryEvent(
            key="k1", stage="decided", action=action, cluster="c1", job_id="81234",
            node="node003", rule="r", reason="test", trigger_id="inc1", attempt=1, ts=1,
            mode="act",
        )  # fmt: skip
        actuator.execute(decision)
    return sent


def rbac_grants(docs: list[dict[str, Any]], sa: str) -> set[Grant]:
    """What the ServiceAccount ``sa`` (namespace rankscope) may do, from every binding."""
    grants: set[Grant] = set()
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == "rankscope"
            for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace", "*")
        role_ns = ns if ref["kind"] == "Role" else None
        role = next(
            d
            for d in docs
            if d["kind"] == ref["kind"]
            and d["metadata"]["name"] == ref["name"]
            and d["metadata"].get("namespace") == role_ns
        )
        if binding["kind"] == "ClusterRoleBinding":
            ns = "*"
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add((group, resource, verb, ns))
    return grants


def required_grants(docs: list[dict[str, Any]]) -> dict[str, set[Grant]]:
    """Per ServiceAccount: the grants the code of the pods running under it needs."""
    need: dict[str, set[Grant]] = {}
    for doc, container in _containers(docs):
        spec = doc["spec"]["template"]["spec"]
        sa = spec["serviceAccountName"]
        args = container["args"]
        requests: list[tuple[str, str]] = []
        if args[0] == "agent":
            from rankscope.collectors.kubernetes.config import KubernetesCollectorConfig

            env = container_env(container, docs)
            section = env_overrides(env).get("kubernetes")
            if section is not None:
                requests = collector_requests(KubernetesCollectorConfig.model_validate(section))
        elif args[:2] == ["recovery", "run"] and "kubernetes" in args:
            requests = actuator_requests(args[args.index("--namespace") + 1])
        need.setdefault(sa, set()).update(request_grant(m, p) for m, p in requests)
    return need


def test_rbac_grants_exactly_what_the_collector_and_actuator_request(
    docs: list[dict[str, Any]],
) -> None:
    need = required_grants(docs)
    assert need["rankscope-agent"] == {
        ("", r, v, "*") for r in ("pods", "nodes", "events") for v in ("list", "watch")
    }
    assert need["rankscope-recovery-runner"]  # the derivation saw the actuator's requests
    for sa, grants in need.items():
        assert rbac_grants(docs, sa) == grants, sa
    bound = {
        s["name"]
        for d in docs
        if d["kind"].endswith("Binding")
        for s in d["subjects"]
    }  # fmt: skip
    assert bound <= set(need)  # no binding for an account no pod uses


def test_no_rule_uses_a_wildcard(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        for rule in doc.get("rules", []) if doc["kind"] in ("Role", "ClusterRole") else []:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (doc["metadata"]["name"], field)
            assert "nonResourceURLs" not in rule and "resourceNames" not in rule


def _rule_verbs(docs: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    return [
        (d["metadata"]["name"], i, verb)
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        for i, rule in enumerate(d["rules"])
        for verb in rule["verbs"]
    ]


@pytest.mark.parametrize(("role", "index", "verb"), _rule_verbs(render_offline()))
def test_removing_a_verb_is_noticed(
    docs: list[dict[str, Any]], role: str, index: int, verb: str
) -> None:
    changed = json.loads(json.dumps(docs))
    for doc in changed:
        if doc["kind"] in ("Role", "ClusterRole") and doc["metadata"]["name"] == role:
            doc["rules"][index]["verbs"].remove(verb)
    need = required_grants(changed)
    assert any(rbac_grants(changed, sa) != grants for sa, grants in need.items())


def test_workers_and_sinks_get_no_api_token(docs: list[dict[str, Any]]) -> None:
    for name in ("rankscope-validator", "rankscope-worker", "rankscope-sink"):
        spec = _one(docs, "Deployment", name)["spec"]["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert (
            _one(docs, "ServiceAccount", spec["serviceAccountName"])["automountServiceAccountToken"]
            is False
        )


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_validators_take_the_raw_topics_off_the_workers(docs: list[dict[str, Any]]) -> None:
    """Both halves of the split or neither: workers that skip validation with no validator
    would leave the raw topics unread, and both validating would repeat every event's work.
    The validators hash with the workers' redaction key and log in as the worker principal
    (the ACL plan's group rule for them is the worker's)."""
    (validator,) = _one(docs, "Deployment", "rankscope-validator")["spec"]["template"]["spec"][
        "containers"
    ]
    (worker,) = _one(docs, "Deployment", "rankscope-worker")["spec"]["template"]["spec"][
        "containers"
    ]
    assert validator["args"] == ["validator"] and worker["args"] == ["worker"]
    worker_env, validator_env = _env(worker), _env(validator)
    from rankscope.settings import Settings

    split = {k: v for k, v in worker_env.items() if isinstance(v, str)}
    assert (
        Settings.model_validate(  # what the worker process reads from its environment
            {k.removeprefix("RANKSCOPE_").lower(): v for k, v in split.items()}
        ).worker_validate
        is False
    )
    for name in (
        "RANKSCOPE_REDACTION_KEY",
        "RANKSCOPE_REDACTION_RULES",
        "RANKSCOPE_KAFKA_SASL_USERNAME",
    ):
        assert validator_env[name] == worker_env[name], name
    # nothing of the analysis state or the recovery keys reaches the stateless validators
    assert "RANKSCOPE_STATE_KEY" not in validator_env
    assert not [k for k in validator_env if k.startswith("RANKSCOPE_RECOVERY")]


def test_the_recovery_runner_is_a_singleton(docs: list[dict[str, Any]]) -> None:
    runner = _one(docs, "Deployment", "rankscope-recovery-runner")
    assert runner["spec"]["replicas"] == 1
    assert runner["spec"]["strategy"] == {"type": "Recreate"}  # never two during a rollout
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    spec = runner["spec"]["template"]["spec"]
    home = container_env(spec["containers"][0], docs)["RANKSCOPE_HOME"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == home)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    claim = _one(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]  # the ledger survives the pod


def test_every_pod_is_locked_down(docs: list[dict[str, Any]]) -> None:
    for doc, container in _containers(docs):
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["limits"]["memory"], doc["metadata"]["name"]
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        if doc["kind"] != "DaemonSet":
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert not sc.get("capabilities", {}).get("add")


def test_every_secret_the_manifests_reference_is_documented(docs: list[dict[str, Any]]) -> None:
    text = json.dumps(docs)
    names = set(re.findall(r'"secretName": "([^"]+)"', text))
    names |= set(re.findall(r'"secretKeyRef": \{"name": "([^"]+)"', text))
    assert names
    guide = (ROOT / "docs" / "deploy.md").read_text()
    documented = set(re.findall(r"`(rankscope-[a-z-]+)`", guide))
    assert names <= documented, names - documented


def _agent_check(config: Path, env: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """``rankscope agent --check`` (validates every section, starts nothing) under ``env``."""
    exe = str(RANKSCOPE)
    base = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    out = subprocess.run(
        [exe, "agent", "--config", str(config), "--check"],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_the_real_agent_accepts_the_daemonsets_config(
    docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    ds = _one(docs, "DaemonSet", "rankscope-agent")
    env = container_env(ds["spec"]["template"]["spec"]["containers"][0], docs)
    effective, log = _agent_check(_agent_config_file(ds, docs, tmp_path), env)
    assert "collectors: gpu, fabric, nccl_log, kernel_log, kubernetes" in log
    assert effective["node"] == "gpu-node-017"  # from the pod's spec.nodeName
    assert effective["kafka"]["bootstrap"] == env["RANKSCOPE_BOOTSTRAP"]
    assert effective["spool"]["dir"] == "/var/lib/rankscope/agent-spool"


def test_the_real_agent_accepts_the_units_config(unit_text: str) -> None:
    effective, log = _agent_check(EXAMPLE_CONFIG, unit_env(unit_text, ENV_EXAMPLE))
    assert "config OK" in log
    assert effective["cluster"] == "prod-east"
    assert _under(PurePosixPath(effective["spool"]["dir"]), "/var/lib/rankscope")
