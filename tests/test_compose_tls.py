"""compose/compose.tls.yaml, the Kafka-over-TLS overlay, checked without a Docker engine.

Three layers: the overlay merged over docker-compose.yml the way Compose merges (for the keys
and tags the overlay uses) is valid against the vendored Compose Specification; the merged
services are cross-checked (every Kafka client SASL_SSL as a user the ACL plan and the broker
know, passwords required, loopback ports); and the broker files the overlay's init command
writes are booted as a real broker (Apache's jars standing in for the image's scripts), set up
by the overlay's kafka-setup command, and logged into with the environment a service gets.
"""

from __future__ import annotations

import copy
import gc
import itertools
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaError, Producer
from pydantic import SecretStr
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.kafka_acls import Principals
from rankscope.kafka_security import (
    ENV_PREFIX,
    KafkaAuthError,
    KafkaSecurity,
    check_access,
    kafka_config,
    security_from_env,
)
from rankscope.schemas.topics import Topics
from rankscope.services._common import free_port, terminate
from rankscope.services.kafka import _TOOLS_LOG4J, _java, ensure_kafka_jars, kafka_healthy
from rankscope.services.kafka_compose import CLIENT_PROPERTIES, PROPERTIES, START_SCRIPT
from rankscope.services.kafka_secure import SecureListener
from tests.kafka_pki import Pki, make_pki
from tests.test_compose import (
    COMPOSE,
    COMPOSE_DIR,
    _docker_compose_available,
    _schema_errors,
)

OVERLAY = COMPOSE_DIR / "compose.tls.yaml"
INIT = "kafka-tls-config"
SETUP = "kafka-setup"
TOPICS = "topics"  # the base's `rankscope topics create`, as the admin here
ADMIN_JOBS = {SETUP, TOPICS}
#: the rankscope services that talk to Kafka, and the ACL plan's role each logs in as
CLIENT_ROLES = {"worker": "worker", "sink": "sink", "simulator": "agent"}
NOT_KAFKA_CLIENTS = {"migrate", INIT}  # ClickHouse only; no network at all
REQUIRED = re.compile(r"^\$\{(\w+):\?[^}]+\}$")


# -- YAML as Compose reads it: the !reset / !override tags --------------------------------------
class _Reset:
    """``!reset``: the key is removed from the merged result."""


@dataclass(frozen=True)
class _Override:
    """``!override``: the value replaces the base's instead of merging with it."""

    value: Any


class _ComposeLoader(yaml.SafeLoader):
    pass


def _construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_ComposeLoader.add_constructor("!reset", lambda _loader, _node: _Reset())
_ComposeLoader.add_constructor(
    "!override", lambda loader, node: _Override(_construct(loader, node))
)


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.load(path.read_text(), Loader=_ComposeLoader)
    return doc


# -- the merge, as Compose does it for what the overlay uses -------------------------------------
#: replaced whole by the overlay (compose-go's merge rules)
_OVERRIDDEN = {("command",), ("entrypoint",), ("healthcheck", "test")}


def _volume_target(volume: object) -> str:
    if isinstance(volume, dict):
        return str(volume["target"])
    parts = str(volume).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _plain(value: Any) -> Any:
    """A value new to the merge, tags resolved (``!reset`` inside it: left out)."""
    if isinstance(value, _Override):
        return _plain(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if not isinstance(v, _Reset)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _merge_value(path: tuple[str, ...], base: Any, over: Any) -> Any:
    """A service's key ``path`` of the base, merged with the overlay's value."""
    if isinstance(over, _Override) or path in _OVERRIDDEN:
        return _plain(over)
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for key, value in over.items():
            if isinstance(value, _Reset):
                out.pop(key, None)
            elif key in out:
                out[key] = _merge_value((*path, key), base[key], value)
            else:
                out[key] = _plain(value)
        return out
    if isinstance(base, list) and isinstance(over, list):
        if path == ("volumes",):  # unique by target: the overlay's mount wins
            targets = {_volume_target(v) for v in over}
            return [v for v in base if _volume_target(v) not in targets] + _plain(over)
        return [*base, *(v for v in _plain(over) if v not in base)]
    return _plain(over)


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``docker compose -f base -f overlay``: maps merge key by key, sequences append (volumes
    unique by target), command/entrypoint/healthcheck.test are replaced, ``!reset`` removes and
    ``!override`` replaces."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if key == "services":
            services = out.setdefault("services", {})
            for name, svc in value.items():
                if name in services:
                    services[name] = _merge_value((), services[name], svc)
                else:
                    services[name] = _plain(svc)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **_plain(value)}
        else:
            out[key] = _plain(value)
    return out


@cache
def _merged_cached() -> str:
    return yaml.safe_dump(merge(_load(COMPOSE), _load(OVERLAY)), sort_keys=False)


def _merged() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(_merged_cached())
    return doc


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _merged()["services"]
    return services


def _options(command: list[str]) -> dict[str, list[str]]:
    """``--name value`` pairs of a command line, every value of a repeated option."""
    out: dict[str, list[str]] = {}
    for flag, value in itertools.pairwise(command):
        if flag.startswith("--") and not value.startswith("--"):
            out.setdefault(flag, []).append(value)
    return out


def _one(command: list[str], flag: str) -> str:
    values = _options(command)[flag]
    assert len(values) == 1, (flag, values)
    return values[0]


def _init_command() -> list[str]:
    return [str(c) for c in _services()[INIT]["command"]]


def _init_users() -> dict[str, str]:
    """SCRAM user -> the environment variable holding its password, per the init command."""
    return dict(u.split("=", 1) for u in _options(_init_command())["--user"])


def _required_var(value: object) -> str:
    m = REQUIRED.match(str(value))
    assert m, f"{value!r} is not a required ${{VAR:?message}}"
    return m.group(1)


def _mounts(service: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for volume in _services()[service].get("volumes", []):
        source, target, *_ = str(volume).split(":")
        out[source] = target
    return out


def _role_of(service: str) -> str:
    return "admin" if service in ADMIN_JOBS else CLIENT_ROLES[service]


def _username(role: str) -> str:
    if role == "admin":
        return _one(_init_command(), "--admin-user")
    return str(getattr(Principals(), role))


# -- the Compose Specification ------------------------------------------------------------------
def test_the_overlay_merged_over_the_base_is_valid_compose(tmp_path: Path) -> None:
    merged = _merged()
    assert _schema_errors(merged) == []
    assert set(_services()) == set(_load(COMPOSE)["services"]) | {INIT, SETUP}
    if _docker_compose_available():
        env = {**os.environ, **dict.fromkeys(_password_vars(), "x"), "CLICKHOUSE_PASSWORD": "x"}
        env |= {"GRAFANA_CH_PASSWORD": "x", "GRAFANA_ADMIN_PASSWORD": "x"}
        files = ["-f", str(COMPOSE), "-f", str(OVERLAY)]
        done = subprocess.run(
            ["docker", "compose", "--project-directory", str(COMPOSE_DIR), *files, "config"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # Compose's own merge agrees with ours on what the checks below rely on
        theirs = yaml.safe_load(done.stdout)["services"]
        assert "environment" not in theirs["kafka"] or not theirs["kafka"]["environment"]
        assert theirs["kafka"]["entrypoint"] == _services()["kafka"]["entrypoint"]


def test_the_merge_does_what_compose_does_with_the_overlays_keys() -> None:
    """The merge the checks rely on: reset, replaced lists, maps merged, volumes by target."""
    base = {"services": {"s": {"environment": {"A": 1}, "command": ["x", "y"], "ports": ["p"]}}}
    over = yaml.load(
        "services:\n  s:\n    environment: !reset {}\n    command: [z]\n    ports: [q]\n"
        "    healthcheck: !override {test: [t]}\n  n: {image: i}\n",
        Loader=_ComposeLoader,
    )
    got = merge(base, over)["services"]
    assert got["s"] == {"command": ["z"], "ports": ["p", "q"], "healthcheck": {"test": ["t"]}}
    assert got["n"] == {"image": "i"}
    kafka = _services()["kafka"]
    assert "environment" not in kafka, "the base's PLAINTEXT KAFKA_* settings are reset"
    assert kafka["image"] == _load(COMPOSE)["services"]["kafka"]["image"]
    assert "kafka-data:/var/lib/kafka/data" not in kafka["volumes"]
    worker_env = _services()["worker"]["environment"]
    assert worker_env["RANKSCOPE_BOOTSTRAP"] == "kafka:9092", "the base's settings are kept"
    assert worker_env["RANKSCOPE_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"


def _unknown_service_key(doc: dict[str, Any]) -> None:
    doc["services"]["kafka"]["entrypointt"] = doc["services"]["kafka"].pop("entrypoint")


def _bad_depends_on_condition(doc: dict[str, Any]) -> None:
    doc["services"]["worker"]["depends_on"][SETUP]["condition"] = "service_done"


def _group_add_not_a_list(doc: dict[str, Any]) -> None:
    doc["services"]["kafka"]["group_add"] = {"gid": 4092}


@pytest.mark.parametrize(
    "breakage",
    [_unknown_service_key, _bad_depends_on_condition, _group_add_not_a_list],
    ids=lambda f: f.__name__.strip("_"),
)
def test_validation_rejects_a_broken_overlay(breakage: Callable[[dict[str, Any]], None]) -> None:
    overlay = _load(OVERLAY)
    breakage(overlay)
    assert _schema_errors(merge(_load(COMPOSE), overlay)), breakage.__name__


# -- cross-checks -------------------------------------------------------------------------------
def _password_vars() -> set[str]:
    return set(_init_users().values())


def test_every_kafka_client_is_sasl_ssl_as_a_user_the_plan_and_the_broker_know() -> None:
    services = _services()
    built = {n for n, s in services.items() if "build" in s}
    assert built - NOT_KAFKA_CLIENTS == {*CLIENT_ROLES, *ADMIN_JOBS}, "a new service needs a login"
    users = _init_users()
    plan_users = set(Principals().model_dump().values())
    for name in sorted(built - NOT_KAFKA_CLIENTS):
        env = services[name]["environment"]
        role = _role_of(name)
        assert env["RANKSCOPE_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert env["RANKSCOPE_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512", name
        user = env["RANKSCOPE_KAFKA_SASL_USERNAME"]
        assert user == _username(role), (name, user)
        assert role == "admin" or user in plan_users, (name, user)
        # the password variable is required and is the one the broker's user is created with
        assert users[user] == _required_var(env["RANKSCOPE_KAFKA_SASL_PASSWORD"]), name
        assert services[INIT]["environment"][users[user]] == env["RANKSCOPE_KAFKA_SASL_PASSWORD"]
        assert _mounts(name)["./tls/ca.pem"] == env["RANKSCOPE_KAFKA_SSL_CA_FILE"], name
        assert env["RANKSCOPE_BOOTSTRAP"] == "kafka:9092", name
        assert services[name]["depends_on"].get(SETUP, {}).get("condition") == (
            None if name in ADMIN_JOBS else "service_completed_successfully"
        ), name
        for key in env:  # nothing that would turn TLS checks off
            assert key not in (f"{ENV_PREFIX}SSL_ENDPOINT_IDENTIFICATION",), (name, key)
    # kafka-setup applies the plan with its default principals: the names checked above
    setup = [str(c) for c in services[SETUP]["command"]]
    assert setup[0] == "kafka-acls" and "--apply" in setup
    assert [str(c) for c in services[TOPICS]["command"]][:2] == ["topics", "create"]
    assert not any(c.lstrip("-") in Principals.model_fields for c in setup)
    # every SCRAM user made is one a service uses, each password its own variable
    used = {
        services[n]["environment"]["RANKSCOPE_KAFKA_SASL_USERNAME"]
        for n in built - NOT_KAFKA_CLIENTS
    }
    assert set(users) == used
    assert len(set(users.values())) == len(users)


def test_every_password_is_required_and_nothing_is_published_beyond_loopback() -> None:
    text = OVERLAY.read_text()
    refs = re.findall(r"\$\{([A-Z_]*PASSWORD[A-Z_]*)(:[-?][^}]*)?\}", text)
    assert {var for var, _ in refs} >= _password_vars()
    for var, modifier in refs:
        assert modifier.startswith(":?"), (var, modifier)
    for var in _password_vars():
        assert _required_var(_services()[INIT]["environment"][var]) == var
    for name, svc in _services().items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    assert _services()[INIT]["network_mode"] == "none"


def test_kafka_runs_the_init_services_files_and_nothing_plaintext() -> None:
    services = _services()
    init, kafka = services[INIT], services["kafka"]
    command = _init_command()
    out = _one(command, "--out")
    # the same volume, at the same path, in both (the start script names its files by path)
    init_volume = {v for v, target in _mounts(INIT).items() if target == out}
    assert init_volume and init_volume == {v for v, t in _mounts("kafka").items() if t == out}
    assert any(str(v).endswith(f"{out}:ro") for v in kafka["volumes"])
    assert kafka["entrypoint"] == ["/bin/sh", f"{out}/{START_SCRIPT}"]
    assert kafka["depends_on"][INIT] == {"condition": "service_completed_successfully"}
    assert [str(g) for g in kafka["group_add"]] == [_one(command, "--group")]
    assert _mounts(INIT)["./tls"] == _one(command, "--tls-dir")
    # the storage the users are formatted into is not the base's PLAINTEXT one
    assert _mounts("kafka")["kafka-tls-data"] == _one(command, "--log-dir")
    assert "kafka-tls-data" in _merged()["volumes"]
    # the healthcheck logs in as the admin with the file the init writes
    probe = " ".join(kafka["healthcheck"]["test"])
    assert f"--command-config {out}/{CLIENT_PROPERTIES}" in probe
    assert f"--bootstrap-server {_one(command, '--advertised-host')}:{_one(command, '--port')}" in (
        probe
    )
    # the published port is the external listener's
    ext_host, ext_port = _one(command, "--external").rsplit(":", 1)
    assert ext_host == "localhost"
    assert [str(p) for p in kafka["ports"]] == [f"127.0.0.1:{ext_port}:{ext_port}"]
    assert init.get("restart", "no") == "no" and services[SETUP].get("restart", "no") == "no"


def test_startup_order_is_coherent() -> None:
    services = _services()
    needs = {
        n: {d: c["condition"] for d, c in s.get("depends_on", {}).items()}
        for n, s in services.items()
    }
    for name, deps in needs.items():
        for dep, condition in deps.items():
            assert dep in services, (name, dep)
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], (name, dep)
    assert needs["kafka"][INIT] == "service_completed_successfully"
    assert needs[SETUP]["kafka"] == "service_healthy"

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        for dep in needs[name]:
            visit(dep, (*path, name))

    for name in services:
        visit(name, ())


def test_the_broker_files_have_no_plaintext_client_listener(tmp_path: Path) -> None:
    """What the init command writes, with the overlay's own arguments."""
    pki = make_pki(tmp_path / "tls")
    env = {var: f"pw-{var.lower()}" for var in _password_vars()}
    command = _init_command()
    out = tmp_path / "out"
    argv = _substitute(command, {"--out": str(out), "--tls-dir": str(pki.ca_file.parent)})
    done = CliRunner().invoke(app, _without(argv, "--group"), env=env)
    assert done.exit_code == 0, done.output
    props = _read_properties(out / PROPERTIES)
    listeners = props["listeners"].split(",")
    assert [x for x in listeners if not x.startswith(("SASL_SSL://", "EXTERNAL://"))] == [
        f"CONTROLLER://127.0.0.1:{_one(command, '--controller-port')}"
    ]
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    assert protocols == {"SASL_SSL": "SASL_SSL", "EXTERNAL": "SASL_SSL", "CONTROLLER": "PLAINTEXT"}
    assert props["advertised.listeners"] == (
        f"SASL_SSL://kafka:{_one(command, '--port')},EXTERNAL://{_one(command, '--external')}"
    )
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["log.dirs"] == _one(command, "--log-dir")
    for secret in env.values():
        assert secret not in done.output
    mode = (out / PROPERTIES).stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)  # no --group: the owner's alone
    # a second run (the next `up`) keeps the cluster id the storage was formatted with
    first = (out / START_SCRIPT).read_text()
    assert CliRunner().invoke(app, _without(argv, "--group"), env=env).exit_code == 0
    assert (out / START_SCRIPT).read_text() == first
    # a missing password is refused, by name
    done = CliRunner().invoke(
        app, _without(argv, "--group"), env={**env, "KAFKA_SINK_PASSWORD": ""}
    )
    assert done.exit_code != 0 and "KAFKA_SINK_PASSWORD" in done.output


def test_the_files_are_shared_with_the_group_when_asked(tmp_path: Path) -> None:
    from rankscope.services.kafka_compose import ComposeBroker

    pki = make_pki(tmp_path / "tls")
    listener = SecureListener(
        ca_file=pki.ca_file,
        server_cert_file=pki.server_cert_file,
        server_key_file=pki.server_key_file,
        users={"admin": "a"},
    )
    out = tmp_path / "out"
    ComposeBroker(listener=listener).write(out, group=os.getgid())
    assert (out / PROPERTIES).stat().st_mode & 0o777 == 0o640
    assert (out / START_SCRIPT).stat().st_mode & 0o777 == 0o750
    assert out.stat().st_mode & 0o777 == 0o750
    assert {p.stat().st_gid for p in out.iterdir()} == {os.getgid()}


# -- the real broker, from the init command's files ---------------------------------------------
def _substitute(command: list[str], values: dict[str, str]) -> list[str]:
    out = list(command)
    for i, flag in enumerate(command[:-1]):
        if flag in values:
            out[i + 1] = values[flag]
    return out


def _without(command: list[str], flag: str) -> list[str]:
    i = command.index(flag)
    return command[:i] + command[i + 2 :]


def _read_properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@dataclass(frozen=True)
class TlsBroker:
    bootstrap: str
    external: str
    out: Path
    bin_dir: Path
    pki: Pki
    passwords: dict[str, str]  # password variable -> value

    def service_env(self, service: str) -> dict[str, str]:
        """A service's RANKSCOPE_* environment as compose gives it, with local paths."""
        env: dict[str, str] = {}
        for key, value in _services()[service]["environment"].items():
            text = str(value)
            m = REQUIRED.match(text)
            env[key] = self.passwords[m.group(1)] if m else text
        env["RANKSCOPE_BOOTSTRAP"] = self.bootstrap
        assert env["RANKSCOPE_KAFKA_SSL_CA_FILE"] == _mounts(service)["./tls/ca.pem"]
        env["RANKSCOPE_KAFKA_SSL_CA_FILE"] = str(self.pki.ca_file)
        return env

    def security(self, service: str, monkeypatch: pytest.MonkeyPatch) -> KafkaSecurity:
        """What ``security_from_env`` makes of the service's environment."""
        for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
            monkeypatch.delenv(key)
        for key, value in self.service_env(service).items():
            monkeypatch.setenv(key, value)
        return security_from_env()


_WRAPPERS = {
    # what the image's scripts run, from Apache's jars
    "kafka-storage.sh": "kafka.tools.StorageTool",
    "kafka-server-start.sh": "kafka.Kafka",
    "kafka-broker-api-versions.sh": "kafka.admin.BrokerApiVersionsCommand",
}


def _write_wrappers(bin_dir: Path, java: str, libs: Path) -> None:
    bin_dir.mkdir(parents=True)
    log4j = bin_dir / "log4j.properties"
    log4j.write_text(_TOOLS_LOG4J)
    for name, main in _WRAPPERS.items():
        path = bin_dir / name
        heap = "-Xmx768m" if main == "kafka.Kafka" else "-Xmx256m"
        java_args = [java, heap, f"-Dlog4j.configuration={log4j.as_uri()}", "-cp", f"{libs}/*"]
        path.write_text(f'#!/bin/sh\nexec {shlex.join([*java_args, main])} "$@"\n')
        path.chmod(0o755)


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    root = tmp_path_factory.mktemp("compose-tls")
    pki = make_pki(root / "tls")  # SANs 127.0.0.1 and localhost stand in for kafka, localhost
    libs = ensure_kafka_jars()
    bin_dir = root / "bin"
    _write_wrappers(bin_dir, _java(), libs)
    passwords = {var: os.urandom(12).hex() for var in _password_vars()}
    port, ext_port, controller_port = free_port(), free_port(), free_port()
    while len({port, ext_port, controller_port}) < 3:
        ext_port, controller_port = free_port(), free_port()
    out = root / "kafka-tls"
    local = {
        "--out": str(out),
        "--tls-dir": str(pki.ca_file.parent),
        "--advertised-host": "127.0.0.1",
        "--port": str(port),
        "--bind-host": "127.0.0.1",
        "--external": f"localhost:{ext_port}",
        "--controller-port": str(controller_port),
        "--log-dir": str(root / "data"),
        "--kafka-bin": str(bin_dir),
    }
    command = _init_command()
    assert set(local) <= set(_options(command)), "the overlay passes every option substituted"
    # --group: the test's user cannot give files to another group (covered above)
    done = CliRunner().invoke(app, _without(_substitute(command, local), "--group"), env=passwords)
    assert done.exit_code == 0, done.output

    # the kafka service's entrypoint, with the volume's path substituted
    entrypoint = [str(a).replace(_one(command, "--out"), str(out)) for a in _entrypoint()]
    log = (root / "broker.out").open("wb")
    proc = subprocess.Popen(
        entrypoint, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root
    )
    listener_admin = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_username=_username("admin"),
        sasl_password=passwords[_init_users()[_username("admin")]],
        ssl_ca_file=pki.ca_file,
    )
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not kafka_healthy(bootstrap, 2.0, listener_admin):
            output = (root / "broker.out").read_text(errors="replace")[-4000:]
            assert proc.poll() is None, f"the broker exited ({proc.returncode}):\n{output}"
            assert time.monotonic() < deadline, f"the broker never answered:\n{output}"
            time.sleep(0.5)
        broker = TlsBroker(bootstrap, f"localhost:{ext_port}", out, bin_dir, pki, passwords)
        # topics and kafka-setup, as compose runs them: their commands, their environments
        for job in (TOPICS, SETUP):
            env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
            env |= broker.service_env(job)
            argv = [str(c) for c in _services()[job]["command"]]
            done = subprocess.run(
                [sys.executable, "-m", "rankscope", *argv],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, job + done.stdout[-2000:] + done.stderr[-2000:]
        yield broker
    finally:
        gc.collect()
        terminate(proc.pid, 20, proc)
        log.close()


def _entrypoint() -> list[str]:
    return [str(a) for a in _services()["kafka"]["entrypoint"]]


def test_each_service_logs_in_with_the_environment_compose_gives_it(
    tls_broker: TlsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    for service in (*CLIENT_ROLES, *sorted(ADMIN_JOBS)):
        sec = tls_broker.security(service, monkeypatch)
        assert sec.security_protocol == "SASL_SSL" and sec.sasl_username == _username(
            _role_of(service)
        )
        check_access(tls_broker.bootstrap, sec, timeout_s=30)
    # the published listener: localhost, the same login
    check_access(tls_broker.external, tls_broker.security("worker", monkeypatch), timeout_s=30)


def test_a_wrong_password_is_refused(
    tls_broker: TlsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    sec = tls_broker.security("sink", monkeypatch)
    wrong = sec.model_copy(update={"sasl_password": SecretStr("not-the-password")})
    with pytest.raises(KafkaAuthError, match="rankscope-sink"):
        check_access(tls_broker.bootstrap, wrong, timeout_s=30)
    plain = KafkaSecurity()  # a PLAINTEXT client gets nowhere either
    with pytest.raises((KafkaAuthError, ConnectionError)):
        check_access(tls_broker.bootstrap, plain, timeout_s=3)


def _produce(bootstrap: str, security: KafkaSecurity, topic: str) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    producer = Producer(kafka_config(bootstrap, security))
    producer.produce(topic, value=b"[]", on_delivery=lambda e, _m: reports.append(e))
    producer.flush(30)
    assert len(reports) == 1
    return reports[0]


def test_the_plan_holds_a_topic_outside_it_is_denied(
    tls_broker: TlsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = Topics(tls_broker.service_env(SETUP)["RANKSCOPE_TOPIC_PREFIX"])
    admin = tls_broker.security(SETUP, monkeypatch)
    agent = tls_broker.security("simulator", monkeypatch)
    worker = tls_broker.security("worker", monkeypatch)
    # topics and kafka-setup created the topics and the plan: the simulator (agent) may write raw
    assert _produce(tls_broker.bootstrap, agent, topics.raw) is None
    outside = "outside-the-plan"
    assert _produce(tls_broker.bootstrap, admin, outside) is None  # the admin may create it
    for who in (agent, worker):
        refused = _produce(tls_broker.bootstrap, who, outside)
        assert refused is not None
        assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    refused = _produce(tls_broker.bootstrap, worker, topics.raw)  # the worker only reads raw
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_healthcheck_and_a_restart_work_from_the_written_files(tls_broker: TlsBroker) -> None:
    command = _init_command()
    probe = _services()["kafka"]["healthcheck"]["test"][1]
    probe = probe.replace(_one(command, "--kafka-bin"), str(tls_broker.bin_dir))
    probe = probe.replace(f"{_one(command, '--out')}/", f"{tls_broker.out}/")
    probe = probe.replace(f"kafka:{_one(command, '--port')}", tls_broker.bootstrap)
    done = subprocess.run(["/bin/sh", "-c", probe], timeout=120, check=False)
    assert done.returncode == 0, probe
    # the next `up` runs the format line again on a formatted storage: it must pass
    script = (tls_broker.out / START_SCRIPT).read_text().splitlines()
    fmt = [line for line in script if "kafka-storage.sh" in line]
    assert len(fmt) == 1 and "--ignore-formatted" in fmt[0] and "--add-scram" in fmt[0]
    done = subprocess.run(
        ["/bin/sh", "-c", fmt[0]], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
