"""Actuators that change the cluster: Slurm (``scontrol``/``scancel``) and Kubernetes (the API
with a service-account token), and a router that sends each action to the one that owns it
(escalations to a webhook, everything else to the scheduler).

The command lines and API requests are the tools' documented forms; tests check them against
recorded contracts.
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
from rankscope.sinks.actuators.base import Actuator, ActuatorResult

CommandRunner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


class SlurmConfig(BaseModel):
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    stack_signal: str = Field(default="USR1", description="What the job traps to dump stacks.")


class SlurmActuator:
    name = "slurm"

    def __init__(self, config: SlurmConfig | None = None, run: CommandRunner = _run) -> None:
        self.config = config or SlurmConfig()
        self._run = run

    def commands(self, d: RecoveryEvent) -> list[list[str]]:
        c = self.config
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

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        try:
            commands = self.commands(decision)
        except ValueError as exc:
            return ActuatorResult(False, str(exc))
        done = []
        for argv in commands:
            out = self._run(argv)
            line = shlex.join(argv)
            if out.returncode != 0:
                err = (out.stderr or out.stdout).strip()[:300]
                return ActuatorResult(False, f"{line} exited {out.returncode}: {err}")
            done.append(line)
        return ActuatorResult(True, "; ".join(done))


_Request = tuple[str, str, dict[str, object] | None]  # method, path with query, JSON body


class KubernetesConfig(BaseModel):
    api_server: str = "https://kubernetes.default.svc"
    token_file: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    ca_file: Path | None = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    namespace: str = "default"
    job_label: str = Field(
        default="training.kubeflow.org/job-name",
        description="The pod label naming the training job (the training operator sets it).",
    )
    timeout_s: float = 10.0


class KubernetesActuator:
    """Cordon a node (PATCH spec.unschedulable), restart a job by deleting its pods (the
    training operator recreates them from the last checkpoint)."""

    name = "kubernetes"

    def __init__(self, config: KubernetesConfig | None = None) -> None:
        self.config = config or KubernetesConfig()

    def requests(self, d: RecoveryEvent) -> list[_Request]:
        """(method, path with query, JSON body) per step of the action."""
        c = self.config
        cordon: _Request = (
            "PATCH",
            f"/api/v1/nodes/{urllib.parse.quote(d.node)}",
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
        except ValueError as exc:
            return ActuatorResult(False, str(exc))
        c = self.config
        token = c.token_file.read_text().strip()
        context = None
        if c.api_server.startswith("https"):
            context = ssl.create_default_context(cafile=str(c.ca_file) if c.ca_file else None)
        done = []
        for method, path, body in steps:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = "application/strategic-merge-patch+json"
            req = urllib.request.Request(
                c.api_server + path, data=data, headers=headers, method=method
            )
            try:
                with urllib.request.urlopen(req, timeout=c.timeout_s, context=context) as resp:
                    done.append(f"{method} {path}: {resp.status}")
            except urllib.error.HTTPError as exc:
                return ActuatorResult(False, f"{method} {path}: HTTP {exc.code}")
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                return ActuatorResult(False, f"{method} {path}: {exc}")
        return ActuatorResult(True, "; ".join(done))


class RoutingActuator:
    """Each action to the actuator that owns it (e.g. escalate -> webhook, the rest -> Slurm)."""

    name = "router"

    def __init__(self, routes: dict[str, Actuator], default: Actuator) -> None:
        self.routes = routes
        self.default = default

    def execute(self, decision: RecoveryEvent) -> ActuatorResult:
        target = self.routes.get(decision.action, self.default)
        result = target.execute(decision)
        return ActuatorResult(result.ok, f"{target.name}: {result.detail}")
