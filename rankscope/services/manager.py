"""Bring the pipeline's backing services up and down: local ones we run, or the user's own.

Used by `rankscope services up|down|status`, the demo and the test fixtures. Passing a Kafka
bootstrap address and/or a ClickHouse URL means "use mine": nothing is started for that service.
Otherwise a local Kafka broker and a chDB-backed ClickHouse endpoint are started, detached (their
own sessions), so they outlive the command that started them; the state file remembers them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankscope.services._common import Progress, ServiceError, file_lock, port_free
from rankscope.services.clickhouse_local import LocalClickHouse, clickhouse_healthy
from rankscope.services.kafka import KAFKA_VERSION, LocalKafka, kafka_healthy

STATE_FILE = "services.json"
STATE_VERSION = 1
KAFKA = "kafka"
CLICKHOUSE = "clickhouse"


def default_state_dir() -> Path:
    """`$RANKSCOPE_HOME`, else `.rankscope` in the current directory."""
    env = os.environ.get("RANKSCOPE_HOME")
    return Path(env).expanduser() if env else Path.cwd() / ".rankscope"


@dataclass(frozen=True)
class Endpoints:
    """Where the pipeline finds its services.

    managed is True when at least one of them is a local service rankscope runs.
    """

    kafka_bootstrap: str
    clickhouse_url: str
    managed: bool


def docker_available(timeout_s: float = 2.0) -> bool:
    """True when a Docker engine answers a ping; never raises (False without the docker package)."""
    try:
        docker: Any = importlib.import_module("docker")
        client = docker.from_env(timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


class ServiceManager:
    """Starts, finds and stops the local services recorded in `<state_dir>/services.json`."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        kafka_port: int = 0,
        kafka_controller_port: int = 0,
        clickhouse_port: int = 0,
        kafka_start_timeout_s: float = 60,
        clickhouse_start_timeout_s: float = 30,
        database: str = "rankscope",
    ) -> None:
        self.state_dir = (state_dir or default_state_dir()).expanduser().resolve()
        self.kafka_port = kafka_port
        self.kafka_controller_port = kafka_controller_port
        self.clickhouse_port = clickhouse_port
        self.kafka_start_timeout_s = kafka_start_timeout_s
        self.clickhouse_start_timeout_s = clickhouse_start_timeout_s
        #: the database the local engine's writer and reader users are granted on
        self.database = database
        # Handles for processes this object started: stopping through them also reaps them.
        self._kafka: LocalKafka | None = None
        self._clickhouse: LocalClickHouse | None = None

    # -- paths and state ---------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def kafka_data_dir(self) -> Path:
        return self.state_dir / "data" / "kafka"

    @property
    def clickhouse_data_dir(self) -> Path:
        return self.state_dir / "data" / "clickhouse"

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return file_lock(self.state_dir / ".services.lock")

    def _load(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ServiceError(f"unreadable state file {self.state_file}: {exc}") from exc
        return state if isinstance(state, dict) else {}

    def _save(self, state: dict[str, Any]) -> None:
        if not state.get(KAFKA) and not state.get(CLICKHOUSE) and not state.get("endpoints"):
            self.state_file.unlink(missing_ok=True)
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        state["version"] = STATE_VERSION
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.state_file)

    def _kafka_handle(self, record: dict[str, Any]) -> LocalKafka:
        if self._kafka is not None and self._kafka.pid == record.get("pid"):
            return self._kafka
        return LocalKafka.attach(
            int(record["pid"]),
            Path(record["data_dir"]),
            int(record["port"]),
            int(record["controller_port"]),
        )

    def _clickhouse_handle(self, record: dict[str, Any]) -> LocalClickHouse:
        if self._clickhouse is not None and self._clickhouse.pid == record.get("pid"):
            return self._clickhouse
        return LocalClickHouse.attach(
            int(record["pid"]),
            Path(record["data_dir"]),
            int(record["port"]),
            str(record.get("host", "127.0.0.1")),
        )

    # -- up ----------------------------------------------------------------------------------
    def up(
        self,
        kafka_bootstrap: str | None = None,
        clickhouse_url: str | None = None,
        progress: Progress | None = None,
    ) -> Endpoints:
        """Return endpoints, starting (or reusing) local services for those not given."""
        endpoints, _ = self.up_tracked(kafka_bootstrap, clickhouse_url, progress)
        return endpoints

    def up_tracked(
        self,
        kafka_bootstrap: str | None = None,
        clickhouse_url: str | None = None,
        progress: Progress | None = None,
    ) -> tuple[Endpoints, list[str]]:
        """Like `up`, also naming the services this call started (not reused)."""
        with self._lock():
            state = self._load()
            started: list[str] = []
            try:
                if kafka_bootstrap is None:
                    kafka_bootstrap = self._up_kafka(state, started, progress)
                if clickhouse_url is None:
                    clickhouse_url = self._up_clickhouse(state, started, progress)
            except BaseException:
                self._stop_locked(state, started, progress)
                raise
            managed = bool(state.get(KAFKA)) and state[KAFKA]["bootstrap"] == kafka_bootstrap
            managed = managed or (
                bool(state.get(CLICKHOUSE)) and state[CLICKHOUSE]["url"] == clickhouse_url
            )
            endpoints = Endpoints(kafka_bootstrap, clickhouse_url, managed)
            state["endpoints"] = asdict(endpoints)
            self._save(state)
            return endpoints, started

    def _up_kafka(
        self, state: dict[str, Any], started: list[str], progress: Progress | None
    ) -> str:
        record = state.get(KAFKA)
        port, controller_port = self.kafka_port, self.kafka_controller_port
        if record:
            kafka = self._kafka_handle(record)
            if kafka.running and kafka_healthy(kafka.bootstrap, timeout_s=5.0):
                _say(progress, f"Kafka already running on {kafka.bootstrap} (pid {kafka.pid})")
                return kafka.bootstrap
            if kafka.running:
                _say(progress, f"Kafka pid {kafka.pid} is not answering; restarting it")
                kafka.stop()
            # Keep the address stable across crashes when the old ports are still free.
            if not port and port_free("127.0.0.1", int(record["port"])):
                port = int(record["port"])
            if not controller_port and port_free("127.0.0.1", int(record["controller_port"])):
                controller_port = int(record["controller_port"])
            state.pop(KAFKA, None)
            self._save(state)
        kafka = LocalKafka(self.kafka_data_dir, port, controller_port, progress=progress)
        began = time.monotonic()
        kafka.start(timeout_s=self.kafka_start_timeout_s)
        self._kafka = kafka
        state[KAFKA] = {
            "pid": kafka.pid,
            "port": kafka.port,
            "controller_port": kafka.controller_port,
            "data_dir": str(kafka.data_dir),
            "bootstrap": kafka.bootstrap,
            "version": KAFKA_VERSION,
            "log": str(kafka.broker_log),
            "started_at": time.time(),
        }
        started.append(KAFKA)
        self._save(state)  # recorded at once, so `down` finds it even if ClickHouse fails
        _say(
            progress,
            f"Kafka ready on {kafka.bootstrap} (pid {kafka.pid}, {time.monotonic() - began:.1f} s)",
        )
        return kafka.bootstrap

    def _up_clickhouse(
        self, state: dict[str, Any], started: list[str], progress: Progress | None
    ) -> str:
        record = state.get(CLICKHOUSE)
        port = self.clickhouse_port
        if record:
            server = self._clickhouse_handle(record)
            if server.running and clickhouse_healthy(server.url, timeout_s=5.0):
                _say(progress, f"ClickHouse (chDB) already running on {server.url}")
                return server.url
            if server.running:
                _say(progress, f"ClickHouse pid {server.pid} is not answering; restarting it")
                server.stop()
            if not port and port_free("127.0.0.1", int(record["port"])):
                port = int(record["port"])
            state.pop(CLICKHOUSE, None)
            self._save(state)
        _say(progress, "Starting ClickHouse (chDB engine, HTTP interface)...")
        # writer/reader passwords live in the state dir (0600), next to the other local keys
        server = LocalClickHouse(
            self.clickhouse_data_dir, port, credentials_dir=self.state_dir, database=self.database
        )
        began = time.monotonic()
        server.start(timeout_s=self.clickhouse_start_timeout_s)
        self._clickhouse = server
        state[CLICKHOUSE] = {
            "pid": server.pid,
            "port": server.port,
            "host": server.host,
            "data_dir": str(server.data_dir),
            "url": server.url,
            "log": str(server.log_file),
            # serves the writer/reader users (passwords in the state dir), not only `default`
            "users": server.users,
            "started_at": time.time(),
        }
        started.append(CLICKHOUSE)
        self._save(state)
        _say(
            progress,
            f"ClickHouse ready on {server.url} (pid {server.pid}, "
            f"{time.monotonic() - began:.1f} s)",
        )
        return server.url

    # -- down --------------------------------------------------------------------------------
    def down(self, progress: Progress | None = None) -> None:
        """Stop every local service in the state file and remove the file."""
        with self._lock():
            state = self._load()
            self._stop_locked(state, [KAFKA, CLICKHOUSE], progress)
            self.state_file.unlink(missing_ok=True)

    def stop_services(self, names: list[str], progress: Progress | None = None) -> None:
        """Stop only the named local services ("kafka", "clickhouse"), keeping the rest."""
        with self._lock():
            state = self._load()
            self._stop_locked(state, names, progress)

    def _stop_locked(
        self, state: dict[str, Any], names: list[str], progress: Progress | None
    ) -> None:
        errors: list[str] = []
        # ClickHouse first: the sinks write there last, and it stops quickest.
        for name in (CLICKHOUSE, KAFKA):
            record = state.get(name)
            if name not in names or not record:
                continue
            handle: LocalKafka | LocalClickHouse = (
                self._kafka_handle(record) if name == KAFKA else self._clickhouse_handle(record)
            )
            try:
                if handle.running:
                    _say(progress, f"Stopping {name} (pid {handle.pid})...")
                    handle.stop()
            except ServiceError as exc:
                errors.append(f"{name}: {exc}")
                continue
            state.pop(name, None)
            if name == KAFKA:
                self._kafka = None
            else:
                self._clickhouse = None
        if not state.get(KAFKA) and not state.get(CLICKHOUSE):
            state.pop("endpoints", None)
        self._save(state)
        if errors:
            raise ServiceError("; ".join(errors))

    # -- status ------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Per service: managed, running, pid, endpoint, healthy (plus data dir and log)."""
        state = self._load()
        endpoints = state.get("endpoints") or {}
        report: dict[str, Any] = {"state_file": str(self.state_file)}
        kafka_record = state.get(KAFKA)
        if kafka_record:
            kafka = self._kafka_handle(kafka_record)
            running = kafka.running
            report[KAFKA] = {
                "managed": True,
                "running": running,
                "pid": kafka.pid if running else None,
                "endpoint": kafka.bootstrap,
                "healthy": running and kafka_healthy(kafka.bootstrap),
                "data_dir": kafka_record["data_dir"],
                "log": kafka_record.get("log"),
            }
        else:
            report[KAFKA] = self._external(endpoints.get("kafka_bootstrap"), kafka_healthy)
        ch_record = state.get(CLICKHOUSE)
        if ch_record:
            server = self._clickhouse_handle(ch_record)
            running = server.running
            report[CLICKHOUSE] = {
                "managed": True,
                "running": running,
                "pid": server.pid if running else None,
                "endpoint": server.url,
                "healthy": running and clickhouse_healthy(server.url),
                "data_dir": ch_record["data_dir"],
                "log": ch_record.get("log"),
                "users": bool(ch_record.get("users")),
            }
        else:
            report[CLICKHOUSE] = self._external(endpoints.get("clickhouse_url"), clickhouse_healthy)
        return report

    @staticmethod
    def _external(endpoint: str | None, check: Callable[[str], bool]) -> dict[str, Any]:
        healthy = endpoint is not None and check(endpoint)
        return {
            "managed": False,
            "running": healthy,
            "pid": None,
            "endpoint": endpoint,
            "healthy": healthy,
        }


@contextlib.contextmanager
def local_services(
    state_dir: Path,
    kafka_bootstrap: str | None = None,
    clickhouse_url: str | None = None,
    progress: Progress | None = None,
    database: str = "rankscope",
) -> Iterator[Endpoints]:
    """Services for a test session or the demo: start what is missing, stop only that after."""
    manager = ServiceManager(state_dir, database=database)
    endpoints, started = manager.up_tracked(kafka_bootstrap, clickhouse_url, progress)
    try:
        yield endpoints
    finally:
        if started:
            manager.stop_services(started, progress)
