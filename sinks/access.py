"""The pipeline's ClickHouse users and their rights, declared once, rendered for each engine.

Three identities (issue 14, least privilege):

* **admin**: whoever runs ``rankscope migrate`` (DDL, retention, and creating the users below);
  the URL it is given carries that login. Nothing else needs it;
* **writer** (:data:`WRITER`): the sink. SELECT and INSERT on the pipeline's database, nothing
  else: it creates no table (``rankscope migrate`` did) and drops nothing;
* **reader** (:data:`READER`): Grafana and ``rankscope query``. SELECT on the database under a
  ``readonly=1`` profile with limits (time, result size, memory), so it can neither write, alter
  nor lift its own limits.

Two renderers read the same declaration:

* :func:`sql_statements`: ``CREATE SETTINGS PROFILE``/``CREATE USER``/``GRANT`` for a ClickHouse
  server, run by ``rankscope migrate`` (:func:`ensure_users`) when the users' passwords are set;
* :func:`users_xml`: the ``users.xml`` the local chDB engine reads (chDB has no writable access
  storage, so ``CREATE USER`` fails there with code 514, but it enforces a users file).

Passwords travel as SHA-256 hex only (``IDENTIFIED WITH sha256_hash``, ``password_sha256_hex``),
so they never appear in a server's query log. User names are checked against a strict pattern
rather than quoted, so no statement is built from a hostile name.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit
from xml.sax.saxutils import escape

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from rankscope.secret_files import create_secret_file

RoleName = Literal["writer", "reader"]
ENV_PREFIX = "RANKSCOPE_CLICKHOUSE_"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DB_NAME = _NAME
#: where the local engine's users may log in from (it listens on loopback only)
LOOPBACK = ("::1", "127.0.0.1")
SettingValue = int | str


class Constraint(BaseModel):
    """A setting the user may change within bounds even under ``readonly=1``; only where the
    server enables ``settings_constraints_replace_previous`` (chDB does not read that switch)."""

    model_config = ConfigDict(frozen=True)

    min: int
    max: int


class Role(BaseModel):
    """One identity's rights on the pipeline's database and its settings profile."""

    model_config = ConfigDict(frozen=True)

    name: RoleName
    default_user: str
    privileges: tuple[str, ...]
    settings: dict[str, SettingValue] = Field(min_length=1)
    changeable_in_readonly: dict[str, Constraint] = Field(default_factory=dict)

    def grants(self, database: str) -> list[str]:
        """The grant of this role on ``database`` (one statement, no grantee)."""
        return [f"GRANT {', '.join(self.privileges)} ON {check_name(database)}.*"]


WRITER = Role(
    name="writer",
    default_user="rankscope_writer",
    privileges=("SELECT", "INSERT"),
    settings={"max_execution_time": 300, "max_memory_usage": 8_000_000_000},
)
READER = Role(
    name="reader",
    default_user="rankscope_reader",
    privileges=("SELECT",),
    settings={
        "readonly": 1,
        "max_execution_time": 60,
        # clickhouse-connect reads system.settings (~2000 rows) when it connects
        "max_result_rows": 1_000_000,
        "max_result_bytes": 1_000_000_000,
        "max_memory_usage": 4_000_000_000,
        "result_overflow_mode": "throw",
    },
    # Grafana's driver (clickhouse-go) sends max_execution_time with every query
    changeable_in_readonly={"max_execution_time": Constraint(min=1, max=600)},
)
ROLES: dict[RoleName, Role] = {"writer": WRITER, "reader": READER}


def check_name(name: str) -> str:
    """A user, profile or database name we put into SQL or XML unquoted: a strict pattern."""
    if not _NAME.match(name):
        raise ValueError(f"invalid ClickHouse name {name!r}: use letters, digits and _")
    return name


def sha256_hex(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


class User(BaseModel):
    """A login of one role."""

    model_config = ConfigDict(frozen=True)

    role: Role
    name: str
    password: SecretStr

    def model_post_init(self, _context: object) -> None:
        check_name(self.name)
        if not self.password.get_secret_value():
            raise ValueError(f"{self.role.name} user {self.name!r} needs a password")

    @property
    def profile(self) -> str:
        return self.name


class AccessSettings(BaseSettings):
    """User names and passwords from ``RANKSCOPE_CLICKHOUSE_{WRITER,READER}_*``; a password may
    be given as a file (``*_PASSWORD_FILE``, a mounted secret), read at use."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    writer_user: str = WRITER.default_user
    writer_password: SecretStr | None = None
    writer_password_file: Path | None = None
    reader_user: str = READER.default_user
    reader_password: SecretStr | None = None
    reader_password_file: Path | None = None
    #: let the reader change max_execution_time within bounds (Grafana); needs the server's
    #: ``settings_constraints_replace_previous`` switch, or CREATE SETTINGS PROFILE fails
    reader_changeable_timeout: bool = False

    def user(self, role: RoleName) -> User | None:
        """The role's login, or None when no password is configured for it."""
        name: str = getattr(self, f"{role}_user")
        secret: SecretStr | None = getattr(self, f"{role}_password")
        path: Path | None = getattr(self, f"{role}_password_file")
        if secret is not None and secret.get_secret_value():
            password = secret.get_secret_value()
        elif path is not None:
            try:
                password = path.read_text().strip()
            except OSError as exc:
                env = f"{ENV_PREFIX}{role.upper()}_PASSWORD_FILE"
                raise ValueError(f"{env}={path}: {exc.strerror or exc}") from None
        else:
            return None
        return User(role=ROLES[role], name=name, password=SecretStr(password))


def with_login(url: str, user: User | None) -> str:
    """``url`` logging in as ``user``; a URL that names a user already wins, and ``chdb://``
    (the embedded engine, no users) is left as it is."""
    parts = urlsplit(url)
    if user is None or parts.scheme == "chdb" or parts.username:
        return url
    login = f"{quote(user.name, safe='')}:{quote(user.password.get_secret_value(), safe='')}"
    return urlunsplit(parts._replace(netloc=f"{login}@{parts.netloc}"))


def url_for(url: str, role: RoleName, access: AccessSettings | None = None) -> str:
    """The URL ``role`` connects with: its configured login added unless the URL has one."""
    return with_login(url, (access or AccessSettings()).user(role))


# -- servers: SQL run by `rankscope migrate` ------------------------------------------------------


def _literal(value: SettingValue) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"unsupported setting value {value!r}")
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _profile_settings(role: Role, changeable_in_readonly: bool) -> str:
    items = []
    for name, value in role.settings.items():
        item = f"{check_name(name)} = {_literal(value)}"
        bound = role.changeable_in_readonly.get(name) if changeable_in_readonly else None
        if bound is not None:
            item += f" MIN {bound.min} MAX {bound.max} CHANGEABLE_IN_READONLY"
        elif name == "readonly":
            item += " CONST"
        items.append(item)
    return ", ".join(items)


def sql_statements(
    database: str, users: Iterable[User], *, changeable_in_readonly: bool = False
) -> list[str]:
    """Statements that make each user exactly as declared; safe to run again (they create what
    is missing, then set password, profile and grants, so a rerun rotates a password)."""
    check_name(database)
    out: list[str] = []
    for user in users:
        profile, name = check_name(user.profile), check_name(user.name)
        settings = _profile_settings(user.role, changeable_in_readonly)
        digest = sha256_hex(user.password.get_secret_value())
        out += [
            f"CREATE SETTINGS PROFILE IF NOT EXISTS {profile}",
            f"ALTER SETTINGS PROFILE {profile} SETTINGS {settings}",
            f"CREATE USER IF NOT EXISTS {name} IDENTIFIED WITH sha256_hash BY '{digest}'",
            f"ALTER USER {name} IDENTIFIED WITH sha256_hash BY '{digest}' "
            f"DEFAULT DATABASE {database} SETTINGS PROFILE '{profile}'",
            f"REVOKE ALL ON *.* FROM {name}",
            *(f"{grant} TO {name}" for grant in user.role.grants(database)),
        ]
    return out


class NoAccessStorage(RuntimeError):
    """The engine keeps no users of its own (chDB: code 514, or 495 for a user its read-only
    users file declares); its users come from that file."""


def ensure_users(
    client: Client,
    database: str,
    access: AccessSettings | None = None,
    cluster: str | None = None,
) -> str:
    """Create or update the configured users (run by ``rankscope migrate``, as admin); a role
    without a password is skipped. Returns one line saying what was done. With ``cluster``, on
    every server of it (``ON CLUSTER``, rankscope.sinks.cluster_ddl)."""
    access = access or AccessSettings()
    users = [u for u in (access.user(r) for r in ROLES) if u is not None]
    skipped = [r for r in ROLES if access.user(r) is None]
    statements = sql_statements(
        database, users, changeable_in_readonly=access.reader_changeable_timeout
    )
    if cluster is not None:
        from rankscope.sinks.cluster_ddl import access_on_cluster

        statements = [access_on_cluster(s, cluster) for s in statements]
    for stmt in statements:
        try:
            client.command(stmt)
        except DatabaseError as exc:
            # 514: nowhere to store users; 495: the user exists in a read-only users file
            if any(f"Code: {c}." in str(exc) for c in (514, 495)):
                raise NoAccessStorage(
                    "this engine has no writable access storage (chDB: its users come from "
                    "users.xml, written by `rankscope services`)"
                ) from None
            raise
    done = ", ".join(f"{u.role.name} {u.name!r}" for u in users) or "none"
    line = f"{done} created or updated"
    if skipped:
        envs = " / ".join(f"{ENV_PREFIX}{r.upper()}_PASSWORD[_FILE]" for r in skipped)
        line += f"; {', '.join(skipped)} skipped: set {envs}"
    return line


# -- the local chDB engine: users.xml --------------------------------------------------------------


def users_xml(database: str, users: Iterable[User], networks: Iterable[str] = LOOPBACK) -> str:
    """A users.xml for chDB: ``default`` (no password, loopback only, access management) is the
    admin ``migrate`` and the local tools use; each user gets its role's profile and grants."""
    check_name(database)
    users = list(users)
    ips = "".join(f"<ip>{escape(ip)}</ip>" for ip in networks)
    lines = ["<clickhouse>", "  <profiles>", "    <default/>"]
    for user in users:
        lines.append(f"    <{check_name(user.profile)}>")
        lines += [
            f"      <{check_name(k)}>{escape(str(v))}</{k}>" for k, v in user.role.settings.items()
        ]
        lines.append(f"    </{user.profile}>")
    lines += [
        "  </profiles>",
        "  <quotas><default/></quotas>",
        "  <users>",
        "    <default>",
        "      <password></password>",
        f"      <networks>{ips}</networks>",
        "      <profile>default</profile>",
        "      <quota>default</quota>",
        "      <access_management>1</access_management>",
        "    </default>",
    ]
    for user in users:
        name = check_name(user.name)
        digest = sha256_hex(user.password.get_secret_value())
        grants = "".join(f"<query>{escape(g)}</query>" for g in user.role.grants(database))
        lines += [
            f"    <{name}>",
            f"      <password_sha256_hex>{digest}</password_sha256_hex>",
            f"      <networks>{ips}</networks>",
            f"      <profile>{user.profile}</profile>",
            "      <quota>default</quota>",
            f"      <grants>{grants}</grants>",
            f"    </{name}>",
        ]
    lines += ["  </users>", "</clickhouse>"]
    return "\n".join(lines) + "\n"


def password_file(directory: Path, role: RoleName) -> Path:
    return directory / f"clickhouse-{role}.password"


def local_users(directory: Path, create: bool = True) -> dict[RoleName, User]:
    """The local engine's users, their passwords generated once into ``directory`` (0600
    files, ``clickhouse-<role>.password``); the names are the roles' defaults."""
    out: dict[RoleName, User] = {}
    for role in ROLES.values():
        path = password_file(directory, role.name)
        if not path.exists():
            if not create:
                continue
            create_secret_file(path, secrets.token_urlsafe(24))  # a racing process's wins
        out[role.name] = User(
            role=role, name=role.default_user, password=SecretStr(path.read_text().strip())
        )
    return out


def local_env(directory: Path, roles: Iterable[RoleName]) -> dict[str, str]:
    """Environment that makes a spawned process log in to the local engine as ``roles``
    (the password files, never the passwords, so they stay out of ``ps``)."""
    users = local_users(directory)
    env: dict[str, str] = {}
    for role in roles:
        env[f"{ENV_PREFIX}{role.upper()}_USER"] = users[role].name
        env[f"{ENV_PREFIX}{role.upper()}_PASSWORD"] = ""  # an inherited one would win
        env[f"{ENV_PREFIX}{role.upper()}_PASSWORD_FILE"] = str(password_file(directory, role))
    return env
