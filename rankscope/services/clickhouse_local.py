"""A local ClickHouse HTTP endpoint backed by chDB, run as a detached process.

The engine is the real ClickHouse (chdb-core), so the sinks talk to it with clickhouse-connect
exactly as they would to a ClickHouse server; see `chdb_server` for how it is served.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

import rankscope
from rankscope.services._common import (
    DEFAULT_MEMORY_RATIO,
    ServiceError,
    free_port,
    pid_alive,
    pid_cmdline,
    pid_matches,
    pids_with,
    run_dir_for,
    tail,
    terminate,
    wait_until,
)

_MODULE = "rankscope.services.chdb_server"


def clickhouse_healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when GET <url>/ping answers "Ok." (works for chDB and real ClickHouse servers)."""
    base = url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/ping", timeout=timeout_s) as response:
            body: bytes = response.read()
    except (OSError, urllib.error.URLError, ValueError):
        return False
    return body.strip() == b"Ok."


def _pythonpath() -> str:
    """Make `python -m rankscope...` importable in the child even when not pip-installed."""
    root = str(Path(rankscope.__file__).resolve().parent.parent)
    current = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([root, current]) if current else root


class LocalClickHouse:
    """chDB serving ClickHouse's HTTP interface on host:port, data in data_dir."""

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        memory_ratio: float = DEFAULT_MEMORY_RATIO,
        credentials_dir: Path | None = None,
        database: str = "rankscope",
        users: bool = True,
    ) -> None:
        """``users``: serve the users of `rankscope.sinks.access` (writer and reader, granted on
        ``database``, passwords generated once into ``credentials_dir``, default the run
        directory) beside ``default``, the loopback admin; off: ``default`` only, as before."""
        self.data_dir = data_dir.resolve()
        self.credentials_dir = (credentials_dir or run_dir_for(self.data_dir)).resolve()
        self.database = database
        self.users = users
        self.host = host
        self.port = port or free_port(host)
        self.memory_ratio = memory_ratio
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def run_dir(self) -> Path:
        return run_dir_for(self.data_dir)

    @property
    def users_file(self) -> Path:
        return self.run_dir / "users.xml"

    def write_users(self) -> Path:
        """Render the users file the engine enforces (0600: it holds password hashes)."""
        from rankscope.sinks.access import local_users, users_xml

        text = users_xml(self.database, local_users(self.credentials_dir).values())
        tmp = self.users_file.with_name(f".users.xml.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        tmp.replace(self.users_file)
        return self.users_file

    @property
    def log_file(self) -> Path:
        return self.run_dir / "server.log"

    @classmethod
    def attach(
        cls, pid: int, data_dir: Path, port: int, host: str = "127.0.0.1"
    ) -> LocalClickHouse:
        """Handle for a server started by another process (the CLI's `services up`)."""
        server = cls(data_dir, port, host)
        server.pid = pid
        return server

    @property
    def running(self) -> bool:
        """Our supervisor process (not a reused pid) is alive."""
        if self._proc is not None:
            return self._proc.poll() is None
        if self.pid is None:
            return False
        return pid_matches(self.pid, _MODULE, str(self.data_dir))

    def healthy(self, timeout_s: float = 2.0) -> bool:
        return self.running and clickhouse_healthy(self.url, timeout_s)

    def start(self, timeout_s: float = 30) -> Self:
        """Spawn the server in its own session and wait until /ping answers."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # An engine orphaned by a killed supervisor exits on its own (parent-death signal) but
        # holds the data-dir lock for a second or so; give it that time instead of failing.
        wait_until(lambda: not self._orphaned_engines(), 10.0)
        cmd = [
            sys.executable,
            "-m",
            _MODULE,
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--host",
            self.host,
            "--memory-ratio",
            str(self.memory_ratio),
        ]
        if self.users:
            cmd += ["--users-xml", str(self.write_users())]
        env = {**os.environ, "PYTHONPATH": _pythonpath(), "PYTHONUNBUFFERED": "1"}
        with self.log_file.open("ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"----- {stamp} starting on {self.url} -----\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        deadline = time.monotonic() + timeout_s
        while not clickhouse_healthy(self.url, timeout_s=1.0):
            if not self.running:
                code = self._proc.returncode if self._proc is not None else None
                self._proc = None
                self.pid = None
                raise ServiceError(
                    f"chDB server exited during startup (code {code})\n"
                    f"--- {self.log_file} ---\n{tail(self.log_file)}"
                )
            if time.monotonic() >= deadline:
                self.stop()
                raise ServiceError(
                    f"chDB server on {self.url} not ready after {timeout_s:.0f} s\n"
                    f"--- {self.log_file} ---\n{tail(self.log_file)}"
                )
            time.sleep(0.1)
        return self

    def _orphaned_engines(self) -> list[int]:
        """Engine processes on our data dir whose supervisor is gone."""
        orphans = []
        for pid in pids_with(_MODULE, f"--data-dir {self.data_dir} ", "--parent-pid"):
            args = pid_cmdline(pid).split()
            with contextlib.suppress(ValueError, IndexError):
                if not pid_alive(int(args[args.index("--parent-pid") + 1])):
                    orphans.append(pid)
        return orphans

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM the supervisor (it stops the engine cleanly), SIGKILL the group on timeout."""
        if self.pid is not None and (self._proc is not None or self.running):
            terminate(self.pid, timeout_s, self._proc)
        self._proc = None
        self.pid = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
