"""Local services against real processes: a Kafka broker from Apache's jars and chDB over HTTP."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import clickhouse_connect
import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from rankscope.services import (
    Endpoints,
    LocalClickHouse,
    LocalKafka,
    ServiceError,
    ServiceManager,
    clickhouse_healthy,
    docker_available,
    ensure_kafka_jars,
    ensure_topics,
    kafka_healthy,
    local_services,
)
from rankscope.services._common import pid_alive, pids_with, port_open
from rankscope.services.kafka_cluster import LocalKafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TWO_MB = 2 * 1024 * 1024


def _processes_under(base: Path) -> list[str]:
    """Command lines of live processes that mention base (our brokers and chDB servers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(base) in cmdline and pid_alive(int(entry.name)):
            found.append(f"{entry.name}: {cmdline}")
    return found


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module", autouse=True)
def no_leftover_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs last: nothing this module started may outlive it.

    Processes already running when the module starts (the session-wide services of
    tests/conftest.py live under the same base temp dir) are not this module's.
    """
    base = tmp_path_factory.getbasetemp()
    before = set(_processes_under(base))
    yield
    leftovers = [p for p in _processes_under(base) if p not in before]
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.fixture(scope="module")
def kafka_libs() -> Path:
    return ensure_kafka_jars()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, kafka_libs: Path) -> Iterator[LocalKafka]:
    kafka = LocalKafka(tmp_path_factory.mktemp("kafka-shared"), libs_dir=kafka_libs)
    began = time.monotonic()
    kafka.start(timeout_s=90)
    print(f"\nbroker ready in {time.monotonic() - began:.1f} s on {kafka.bootstrap}")
    yield kafka
    kafka.stop()


def _consume_one(bootstrap: str, topic: str, timeout_s: float = 30) -> bytes:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 8388608,
            "max.partition.fetch.bytes": 8388608,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                continue
            value = message.value()
            assert value is not None
            return value
        raise AssertionError(f"no message on {topic} within {timeout_s} s")
    finally:
        consumer.close()


# -- Kafka ----------------------------------------------------------------------------------
def test_kafka_produce_consume(broker: LocalKafka) -> None:
    assert kafka_healthy(broker.bootstrap)
    ensure_topics(broker.bootstrap, {"rs.test.small": 2, "rs.test.big": 1})
    ensure_topics(broker.bootstrap, ["rs.test.small"])  # already there: no error

    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 8388608})
    delivered: list[KafkaError | None] = []
    producer.produce(
        "rs.test.small", key=b"k", value=b"hello", on_delivery=lambda e, _m: delivered.append(e)
    )
    # Above the 1 MB broker default: must pass because the broker allows 8 MiB messages.
    producer.produce(
        "rs.test.big", value=b"x" * TWO_MB, on_delivery=lambda e, _m: delivered.append(e)
    )
    assert producer.flush(30) == 0
    assert delivered == [None, None]

    assert _consume_one(broker.bootstrap, "rs.test.small") == b"hello"
    assert len(_consume_one(broker.bootstrap, "rs.test.big")) == TWO_MB


def test_kafka_stop_and_restart_on_same_data(tmp_path: Path, kafka_libs: Path) -> None:
    kafka = LocalKafka(tmp_path / "kafka", libs_dir=kafka_libs)
    try:
        kafka.start(timeout_s=90)
        assert (kafka.log_dir / "meta.properties").is_file()
        ensure_topics(kafka.bootstrap, ["rs.persisted"], partitions=3)
        pid, ports = kafka.pid, (kafka.port, kafka.controller_port)
        assert pid is not None
        kafka.stop()
        assert not pid_alive(pid)
        assert not any(port_open("127.0.0.1", port) for port in ports)

        kafka.start(timeout_s=90)  # formatted already: no second format, topic still there
        assert kafka.pid != pid
        attached = LocalKafka.attach(kafka.pid or 0, kafka.data_dir, kafka.port, 0)
        assert attached.running
        listed = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "probe"})
        try:
            topics = listed.list_topics(timeout=10).topics
        finally:
            listed.close()
        assert len(topics["rs.persisted"].partitions) == 3
    finally:
        kafka.stop()
    assert not kafka.running


def test_a_single_broker_is_its_own_quorum_with_single_replica_defaults(tmp_path: Path) -> None:
    """What the session broker runs: node 1, voting alone, one replica of everything."""
    config = LocalKafka(tmp_path / "kafka", port=19092, controller_port=19093)._config()
    assert config["node.id"] == "1"
    assert config["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert config["offsets.topic.replication.factor"] == "1"
    assert config["transaction.state.log.replication.factor"] == "1"
    assert config["transaction.state.log.min.isr"] == "1"
    assert "default.replication.factor" not in config
    assert "min.insync.replicas" not in config


def test_cluster_nodes_share_one_id_one_quorum_and_replicate_everything(tmp_path: Path) -> None:
    cluster = LocalKafkaCluster(tmp_path / "cluster", nodes=3)
    configs = [node._config() for node in cluster.nodes]
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    assert {node.cluster_id for node in cluster.nodes} == {cluster.cluster_id}
    voters = {c["controller.quorum.voters"] for c in configs}
    assert voters == {",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in cluster.nodes)}
    ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    assert cluster.bootstrap.split(",") == [n.bootstrap for n in cluster.nodes]
    for c in configs:
        assert c["default.replication.factor"] == "3"
        assert c["min.insync.replicas"] == "2"
        assert c["offsets.topic.replication.factor"] == "3"
        assert c["transaction.state.log.replication.factor"] == "3"
        assert c["transaction.state.log.min.isr"] == "2"
    assert len({n.data_dir for n in cluster.nodes}) == 3


def test_ensure_kafka_jars_redoes_half_finished_resolve(
    tmp_path: Path, kafka_libs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "m2").symlink_to(kafka_libs.parent.parent / "m2")  # artefacts already downloaded
    half = cache / "kafka-3.9.1" / "libs"
    half.mkdir(parents=True)
    (half / "truncated.jar").write_bytes(b"")  # an interrupted resolve: jars but no marker

    libs = ensure_kafka_jars(cache_dir=cache)
    assert libs == half.resolve()
    assert not (libs / "truncated.jar").exists()
    assert sorted(p.name for p in libs.glob("*.jar")) == sorted(
        p.name for p in kafka_libs.glob("*.jar")
    )
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # reuse must not need Maven
    assert ensure_kafka_jars(cache_dir=cache) == libs


def test_ensure_kafka_jars_needs_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(ServiceError, match="mvn"):
        ensure_kafka_jars(cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "kafka-3.9.1" / ".resolved.json").exists()


# -- ClickHouse (chDB) ---------------------------------------------------------------------
def test_clickhouse_http_roundtrip_and_persistence(tmp_path: Path) -> None:
    data_dir = tmp_path / "clickhouse"
    server = LocalClickHouse(data_dir)
    try:
        began = time.monotonic()
        server.start()
        print(f"\nchDB ready in {time.monotonic() - began:.2f} s on {server.url}")
        client = clickhouse_connect.get_client(dsn=server.url)
        client.command("CREATE DATABASE IF NOT EXISTS rs_test")
        client.command(
            "CREATE TABLE rs_test.events (id UInt32, msg String, ver UInt32) "
            "ENGINE = ReplacingMergeTree(ver) ORDER BY id"
        )
        client.insert(
            "rs_test.events",
            [[1, "old", 1], [1, "new", 2], [2, "two", 1]],
            column_names=["id", "msg", "ver"],
        )
        rows = client.query("SELECT id, msg FROM rs_test.events FINAL ORDER BY id").result_rows
        assert rows == [(1, "new"), (2, "two")]
        client.close()

        # The data directory is locked by the running server: a second one fails fast.
        with pytest.raises(ServiceError, match="lock"):
            LocalClickHouse(data_dir).start(timeout_s=30)
        assert clickhouse_healthy(server.url)

        pid, port = server.pid, server.port
        assert pid is not None
        server.stop()
        assert not pid_alive(pid)
        assert not port_open("127.0.0.1", port)

        server.start()
        by_host = clickhouse_connect.get_client(
            host="127.0.0.1", port=server.port, database="rs_test"
        )
        count = by_host.query("SELECT count() FROM events FINAL").result_rows
        assert count == [(2,)]
        by_host.close()
    finally:
        server.stop()
    assert not server.running


def test_clickhouse_recovers_from_killed_processes(tmp_path: Path) -> None:
    data_dir = tmp_path / "clickhouse"
    server = LocalClickHouse(data_dir).start()
    try:
        client = clickhouse_connect.get_client(dsn=server.url)
        client.command("CREATE TABLE kept (id UInt32) ENGINE = MergeTree ORDER BY id")
        client.insert("kept", [[7]], column_names=["id"])
        client.close()

        def engines() -> list[int]:
            return pids_with("rankscope.services.chdb_server", str(server.data_dir), "--parent-pid")

        # The engine dies: its supervisor starts a new one on the same port.
        (engine,) = engines()
        os.kill(engine, signal.SIGKILL)
        _wait(lambda: engines() not in ([], [engine]), 30, "a new engine")
        _wait(lambda: clickhouse_healthy(server.url), 30, "the restarted engine")

        # The supervisor dies: its engine exits by itself, and a new server can take over.
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        server.stop()  # reaps the killed supervisor; nothing else left to stop
        replacement = LocalClickHouse(data_dir, port=server.port).start()
        try:
            client = clickhouse_connect.get_client(dsn=replacement.url)
            assert client.query("SELECT id FROM kept").result_rows == [(7,)]
            client.close()
        finally:
            replacement.stop()
    finally:
        server.stop()


# -- ServiceManager ------------------------------------------------------------------------
def test_manager_up_status_down(tmp_path: Path, kafka_libs: Path) -> None:
    state_dir = tmp_path / "state"
    manager = ServiceManager(state_dir)
    messages: list[str] = []
    try:
        endpoints = manager.up(progress=messages.append)
        assert endpoints.managed
        assert kafka_healthy(endpoints.kafka_bootstrap)
        assert clickhouse_healthy(endpoints.clickhouse_url)
        assert any("Kafka ready" in m for m in messages)

        state = json.loads((state_dir / "services.json").read_text())
        assert state["kafka"]["data_dir"] == str((state_dir / "data" / "kafka").resolve())
        assert state["clickhouse"]["data_dir"] == str((state_dir / "data" / "clickhouse").resolve())

        report = manager.status()
        for name in ("kafka", "clickhouse"):
            assert report[name]["running"] and report[name]["healthy"], report
            assert report[name]["managed"]
        pids = {name: report[name]["pid"] for name in ("kafka", "clickhouse")}

        # Another manager (as from a second CLI call) reuses the running services.
        again, started = ServiceManager(state_dir).up_tracked()
        assert again == endpoints
        assert started == []

        # local_services on a state dir with services up reuses them and leaves them running.
        with local_services(state_dir) as inner:
            assert inner == endpoints
        assert all(pid_alive(pid) for pid in pids.values())

        ServiceManager(state_dir).down()  # a fresh manager finds them through the state file
        for pid in pids.values():
            _wait(lambda pid=pid: not pid_alive(pid), 10, f"pid {pid} to exit")
        assert not (state_dir / "services.json").exists()
        report = manager.status()
        assert not report["kafka"]["running"] and not report["clickhouse"]["running"]

        # Up again on the existing data dirs (new ports): comes back healthy.
        endpoints = manager.up()
        assert kafka_healthy(endpoints.kafka_bootstrap)
        assert clickhouse_healthy(endpoints.clickhouse_url)
    finally:
        manager.down()
    assert not (state_dir / "services.json").exists()


def test_manager_with_given_addresses_starts_nothing(tmp_path: Path, broker: LocalKafka) -> None:
    state_dir = tmp_path / "state"
    manager = ServiceManager(state_dir)
    endpoints = manager.up(kafka_bootstrap=broker.bootstrap, clickhouse_url="http://127.0.0.1:9")
    assert endpoints == Endpoints(broker.bootstrap, "http://127.0.0.1:9", managed=False)
    assert not (state_dir / "data").exists()
    state = json.loads((state_dir / "services.json").read_text())
    assert "kafka" not in state and "clickhouse" not in state
    assert not _processes_under(state_dir)

    report = manager.status()
    assert report["kafka"] == {
        "managed": False,
        "running": True,
        "pid": None,
        "endpoint": broker.bootstrap,
        "healthy": True,
    }
    assert report["clickhouse"]["healthy"] is False
    manager.down()  # nothing of ours to stop; the user's broker keeps running
    assert broker.running and kafka_healthy(broker.bootstrap)


def test_local_services_stops_only_what_it_started(tmp_path: Path, broker: LocalKafka) -> None:
    state_dir = tmp_path / "state"
    with local_services(state_dir, kafka_bootstrap=broker.bootstrap) as endpoints:
        assert endpoints.kafka_bootstrap == broker.bootstrap
        assert endpoints.managed  # ClickHouse is ours
        assert clickhouse_healthy(endpoints.clickhouse_url)
        pid = ServiceManager(state_dir).status()["clickhouse"]["pid"]
        assert pid is not None
    assert not pid_alive(pid)
    assert not clickhouse_healthy(endpoints.clickhouse_url)
    assert broker.running


def test_docker_available_never_raises() -> None:
    assert docker_available(timeout_s=1.0) in (True, False)
