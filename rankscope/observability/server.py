"""``/metrics``, ``/healthz`` and ``/readyz`` of one long-running process, on a small thread.

``/healthz`` answers whether the process's main loop ticked recently (a wedged loop is restarted
by the orchestrator); ``/readyz`` whether it can do its work now: the broker answers (and, for
the sink, ClickHouse is not in an outage). A stdlib ``ThreadingHTTPServer`` serves all three:
prometheus-client's own server serves ``/metrics`` only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rankscope.kafka_security import KafkaSecurity, kafka_config
from rankscope.observability.metrics import ProcessMetrics

__all__ = ["BrokerProbe", "Health", "MetricsServer", "serve"]

log = logging.getLogger("rankscope.observability")

#: a check that returns None when fine, else the reason in a few words
Check = Callable[[], str | None]


class BrokerProbe:
    """Whether the broker answers a metadata request now (cached briefly: scrapes and probes
    may come often, and a down broker costs the whole timeout)."""

    def __init__(
        self,
        bootstrap: str,
        security: KafkaSecurity | None = None,
        timeout_s: float = 2.0,
        cache_s: float = 1.0,
    ) -> None:
        conf = kafka_config(bootstrap, security, **{"socket.connection.setup.timeout.ms": 2000})
        self._admin = AdminClient(conf)
        self._timeout_s = timeout_s
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._checked = -float("inf")
        self._result: str | None = None

    def __call__(self) -> str | None:
        with self._lock:
            if time.monotonic() - self._checked >= self._cache_s:
                try:
                    meta = self._admin.list_topics(timeout=self._timeout_s)
                    self._result = None if meta.brokers else "no broker in the metadata"
                except KafkaException as exc:
                    self._result = f"broker unreachable: {exc.args[0] if exc.args else exc}"
                self._checked = time.monotonic()
            return self._result


class Health:
    """Liveness from the main loop's heartbeat; readiness from the process's checks."""

    def __init__(
        self,
        ready: list[Check],
        last_beat: Callable[[], float] | None = None,
        stale_after_s: float = 60.0,
    ) -> None:
        """``last_beat``: when the main loop last turned (monotonic; the stats objects start
        with their creation time, so start-up counts as a turn); None: the process answering
        at all is its liveness (a process whose own threads are supervised)."""
        self._ready = ready
        self._last_beat = last_beat
        self.stale_after_s = stale_after_s

    def live(self) -> str | None:
        if self._last_beat is None:
            return None
        quiet = time.monotonic() - self._last_beat()
        return None if quiet < self.stale_after_s else f"main loop quiet for {quiet:.0f} s"

    def ready(self) -> str | None:
        for check in [self.live, *self._ready]:
            problem = check()
            if problem is not None:
                return problem
        return None


class MetricsServer:
    """The running endpoint; ``port`` is the bound one (useful with port 0)."""

    def __init__(self, httpd: ThreadingHTTPServer) -> None:
        self._httpd = httpd
        self.port: int = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="rankscope-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def serve(
    metrics: ProcessMetrics, health: Health, port: int, host: str = "0.0.0.0"
) -> MetricsServer | None:
    """Serve the three endpoints on ``port`` (0: any free port, logged); a port in use is a
    warning and no endpoint, never a reason for the stage itself to stop."""
    registry = metrics.registry

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                problem = health.live() if path == "/healthz" else health.ready()
                body = ("ok" if problem is None else problem).encode() + b"\n"
                self._send(200 if problem is None else 503, body, "text/plain; charset=utf-8")
            else:
                self._send(404, b"/metrics, /healthz or /readyz\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape every few seconds is not news

    try:
        httpd = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        log.warning("%s metrics endpoint not started on port %d: %s", metrics.role, port, exc)
        return None
    httpd.daemon_threads = True
    server = MetricsServer(httpd)
    log.warning("%s metrics on port %d (/metrics, /healthz, /readyz)", metrics.role, server.port)
    return server
