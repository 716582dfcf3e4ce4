"""Slurm and Kubernetes actuators against recorded contracts: the exact commands and requests."""

from __future__ import annotations

import json
import subprocess
import threading
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
    )


class _Recorder:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        code = 1 if self.fail_on and self.fail_on in argv else 0
        err = "slurm_requeue error: Job is pending execution" if code else ""
        return subprocess.CompletedProcess(list(argv), code, "", err)


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
    assert rec.calls == SLURM_CONTRACT[action]


def test_a_failing_slurm_command_stops_the_action_and_says_why() -> None:
    rec = _Recorder(fail_on="requeue")
    result = SlurmActuator(run=rec).execute(_decision("exclude_node_and_restart"))
    assert not result.ok
    assert "scontrol requeue 81234 exited 1: slurm_requeue error" in result.detail
    assert len(rec.calls) == 2  # the job update after the failed requeue is not attempted
    assert not SlurmActuator(run=rec).execute(_decision("escalate")).ok
    assert "needs a node" in SlurmActuator(run=rec).execute(_decision("drain_node", node="")).detail


class _ApiServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
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
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_PATCH = _handle
            do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


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
    assert api.requests == [
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
    assert rec.calls == [["scontrol", "requeue", "81234"]] and len(pager.would) == 1
