"""The Kafka security block: environment and file, the two client dialects, the ACL plan."""

from __future__ import annotations

import ssl
from pathlib import Path

import faust
import pytest
from pydantic import ValidationError

from rankscope.collectors.publisher import PublisherConfig, producer_settings
from rankscope.kafka_acls import Principals, acl_bindings, acl_plan, format_plan
from rankscope.kafka_security import (
    KafkaSecurity,
    faust_credentials,
    kafka_config,
    security_from_env,
)
from rankscope.schemas.topics import Topics
from rankscope.services.kafka_secure import SecureListener
from rankscope.settings import Settings
from tests.kafka_pki import make_pki

ENV = (
    "RANKSCOPE_KAFKA_SECURITY_PROTOCOL",
    "RANKSCOPE_KAFKA_SASL_MECHANISM",
    "RANKSCOPE_KAFKA_SASL_USERNAME",
    "RANKSCOPE_KAFKA_SASL_PASSWORD",
    "RANKSCOPE_KAFKA_SASL_PASSWORD_FILE",
    "RANKSCOPE_KAFKA_SSL_CA_FILE",
    "RANKSCOPE_KAFKA_SSL_CERT_FILE",
    "RANKSCOPE_KAFKA_SSL_KEY_FILE",
    "RANKSCOPE_KAFKA_SSL_KEY_PASSWORD",
    "RANKSCOPE_KAFKA_CONFIG_FILE",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_plaintext_is_the_default_and_adds_nothing_but_the_protocol() -> None:
    assert kafka_config("h:9092", **{"group.id": "g"}) == {
        "bootstrap.servers": "h:9092",
        "security.protocol": "plaintext",
        "group.id": "g",
    }
    assert faust_credentials() is None


def test_the_environment_names_the_compose_file_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("RANKSCOPE_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("RANKSCOPE_KAFKA_SASL_USERNAME", "rankscope-sink")
    monkeypatch.setenv("RANKSCOPE_KAFKA_SASL_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("RANKSCOPE_KAFKA_SSL_CA_FILE", "/etc/ca.pem")
    conf = kafka_config("h:9093")
    assert conf["security.protocol"] == "sasl_ssl"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"  # the default mechanism
    assert conf["sasl.username"] == "rankscope-sink"
    assert conf["sasl.password"] == "s3cret"  # read from the file, stripped
    assert conf["ssl.ca.location"] == "/etc/ca.pem"
    assert conf["ssl.endpoint.identification.algorithm"] == "https"  # on by default
    # the settings every command builds expose the same block
    assert Settings().kafka_security == security_from_env()
    # a rotated secret is picked up by the next client
    secret.write_text("rotated")
    assert kafka_config("h:9093")["sasl.password"] == "rotated"


def test_the_config_file_and_env_over_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "kafka.yaml"
    config.write_text(
        "security_protocol: SASL_SSL\nsasl_mechanism: SCRAM-SHA-256\n"
        "sasl_username: from-file\nsasl_password: pw\nssl_ca_file: /ca.pem\n"
    )
    monkeypatch.setenv("RANKSCOPE_KAFKA_CONFIG_FILE", str(config))
    sec = security_from_env()
    assert (sec.security_protocol, sec.sasl_mechanism, sec.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "from-file",
    )
    monkeypatch.setenv("RANKSCOPE_KAFKA_SASL_USERNAME", "from-env")
    assert security_from_env().sasl_username == "from-env"
    monkeypatch.setenv("RANKSCOPE_KAFKA_CONFIG_FILE", str(tmp_path / "missing.yaml"))
    with pytest.raises(FileNotFoundError, match="RANKSCOPE_KAFKA_CONFIG_FILE"):
        security_from_env()


def test_incomplete_blocks_are_refused() -> None:
    with pytest.raises(ValidationError, match="needs sasl_username"):
        KafkaSecurity(security_protocol="SASL_SSL")
    with pytest.raises(ValidationError, match="needs sasl_password"):
        KafkaSecurity(security_protocol="SASL_PLAINTEXT", sasl_username="u")
    with pytest.raises(ValidationError, match="both ssl_cert_file and ssl_key_file"):
        KafkaSecurity(security_protocol="SSL", ssl_cert_file=Path("c.pem"))
    with pytest.raises(ValidationError):
        KafkaSecurity(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI")  # type: ignore[arg-type]


def test_to_env_round_trips_for_spawned_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    sec = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_username="rankscope-worker",
        sasl_password="pw",  # type: ignore[arg-type]
        ssl_ca_file=pki.ca_file,
        ssl_cert_file=pki.client_cert_file,
        ssl_key_file=pki.client_key_file,
        ssl_endpoint_identification=False,
    )
    for name, value in sec.to_env().items():
        monkeypatch.setenv(name, value)
    assert security_from_env() == sec


def test_faust_gets_scram_over_tls_with_the_client_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    sec = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_username="w",
        sasl_password="pw",  # type: ignore[arg-type]
        ssl_ca_file=pki.ca_file,
        ssl_cert_file=pki.client_cert_file,
        ssl_key_file=pki.client_key_file,
    )
    creds = faust_credentials(sec)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.mechanism.value == "SCRAM-SHA-512"
    assert creds.protocol.value == "SASL_SSL"
    assert (creds.username, creds.password) == ("w", "pw")
    assert creds.ssl_context is not None
    assert creds.ssl_context.check_hostname is True
    assert creds.ssl_context.verify_mode == ssl.CERT_REQUIRED
    tls_only = faust_credentials(KafkaSecurity(security_protocol="SSL", ssl_ca_file=pki.ca_file))
    assert isinstance(tls_only, faust.SSLCredentials)


def test_the_publisher_takes_the_block_and_extra_still_wins() -> None:
    sec = KafkaSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="agent",
        sasl_password="pw",  # type: ignore[arg-type]
    )
    conf = producer_settings(
        PublisherConfig(bootstrap="h:1", security=sec, extra={"sasl.username": "override"})
    )
    assert conf["security.protocol"] == "sasl_plaintext"
    assert conf["sasl.mechanism"] == "PLAIN"
    assert conf["sasl.username"] == "override"
    assert conf["enable.idempotence"] is True


def test_the_acl_plan_gives_each_role_only_its_topics() -> None:
    t = Topics("p")
    rules = acl_plan(t)

    def ops(role: str, name: str) -> set[str]:
        return {op for r in rules if r.role == role and r.name == name for op in r.operations}

    assert ops("agent", t.raw) == {"WRITE", "DESCRIBE"}
    assert not any(r.role == "agent" and r.name not in t.all_raw for r in rules)
    assert ops("worker", t.raw) == {"READ", "DESCRIBE"}
    assert "WRITE" in ops("worker", t.detections) and "READ" not in ops("worker", t.detections)
    assert ops("sink", t.events) == {"READ", "DESCRIBE"}
    assert not any(r.role == "sink" and "WRITE" in r.operations for r in rules)
    assert not any(r.role == "sink" and r.name in t.all_raw for r in rules)
    assert ops("runner", t.recovery) == {"READ", "WRITE", "DESCRIBE"}
    assert {r.name for r in rules if r.role == "runner"} == {t.recovery, "p-actuators"}
    # the workers' group, and the validators' beside them (both log in as the worker)
    worker_groups = {r.name for r in rules if r.role == "worker" and r.resource == "group"}
    assert {"p-streams", "p-streams-validate"} <= worker_groups
    bindings = acl_bindings(t, Principals(agent="a"))
    assert sum(b.principal == "User:a" for b in bindings) == 2 * len(t.all_raw)
    assert "| User:a (agent) | topic | p.raw.events | WRITE, DESCRIBE |" in format_plan(
        t, Principals(agent="a")
    )


def test_the_secure_listener_config(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    listener = SecureListener(
        ca_file=pki.ca_file,
        server_cert_file=pki.server_cert_file,
        server_key_file=pki.server_key_file,
        users={"admin": "a-b", "rankscope-agent": "x"},
    )
    conf = listener.broker_config("127.0.0.1", 9093, 9094)
    assert conf["listeners"] == "SASL_SSL://127.0.0.1:9093,CONTROLLER://127.0.0.1:9094"
    assert "PLAINTEXT://" not in conf["listeners"].replace("CONTROLLER://", "")
    assert conf["allow.everyone.if.no.acl.found"] == "false"
    assert 'password="a-b";' in conf["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert "\n" not in conf["ssl.keystore.key"]
    assert listener.format_args()[:2] == ["--add-scram", "SCRAM-SHA-512=[name=admin,password=a-b]"]
    assert conf["ssl.truststore.certificates"].startswith("-----BEGIN CERTIFICATE-----\\n")
    # compose's shape: bound on every interface, advertised by name, a published second listener
    conf = listener.broker_config(
        "kafka",
        9092,
        9093,
        bind_host="0.0.0.0",
        controller_host="127.0.0.1",
        external=("localhost", 19092),
    )
    assert conf["listeners"] == (
        "SASL_SSL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092,CONTROLLER://127.0.0.1:9093"
    )
    assert conf["advertised.listeners"] == "SASL_SSL://kafka:9092,EXTERNAL://localhost:19092"
    assert conf["listener.security.protocol.map"] == (
        "SASL_SSL:SASL_SSL,EXTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"
    )
    assert 'password="a-b";' in conf["listener.name.external.scram-sha-512.sasl.jaas.config"]
    tools = listener.java_client_properties("rankscope-agent")
    assert tools["security.protocol"] == "SASL_SSL"
    assert 'username="rankscope-agent" password="x";' in tools["sasl.jaas.config"]
    with pytest.raises(ValidationError, match="SCRAM user names"):
        SecureListener.model_validate({**listener.model_dump(), "users": {"admin": "a,b]"}})
    with pytest.raises(ValueError, match="admin user"):
        SecureListener(
            ca_file=pki.ca_file,
            server_cert_file=pki.server_cert_file,
            server_key_file=pki.server_key_file,
            users={"x": "y"},
        ).broker_config("127.0.0.1", 1, 2)
