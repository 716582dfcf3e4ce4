"""Serve the ClickHouse HTTP interface from the chDB engine (chdb-core), as a process.

    python -m rankscope.services.chdb_server --data-dir D --port P [--host 127.0.0.1]

chDB has no server mode of its own, but one `_chdb.query` call that runs
``SYSTEM START LISTEN HTTP`` *and* a long ``sleepEachRow`` query starts ClickHouse's HTTP
handler and keeps it alive while that query runs. Facts this module is built on (chdb-core
26.9, measured):

* both statements must be in one call: a second ``_chdb.query`` in the same process fails with
  "EventNotifier is initialized twice", and once the keep-alive query ends the listener is gone
  for good. So a restart needs a fresh process: this module runs as a small supervisor that
  re-spawns the engine process if its keep-alive query ever ends;
* the result format must be TabSeparated: it becomes the HTTP default format, and with CSV
  clickhouse-connect's handshake fails;
* the HTTP port, listen host and server settings are read from ``config.xml`` in the working
  directory, so the engine runs in a private directory next to the data directory;
* the data directory is locked by the engine process, and data persists across restarts.

SIGTERM stops it: the engine cancels its keep-alive query over HTTP (``KILL QUERY`` needs a POST;
GET requests are read-only), which shuts the HTTP server down. With no client connection open
that takes ~1 s and exits 0; while clients still hold connections chDB waits ~5 s and then
force-exits with code 1 (committed inserts are on disk either way). A short HTTP keep-alive
timeout keeps idle pooled connections from causing that wait.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any
from xml.sax.saxutils import escape

from rankscope.services._common import DEFAULT_MEMORY_RATIO, run_dir_for

KEEPALIVE_TAG = "rankscope-chdb-keepalive"
KEEPALIVE_QUERY = (
    "SYSTEM START LISTEN HTTP; "
    f"SELECT /* {KEEPALIVE_TAG} */ sleepEachRow(1) FROM numbers(100000000) "
    "SETTINGS max_block_size=1, function_sleep_max_microseconds_per_block=0, max_execution_time=0"
)
EXIT_RESTART = 75  # engine served, then its keep-alive query ended: the supervisor restarts it
MAX_RESTARTS = 5
RESTART_WINDOW_S = 300.0


def config_xml(
    host: str, port: int, memory_ratio: float | None, users_xml: Path | None = None
) -> str:
    """Server settings chDB was verified to accept; anything else in here is untested.

    ``users_xml``: the users file (absolute path) the HTTP interface authenticates against and
    enforces (profiles, grants); chDB has no writable access storage, so users come from it."""
    parts = [
        "<clickhouse>",
        f"  <listen_host>{escape(host)}</listen_host>",
        f"  <http_port>{int(port)}</http_port>",
        # Idle keep-alive connections hold up shutdown (then chDB force-exits after ~5 s);
        # 3 s was ClickHouse's own default for years, and clickhouse-connect retries remote closes.
        "  <keep_alive_timeout>3</keep_alive_timeout>",
    ]
    if memory_ratio is not None:
        parts.append(
            "  <max_server_memory_usage_to_ram_ratio>"
            f"{memory_ratio}</max_server_memory_usage_to_ram_ratio>"
        )
    if users_xml is not None:
        parts += [
            "  <user_directories><users_xml>",
            f"    <path>{escape(str(users_xml.resolve()))}</path>",
            "  </users_xml></user_directories>",
        ]
    parts.append("</clickhouse>")
    return "\n".join(parts) + "\n"


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} [chdb_server pid={os.getpid()}] {message}", file=sys.stderr, flush=True)


def _http(host: str, port: int, query: str | None = None, timeout_s: float = 2.0) -> bytes:
    base = f"http://{host}:{port}"
    if query is None:
        request = urllib.request.Request(f"{base}/ping")
    else:  # POST: GET requests run read-only and may not KILL
        request = urllib.request.Request(
            f"{base}/?{urllib.parse.urlencode({'query': query})}", data=b"", method="POST"
        )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body: bytes = response.read()
        return body


def _pinged(host: str, port: int) -> bool:
    try:
        return _http(host, port).strip() == b"Ok."
    except (OSError, urllib.error.URLError):
        return False


def _die_with_parent(parent_pid: int | None) -> None:
    """Ask Linux to SIGTERM us when the supervisor dies, so the data-dir lock never leaks."""
    if parent_pid is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
        sys.exit(0)


def run_engine(
    data_dir: Path,
    host: str,
    port: int,
    memory_ratio: float | None,
    parent_pid: int | None = None,
    users_xml: Path | None = None,
) -> int:
    """Run chDB's HTTP server in this process until SIGTERM; returns the exit code."""
    _die_with_parent(parent_pid)
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    run_dir = run_dir_for(data_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.xml").write_text(config_xml(host, port, memory_ratio, users_xml))
    os.chdir(run_dir)

    stop = threading.Event()
    finished = threading.Event()
    outcome: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def serve() -> None:
        try:
            # The compiled module has no type information; one call per process (see above).
            _chdb: Any = importlib.import_module("chdb._chdb")
            result = _chdb.query(KEEPALIVE_QUERY, "TabSeparated", path=str(data_dir))
            error = getattr(result, "error_message", None)
            outcome.append(f"returned {error() if callable(error) else ''}".strip())
        except BaseException as exc:
            outcome.append(f"raised {type(exc).__name__}: {exc}")
        finally:
            finished.set()

    engine = threading.Thread(target=serve, name="chdb-keepalive", daemon=True)
    engine.start()
    served = False
    while not stop.is_set() and not finished.is_set():
        if not served and _pinged(host, port):
            served = True
            _log(f"serving ClickHouse HTTP on http://{host}:{port} (data {data_dir})")
        stop.wait(0.2 if not served else 1.0)

    if finished.is_set() and not stop.is_set():
        _log(f"keep-alive query ended: {outcome[0] if outcome else '?'}")
        return EXIT_RESTART if served else 1

    _log("SIGTERM: cancelling the keep-alive query")
    try:
        _http(
            host,
            port,
            f"KILL QUERY WHERE query LIKE '%{KEEPALIVE_TAG}%' AND query NOT ILIKE 'KILL%' ASYNC",
            timeout_s=5.0,
        )
    except (OSError, urllib.error.URLError) as exc:
        _log(f"could not cancel the keep-alive query: {exc}")
    if finished.wait(10.0):
        _log("stopped")
        return 0
    _log("keep-alive query did not stop; exiting hard")
    sys.stderr.flush()
    os._exit(0)


def supervise(argv_engine: list[str]) -> int:
    """Run the engine as a child; restart it if it ends by itself; forward SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    restarts: list[float] = []
    while True:
        cmd = [sys.executable, "-m", "rankscope.services.chdb_server", *argv_engine]
        child = subprocess.Popen([*cmd, "--parent-pid", str(os.getpid())])
        while child.poll() is None and not stop.is_set():
            stop.wait(0.5)
        if stop.is_set():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            _log(f"engine exited with code {child.returncode}; supervisor exiting")
            return 0
        code = child.returncode
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < RESTART_WINDOW_S]
        if code not in (EXIT_RESTART, -signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT):
            _log(f"engine exited with code {code}; giving up")
            return code if code > 0 else 1
        if len(restarts) >= MAX_RESTARTS:
            _log(f"engine ended {len(restarts) + 1} times in {RESTART_WINDOW_S:.0f} s; giving up")
            return 1
        restarts.append(now)
        _log(f"engine ended (code {code}); restarting")
        stop.wait(1.0)
        if stop.is_set():
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rankscope.services.chdb_server",
        description="Serve the ClickHouse HTTP interface from the chDB engine.",
    )
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--memory-ratio",
        type=float,
        default=DEFAULT_MEMORY_RATIO,
        help="max_server_memory_usage_to_ram_ratio (0 = ClickHouse's default)",
    )
    parser.add_argument(
        "--users-xml", type=Path, default=None, help="users file (profiles, users, grants)"
    )
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ratio: float | None = args.memory_ratio or None
    if args.parent_pid is not None:
        return run_engine(
            args.data_dir, args.host, args.port, ratio, args.parent_pid, args.users_xml
        )
    engine_args = [
        "--data-dir",
        str(args.data_dir.resolve()),
        "--port",
        str(args.port),
        "--host",
        args.host,
        "--memory-ratio",
        str(args.memory_ratio),
    ]
    if args.users_xml is not None:
        engine_args += ["--users-xml", str(args.users_xml.resolve())]
    return supervise(engine_args)


if __name__ == "__main__":
    sys.exit(main())
