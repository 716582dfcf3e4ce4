"""The compose stack is not run here (no Docker engine), so its correctness is checked here.

The file is validated against the Compose Specification's own JSON schema (vendored in
tests/data/compose) and, where a Docker CLI with the compose plugin exists, by
`docker compose config`. The pieces the stack wires together (the CLI, the ClickHouse users, the
Grafana provisioning, the migrations) are cross-checked, because a mismatch between them only
shows at `up` time on someone else's machine.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from typer.main import get_command

from rankscope.cli import app

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_DIR = ROOT / "compose"
COMPOSE = COMPOSE_DIR / "docker-compose.yml"
SCHEMA = Path(__file__).resolve().parent / "data" / "compose" / "compose-spec.json"
PROVISIONING = COMPOSE_DIR / "grafana" / "provisioning"
DATASOURCES = PROVISIONING / "datasources" / "clickhouse.yaml"
DASHBOARD_PROVIDERS = PROVISIONING / "dashboards"
CLICKHOUSE_CONF = COMPOSE_DIR / "clickhouse"
USERS_D = CLICKHOUSE_CONF / "users.d"
CONFIG_D = CLICKHOUSE_CONF / "config.d"
MIGRATIONS = ROOT / "sinks" / "migrations"

DATASOURCE_UID = "rankscope-clickhouse"
CREATE_TABLE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+\{db\}\.(\w+)", re.IGNORECASE)
GRANT = re.compile(r"^GRANT\s+SELECT\s+ON\s+(\w+)\.(\*|\w+)$", re.IGNORECASE)
VARIABLE = re.compile(r"\$\{(\w+)(?::?[-?]([^}]*))?\}")


# -- helpers -----------------------------------------------------------------------------------
def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _pipeline_env() -> dict[str, str]:
    """The x-rankscope-env block every rankscope container gets."""
    env: dict[str, Any] = _compose()["x-rankscope-env"]
    return {k: str(v) for k, v in env.items()}


def _interpolate(value: object) -> str:
    """A value as compose resolves it: `${X:-d}` -> `d`; a required `${X:?msg}` -> `X` (set)."""
    return VARIABLE.sub(
        lambda m: m.group(1) if ":?" in m.group(0) else (m.group(2) or ""), str(value)
    )


def _mounts(service: str) -> dict[str, str]:
    """Short-syntax volumes of a service, as {source: target}."""
    out: dict[str, str] = {}
    for volume in _services()[service].get("volumes", []):
        source, target, *_ = str(volume).split(":")
        out[source] = target
    return out


@cache
def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    assert schema["title"] == "Compose Specification"
    assert "draft-07" in schema["$schema"], "the vendored schema is meant for a draft-07 validator"
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _schema_errors(doc: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in _validator().iter_errors(doc)
    ]


def _docker_compose_available() -> bool:
    """True where a Docker CLI with the compose plugin answers (no engine is needed for config)."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        r = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _docker_compose_config(file: Path) -> subprocess.CompletedProcess[str]:
    docker = shutil.which("docker")
    assert docker is not None
    project = ["--project-directory", str(COMPOSE_DIR), "-f", str(file)]
    return subprocess.run(
        [docker, "compose", *project, "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _read_only_users() -> dict[str, ET.Element]:
    """Users of compose/clickhouse/users.d whose profile sets readonly=1, by name."""
    users: dict[str, ET.Element] = {}
    for path in sorted(USERS_D.glob("*.xml")):
        root = ET.parse(path).getroot()
        profiles = {p.tag: p for p in root.iterfind("profiles/*")}
        for user in root.iterfind("users/*"):
            profile = profiles.get(user.findtext("profile", default=""))
            if profile is not None and profile.findtext("readonly") == "1":
                users[user.tag] = user
    return users


def _clickhouse_datasource() -> dict[str, Any]:
    doc = yaml.safe_load(DATASOURCES.read_text())
    matches = [d for d in doc["datasources"] if d.get("uid") == DATASOURCE_UID]
    assert len(matches) == 1, f"one datasource with uid {DATASOURCE_UID} expected"
    datasource: dict[str, Any] = matches[0]
    return datasource


def _walk(node: object) -> Iterator[tuple[str, object]]:
    """Every (key, value) pair of a parsed YAML document, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key), value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _migration_tables() -> set[str]:
    return {m for p in MIGRATIONS.glob("*.sql") for m in CREATE_TABLE.findall(p.read_text())}


# -- the CLI -----------------------------------------------------------------------------------
def test_compose_services_run_commands_the_cli_has() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    cli = get_command(app)
    commands = set(cli.commands)  # type: ignore[attr-defined]
    built = {n: s for n, s in doc["services"].items() if "build" in s}
    assert {"worker", "sink", "migrate", "simulator"} <= set(built)
    for name, svc in built.items():
        assert svc["command"][0] in commands, f"{name} runs unknown command {svc['command'][0]}"
        env = svc["environment"]
        assert env["RANKSCOPE_BOOTSTRAP"] == "kafka:9092"


def test_compose_pins_the_tested_kafka_version() -> None:
    from rankscope.services import KAFKA_VERSION

    doc = yaml.safe_load(COMPOSE.read_text())
    assert doc["services"]["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"


# -- the Compose Specification -----------------------------------------------------------------
def test_compose_file_is_valid_compose() -> None:
    """Schema-valid always; also accepted by `docker compose config` where that CLI exists."""
    assert _schema_errors(_compose()) == []
    if _docker_compose_available():
        r = _docker_compose_config(COMPOSE)
        assert r.returncode == 0, r.stdout + r.stderr


def _ports_not_a_list(doc: dict[str, Any]) -> None:
    doc["services"]["clickhouse"]["ports"] = 12


def _unknown_top_level_key(doc: dict[str, Any]) -> None:
    doc["servces"] = doc.pop("services")


def _unknown_service_key(doc: dict[str, Any]) -> None:
    doc["services"]["grafana"]["imagee"] = doc["services"]["grafana"].pop("image")


def _bad_depends_on_condition(doc: dict[str, Any]) -> None:
    doc["services"]["sink"]["depends_on"]["migrate"]["condition"] = "service_finished"


@pytest.mark.parametrize(
    "breakage",
    [_ports_not_a_list, _unknown_top_level_key, _unknown_service_key, _bad_depends_on_condition],
    ids=lambda f: f.__name__.strip("_"),
)
def test_validation_rejects_a_broken_compose_file(
    breakage: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    """The checks above can fail: a deliberately broken copy of the file is refused."""
    doc = copy.deepcopy(_compose())
    breakage(doc)
    assert _schema_errors(doc), f"{breakage.__name__} passed schema validation"
    if _docker_compose_available():
        # The unbroken copy, written the same way, passes: the refusal is the breakage's doing.
        intact = tmp_path / "intact.yml"
        intact.write_text(yaml.safe_dump(_compose(), sort_keys=False))
        r = _docker_compose_config(intact)
        assert r.returncode == 0, r.stdout + r.stderr
        broken = tmp_path / "broken.yml"
        broken.write_text(yaml.safe_dump(doc, sort_keys=False))
        r = _docker_compose_config(broken)
        assert r.returncode != 0, f"docker compose config accepted {breakage.__name__}"


# -- how the services are wired ----------------------------------------------------------------
def test_startup_order_is_coherent() -> None:
    """Waits name real services, a health wait has a healthcheck, and there is no cycle."""
    services = _services()
    needs: dict[str, dict[str, str]] = {}
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions"
        needs[name] = {dep: spec["condition"] for dep, spec in deps.items()}
        for dep, condition in needs[name].items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health"
            if condition == "service_completed_successfully":
                assert services[dep].get("restart", "no") == "no", f"{dep} is a one-shot job"

    assert needs["migrate"]["clickhouse"] == "service_healthy"
    assert needs["sink"]["migrate"] == "service_completed_successfully"
    assert needs["sink"]["kafka"] == "service_healthy"
    assert needs["grafana"]["clickhouse"] == "service_healthy"
    for name in ("worker", "simulator"):
        assert needs[name]["kafka"] == "service_healthy"

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        for dep in needs[name]:
            visit(dep, (*path, name))

    for name in services:
        visit(name, ())


def test_clickhouse_writer_is_the_user_of_the_pipeline_url() -> None:
    """The server creates the user the migrations and the sink log in as, with that password."""
    url = urlsplit(_interpolate(_pipeline_env()["RANKSCOPE_CLICKHOUSE_URL"]))
    env = _services()["clickhouse"]["environment"]
    assert url.hostname == "clickhouse" and url.port == 8123
    assert url.username == _interpolate(env["CLICKHOUSE_USER"])
    assert url.password == _interpolate(env["CLICKHOUSE_PASSWORD"])


def test_clickhouse_mounts_every_server_config_file() -> None:
    """A file under compose/clickhouse that is not mounted would silently not apply."""
    mounts = _mounts("clickhouse")
    files = sorted(p for d in (USERS_D, CONFIG_D) for p in d.glob("*.xml"))
    assert files, "compose/clickhouse has no server config"
    for path in files:
        rel = path.relative_to(CLICKHOUSE_CONF)
        source = f"./{path.relative_to(COMPOSE_DIR).as_posix()}"
        assert mounts.get(source) == f"/etc/clickhouse-server/{rel.as_posix()}", source


def test_read_only_user_selects_from_the_pipeline_database_only() -> None:
    """grafana_ro: readonly=1, SELECT on RANKSCOPE_DATABASE and nothing else."""
    database = _pipeline_env()["RANKSCOPE_DATABASE"]
    users = _read_only_users()
    assert "grafana_ro" in users
    user = users["grafana_ro"]
    grants = [q.text.strip() for q in user.iterfind("grants/query") if q.text]
    assert grants, "grafana_ro has no grants"
    for grant in grants:
        m = GRANT.match(grant)
        assert m, f"grafana_ro may only be granted SELECT: {grant!r}"
        assert m.group(1) == database, f"{grant!r} names another database than {database}"
    assert user.findtext("access_management", default="0") == "0"
    password = user.find("password")
    assert password is not None and password.get("from_env") == "GRAFANA_CH_PASSWORD"
    env = _services()["clickhouse"]["environment"]
    assert "GRAFANA_CH_PASSWORD" in env, "the clickhouse container must get the password"


def test_read_only_profile_cannot_be_lifted() -> None:
    """Settings changeable under readonly=1 need the server switch, and never include readonly."""
    changeable: list[str] = []
    for path in USERS_D.glob("*.xml"):
        for constraint in ET.parse(path).getroot().iterfind("profiles/*/constraints/*"):
            if constraint.find("changeable_in_readonly") is not None:
                changeable.append(constraint.tag)
    assert "readonly" not in changeable
    if changeable:
        switch = "access_control_improvements/settings_constraints_replace_previous"
        switches = [ET.parse(p).getroot().findtext(switch) for p in CONFIG_D.glob("*.xml")]
        assert "true" in switches, "changeable_in_readonly is refused without this switch"


def test_grafana_datasource_is_the_read_only_user_on_the_pipeline_database() -> None:
    from rankscope.grafana import DATASOURCE, DEFAULT_DATABASE

    ds = _clickhouse_datasource()
    data = ds["jsonData"]
    assert ds["type"] == "grafana-clickhouse-datasource"
    # the dashboards select any datasource of the plugin (a variable), by type, not by uid
    assert (DATASOURCE.uid, ds["type"]) == ("${datasource}", DATASOURCE.type_val)
    assert data["defaultDatabase"] == DEFAULT_DATABASE  # the database variable's default
    assert data["host"] in _services() and data["host"] == "clickhouse"
    assert (data["port"], data["protocol"]) == (8123, "http")
    assert data["defaultDatabase"] == _pipeline_env()["RANKSCOPE_DATABASE"]
    assert data["username"] in _read_only_users()
    assert "password" not in data, "the password belongs in secureJsonData"
    assert ds["secureJsonData"]["password"] == "${GRAFANA_CH_PASSWORD}"
    grafana, clickhouse = (_services()[s]["environment"] for s in ("grafana", "clickhouse"))
    assert grafana["GRAFANA_CH_PASSWORD"] == clickhouse["GRAFANA_CH_PASSWORD"]
    assert _interpolate(grafana["GRAFANA_CH_PASSWORD"]), "the password needs a default"


def test_grafana_installs_the_plugin_and_mounts_provisioning() -> None:
    grafana = _services()["grafana"]
    assert re.fullmatch(r"grafana/grafana:12\.\d+\.\d+", grafana["image"])
    plugins = str(grafana["environment"]["GF_PLUGINS_PREINSTALL_SYNC"]).split(",")
    assert any(p.split("@")[0] == "grafana-clickhouse-datasource" for p in plugins)
    assert _mounts("grafana")["./grafana/provisioning"] == "/etc/grafana/provisioning"


def test_dashboards_provider_reads_the_mounted_dashboards() -> None:
    """The provider's path is where compose mounts the packaged dashboards, rankscope/dashboards."""
    target = _mounts("grafana")["../rankscope/dashboards"]
    assert target == "/var/lib/grafana/dashboards"
    assert (ROOT / "rankscope" / "dashboards").is_dir()
    providers = [
        p
        for f in sorted(DASHBOARD_PROVIDERS.glob("*.y*ml"))
        for p in yaml.safe_load(f.read_text())["providers"]
    ]
    assert [p["options"]["path"] for p in providers if p["type"] == "file"] == [target]


def test_tables_named_by_provisioning_and_users_exist() -> None:
    """A table the provisioning or a grant names is created by a migration."""
    named: set[str] = set()
    for path in PROVISIONING.rglob("*.y*ml"):
        named |= {str(v) for k, v in _walk(yaml.safe_load(path.read_text())) if k == "defaultTable"}
    for user in _read_only_users().values():
        for query in user.iterfind("grants/query"):
            m = GRANT.match((query.text or "").strip())
            if m and m.group(2) != "*":
                named.add(m.group(2))
        named |= {t.tag for t in user.iterfind("databases/*/*")}  # row policies
    assert named, "nothing names a table: the check would be empty"
    assert named <= _migration_tables(), f"no migration creates {named - _migration_tables()}"


def test_published_ports_bind_loopback_and_passwords_have_no_defaults() -> None:
    """Compose is a dev stack: nothing listens on other interfaces, no password is built in."""
    text = COMPOSE.read_text()
    for name, svc in _services().items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    # Every ${VAR} naming a password is required (``:?``), never defaulted (``:-``).
    refs = re.findall(r"\$\{([A-Z_]*PASSWORD[A-Z_]*)(:[-?][^}]*)?\}", text)
    assert refs
    for var, modifier in refs:
        assert modifier.startswith(":?"), (var, modifier)
    grafana_env = _services()["grafana"]["environment"]
    assert grafana_env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    assert "rankscope:rankscope@" not in text
