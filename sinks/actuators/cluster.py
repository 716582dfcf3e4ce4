"""Actuators that change the cluster: Slurm (``scontrol``/``scancel``) and Kubernetes (the API
with a service-account token), and a router that sends each action to the one that owns it
(escalations to a webhook, everything else to the scheduler).

The command lines and API requests are the tools' documented forms; tests check them against
recorded contracts.

Job ids and node names come from telemetry, so they are untrusted (issue 14): each is checked
against the scheduler's identifier syntax (``identifiers.py``) and then against what the
scheduler itself reports (``scontrol -o show job|node``, a GET of the node and of the job's
pods) before anything changes; a value that fails either is refused and nothing runs.
Commands are argv lists (no shell). A decision in ``dry_run`` mode runs nothing, not even the
read-only checks, and says what it would have run.
"""

from __future__ import annotations

import json
import shlex
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from rankscope.schemas.derived import RecoveryAction, RecoveryEvent
from rankscope.sinks.actuators.base import Actuator, ActuatorResult, refuse
from rankscope.sinks.actuators.identifiers import (
    IdentifierError,
    K8sNamespace,
    k8s_label_value,
    k8s_node_name,
    slurm_job_id,
    slurm_node_name,
)

CommandRunner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


class SlurmConfig(BaseModel):
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    stack_signal: str = Field(
        default="USR1", pattern=r"^[A-Z0-9]{1,10}$", description="What the job traps."
    )
    verify: bool = Field(
        default=True, description="Ask scontrol that the job and node exist before acting."
    )


_JOB_ACTIONS = frozenset({"restart_from_checkpoint", "exclude_node_and_restart", "dump_stacks"})
_NODE_ACTIONS = frozenset({"exclude_node_and_restart", "drain_node"})


class SlurmActuator:
    name = "slurm"

    def __init__(self, config: SlurmConfig | None = None, run: CommandRunner = _run) -> None:
        self.config = config or SlurmConfig()
        self._run = run

    def commands(self, d: RecoveryEvent) -> list[list[str]]:
        """The argv of each step; IdentifierError when the job id or node is not a valid Slurm
        identifier, ValueError when the action is not Slurm's."""
        c = self.config
        if d.action in _JOB_ACTIONS:
            slurm_job_id(d.job_id)
        if d.action in _NODE_ACTIONS and d.node:
            slurm_node_name(d.node)
        reason = f"rankscope: {d.rule}"[:120]
        drain = [c.scontrol, "update", f"NodeName={d.node}", "State=DRAIN", f"Reason={reason}"]
        by_action: dict[RecoveryAction, list[list[str]]] = {
            "restart_from_checkpoint": [[c.scontrol, "requeue", d.job_id]],
            "exclude_node_and_restart": [
                drain,
                [c.scontrol, "requeue", d.job_id],
                [c.scontrol, "update", f"JobId={d.job_id}", f"ExcNodeList={d.node}"],
            ],
            "drain_node": [drain],
            "dump_stacks": [[c.scancel, f"--signal={c.stack_signal}", d.job_id]],
        }
        if d.action not in by_action:
            raise ValueError(f"Slurm has no action {d.action}")
        if d.action in ("exclude_node_and_restart", "drain_node") and not d.node:
            raise ValueError(f"{d.action} needs a node")
        return by_action[d.action]

    def verify(self, d: RecoveryEvent) -> str | None:
        """Why the scheduler does not confirm the job and node, or None."""
        c = self.config
        if d.action in _JOB_ACTIONS:
            out = self._run([c.scontrol, "-o", "show", "job", d.job_id])
            if out.returncode != 0 or not _slurm_reports_job(out.stdout, d.job_id):
                return f"Slurm does not report job {d.job_id}"
        if d.action in _NODE_ACTIONS:
            out = self._run([c.scontrol, "-o", "show", "node", d.node])
            first = out.stdout.strip().splitlines()[:1]
            if out.returncode != 0 or not first or f"NodeName={d.node}" not in first[0].split():
                return f"Slurm does not report node {d.node}"
        return None

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        try:
            commands = self.commands(decision)
        except IdentifierError as exc:
            return refuse(str(exc))
        except ValueError as exc:
            return ActuatorResult(False, str(exc))
        if decision.mode == "dry_run":
            return ActuatorResult(
                True, "dry run: would run " + "; ".join(map(shlex.join, commands))
            )
        if self.config.verify:
            why = self.verify(decision)
            if why is not None:
                return refuse(why)
        done = []
        for argv in commands:
            out = self._run(argv)
            line = shlex.join(argv)
            if out.returncode != 0:
                err = (out.stderr or out.stdout).strip()[:300]
                return ActuatorResult(False, f"{line} exited {out.returncode}: {err}")
            done.append(line)
        return ActuatorResult(True, "; ".join(done))


def _slurm_reports_job(stdout: str, job_id: str) -> bool:
    """``scontrol -o show job`` names ``job_id``: as JobId, or as an array task
    (ArrayJobId/ArrayTaskId) or het component (HetJobId/HetJobOffset) of it."""
    lines = stdout.strip().splitlines()
    fields = dict(f.split("=", 1) for f in (lines[0].split() if lines else []) if "=" in f)
    if "_" in job_id:
        base, task = job_id.split("_")
        return fields.get("ArrayJobId") == base and fields.get("ArrayTaskId") == task
    if "+" in job_id:
        base, offset = job_id.split("+")
        return fields.get("HetJobId") == base and fields.get("HetJobOffset") == offset
    return fields.get("JobId") == job_id


_Request = tuple[str, str, dict[str, object] | None]  # method, path with query, JSON body


class KubernetesConfig(BaseModel):
    api_server: str = "https://kubernetes.default.svc"
    token_file: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    ca_file: Path | None = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    namespace: K8sNamespace = "default"
    job_label: str = Field(
        default="training.kubeflow.org/job-name",
        description="The pod label naming the training job (the training operator sets it).",
    )
    timeout_s: float = 10.0
    verify: bool = Field(
        default=True, description="GET the node and the job's pods before changing them."
    )


class KubernetesActuator:
    """Cordon a node (PATCH spec.unschedulable), restart a job by deleting its pods (the
    training operator recreates them from the last checkpoint)."""

    name = "kubernetes"

    def __init__(self, config: KubernetesConfig | None = None) -> None:
        self.config = config or KubernetesConfig()

    def requests(self, d: RecoveryEvent) -> list[_Request]:
        """(method, path with query, JSON body) per step of the action; IdentifierError when
        the node is not a DNS-1123 name or the job id not a label value."""
        c = self.config
        if d.action in _NODE_ACTIONS:
            k8s_node_name(d.node)
        if d.action in ("restart_from_checkpoint", "exclude_node_and_restart"):
            k8s_label_value(d.job_id)
        cordon: _Request = (
            "PATCH",
            f"/api/v1/nodes/{urllib.parse.quote(d.node, safe='')}",
            {"spec": {"unschedulable": True}},
        )
        selector = urllib.parse.urlencode({"labelSelector": f"{c.job_label}={d.job_id}"})
        delete_pods: _Request = (
            "DELETE",
            f"/api/v1/namespaces/{c.namespace}/pods?{selector}",
            None,
        )
        by_action: dict[str, list[_Request]] = {
            "restart_from_checkpoint": [delete_pods],
            "exclude_node_and_restart": [cordon, delete_pods],
            "drain_node": [cordon],
        }
        if d.action not in by_action:
            raise ValueError(f"Kubernetes has no action {d.action} here (route it elsewhere)")
        return by_action[d.action]

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        try:
            steps = self.requests(decision)
        except IdentifierError as exc:
            return refuse(str(exc))
        except ValueError as exc:
            return ActuatorResult(False, str(exc))
        if decision.mode == "dry_run":
            return ActuatorResult(
                True, "dry run: would send " + "; ".join(f"{m} {p}" for m, p, _ in steps)
            )
        if self.config.verify:
            why = self.verify(decision, steps)
            if why is not None:
                return refuse(why)
        done = []
        for method, path, body in steps:
            status, _ = self._call(method, path, body)
            if status is None or status >= 300:
                what = "no answer" if status is None else f"HTTP {status}"
                return ActuatorResult(False, f"{method} {path}: {what}")
            done.append(f"{method} {path}: {status}")
        return ActuatorResult(True, "; ".join(done))

    def verify(self, d: RecoveryEvent, steps: list[_Request]) -> str | None:
        """Why the API server does not confirm the node and the job's pods, or None."""
        for method, path, _ in steps:
            if method == "PATCH":  # the node: it must exist under exactly this name
                status, doc = self._call("GET", path, None)
                name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
                if status != 200 or name != d.node:
                    return f"Kubernetes does not report node {d.node}"
            if method == "DELETE":  # the job's pods: at least one, each labelled with the job
                status, doc = self._call("GET", path, None)
                items = doc.get("items") if isinstance(doc, dict) else None
                label = self.config.job_label
                if (
                    status != 200
                    or not items
                    or not all(
                        ((i.get("metadata") or {}).get("labels") or {}).get(label) == d.job_id
                        for i in items
                    )
                ):
                    return f"Kubernetes reports no pods of job {d.job_id}"
        return None

    def _call(
        self, method: str, path: str, body: dict[str, object] | None
    ) -> tuple[int | None, object]:
        """(HTTP status or None when nothing answered, the JSON answer or None)."""
        c = self.config
        token = c.token_file.read_text().strip()
        context = None
        if c.api_server.startswith("https"):
            context = ssl.create_default_context(cafile=str(c.ca_file) if c.ca_file else None)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/strategic-merge-patch+json"
        req = urllib.request.Request(c.api_server + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=c.timeout_s, context=context) as resp:
                raw = resp.read()
                status = int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except (urllib.error.URLError, TimeoutError, OSError):
            return None, None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None


class RoutingActuator:
    """Each action to the actuator that owns it (e.g. escalate -> webhook, the rest -> Slurm)."""

    name = "router"

    def __init__(self, routes: dict[str, Actuator], default: Actuator) -> None:
        self.routes = routes
        self.default = default

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        target = self.routes.get(decision.action, self.default)
        result = target.execute(decision)
        return ActuatorResult(result.ok, f"{target.name}: {result.detail}", result.refused)
