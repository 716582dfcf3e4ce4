"""The Kubernetes collector against a real local HTTP server replaying recorded API responses.

The server (``http.server`` on 127.0.0.1, random port, its own threads) serves scripted list
documents and chunked watch streams (newline-delimited JSON), records every request (path,
query, Authorization header) and can end a stream cleanly, drop it mid-stream, hold it open,
or wait on a gate the test opens. Tests wait on conditions with deadlines, never on sleeps.
"""

from __future__ import annotations

import base64
import json
import queue
import select
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import pytest

from rankscope.collectors.base import EventFactory
from rankscope.collectors.kubernetes import (
    KubeConfigError,
    KubernetesCollector,
    KubernetesCollectorConfig,
    create_kubernetes_collector,
    parse_k8s_time,
    resolve_connection,
)
from rankscope.schemas.events import AgentEventEvent, Event, SchedulerEventEvent

DATA = Path(__file__).parent / "data" / "kubernetes"
NOW_NS = 1_762_800_000_000_000_000
DEADLINE_S = 10.0
NODE = "gpu-node-1"
PODS = "/api/v1/namespaces/train/pods"
NODES = "/api/v1/nodes"
EVENTS = "/api/v1/namespaces/train/events"


def rec(name: str) -> bytes:
    return (DATA / name).read_bytes()


# --------------------------------------------------------------------------------------------
# the recorded API server
# --------------------------------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer: a JSON document, or a watch stream and how it ends."""

    status: int = 200
    body: bytes = b""
    lines: list[bytes | threading.Event] = field(default_factory=list)
    end: Literal["document", "clean", "drop", "hold", "stall"] = "document"
    before: Callable[[], None] | None = None


def doc(name: str, status: int = 200, before: Callable[[], None] | None = None) -> Reply:
    return Reply(status=status, body=rec(name), before=before)


def stream(
    name: str | None,
    end: Literal["clean", "drop", "hold"] = "clean",
    gate: threading.Event | None = None,
    raw: bool = False,
) -> Reply:
    lines: list[bytes | threading.Event] = [gate] if gate is not None else []
    if name is not None:
        data = rec(name)
        if raw:
            lines.append(data)
        else:
            lines.extend(line + b"\n" for line in data.splitlines() if line.strip())
    return Reply(lines=lines, end=end)


def status_doc(code: int, reason: str, message: str) -> Reply:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return Reply(status=code, body=json.dumps(body).encode())


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    auth: str | None

    @property
    def watch(self) -> bool:
        return self.query.get("watch") == "1"


class ApiServer:
    """Scripts keyed by (path, is_watch); unscripted requests are held open (idle watches)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.scripts: dict[tuple[str, bool], list[Reply]] = {}
        self.requests: queue.Queue[Request] = queue.Queue()
        self.log: list[Request] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                req = Request(parts.path, query, self.headers.get("Authorization"))
                with owner._lock:
                    owner.log.append(req)
                    script = owner.scripts.get((req.path, req.watch), [])
                    reply = script.pop(0) if script else Reply(end="hold")
                if reply.before is not None:
                    reply.before()
                owner.requests.put(req)
                owner.serve(self, reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def script(self, path: str, watch: bool, *replies: Reply) -> None:
        with self._lock:
            self.scripts.setdefault((path, watch), []).extend(replies)

    def next_request(self, path: str, timeout: float = DEADLINE_S) -> Request:
        """The next request for ``path`` (requests for other paths are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no request for {path} within {timeout}s; got {self.log}")
            try:
                req = self.requests.get(timeout=left)
            except queue.Empty:
                continue
            if req.path == path:
                return req

    def requests_for(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.log if r.path == path]

    # -- replies -----------------------------------------------------------------------------

    def _gone(self, handler: BaseHTTPRequestHandler) -> bool:
        """Has the client closed its end?"""
        sock = handler.connection
        if isinstance(sock, ssl.SSLSocket):
            return False  # no peeking under TLS: held streams end when the server closes
        try:
            readable, _, _ = select.select([sock], [], [], 0.02)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _wait(self, handler: BaseHTTPRequestHandler, gate: threading.Event | None) -> bool:
        """Block until the gate opens (True) or the client/server goes away (False)."""
        while not self.closing.is_set():
            if gate is not None and gate.is_set():
                return True
            if self._gone(handler):
                return False
        return False

    def serve(self, h: BaseHTTPRequestHandler, reply: Reply) -> None:
        try:
            if reply.end == "stall":  # read the request, never answer
                self._wait(h, None)
                h.close_connection = True
                return
            if reply.end == "document":
                h.send_response(reply.status)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(reply.body)))
                h.end_headers()
                h.wfile.write(reply.body)
                return
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.flush()
            for item in reply.lines:
                if isinstance(item, threading.Event):
                    if not self._wait(h, item):
                        return
                    continue
                h.wfile.write(b"%x\r\n%s\r\n" % (len(item), item))
                h.wfile.flush()
            if reply.end == "clean":
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()
            elif reply.end == "drop":
                h.close_connection = True
                h.connection.shutdown(socket.SHUT_RDWR)
            else:
                self._wait(h, None)
                h.close_connection = True
        except OSError:
            h.close_connection = True

    def __enter__(self) -> ApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer() as srv:
        yield srv


class Sink:
    """The agent's emit: collects batches; waits with deadlines."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.cond = threading.Condition()

    def __call__(self, batch: Any) -> None:
        with self.cond:
            self.events.extend(batch)
            self.cond.notify_all()

    def scheduler(self) -> list[SchedulerEventEvent]:
        with self.cond:
            return [e for e in self.events if isinstance(e, SchedulerEventEvent)]

    def agent(self) -> list[AgentEventEvent]:
        with self.cond:
            return [e for e in self.events if isinstance(e, AgentEventEvent)]

    def wait(self, pred: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}; have {self.events}")
                self.cond.wait(left)

    def wait_scheduler(self, n: int) -> list[SchedulerEventEvent]:
        self.wait(lambda: len(self.scheduler()) >= n, f"{n} scheduler events")
        return self.scheduler()


def factory(node: str = NODE) -> EventFactory:
    return EventFactory(cluster="k8s-prod", node=node, clock_ns=lambda: NOW_NS)


def summary(events: list[SchedulerEventEvent]) -> list[tuple[Any, ...]]:
    """(event_type, job_id, rank, node, state, exit_code)."""
    out = []
    for e in events:
        assert e.payload.source == "kubernetes"
        out.append(
            (e.payload.event_type, e.job_id, e.rank, e.node, e.payload.state, e.payload.exit_code)
        )
    return out


def config(srv: ApiServer, token: Path, **kw: Any) -> KubernetesCollectorConfig:
    base: dict[str, Any] = {
        "api_url": f"http://127.0.0.1:{srv.port}",
        "token_path": token,
        "namespace": "train",
        "label_selector": "app=llm",
        "node_name": NODE,
        "watch_timeout_s": 60,
        "request_timeout_s": 5,
        "backoff_initial_s": 0.05,
        "backoff_max_s": 0.2,
    }
    base.update(kw)
    return KubernetesCollectorConfig(**base)


def stop_promptly(col: KubernetesCollector) -> None:
    t0 = time.monotonic()
    col.stop()
    assert time.monotonic() - t0 < 2.0, "stop() must cut open watches, not wait them out"
    assert col._threads == []


@pytest.fixture
def token(tmp_path: Path) -> Path:
    p = tmp_path / "token"
    p.write_text("tok-1\n")
    return p


# --------------------------------------------------------------------------------------------
# pods: list, watch, bookmark, dropped stream, 410 relist, resume versions, token rotation
# --------------------------------------------------------------------------------------------


def test_pod_watch_relist_and_resume(server: ApiServer, token: Path) -> None:
    server.script(PODS, False, doc("pods_list_1.json"))
    server.script(
        PODS,
        True,
        # ends with a BOOKMARK at 1010, then the connection drops between two objects (to a
        # chunked HTTP/1.1 reader that is the end of the stream: resumed the same way)
        stream("pods_watch_1.ndjson", end="drop"),
        stream("pods_watch_2.ndjson", end="clean"),  # ERROR 410 Expired
    )
    # the relist rotates the service-account token: later requests must carry the new one
    server.script(PODS, False, doc("pods_list_2.json", before=lambda: token.write_text("tok-2")))
    server.script(PODS, True, stream("pods_watch_3.ndjson", end="clean"))

    sink = Sink()
    col = create_kubernetes_collector(
        config(server, token, watch_nodes=False, watch_events=False), factory()
    )
    assert (col.name, col.interval_s) == ("kubernetes", None)
    col.start(sink)
    try:
        reqs = [server.next_request(PODS) for _ in range(6)]
        got = sink.wait_scheduler(6)
    finally:
        stop_promptly(col)

    selectors = {"labelSelector": "app=llm", "fieldSelector": f"spec.nodeName={NODE}"}
    watch = {**selectors, "watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
    assert [r.query for r in reqs] == [
        {**selectors, "limit": "500"},
        {**watch, "resourceVersion": "1000"},  # from the list
        {**watch, "resourceVersion": "1010"},  # resumed from the BOOKMARK after the drop
        {**selectors, "limit": "500"},  # relist after 410 Gone
        {**watch, "resourceVersion": "2000"},  # from the relist
        {**watch, "resourceVersion": "2003"},  # resumed after the clean end (timeout)
    ]
    assert [r.auth for r in reqs] == ["Bearer tok-1"] * 4 + ["Bearer tok-2"] * 2

    job = "llama-70b"
    assert summary(got) == [
        ("job_started", job, 0, NODE, "Running", None),  # listed running
        ("job_started", job, 1, NODE, "Running", None),  # Pending -> Running
        ("oom_killed", job, 0, NODE, "OOMKilled", 137),  # lastState after restart
        ("job_started", job, 0, NODE, "Running", None),  # the restart: attempt 2 (issue 19)
        ("job_failed", job, 1, NODE, "Terminated", 1),  # seen by the relist
        ("preempted", job, 0, NODE, "Running", None),  # DisruptionTarget; no cancel/143s
    ]
    assert got[0].ts == parse_k8s_time("2025-11-10T15:02:10Z")
    assert got[2].ts == parse_k8s_time("2025-11-10T16:31:07Z")
    assert got[2].payload.reason == "OOMKilled: container pytorch exited 137"
    restart = got[3].payload
    assert (restart.reason, restart.run_id, restart.attempt) == ("restart 1", job, 2)
    assert [(e.payload.run_id, e.payload.attempt) for e in got[:3]] == [(job, 1)] * 3
    assert got[4].payload.reason.startswith("Error: container pytorch exited 1: Traceback")
    assert "NCCL error" in got[4].payload.reason
    assert got[5].payload.reason == (
        "PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod"
    )
    assert got[5].ts == parse_k8s_time("2025-11-10T17:00:00Z")
    assert all(e.event_id.startswith("k8s-") for e in got)
    assert len({e.event_id for e in got}) == len(got)
    assert sink.agent() == []  # a drop and a 410 are routine, not collector errors
    stats = dict(col.stats["pods"])
    stats.pop("watches")  # the request log above shows the four watches
    assert stats == {"lists": 2, "relists": 1, "drops": 0, "errors": 0, "failing": 0}


# --------------------------------------------------------------------------------------------
# nodes: pressure, cordon, NotReady, 410 -> relist shows it Ready again
# --------------------------------------------------------------------------------------------


def test_node_watch(server: ApiServer, token: Path) -> None:
    server.script(PODS, False, doc("pods_list_1.json"))
    server.script(NODES, False, doc("nodes_list_1.json"), doc("nodes_list_2.json"))
    gate = threading.Event()
    server.script(NODES, True, stream("nodes_watch_1.ndjson", end="hold", gate=gate))
    sink = Sink()
    col = KubernetesCollector(config(server, token, watch_events=False), factory())
    col.start(sink)
    try:
        sink.wait_scheduler(1)  # the pod on the node is known: node events carry its job
        gate.set()
        reqs = [server.next_request(NODES) for _ in range(4)]
        sink.wait(
            lambda: [e.payload.event_type for e in sink.scheduler()].count("node_up") == 1,
            "node_up",
        )
    finally:
        stop_promptly(col)

    sel = {"fieldSelector": f"metadata.name={NODE}"}
    assert [r.query.get("resourceVersion") for r in reqs] == [None, "500", None, "600"]
    assert all(r.query["fieldSelector"] == sel["fieldSelector"] for r in reqs)
    node_events = [e for e in sink.scheduler() if e.payload.event_type != "job_started"]
    assert summary(node_events) == [
        ("other", "llama-70b", None, NODE, "MemoryPressure", None),
        ("node_drain", "llama-70b", None, NODE, "Unschedulable", None),
        ("node_down", "llama-70b", None, NODE, "Ready=Unknown", None),
        ("node_up", "llama-70b", None, NODE, "Ready", None),
    ]
    reasons = [e.payload.reason for e in node_events]
    assert reasons == [
        "KubeletHasInsufficientMemory: kubelet has insufficient memory available",
        "spec.unschedulable=true (cordoned); taints: node.kubernetes.io/unschedulable:NoSchedule",
        "NodeStatusUnknown: Kubelet stopped posting node status.",
        "KubeletReady: kubelet is posting ready status",
    ]
    assert node_events[2].ts == parse_k8s_time("2025-11-10T17:12:40Z")
    assert node_events[3].ts == parse_k8s_time("2025-11-10T17:20:05Z")
    assert node_events[1].ts == NOW_NS  # a cordon carries no time of its own
    assert col.stats["nodes"]["relists"] == 1


# --------------------------------------------------------------------------------------------
# core/v1 events: Evicted/Preempted about known pods, SystemOOM on this node; then the pod fails
# --------------------------------------------------------------------------------------------


def test_core_events_and_eviction(server: ApiServer, token: Path) -> None:
    events_gate, pods_gate = threading.Event(), threading.Event()
    server.script(PODS, False, doc("pods_list_events.json"))
    server.script(PODS, True, stream("pods_watch_events.ndjson", end="hold", gate=pods_gate))
    server.script(EVENTS, False, doc("events_list_1.json"))
    server.script(EVENTS, True, stream("events_watch_1.ndjson", end="hold", gate=events_gate))
    sink = Sink()
    col = KubernetesCollector(config(server, token, watch_nodes=False), factory())
    col.start(sink)
    try:
        sink.wait_scheduler(1)  # worker-2 listed running: the events can name a known pod
        events_gate.set()
        sink.wait_scheduler(3)
        pods_gate.set()  # now the pod watch reports the evicted pod as Failed
        got = sink.wait_scheduler(4)
        ev_reqs = server.requests_for(EVENTS)
    finally:
        stop_promptly(col)

    assert [r.query for r in ev_reqs] == [
        {"limit": "500"},
        {
            "watch": "1",
            "resourceVersion": "3100",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "60",
        },
    ]
    assert summary(got) == [
        ("job_started", "llama-70b", 2, NODE, "Running", None),
        ("oom_killed", "llama-70b", None, NODE, "SystemOOM", None),  # this node only
        ("preempted", "llama-70b", 2, NODE, "Evicted", None),  # once, though the event repeats
        ("job_failed", "llama-70b", 2, NODE, "Failed", 137),  # pod-level, reason Evicted
    ]
    assert got[1].payload.reason == "System OOM encountered, victim process: python, pid: 48213"
    assert got[2].payload.reason.startswith("Evicted: The node was low on resource: memory.")
    assert got[3].payload.reason.startswith("Evicted: The node was low on resource: memory.")
    assert got[2].ts == parse_k8s_time("2025-11-10T17:30:00Z")


# --------------------------------------------------------------------------------------------
# errors: a failing list is retried with backoff and reported once; a stream broken inside an
# object is resumed from the last version
# --------------------------------------------------------------------------------------------


def test_reconnect_after_errors(server: ApiServer, token: Path) -> None:
    server.script(
        PODS,
        False,
        status_doc(500, "InternalError", "etcdserver: leader changed"),
        status_doc(503, "ServiceUnavailable", "the server is currently unable to handle it"),
        doc("pods_list_1.json"),
    )
    server.script(PODS, True, stream("pods_watch_truncated.ndjson", end="drop", raw=True))
    sink = Sink()
    col = KubernetesCollector(
        config(server, token, watch_nodes=False, watch_events=False), factory()
    )
    col.start(sink)
    try:
        reqs = [server.next_request(PODS) for _ in range(5)]
        sink.wait(lambda: len(sink.agent()) == 2, "collector_error and collector_recovered")
        got = sink.wait_scheduler(2)
    finally:
        stop_promptly(col)

    assert [(r.watch, r.query.get("resourceVersion")) for r in reqs] == [
        (False, None),
        (False, None),
        (False, None),
        (True, "1000"),
        (True, "1001"),  # the whole object before the cut was applied; the cut one was not
    ]
    err, ok = sink.agent()
    assert (err.payload.event_type, err.payload.collector, err.payload.count) == (
        "collector_error",
        "kubernetes",
        1,
    )
    assert "500" in err.payload.message and "etcdserver: leader changed" in err.payload.message
    assert (ok.payload.event_type, ok.payload.count) == ("collector_recovered", 2)
    assert [e.payload.event_type for e in got] == ["job_started", "job_started"]
    assert col.stats["pods"]["errors"] == 2
    assert col.stats["pods"]["drops"] == 1


def test_stop_while_a_request_is_unanswered(server: ApiServer, token: Path) -> None:
    """An API server that accepts but never answers must not hold stop() for the timeouts."""
    server.script(PODS, False, Reply(end="stall"))
    col = KubernetesCollector(
        config(server, token, watch_nodes=False, watch_events=False, request_timeout_s=60),
        factory(),
    )
    col.start(Sink())
    server.next_request(PODS)
    stop_promptly(col)


# --------------------------------------------------------------------------------------------
# connection settings: in-cluster over TLS with the service-account CA, kubeconfig, refusals
# --------------------------------------------------------------------------------------------


def _make_tls(tmp: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA and a server certificate for 127.0.0.1 (made in Python: no openssl binary needed)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(
        subject: str, key: rsa.RSAPrivateKey, issuer: str, signer: rsa.RSAPrivateKey, ca: bool
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    srv_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_crt = cert("test-ca", ca_key, "test-ca", ca_key, ca=True)
    srv_crt = cert("127.0.0.1", srv_key, "test-ca", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    (tmp / "ca.crt").write_bytes(ca_crt.public_bytes(pem))
    (tmp / "srv.crt").write_bytes(srv_crt.public_bytes(pem))
    (tmp / "srv.key").write_bytes(
        srv_key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp / "srv.crt", tmp / "srv.key")
    return tmp / "ca.crt", ctx


def test_in_cluster_tls_and_kubeconfig(tmp_path: Path, token: Path) -> None:
    ca, server_tls = _make_tls(tmp_path)
    with ApiServer(tls=server_tls) as srv:
        srv.script(PODS, False, doc("pods_list_events.json"))
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(srv.port)}
        cfg = KubernetesCollectorConfig(
            token_path=token, ca_path=ca, namespace="train", watch_nodes=False, watch_events=False
        )
        assert resolve_connection(cfg, env).url == f"https://127.0.0.1:{srv.port}"
        sink = Sink()
        col = KubernetesCollector(cfg, factory(), environ=env)
        col.start(sink)
        try:
            first = srv.next_request(PODS)
            sink.wait_scheduler(1)
        finally:
            stop_promptly(col)
        assert first.auth == "Bearer tok-1"

        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "prod",
                    "contexts": [{"name": "prod", "context": {"cluster": "c", "user": "agent"}}],
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": f"https://127.0.0.1:{srv.port}",
                                "certificate-authority-data": base64.b64encode(
                                    ca.read_bytes()
                                ).decode(),
                            },
                        }
                    ],
                    "users": [{"name": "agent", "user": {"token": "kc-token"}}],
                }
            )
        )
        pods2 = "/api/v1/namespaces/train2/pods"  # apart from the first collector's requests
        srv.script(pods2, False, doc("pods_list_events.json"))
        cfg2 = KubernetesCollectorConfig(
            kubeconfig=kubeconfig, namespace="train2", watch_nodes=False, watch_events=False
        )
        sink2 = Sink()
        col2 = KubernetesCollector(cfg2, factory(), environ={})
        col2.start(sink2)
        try:
            assert srv.next_request(pods2).auth == "Bearer kc-token"
            sink2.wait_scheduler(1)
        finally:
            stop_promptly(col2)


def test_connection_refusals(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        resolve_connection(KubernetesCollectorConfig(), {})
    kc = tmp_path / "kc.yaml"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: eks\n"
        "contexts: [{name: eks, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://example.invalid'}}]\n"
        "users: [{name: u, user: {exec: {command: aws, args: [eks, get-token]}}}]\n"
    )
    with pytest.raises(KubeConfigError, match="'exec'"):
        resolve_connection(KubernetesCollectorConfig(kubeconfig=kc), {})
    with pytest.raises(KubeConfigError, match="no context named 'other'"):
        resolve_connection(KubernetesCollectorConfig(kubeconfig=kc, context="other"), {})


def test_parse_k8s_time() -> None:
    assert parse_k8s_time("1970-01-01T00:00:01Z") == 1_000_000_000
    assert parse_k8s_time("2025-11-10T17:29:58.100000Z") == 1_762_795_798_100_000_000
    assert parse_k8s_time(None) is None
    assert parse_k8s_time("yesterday") is None
