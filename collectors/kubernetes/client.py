"""The connection to the API server (in-cluster service account or kubeconfig) and a minimal
client over ``http.client``: GETs with bearer auth, JSON documents and abortable watch streams.

Why not the official ``kubernetes`` package: see the package docstring.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rankscope.collectors.kubernetes.config import KubernetesCollectorConfig

USER_AGENT = "rankscope-agent/kubernetes"


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
