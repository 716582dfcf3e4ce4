"""Slurm and Kubernetes actuators against recorded contracts: the exact commands and requests."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.cluster import (
    KubernetesActuator,
    KubernetesConfig,
    RoutingActuator,
    SlurmActuator,
)
from rankscope.sinks.actuators.dryrun import DryRunActuator


def _decision(action: str, node: str = "node003") -> RecoveryEvent:
    return RecoveryEvent(
        key="k1",
        stage="decided",
        action=action,  # type: ignore[arg-type]
        cluster="c1",
        job_id="81234",
        node=node,
        rank=26,
        rule="gpu-hardware-exclude-node",
        reason="XID 79",
        trigger_id="inc1",
        attempt=1,
        ts=1,
        mode="act",
    )


class _Recorder:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if list(argv[1:4]) == ["-o", "show", "job"]:  # what scontrol -o prints, abridged
            out = f"JobId={argv[4]} JobName=train UserId=alice(1000) JobState=RUNNING\n"
            return subprocess.CompletedProcess(list(argv), 0, out, "")
        if list(argv[1:4]) == ["-o", "show", "node"]:
            out = f"NodeName={argv[4]} Arch=x86_64 CoresPerSocket=32 State=ALLOCATED\n"
            return subprocess.CompletedProcess(list(argv), 0, out, "")
        code = 1 if self.fail_on and self.fail_on in argv else 0
        err = "slurm_requeue error: Job is pending execution" if code else ""
        return subprocess.CompletedProcess(list(argv), code, "", err)


#: what the actuator asks scontrol before acting (the job, then the node)
SHOW_JOB = ["scontrol", "-o", "show", "job", "81234"]
SHOW_NODE = ["scontrol", "-o", "show", "node", "node003"]
CHECKS = {
    "restart_from_checkpoint": [SHOW_JOB],
    "exclude_node_and_restart": [SHOW_JOB, SHOW_NODE],
    "drain_node": [SHOW_NODE],
    "dump_stacks": [SHOW_JOB],
}


#: scontrol/scancel lines as the Slurm documentation writes them
SLURM_CONTRACT = {
    "restart_from_checkpoint": [["scontrol", "requeue", "81234"]],
    "exclude_node_and_restart": [
        [
            "scontrol",
            "update",
            "NodeName=node003",
            "State=DRAIN",
            "Reason=rankscope: gpu-hardware-exclude-node",
        ],
        ["scontrol", "requeue", "81234"],
        ["scontrol", "update", "JobId=81234", "ExcNodeList=node003"],
    ],
    "drain_node": [
        [
            "scontrol",
            "update",
            "NodeName=node003",
            "State=DRAIN",
            "Reason=rankscope: gpu-hardware-exclude-node",
        ],
    ],
    "dump_stacks": [["scancel", "--signal=USR1", "81234"]],
}


@pytest.mark.parametrize("action", sorted(SLURM_CONTRACT))
def test_slurm_commands_match_the_contract(action: str) -> None:
    rec = _Recorder()
    result = SlurmActuator(run=rec).execute(_decision(action))
    assert result.ok, result.detail
    assert rec.calls == CHECKS[action] + SLURM_CONTRACT[action]


def test_a_failing_slurm_command_stops_the_action_and_says_why() -> None:
    rec = _Recorder(fail_on="requeue")
    result = SlurmActuator(run=rec).execute(_decision("exclude_node_and_restart"))
    assert not result.ok
    assert "scontrol requeue 81234 exited 1: slurm_requeue error" in result.detail
    assert len(rec.calls) == 4  # 2 checks, drain, requeue: the job update is not attempted
    assert not SlurmActuator(run=rec).execute(_decision("escalate")).ok
    assert "needs a node" in SlurmActuator(run=rec).execute(_decision("drain_node", node="")).detail


class _ApiServer:
    """A recorded-contract API server: the nodes and job pods it knows, answered to GETs."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.nodes = {"node003"}
        self.jobs = {"81234"}
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                api.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "type": self.headers.get("Content-Type"),
                        "body": json.loads(body) if body else None,
                    }
                )
                answer = api.answer(self.command, self.path)
                self.send_response(200 if answer is not None else 404)
                data = json.dumps(answer or {}).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_PATCH = _handle
            do_DELETE = _handle
            do_GET = _handle

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, path: str) -> dict[str, Any] | None:
        """What the API returns (None: 404): a node object, a pod list, or an empty object."""
        if method != "GET":
            return {}
        if path.startswith("/api/v1/nodes/"):
            name = path.removeprefix("/api/v1/nodes/")
            return {"kind": "Node", "metadata": {"name": name}} if name in self.nodes else None
        label = "training.kubeflow.org/job-name"
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        job = query.get("labelSelector", [""])[0].removeprefix(f"{label}=")
        pods = [{"metadata": {"name": f"{job}-worker-0", "labels": {label: job}}}]
        return {"kind": "PodList", "items": pods if job in self.jobs else []}


@pytest.fixture
def api() -> Iterator[_ApiServer]:
    server = _ApiServer()
    yield server
    server.server.shutdown()


def test_kubernetes_requests_match_the_api_contract(api: _ApiServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("sa-token-123\n")
    k8s = KubernetesActuator(
        KubernetesConfig(api_server=api.url, token_file=token, ca_file=None, namespace="training")
    )
    assert k8s.execute(_decision("exclude_node_and_restart")).ok
    checks = api.requests[:2]
    assert [(r["method"], r["path"]) for r in checks] == [
        ("GET", "/api/v1/nodes/node003"),
        ("GET", "/api/v1/namespaces/training/pods?labelSelector="
         "training.kubeflow.org%2Fjob-name%3D81234"),
    ]  # fmt: skip
    assert api.requests[2:] == [
        {  # kubectl cordon: a strategic merge patch of spec.unschedulable
            "method": "PATCH",
            "path": "/api/v1/nodes/node003",
            "auth": "Bearer sa-token-123",
            "type": "application/strategic-merge-patch+json",
            "body": {"spec": {"unschedulable": True}},
        },
        {  # delete the job's pods (deletecollection); the training operator recreates them
            "method": "DELETE",
            "path": "/api/v1/namespaces/training/pods?labelSelector="
            "training.kubeflow.org%2Fjob-name%3D81234",
            "auth": "Bearer sa-token-123",
            "type": None,
            "body": None,
        },
    ]
    result = k8s.execute(_decision("dump_stacks"))
    assert not result.ok and "route it elsewhere" in result.detail


def test_the_router_sends_escalations_to_their_own_actuator() -> None:
    pager, rec = DryRunActuator(), _Recorder()
    router = RoutingActuator({"escalate": pager}, default=SlurmActuator(run=rec))
    assert router.execute(_decision("escalate")).detail.startswith("dry-run: would run escalate")
    assert router.execute(_decision("restart_from_checkpoint")).detail == (
        "slurm: scontrol requeue 81234"
    )
    assert rec.calls == [SHOW_JOB, ["scontrol", "requeue", "81234"]] and len(pager.would) == 1
