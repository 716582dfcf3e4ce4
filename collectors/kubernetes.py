"""Kubernetes scheduler events from watches on pods, nodes and core/v1 events.

The collector lists each resource, then watches it from the list's ``resourceVersion``
(``?watch=1&allowWatchBookmarks=true&timeoutSeconds=N``), resumes from the last version seen
(object or BOOKMARK) when a stream ends or drops, relists when the server answers 410 Gone (as
an HTTP status or as an ``ERROR`` event carrying a ``Status`` with ``code: 410``), and reconnects
with exponential backoff on any other error. A relist is diffed against what was already
reported, so nothing is reported twice and nothing that happened while disconnected is lost.

Why a thin client over ``http.client`` and not the official ``kubernetes`` package (37.x on
PyPI): the collector needs three GETs (list and watch of pods, nodes, events) and nothing else.
The official client pulls in urllib3, google-auth, oauthlib, requests and websocket-client, has
no type stubs (``mypy --strict`` would need ignores at every call), leaves the 410 relist to the
caller anyway (its ``Watch`` raises ``ApiException(410)``), and blocks inside urllib3 until the
server's timeout, so ``stop()`` could not end a watch promptly. Owning the connection lets
``stop()`` shut the socket down and return at once, and the tests run the collector against a
plain local HTTP server. Authentication covered: the in-cluster service account (token re-read
on every request, since bound tokens rotate; the service-account CA), and a kubeconfig whose
user has a token, a token file or a client certificate (inline ``*-data`` or files); ``exec``
and ``auth-provider`` plugins are refused with a clear error (use a token for the agent).

Mapping to SchedulerEvent (``source="kubernetes"``):

- pod phase Running (first time) -> ``job_started``; Succeeded -> ``job_completed``;
- a container termination with reason ``OOMKilled`` (``state`` or ``lastState``, once per
  container instance) -> ``oom_killed`` with the exit code; another non-zero exit of a pod that
  is not being disrupted -> ``job_failed`` (a restart under ``restartPolicy: OnFailure`` is a
  crashed rank even though the pod stays Running);
- pod condition ``DisruptionTarget=True`` (PreemptionByScheduler, EvictionByEvictionAPI,
  DeletionByTaintManager, TerminationByKubelet; Kubernetes >= 1.26), pod ``status.reason``
  ``Evicted``, or a core/v1 event ``Preempted`` (action ``Preempting``) or ``Evicted`` about a
  known pod -> ``preempted``, once per pod;
- pod phase Failed -> ``job_failed`` unless a container failure of that pod was already
  reported; a pod deleted (``deletionTimestamp``) with no disruption condition -> ``job_cancelled``
  (its containers' SIGTERM/SIGKILL exits are not reported as failures);
- node ``Ready`` False/Unknown or the node deleted -> ``node_down``; ``spec.unschedulable``
  (cordon, drain) -> ``node_drain``; schedulable and Ready again -> ``node_up``;
  ``MemoryPressure``/``DiskPressure``/``PIDPressure`` turning True -> ``other`` (a precursor of
  evictions and host OOM); a node event ``SystemOOM`` -> ``oom_killed``.

``job_id`` comes from the label ``job_label`` (default ``training.kubeflow.org/job-name``),
else the pod's controller owner, else the pod name; ``rank`` from a literal ``RANK`` env var in
the pod spec (the training operator sets it), else the first integer label of ``rank_labels``
(replica index, job-completion index). Events get the node the pod runs on (or the node the
event is about), and ids derived from the object's uid, so a restarted agent, or agents on
several nodes watching the same objects, produce rows that ClickHouse deduplicates. The first
list counts as news: a pod already running, a container already OOM-killed, a node already
cordoned are reported with their own timestamps (an agent that starts late still reports them,
and the ids make the repeats of a restarted agent harmless). A core/v1 event about a pod the pod
watch has not seen is ignored (the pod's own status reports the same disruption).

A watch thread's failures are reported as ``agent_event`` ``collector_error`` (once per run of
failures, with the message) and ``collector_recovered`` when the watch is back.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from rankscope.collectors.base import BaseCollector, CollectorConfig, Emit, EventFactory
from rankscope.schemas.events import AgentEventEvent, Event, SchedulerEventEvent
from rankscope.schemas.payloads import AgentEvent, SchedulerEvent, SchedulerEventType

__all__ = [
    "KubeApiError",
    "KubeClient",
    "KubeConfigError",
    "KubernetesCollector",
    "KubernetesCollectorConfig",
    "KubernetesConnection",
    "create_kubernetes_collector",
    "parse_k8s_time",
    "resolve_connection",
]

log = logging.getLogger(__name__)

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT = "rankscope-agent/kubernetes"
DISRUPTION_REASONS = frozenset(
    {
        "PreemptionByScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "DeletionByPodGC",
        "TerminationByKubelet",
    }
)
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")


class KubernetesCollectorConfig(CollectorConfig):
    """Where the API server is, how to authenticate, and what to watch."""

    #: e.g. https://10.0.0.1:6443; None = kubeconfig if given, else in-cluster
    #: (KUBERNETES_SERVICE_HOST/PORT)
    api_url: str | None = None
    token_path: Path = SA_DIR / "token"
    ca_path: Path | None = SA_DIR / "ca.crt"
    kubeconfig: Path | None = None
    #: kubeconfig context; None = its current-context
    context: str | None = None
    insecure_skip_tls_verify: bool = False
    #: None = all namespaces
    namespace: str | None = None
    label_selector: str = ""
    #: watch only the pods on this node (fieldSelector spec.nodeName) and only this node
    node_name: str | None = None
    watch_nodes: bool = True
    watch_events: bool = True
    #: server-side end of each watch (timeoutSeconds); the watch is then resumed
    watch_timeout_s: int = Field(default=300, ge=1)
    #: connect and read timeout of list calls; a watch read waits watch_timeout_s plus this
    request_timeout_s: float = Field(default=30.0, gt=0)
    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    #: items per list page (limit/continue)
    page_limit: int = Field(default=500, ge=1)
    job_label: str = "training.kubeflow.org/job-name"
    rank_labels: list[str] = Field(
        default_factory=lambda: [
            "training.kubeflow.org/replica-index",
            "batch.kubernetes.io/job-completion-index",
        ]
    )
    rank_env: list[str] = Field(default_factory=lambda: ["RANK"])


# --------------------------------------------------------------------------------------------
# A minimal API client
# --------------------------------------------------------------------------------------------


class KubeConfigError(ValueError):
    """The connection settings cannot be used (no API address, unsupported auth, bad file)."""


class KubeApiError(RuntimeError):
    """The API server answered with an error status (or an ERROR watch event)."""

    def __init__(self, code: int, message: str, reason: str = "") -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"{code} {reason}: {message}".strip())


class _Expired(Exception):
    """410 Gone: the resourceVersion is too old; relist."""


class _Dropped(Exception):
    """An open watch stream broke (server restart, proxy idle cut): resume from the version."""


@dataclass(frozen=True)
class KubernetesConnection:
    """Where and how to talk to the API server."""

    url: str
    token: Callable[[], str | None]
    ssl_context: ssl.SSLContext | None = None


def _file_token(path: Path) -> Callable[[], str | None]:
    """Re-read on each request: projected service-account tokens are rotated by the kubelet."""

    def read() -> str | None:
        try:
            return path.read_text().strip() or None
        except OSError:
            return None

    return read


def _ssl_context(
    ca_file: Path | None,
    ca_data: str | None,
    cert: tuple[str, str] | None,
    insecure: bool,
) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    try:
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif ca_data:
            ctx.load_verify_locations(cadata=ca_data)
        elif ca_file is not None:
            ctx.load_verify_locations(cafile=str(ca_file))
        if cert is not None:
            ctx.load_cert_chain(cert[0], cert[1])
    except (OSError, ssl.SSLError) as exc:
        raise KubeConfigError(f"cannot load TLS material: {exc}") from exc
    return ctx


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=False)
    except ValueError as exc:
        raise KubeConfigError(f"kubeconfig {what} is not base64") from exc


def _named(items: Any, name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            body = item.get(what)
            return dict(body) if isinstance(body, Mapping) else {}
    raise KubeConfigError(f"kubeconfig has no {what} named {name!r}")


def _from_kubeconfig(path: Path, context: str | None, insecure: bool) -> KubernetesConnection:
    """The subset of kubeconfig an agent needs: server, CA, token or client certificate."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"kubeconfig {path} is not a mapping")
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise KubeConfigError(f"kubeconfig {path} has no current-context")
    ctx = _named(doc.get("contexts"), str(ctx_name), "context")
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster", "")), "cluster")
    user = _named(doc.get("users"), str(ctx.get("user", "")), "user") if ctx.get("user") else {}
    base = path.parent

    def rel(p: Any) -> Path:
        q = Path(str(p))
        return q if q.is_absolute() else base / q

    server = cluster.get("server")
    if not server:
        raise KubeConfigError(f"kubeconfig cluster {ctx.get('cluster')!r} has no server")
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise KubeConfigError(
                f"kubeconfig user {ctx.get('user')!r} uses {plugin!r}, which this collector "
                "does not run; give the agent a service-account token or a client certificate"
            )
    if user.get("token"):
        static = str(user["token"])

        def token() -> str | None:
            return static

    elif user.get("tokenFile"):
        token = _file_token(rel(user["tokenFile"]))
    else:

        def token() -> str | None:
            return None

    ssl_ctx = None
    if str(server).startswith("https"):
        ca_data = None
        if cluster.get("certificate-authority-data"):
            ca_data = _b64(cluster["certificate-authority-data"], "CA data").decode()
        ca_file = (
            rel(cluster["certificate-authority"]) if cluster.get("certificate-authority") else None
        )
        cert: tuple[str, str] | None = None
        tmp: tempfile.TemporaryDirectory[str] | None = None
        try:
            if user.get("client-certificate-data") and user.get("client-key-data"):
                tmp = tempfile.TemporaryDirectory(prefix="rankscope-kube-")
                crt, key = Path(tmp.name) / "client.crt", Path(tmp.name) / "client.key"
                for p, data in (
                    (crt, user["client-certificate-data"]),
                    (key, user["client-key-data"]),
                ):
                    p.touch(mode=0o600)
                    p.write_bytes(_b64(data, "client certificate"))
                cert = (str(crt), str(key))
            elif user.get("client-certificate") and user.get("client-key"):
                cert = (str(rel(user["client-certificate"])), str(rel(user["client-key"])))
            ssl_ctx = _ssl_context(
                ca_file,
                ca_data,
                cert,
                insecure or bool(cluster.get("insecure-skip-tls-verify")),
            )
        finally:
            if tmp is not None:
                tmp.cleanup()  # the context holds the loaded key; the files are not needed
    return KubernetesConnection(url=str(server).rstrip("/"), token=token, ssl_context=ssl_ctx)


def resolve_connection(
    config: KubernetesCollectorConfig, environ: Mapping[str, str] | None = None
) -> KubernetesConnection:
    """api_url, else kubeconfig, else in-cluster (KUBERNETES_SERVICE_HOST/PORT)."""
    env = os.environ if environ is None else environ
    if config.api_url is None and config.kubeconfig is not None:
        return _from_kubeconfig(config.kubeconfig, config.context, config.insecure_skip_tls_verify)
    url = config.api_url
    if url is None:
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise KubeConfigError(
                "no api_url or kubeconfig given and not in a pod "
                "(KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset)"
            )
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    ssl_ctx = None
    if url.startswith("https"):
        ca = config.ca_path if config.ca_path is not None and config.ca_path.exists() else None
        ssl_ctx = _ssl_context(ca, None, None, config.insecure_skip_tls_verify)
    return KubernetesConnection(
        url=url.rstrip("/"), token=_file_token(config.token_path), ssl_context=ssl_ctx
    )


class _Stream:
    """One request's connection and, once answered, its response; abortable from any thread."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        self.resp: http.client.HTTPResponse | None = None
        self._closed = False

    def read_json(self, what: str) -> dict[str, Any]:
        assert self.resp is not None
        try:
            doc = json.loads(self.resp.read())
        except ValueError as exc:
            raise KubeApiError(200, f"{what}: response is not JSON") from exc
        if not isinstance(doc, dict):
            raise KubeApiError(200, f"{what}: expected a JSON object")
        return doc

    def lines(self) -> Iterator[bytes]:
        """Newline-delimited JSON; a line cut short by the end of the stream raises."""
        assert self.resp is not None
        while True:
            line = self.resp.readline()
            if not line:
                return
            if not line.endswith(b"\n"):
                raise http.client.IncompleteRead(line)  # the stream ended inside an object
            if line.strip():
                yield line

    def abort(self) -> None:
        """Unblock a reader stuck in recv (close() alone does not, on Linux) and forbid
        http.client from silently reconnecting."""
        if self._closed:
            return
        self._closed = True
        self.conn.auto_open = 0
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


class KubeClient:
    """GET with bearer auth: JSON documents and watch streams."""

    def __init__(self, connection: KubernetesConnection, timeout_s: float) -> None:
        self.connection = connection
        self.timeout_s = timeout_s
        parts = urllib.parse.urlsplit(connection.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KubeConfigError(f"bad API server URL {connection.url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host,
                self._port,
                timeout=self.timeout_s,
                context=self.connection.ssl_context or ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)

    def open(
        self,
        path: str,
        params: Mapping[str, str],
        read_timeout_s: float | None = None,
        register: Callable[[_Stream], None] | None = None,
    ) -> _Stream:
        """Send the GET and wait for the answer's headers (both within ``timeout_s``); then
        reads wait up to ``read_timeout_s``. ``register`` gets the stream before anything is
        sent, so that it can be aborted at any point. A non-200 answer raises (410 as
        :class:`_Expired`)."""
        query = urllib.parse.urlencode(params)
        target = f"{self._prefix}{path}" + (f"?{query}" if query else "")
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        token = self.connection.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        stream = _Stream(self._connect())
        if register is not None:
            register(stream)
        try:
            stream.conn.request("GET", target, headers=headers)
            resp = stream.conn.getresponse()
            if resp.status != 200:
                raise _status_error(resp.status, resp.read(65536))
            if read_timeout_s is not None and stream.conn.sock is not None:
                stream.conn.sock.settimeout(read_timeout_s)
        except BaseException:
            stream.abort()
            raise
        stream.resp = resp
        return stream

    def get_json(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        stream = self.open(path, params)
        try:
            return stream.read_json(f"GET {path}")
        finally:
            stream.abort()


def _status_error(code: int, body: bytes) -> Exception:
    message, reason = body.decode("utf-8", "replace")[:300], ""
    try:
        status = json.loads(body)
        if isinstance(status, dict):
            message = str(status.get("message", message))
            reason = str(status.get("reason", ""))
            code = int(status.get("code", code))
    except ValueError:
        pass
    if code == 410:
        return _Expired(message)
    return KubeApiError(code, message, reason)


# --------------------------------------------------------------------------------------------
# Object helpers
# --------------------------------------------------------------------------------------------


def parse_k8s_time(value: Any) -> int | None:
    """RFC 3339 (``2025-01-02T03:04:05Z``, MicroTime with fractions) -> ns since the epoch."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def _get(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in _dicts(_get(obj, "status", "conditions")):
        if c.get("type") == ctype:
            return c
    return None


def _stable_id(*parts: object) -> str:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return f"k8s-{digest[:40]}"


def _int_text(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


@dataclass
class _PodState:
    uid: str
    name: str
    namespace: str
    node: str
    job_id: str
    rank: int | None
    started: bool = False
    preempted: bool = False
    ended: bool = False
    terms: set[str] = field(default_factory=set)
    failed_terms: set[str] = field(default_factory=set)


@dataclass
class _NodeState:
    klass: Literal["up", "drain", "down"]
    pressure: set[str] = field(default_factory=set)


@dataclass
class _Cursor:
    """Where a watch resumes: the last resourceVersion applied (None: list first)."""

    rv: str | None = None


@dataclass(frozen=True)
class _Resource:
    """One watched collection."""

    name: Literal["pods", "nodes", "events"]
    path: str
    params: dict[str, str]


# --------------------------------------------------------------------------------------------
# The collector
# --------------------------------------------------------------------------------------------


class KubernetesCollector(BaseCollector):
    """Event-driven: one watch thread per resource; ``stop()`` ends them promptly."""

    name = "kubernetes"
    interval_s: float | None = None

    def __init__(
        self,
        config: KubernetesCollectorConfig,
        factory: EventFactory,
        connection: KubernetesConnection | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.connection = connection or resolve_connection(config, environ)
        self.client = KubeClient(self.connection, config.request_timeout_s)
        self._stop = threading.Event()
        self._lock = threading.RLock()  # pod/node state, emit
        self._streams: dict[str, _Stream] = {}
        self._threads: list[threading.Thread] = []
        self._emit: Emit | None = None
        self._pods: dict[str, _PodState] = {}
        self._nodes: dict[str, _NodeState] = {}
        self._events_seen: dict[str, None] = {}
        #: per resource: lists, watches, relists after 410, drops, errors, current failure run
        self.stats: dict[str, dict[str, int]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def resources(self) -> list[_Resource]:
        cfg = self.config
        ns = f"/namespaces/{urllib.parse.quote(cfg.namespace)}" if cfg.namespace else ""
        pod_params: dict[str, str] = {}
        if cfg.label_selector:
            pod_params["labelSelector"] = cfg.label_selector
        if cfg.node_name:
            pod_params["fieldSelector"] = f"spec.nodeName={cfg.node_name}"
        out = [_Resource("pods", f"/api/v1{ns}/pods", pod_params)]
        if cfg.watch_nodes:
            node_params = (
                {"fieldSelector": f"metadata.name={cfg.node_name}"} if cfg.node_name else {}
            )
            out.append(_Resource("nodes", "/api/v1/nodes", node_params))
        if cfg.watch_events:
            out.append(_Resource("events", f"/api/v1{ns}/events", {}))
        return out

    def start(self, emit: Emit) -> None:
        """Start one daemon watch thread per resource."""
        if self._threads:
            raise RuntimeError("kubernetes collector already started")
        self._emit = emit
        self._stop.clear()
        for res in self.resources():
            self.stats[res.name] = {
                "lists": 0,
                "watches": 0,
                "relists": 0,
                "drops": 0,
                "errors": 0,
                "failing": 0,
            }
            t = threading.Thread(
                target=self._run, args=(res,), name=f"rankscope-k8s-{res.name}", daemon=True
            )
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        """Signal the threads, cut their open streams, and wait for them (bounded)."""
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            s.abort()
        deadline = time.monotonic() + 5.0
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    # -- the watch loop ----------------------------------------------------------------------

    def _run(self, res: _Resource) -> None:
        backoff = self.config.backoff_initial_s
        cursor = _Cursor()
        while not self._stop.is_set():
            try:
                if cursor.rv is None:
                    cursor.rv = self._list(res)
                opened = time.monotonic()
                self._watch(res, cursor)
                backoff = self.config.backoff_initial_s
                if time.monotonic() - opened < self.config.backoff_initial_s:
                    self._stop.wait(self.config.backoff_initial_s)  # no hot loop on instant ends
            except _Expired as exc:
                log.info("kubernetes %s: %s; relisting", res.name, exc)
                self.stats[res.name]["relists"] += 1
                cursor.rv = None
            except _Dropped as exc:
                # routine (API server restarts, load balancers): no error event, quick resume
                log.info(
                    "kubernetes %s: watch broke (%s); resuming at %s", res.name, exc, cursor.rv
                )
                self.stats[res.name]["drops"] += 1
                self._stop.wait(self.config.backoff_initial_s)
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._failed(res, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.config.backoff_max_s)

    def _failed(self, res: _Resource, exc: Exception, backoff: float) -> None:
        """Count a failure; the first of a run of them is reported as collector_error."""
        stats = self.stats[res.name]
        stats["errors"] += 1
        stats["failing"] += 1
        log.warning("kubernetes %s: %s; retry in %.1fs", res.name, exc, backoff)
        if stats["failing"] == 1:
            self._agent_event("collector_error", res, 1, f"{type(exc).__name__}: {exc}")

    def _connected(self, res: _Resource) -> None:
        """A request succeeded: end a run of failures with collector_recovered."""
        stats = self.stats[res.name]
        if stats["failing"]:
            self._agent_event("collector_recovered", res, stats["failing"], "")
            stats["failing"] = 0

    def _register(self, res: _Resource, stream: _Stream | None) -> None:
        """Make the open request abortable by stop() (or forget it)."""
        with self._lock:
            if stream is None:
                self._streams.pop(res.name, None)
            else:
                self._streams[res.name] = stream
        if stream is not None and self._stop.is_set():
            stream.abort()

    def _open(
        self, res: _Resource, params: Mapping[str, str], read_timeout_s: float | None = None
    ) -> _Stream:
        """Open a request that stop() can abort from its first byte on."""
        try:
            return self.client.open(
                res.path, params, read_timeout_s, register=lambda st: self._register(res, st)
            )
        except BaseException:
            self._register(res, None)
            raise

    def _list(self, res: _Resource) -> str:
        """List every page, reconcile with the known state, return the list's version."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            params = dict(res.params, limit=str(self.config.page_limit))
            if cont:
                params["continue"] = cont
            stream = self._open(res, params)
            try:
                doc = stream.read_json(f"list {res.name}")
            finally:
                self._register(res, None)
                stream.abort()
            self._connected(res)
            items.extend(_dicts(doc.get("items")))
            cont = str(_get(doc, "metadata", "continue") or "")
            rv = str(_get(doc, "metadata", "resourceVersion") or "")
            if not cont:
                break
        self.stats[res.name]["lists"] += 1
        self._sync(res, items)
        return rv

    def _watch(self, res: _Resource, cursor: _Cursor) -> None:
        """Stream one watch; ``cursor.rv`` follows every object and bookmark applied, so a
        watch that ends or breaks anywhere resumes exactly after the last one."""
        params = dict(
            res.params,
            watch="1",
            resourceVersion=cursor.rv or "",
            allowWatchBookmarks="true",
            timeoutSeconds=str(self.config.watch_timeout_s),
        )
        stream = self._open(
            res, params, self.config.watch_timeout_s + self.config.request_timeout_s
        )
        self._connected(res)
        self.stats[res.name]["watches"] += 1
        lines = stream.lines()
        try:
            while True:
                try:
                    line = next(lines)
                except StopIteration:
                    break
                except (http.client.HTTPException, OSError) as exc:
                    if self._stop.is_set():
                        break
                    raise _Dropped(f"{type(exc).__name__}: {exc}") from exc
                try:
                    ev = json.loads(line)
                except ValueError as exc:
                    raise KubeApiError(200, f"watch {res.name}: bad line {line[:80]!r}") from exc
                etype = str(ev.get("type", "")) if isinstance(ev, dict) else ""
                obj = ev.get("object") if isinstance(ev, dict) else None
                if not isinstance(obj, dict):
                    raise KubeApiError(200, f"watch {res.name}: event without object")
                if etype == "ERROR":
                    code = _int_text(obj.get("code")) or 0
                    message = str(obj.get("message", ""))
                    if code == 410:
                        raise _Expired(message)
                    raise KubeApiError(code, message, str(obj.get("reason", "")))
                new_rv = _get(obj, "metadata", "resourceVersion")
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    self._handle(res, etype, obj)
                if new_rv:
                    cursor.rv = str(new_rv)
        finally:
            self._register(res, None)
            stream.abort()

    # -- dispatch ----------------------------------------------------------------------------

    def _sync(self, res: _Resource, items: list[dict[str, Any]]) -> None:
        """A (re)list: every object as ADDED; known pods/nodes that are gone as DELETED."""
        if res.name == "events":
            for obj in items:
                self._handle(res, "SYNC", obj)
            return
        with self._lock:
            if res.name == "pods":
                listed = {str(_get(o, "metadata", "uid")) for o in items}
                gone = [self._pods.pop(u) for u in list(self._pods) if u not in listed]
                events: list[Event] = [
                    self._pod_event(
                        st,
                        "other",
                        "Gone",
                        "pod deleted while the watch was disconnected; its end is unknown",
                        None,
                        None,
                        ("gone",),
                    )
                    for st in gone
                    if not st.ended and not st.preempted
                ]
                if events and self._emit is not None:
                    self._emit(events)
            for obj in items:
                self._handle(res, "ADDED", obj)
            if res.name == "nodes":
                listed = {str(_get(o, "metadata", "name")) for o in items}
                for name in [n for n in self._nodes if n not in listed]:
                    self._handle(res, "DELETED", {"metadata": {"name": name}})

    def _handle(self, res: _Resource, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            try:
                if res.name == "pods":
                    events = self._on_pod(etype, obj)
                elif res.name == "nodes":
                    events = self._on_node(etype, obj)
                else:
                    events = self._on_event(etype, obj)
            except Exception:
                log.exception("kubernetes %s: cannot interpret %s object", res.name, etype)
                return
            if events and self._emit is not None:
                self._emit(events)

    # -- pods --------------------------------------------------------------------------------

    def _pod_identity(self, pod: Mapping[str, Any]) -> tuple[str, int | None]:
        labels = _get(pod, "metadata", "labels") or {}
        job = labels.get(self.config.job_label) if isinstance(labels, Mapping) else None
        if not job:
            owners = _dicts(_get(pod, "metadata", "ownerReferences"))
            owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
            job = owner.get("name") if owner else None
        job = str(job or _get(pod, "metadata", "name") or "")
        rank: int | None = None
        for c in _dicts(_get(pod, "spec", "containers")):
            for env in _dicts(c.get("env")):
                if env.get("name") in self.config.rank_env and rank is None:
                    rank = _int_text(env.get("value"))
        if rank is None and isinstance(labels, Mapping):
            for label in self.config.rank_labels:
                rank = _int_text(labels.get(label))
                if rank is not None:
                    break
        return job, rank

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> list[Event]:
        uid = str(_get(pod, "metadata", "uid") or "")
        if not uid:
            return []
        st = self._pods.get(uid)
        if st is None:
            job, rank = self._pod_identity(pod)
            st = _PodState(
                uid=uid,
                name=str(_get(pod, "metadata", "name") or ""),
                namespace=str(_get(pod, "metadata", "namespace") or ""),
                node=str(_get(pod, "spec", "nodeName") or ""),
                job_id=job,
                rank=rank,
            )
            self._pods[uid] = st
        st.node = str(_get(pod, "spec", "nodeName") or st.node)
        events: list[Event] = []
        status = _get(pod, "status") or {}
        phase = str(status.get("phase") or "")
        deleting = bool(_get(pod, "metadata", "deletionTimestamp")) or etype == "DELETED"
        disruption = _condition(pod, "DisruptionTarget")
        disrupted = (
            disruption is not None
            and disruption.get("status") == "True"
            and str(disruption.get("reason")) in DISRUPTION_REASONS
        )
        evicted = status.get("reason") == "Evicted"

        if phase == "Running" and not st.started:
            st.started = True
            started = [
                parse_k8s_time(_get(cs, "state", "running", "startedAt"))
                for cs in _dicts(status.get("containerStatuses"))
            ]
            ts = min((t for t in started if t), default=None) or parse_k8s_time(
                status.get("startTime")
            )
            events.append(self._pod_event(st, "job_started", "Running", "", None, ts, ("start",)))

        if (disrupted or evicted) and not st.preempted:
            st.preempted = True
            if disrupted and disruption is not None:
                reason = f"{disruption.get('reason')}: {disruption.get('message', '')}".rstrip(": ")
                ts = parse_k8s_time(disruption.get("lastTransitionTime"))
            else:
                reason = f"Evicted: {status.get('message', '')}".rstrip(": ")
                ts = None
            events.append(
                self._pod_event(st, "preempted", phase or "Unknown", reason, None, ts, ("preempt",))
            )

        quiet = deleting or disrupted or evicted  # exits caused by the disruption are not news
        for cs in _dicts(status.get("containerStatuses")):
            cname = str(cs.get("name", ""))
            for where in ("lastState", "state"):
                term = _get(cs, where, "terminated")
                if not isinstance(term, Mapping):
                    continue
                key = str(
                    term.get("containerID")
                    or f"{cname}:{cs.get('restartCount', 0)}:{where}:{term.get('finishedAt')}"
                )
                if key in st.terms:
                    continue
                st.terms.add(key)
                code = _int_text(term.get("exitCode"))
                reason = str(term.get("reason") or "")
                detail = f"{reason}: container {cname} exited {code}"
                if term.get("message"):
                    detail += f": {str(term['message']).strip()[:2000]}"
                ts = parse_k8s_time(term.get("finishedAt"))
                if reason == "OOMKilled":
                    st.failed_terms.add(key)
                    events.append(
                        self._pod_event(st, "oom_killed", "OOMKilled", detail, code, ts, (key,))
                    )
                elif code and not quiet:
                    st.failed_terms.add(key)
                    events.append(
                        self._pod_event(st, "job_failed", "Terminated", detail, code, ts, (key,))
                    )

        if not st.ended and phase in ("Succeeded", "Failed"):
            st.ended = True
            terms = [
                t
                for t in (
                    _get(cs, "state", "terminated")
                    for cs in _dicts(status.get("containerStatuses"))
                )
                if isinstance(t, Mapping)
            ]
            ts = max((parse_k8s_time(t.get("finishedAt")) or 0 for t in terms), default=0) or None
            if phase == "Succeeded":
                events.append(self._pod_event(st, "job_completed", phase, "", 0, ts, ("end",)))
            elif not (st.failed_terms and not quiet):
                code = next(
                    (_int_text(t.get("exitCode")) for t in terms if t.get("exitCode")), None
                )
                reason = ": ".join(
                    str(x) for x in (status.get("reason"), status.get("message")) if x
                )
                events.append(
                    self._pod_event(st, "job_failed", phase, reason or "Failed", code, ts, ("end",))
                )
        if deleting and not st.ended and not st.preempted:
            st.ended = True
            events.append(
                self._pod_event(
                    st, "job_cancelled", phase or "Unknown", "pod deleted", None, None, ("deleted",)
                )
            )
        if etype == "DELETED":
            self._pods.pop(uid, None)
        return events

    def _pod_event(
        self,
        st: _PodState,
        etype: SchedulerEventType,
        state: str,
        reason: str,
        exit_code: int | None,
        ts_ns: int | None,
        key: tuple[object, ...],
    ) -> SchedulerEventEvent:
        return self._event(
            etype,
            state=state,
            reason=reason,
            exit_code=exit_code,
            ts_ns=ts_ns,
            job_id=st.job_id,
            rank=st.rank,
            node=st.node or None,
            event_id=_stable_id(self.factory.cluster, "pod", st.uid, etype, *key),
        )

    # -- nodes -------------------------------------------------------------------------------

    def _on_node(self, etype: str, node: dict[str, Any]) -> list[Event]:
        name = str(_get(node, "metadata", "name") or "")
        if not name:
            return []
        prev = self._nodes.get(name)
        ready = _condition(node, "Ready")
        if etype == "DELETED":
            self._nodes.pop(name, None)
            if prev is None or prev.klass == "down":
                return []
            return [self._node_event(name, "node_down", "Deleted", "node object deleted", None)]
        unschedulable = bool(_get(node, "spec", "unschedulable"))
        if ready is None or ready.get("status") != "True":
            klass: Literal["up", "drain", "down"] = "down"
        elif unschedulable:
            klass = "drain"
        else:
            klass = "up"
        cur = _NodeState(klass=klass)
        for ctype in PRESSURE_CONDITIONS:
            c = _condition(node, ctype)
            if c is not None and c.get("status") == "True":
                cur.pressure.add(ctype)
        self._nodes[name] = cur
        events: list[Event] = []
        for ctype in PRESSURE_CONDITIONS:
            if ctype in cur.pressure and (prev is None or ctype not in prev.pressure):
                c = _condition(node, ctype) or {}
                events.append(
                    self._node_event(
                        name,
                        "other",
                        ctype,
                        _cond_text(c),
                        parse_k8s_time(c.get("lastTransitionTime")),
                    )
                )
        if klass == (prev.klass if prev else "up"):
            return events
        taints = ", ".join(
            f"{t.get('key')}:{t.get('effect')}" for t in _dicts(_get(node, "spec", "taints"))
        )
        if klass == "down":
            cond = ready or {}
            state = f"Ready={cond.get('status', 'Missing')}"
            events.append(
                self._node_event(
                    name,
                    "node_down",
                    state,
                    _cond_text(cond),
                    parse_k8s_time(cond.get("lastTransitionTime")),
                )
            )
        elif klass == "drain":
            reason = "spec.unschedulable=true (cordoned)" + (
                f"; taints: {taints}" if taints else ""
            )
            events.append(self._node_event(name, "node_drain", "Unschedulable", reason, None))
        else:
            ts = (
                parse_k8s_time((ready or {}).get("lastTransitionTime"))
                if prev and prev.klass == "down"
                else None
            )
            events.append(self._node_event(name, "node_up", "Ready", _cond_text(ready or {}), ts))
        return events

    def _node_event(
        self,
        name: str,
        etype: SchedulerEventType,
        state: str,
        reason: str,
        ts_ns: int | None,
    ) -> SchedulerEventEvent:
        return self._event(
            etype,
            state=state,
            reason=reason,
            exit_code=None,
            ts_ns=ts_ns,
            job_id=self._node_job(name),
            rank=None,
            node=name,
            event_id=_stable_id(self.factory.cluster, "node", name, etype, state, ts_ns)
            if ts_ns
            else None,
        )

    # -- core/v1 events ----------------------------------------------------------------------

    def _on_event(self, etype: str, ev: dict[str, Any]) -> list[Event]:
        if etype == "DELETED":
            return []
        reason = str(ev.get("reason") or "")
        action = str(ev.get("action") or "")
        involved = ev.get("involvedObject") or {}
        kind = str(involved.get("kind") or "")
        uid = str(_get(ev, "metadata", "uid") or "")
        count = ev.get("count") or _get(ev, "series", "count") or 1
        seen_key = f"{uid}:{count}"
        if seen_key in self._events_seen:
            return []
        ts = (
            parse_k8s_time(ev.get("eventTime"))
            or parse_k8s_time(ev.get("lastTimestamp"))
            or parse_k8s_time(ev.get("firstTimestamp"))
            or parse_k8s_time(_get(ev, "metadata", "creationTimestamp"))
        )
        message = str(ev.get("message") or "")
        events: list[Event] = []
        if kind == "Pod" and (reason in ("Preempted", "Evicted") or action == "Preempting"):
            st = self._pods.get(str(involved.get("uid") or ""))
            if st is not None and not st.preempted:
                st.preempted = True
                events.append(
                    self._pod_event(
                        st,
                        "preempted",
                        reason,
                        f"{reason}: {message}".rstrip(": "),
                        None,
                        ts,
                        ("preempt",),
                    )
                )
        elif kind == "Node":
            node = str(involved.get("name") or "")
            mine = self.config.node_name is None or node == self.config.node_name
            if mine and reason == "SystemOOM":
                events.append(
                    self._event(
                        "oom_killed",
                        state="SystemOOM",
                        reason=message,
                        exit_code=None,
                        ts_ns=ts,
                        job_id=self._node_job(node),
                        rank=None,
                        node=node or None,
                        event_id=_stable_id(self.factory.cluster, "event", uid, count),
                    )
                )
            elif mine and not self.config.watch_nodes:
                etype_map: dict[str, SchedulerEventType] = {
                    "NodeNotReady": "node_down",
                    "NodeNotSchedulable": "node_drain",
                    "NodeReady": "node_up",
                    "NodeSchedulable": "node_up",
                }
                if reason in etype_map:
                    events.append(
                        self._event(
                            etype_map[reason],
                            state=reason,
                            reason=message,
                            exit_code=None,
                            ts_ns=ts,
                            job_id=self._node_job(node),
                            rank=None,
                            node=node or None,
                            event_id=_stable_id(self.factory.cluster, "event", uid, count),
                        )
                    )
        if uid:
            self._events_seen[seen_key] = None
            while len(self._events_seen) > 8192:
                self._events_seen.pop(next(iter(self._events_seen)))
        return events

    def _node_job(self, node: str) -> str | None:
        """The job of the watched pods on ``node``; this node's own job (registry) otherwise,
        and none for another node."""
        jobs = sorted({p.job_id for p in self._pods.values() if p.node == node and p.job_id})
        return jobs[0] if jobs else (None if node == self.factory.node else "")

    # -- envelopes ---------------------------------------------------------------------------

    def _event(
        self,
        etype: SchedulerEventType,
        *,
        state: str,
        reason: str,
        exit_code: int | None,
        ts_ns: int | None,
        job_id: str | None,
        rank: int | None,
        node: str | None,
        event_id: str | None,
    ) -> SchedulerEventEvent:
        payload = SchedulerEvent(
            source="kubernetes",
            event_type=etype,
            state=state[:256],
            reason=reason[:16_384],
            exit_code=exit_code,
        )
        ev = self.factory.make(SchedulerEventEvent, payload, ts_ns=ts_ns, job_id=job_id, rank=rank)
        update: dict[str, Any] = {}
        if node and node != ev.node:
            update["node"] = node
        if event_id:
            update["event_id"] = event_id
        return ev.model_copy(update=update) if update else ev

    def _agent_event(
        self,
        etype: Literal["collector_error", "collector_recovered"],
        res: _Resource,
        count: int,
        message: str,
    ) -> None:
        payload = AgentEvent(
            event_type=etype,
            collector=self.name,
            count=count,
            message=f"{res.name} watch: {message}".rstrip(": ")[:16_384],
        )
        ev = self.factory.make(AgentEventEvent, payload)
        with self._lock:
            if self._emit is not None:
                self._emit([ev])


def _cond_text(cond: Mapping[str, Any]) -> str:
    return ": ".join(str(x) for x in (cond.get("reason"), cond.get("message")) if x)


def create_kubernetes_collector(
    config: KubernetesCollectorConfig,
    factory: EventFactory,
    connection: KubernetesConnection | None = None,
    environ: Mapping[str, str] | None = None,
) -> KubernetesCollector:
    """The component factory the agent calls; resolves the API connection at once so that a
    misconfiguration fails at start-up, not in a background thread."""
    return KubernetesCollector(config, factory, connection=connection, environ=environ)
