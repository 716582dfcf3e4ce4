"""A single-node Apache Kafka broker (KRaft) run from Apache's own jars, resolved with Maven.

Why 3.9.1: faust-streaming talks to Kafka through aiokafka, which has reported problems with
Kafka 4.x brokers (KIP-896 removed the old protocol versions it still uses). 3.9.1 is the last
3.x release, supports KRaft (no ZooKeeper), and was measured to work with faust-streaming
0.15.3 + aiokafka 0.14 here. Change it only together with a faust/aiokafka check.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # the admin package re-exports it without __all__

from rankscope.kafka_security import KafkaSecurity, kafka_config
from rankscope.services._common import (
    Progress,
    ServiceError,
    default_cache_dir,
    file_lock,
    free_port,
    pid_alive,
    pid_matches,
    port_open,
    tail,
    terminate,
)
from rankscope.services.kafka_secure import SecureListener

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
SLF4J_BINDING = ("org.slf4j", "slf4j-reload4j", "1.7.36")  # broker logs through log4j 1/reload4j
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
HOST = "127.0.0.1"
NODE_ID = 1

_MARKER = ".resolved.json"
_QUIET = logging.getLogger("rankscope.services.kafka.librdkafka")

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rankscope.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>{slf4j_group}</groupId>
      <artifactId>{slf4j_artifact}</artifactId>
      <version>{slf4j_version}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log_file}
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""

_TOOLS_LOG4J = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def ensure_kafka_jars(
    cache_dir: Path | None = None,
    version: str = KAFKA_VERSION,
    progress: Progress | None = None,
) -> Path:
    """Return a directory holding the broker's jars, resolving them with Maven the first time.

    A marker file is written only after a successful resolve, so an interrupted one is redone.
    """
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    home = cache / f"kafka-{version}"
    libs = home / "libs"
    marker = home / _MARKER
    if marker.is_file() and libs.is_dir():
        return libs
    with file_lock(cache / ".kafka-resolve.lock"):
        if marker.is_file() and libs.is_dir():  # another process resolved it meanwhile
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise ServiceError(
                "Maven (`mvn`) is needed once to fetch the Kafka broker jars but is not on PATH; "
                "install Maven (and a Java 17+ runtime), or point rankscope at an existing "
                "cluster with --kafka-bootstrap"
            )
        shutil.rmtree(libs, ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        slf_group, slf_artifact, slf_version = SLF4J_BINDING
        (home / "pom.xml").write_text(
            _POM.format(
                version=version,
                scala=SCALA_VERSION,
                slf4j_group=slf_group,
                slf4j_artifact=slf_artifact,
                slf4j_version=slf_version,
            )
        )
        _say(progress, f"Resolving Apache Kafka {version} jars with Maven (first run only)...")
        started = time.monotonic()
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(home / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={libs}",
            f"-Dmaven.repo.local={cache / 'm2'}",
        ]
        try:
            done = subprocess.run(
                cmd, cwd=home, capture_output=True, text=True, timeout=900, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(f"Maven took too long resolving Kafka {version}: {exc}") from exc
        output = (done.stdout + done.stderr).strip()
        jars = sorted(p.name for p in libs.glob("*.jar")) if libs.is_dir() else []
        wanted = f"kafka_{SCALA_VERSION}-{version}.jar"
        if done.returncode != 0 or wanted not in jars:
            tail_lines = "\n".join(output.splitlines()[-40:])
            raise ServiceError(
                f"Maven could not resolve org.apache.kafka:kafka_{SCALA_VERSION}:{version} "
                f"(exit {done.returncode}); command: {' '.join(cmd)}\n{tail_lines}"
            )
        marker.write_text(json.dumps({"version": version, "jars": jars}, indent=1))
        _say(
            progress,
            f"Kafka {version}: {len(jars)} jars ready in {libs} "
            f"({time.monotonic() - started:.0f} s)",
        )
        return libs


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ServiceError("a Java 17+ runtime (`java`) is needed to run the local Kafka broker")
    return found


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (Kafka's Uuid format)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka avoids these too: they look like CLI options
            return text


def single_node_config(log_dir: str, controller: str, node_id: int = NODE_ID) -> dict[str, str]:
    """server.properties of a one-node KRaft cluster (broker and controller in one process),
    less its listeners: the local broker's, and the compose TLS overlay's (kafka_compose.py).
    ``controller`` is the controller listener's ``host:port``."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@{controller}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": log_dir,
        "num.partitions": "4",
        "offsets.topic.replication.factor": "1",
        # 50 partitions (the default) makes the first consumer-group join slow on one node.
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        # 8 MiB, so an oversized (e.g. 2 MB) record reaches the workers, who dead-letter it.
        "message.max.bytes": "8388608",
        "replica.fetch.max.bytes": "8388608",
        "log.retention.hours": "168",
    }


def _admin(bootstrap: str, security: KafkaSecurity | None = None) -> AdminClient:
    # A logger that nobody polls keeps librdkafka's "connection refused" chatter off stderr.
    config: dict[str, Any] = kafka_config(bootstrap, security, logger=_QUIET)
    return AdminClient(config)


def kafka_healthy(
    bootstrap: str, timeout_s: float = 3.0, security: KafkaSecurity | None = None
) -> bool:
    """True when the cluster at bootstrap answers a metadata request with at least one broker."""
    try:
        metadata = _admin(bootstrap, security).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return bool(metadata.brokers)


class LocalKafka:
    """One KRaft broker+controller on 127.0.0.1, in its own session so it can outlive us.

    Alone by default (node 1, its own quorum, a fresh cluster id). A node of a multi-node
    cluster (``kafka_cluster.LocalKafkaCluster``) is given its ``node_id``, the cluster's shared
    ``cluster_id`` and the ``quorum_voters`` of every controller; such a node is launched with
    :meth:`launch` and awaited with :meth:`wait_ready` separately, since no node answers before
    a majority of the quorum is up.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int = 0,
        controller_port: int = 0,
        *,
        libs_dir: Path | None = None,
        version: str = KAFKA_VERSION,
        heap: str = "768m",
        extra_config: Mapping[str, str] | None = None,
        progress: Progress | None = None,
        secure: SecureListener | None = None,
        node_id: int = NODE_ID,
        cluster_id: str | None = None,
        quorum_voters: str | None = None,
    ) -> None:
        self._owns_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="rankscope-kafka-")) if data_dir is None else data_dir
        ).resolve()
        self.port = port or free_port(HOST)
        self.controller_port = controller_port or free_port(HOST)
        while self.controller_port == self.port:
            self.controller_port = free_port(HOST)
        self.libs_dir = libs_dir
        self.version = version
        self.heap = heap
        self.extra_config = dict(extra_config or {})
        #: a SASL_SSL client listener instead of PLAINTEXT (kafka_secure.py)
        self.secure = secure
        self.progress = progress
        self.node_id = node_id
        #: KRaft cluster id written when the storage is formatted (None: a fresh one)
        self.cluster_id = cluster_id
        #: ``id@host:port,...`` of every controller (None: this node alone)
        self.quorum_voters = quorum_voters
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- paths -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def admin_security(self) -> KafkaSecurity | None:
        """How this object's own probes log in: the admin user on a secure listener."""
        return self.secure.admin() if self.secure is not None else None

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def server_properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def broker_log(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def stdout_log(self) -> Path:
        return self.data_dir / "broker.out"

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def attach(cls, pid: int, data_dir: Path, port: int, controller_port: int) -> LocalKafka:
        """Handle for a broker started by another process (the CLI's `services up`)."""
        kafka = cls(data_dir, port, controller_port)
        kafka.pid = pid
        return kafka

    @property
    def running(self) -> bool:
        """The broker process (ours, not a reused pid) is alive."""
        if self._proc is not None:
            return self._proc.poll() is None
        if self.pid is None:
            return False
        return pid_matches(self.pid, "kafka.Kafka", str(self.server_properties))

    def healthy(self, timeout_s: float = 3.0) -> bool:
        return self.running and kafka_healthy(self.bootstrap, timeout_s, self.admin_security)

    def start(self, timeout_s: float = 60) -> Self:
        """Write the config, format storage on first use, launch, and wait for readiness."""
        if self.running:
            return self
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def launch(self) -> None:
        """Write the config, format storage on first use and spawn the broker; no waiting."""
        if self.running:
            return
        libs = self.libs_dir or ensure_kafka_jars(version=self.version, progress=self.progress)
        self.libs_dir = libs
        java = _java()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        if not (self.log_dir / "meta.properties").is_file():
            self._format(java, libs)
        cmd = [
            java,
            "-Xms256m",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration={(self.data_dir / 'log4j.properties').as_uri()}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(self.server_properties),
        ]
        _say(self.progress, f"Starting Kafka {self.version} on {self.bootstrap}...")
        with self.stdout_log.open("ab") as out:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            out.write(f"----- {stamp} starting on {self.bootstrap} -----\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._proc.pid

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM (controlled shutdown), then SIGKILL after timeout_s."""
        if self.pid is not None and (self._proc is not None or self.running):
            terminate(self.pid, timeout_s, self._proc)
        self._proc = None
        self.pid = None
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL, what a crashed machine looks like: no controlled shutdown, data dir kept."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)
        elif self.pid is not None and self.running:  # attached: not our child to wait for
            os.kill(self.pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while pid_alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
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

    # -- internals ---------------------------------------------------------------------------
    def _config(self) -> dict[str, str]:
        config = single_node_config(
            str(self.log_dir), f"{HOST}:{self.controller_port}", node_id=self.node_id
        )
        config |= {
            "controller.quorum.voters": self.quorum_voters
            or f"{self.node_id}@{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
        if self.secure is not None:
            config.update(self.secure.broker_config(HOST, self.port, self.controller_port))
        config.update(self.extra_config)
        return config

    def _write_config(self) -> None:
        lines = [f"{key}={value}" for key, value in self._config().items()]
        self.server_properties.write_text("\n".join(lines) + "\n")
        (self.data_dir / "log4j.properties").write_text(_LOG4J.format(log_file=self.broker_log))
        (self.data_dir / "tools-log4j.properties").write_text(_TOOLS_LOG4J)

    def _format(self, java: str, libs: Path) -> None:
        cmd = [
            java,
            "-Xmx256m",
            f"-Dlog4j.configuration={(self.data_dir / 'tools-log4j.properties').as_uri()}",
            "-cp",
            f"{libs}/*",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id or new_cluster_id(),
            "-c",
            str(self.server_properties),
            *(self.secure.format_args() if self.secure is not None else []),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(f"formatting Kafka storage timed out: {exc}") from exc
        if done.returncode != 0:
            raise ServiceError(
                f"formatting Kafka storage in {self.log_dir} failed (exit {done.returncode}):\n"
                f"{(done.stdout + done.stderr).strip()[-4000:]}"
            )

    def _logs(self) -> str:
        return (
            f"--- {self.broker_log} ---\n{tail(self.broker_log)}\n"
            f"--- {self.stdout_log} ---\n{tail(self.stdout_log, 20)}"
        )

    def wait_ready(self, timeout_s: float = 60, brokers: Collection[int] = ()) -> None:
        """Until this node's own listener lists it and every node id of ``brokers`` as brokers
        (stopped after timeout_s). A cluster waits for all its nodes: a node's view can lag the
        quorum's, and a topic with replication factor N is refused (finally, as
        INVALID_REPLICATION_FACTOR) where fewer than N brokers are listed."""
        wanted = {self.node_id, *brokers}
        deadline = time.monotonic() + timeout_s
        admin: AdminClient | None = None
        while True:
            if not self.running:
                code = self._proc.returncode if self._proc is not None else None
                self._proc = None
                self.pid = None
                raise ServiceError(
                    f"Kafka broker exited during startup (code {code})\n{self._logs()}"
                )
            if admin is None and port_open(HOST, self.port):
                admin = _admin(self.bootstrap, self.admin_security)
            if admin is not None:
                remaining = max(0.5, min(2.0, deadline - time.monotonic()))
                with contextlib.suppress(KafkaException):
                    if wanted <= admin.list_topics(timeout=remaining).brokers.keys():
                        return
            if time.monotonic() >= deadline:
                logs = self._logs()
                self.stop()
                raise ServiceError(
                    f"Kafka broker on {self.bootstrap} not ready after {timeout_s:.0f} s\n{logs}"
                )
            time.sleep(0.2)


def ensure_topics(
    bootstrap: str,
    topics: dict[str, int] | list[str],
    partitions: int = 4,
    config: dict[str, str] | None = None,
    timeout_s: float = 30,
    security: KafkaSecurity | None = None,
) -> None:
    """Create missing topics (existing ones are left alone) and wait until metadata shows them.

    topics maps name -> partitions, or lists names that get `partitions` each. The replication
    factor is left to the cluster's default, so this works on the local broker and real ones.
    """
    wanted = dict(topics) if isinstance(topics, dict) else dict.fromkeys(topics, partitions)
    if not wanted:
        return
    from rankscope.kafka_topics import submit_new_topics  # it imports this package

    new = [
        NewTopic(name, num_partitions=count, replication_factor=-1, config=dict(config or {}))
        for name, count in wanted.items()
    ]
    submit_new_topics(_admin(bootstrap, security), new, bootstrap, timeout_s)
