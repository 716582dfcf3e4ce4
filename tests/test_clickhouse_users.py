"""Least privilege in ClickHouse (issue 14): the declared users, as the real engine enforces them.

One local chDB engine for the module, started with the users file rendered from
`rankscope.sinks.access`; the SQL renderer (for servers: chDB cannot run CREATE USER) is checked
on its text.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError
from pydantic import SecretStr

from rankscope.services import local_services
from rankscope.sinks.access import (
    READER,
    WRITER,
    AccessSettings,
    User,
    local_users,
    sql_statements,
    url_for,
    users_xml,
    with_login,
)
from rankscope.sinks.clickhouse import connect, migrate

ROOT = Path(__file__).resolve().parents[1]
DB = "rankscope"


@dataclass(frozen=True)
class Engine:
    """The local engine as `rankscope services` runs it (users file, passwords in ``home``)."""

    home: Path
    url: str

    @property
    def credentials_dir(self) -> Path:
        return self.home

    @property
    def users_file(self) -> Path:
        return self.home / "data" / "clickhouse.run" / "users.xml"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    home = tmp_path_factory.mktemp("ch-users").resolve()
    with local_services(home, kafka_bootstrap="unused:9092", database=DB) as eps:
        admin = connect(eps.clickhouse_url)
        migrate(admin, DB)
        admin.insert(
            f"{DB}.heartbeats",
            [[str(uuid.uuid4()), "node001", "c1"]],
            column_names=["event_id", "node", "cluster"],
        )
        yield Engine(home, eps.clickhouse_url)


def _login(engine: Engine, role: str) -> Client:
    user = local_users(engine.credentials_dir)[role]  # type: ignore[index]
    return connect(with_login(engine.url, user))


def _code(exc: pytest.ExceptionInfo[DatabaseError]) -> int:
    text = str(exc.value)
    return int(text.split("Code: ")[1].split(".", maxsplit=1)[0])


def test_local_passwords_are_private_files_made_once(engine: Engine) -> None:
    first = local_users(engine.credentials_dir)
    assert local_users(engine.credentials_dir) == first
    for role in ("writer", "reader"):
        path = engine.credentials_dir / f"clickhouse-{role}.password"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(path.read_text().strip()) >= 24
    assert stat.S_IMODE(engine.users_file.stat().st_mode) == 0o600
    assert first["reader"].password.get_secret_value() not in engine.users_file.read_text()


def test_reader_can_select(engine: Engine) -> None:
    reader = _login(engine, "reader")
    assert reader.query("SELECT currentUser()").result_rows == [("rankscope_reader",)]
    assert reader.query(f"SELECT count() FROM {DB}.heartbeats").result_rows[0][0] >= 1


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        (f"INSERT INTO {DB}.heartbeats (event_id, node) VALUES ('x', 'n')", 497),
        (f"DROP TABLE {DB}.heartbeats", 497),
        (f"DROP DATABASE {DB}", 497),
        (f"ALTER TABLE {DB}.heartbeats DELETE WHERE 1", 497),
        (f"TRUNCATE TABLE {DB}.heartbeats", 497),
        (f"CREATE TABLE {DB}.evil (x UInt8) ENGINE = Memory", 497),
        ("CREATE DATABASE evil", 497),
        ("SELECT * FROM file('/etc/passwd', 'LineAsString')", 497),
        ("SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')", 497),
        ("SELECT 1 SETTINGS readonly = 0", 164),
        ("SELECT 1 SETTINGS max_result_rows = 0", 164),
        ("SELECT number FROM numbers(2000000)", 396),  # max_result_rows, overflow mode throw
    ],
)
def test_reader_cannot_write_alter_or_lift_its_limits(engine: Engine, sql: str, code: int) -> None:
    reader = _login(engine, "reader")
    with pytest.raises(DatabaseError) as exc:
        reader.query(sql) if sql.startswith("SELECT") else reader.command(sql)
    assert _code(exc) == code, str(exc.value)[:300]


def test_reader_cannot_insert_through_the_client(engine: Engine) -> None:
    with pytest.raises(DatabaseError) as exc:
        _login(engine, "reader").insert(
            f"{DB}.heartbeats", [["x", "n", "c"]], column_names=["event_id", "node", "cluster"]
        )
    assert _code(exc) == 497


def test_writer_can_insert_and_select_but_not_drop_or_create(engine: Engine) -> None:
    writer = _login(engine, "writer")
    event_id = str(uuid.uuid4())
    writer.insert(
        f"{DB}.heartbeats",
        [[event_id, "node002", "c2"]],
        column_names=["event_id", "node", "cluster"],
    )
    found = writer.query(
        f"SELECT count() FROM {DB}.heartbeats WHERE event_id = %(e)s", parameters={"e": event_id}
    )
    assert found.result_rows == [(1,)]
    for sql in (
        f"DROP TABLE {DB}.heartbeats",
        f"TRUNCATE TABLE {DB}.heartbeats",
        f"CREATE TABLE {DB}.evil (x UInt8) ENGINE = Memory",
        f"ALTER TABLE {DB}.heartbeats DELETE WHERE 1",
    ):
        with pytest.raises(DatabaseError) as exc:
            writer.command(sql)
        assert _code(exc) == 497, sql


def test_users_see_no_other_database(engine: Engine) -> None:
    connect(engine.url).command("CREATE DATABASE IF NOT EXISTS other")
    connect(engine.url).command(
        "CREATE TABLE IF NOT EXISTS other.t (x UInt8) ENGINE = MergeTree ORDER BY x"
    )
    for role in ("writer", "reader"):
        with pytest.raises(DatabaseError) as exc:
            _login(engine, role).query("SELECT count() FROM other.t")
        assert _code(exc) == 497, role


def test_wrong_password_is_refused(engine: Engine) -> None:
    with pytest.raises(DatabaseError) as exc:
        connect(engine.url.replace("http://", "http://rankscope_reader:nope@"))
    assert _code(exc) == 516


def test_the_sink_as_writer_inserts_without_migrating(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink's client as the writer (from the settings): migrations are checked, not run."""
    from rankscope.sinks.kafka_sink import ClickHouseSink, SinkConfig

    password = engine.credentials_dir / "clickhouse-writer.password"
    monkeypatch.setenv("RANKSCOPE_CLICKHOUSE_WRITER_PASSWORD_FILE", str(password))
    sink = ClickHouseSink(
        SinkConfig(bootstrap="unused:9092", clickhouse_url=engine.url, database=DB)
    )
    try:
        assert sink._client.query("SELECT currentUser()").result_rows == [("rankscope_writer",)]
    finally:
        sink._consumer.close()


# -- rendering --------------------------------------------------------------------------------


def _user(role: object, name: str = "u1", password: str = "p'w\\d`\"") -> User:
    return User(role=role, name=name, password=SecretStr(password))  # type: ignore[arg-type]


def test_sql_statements_grant_exactly_the_declared_rights() -> None:
    stmts = sql_statements(DB, [_user(WRITER, "w"), _user(READER, "r")])
    text = "\n".join(stmts)
    assert "p'w" not in text, "the password must travel as its hash only"
    assert "GRANT SELECT, INSERT ON rankscope.* TO w" in stmts
    assert "GRANT SELECT ON rankscope.* TO r" in stmts
    assert "REVOKE ALL ON *.* FROM r" in stmts
    assert stmts.index("REVOKE ALL ON *.* FROM r") < stmts.index("GRANT SELECT ON rankscope.* TO r")
    profile = next(s for s in stmts if s.startswith("ALTER SETTINGS PROFILE r "))
    assert "readonly = 1 CONST" in profile
    assert "result_overflow_mode = 'throw'" in profile
    assert "CHANGEABLE_IN_READONLY" not in profile
    for s in stmts:  # every literal is a hex digest or a plain name: nothing to escape
        assert s.count("'") % 2 == 0, s
    lifted = sql_statements(DB, [_user(READER, "r")], changeable_in_readonly=True)
    assert any("max_execution_time = 60 MIN 1 MAX 600 CHANGEABLE_IN_READONLY" in s for s in lifted)


@pytest.mark.parametrize("bad", ["x'y", "a b", "a`b", "1abc", "", "a;DROP", "é"])
def test_hostile_names_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        sql_statements(DB, [_user(READER, bad)])
    with pytest.raises(ValueError):
        sql_statements(bad, [_user(READER)])
    with pytest.raises(ValueError):
        users_xml(bad, [_user(READER)])


def test_empty_password_is_rejected() -> None:
    with pytest.raises(ValueError):
        _user(READER, password="")


def test_login_from_settings_and_files(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cr@t/:\n")
    access = AccessSettings(reader_password_file=secret, reader_user="ro")
    url = url_for("http://127.0.0.1:8123", "reader", access)
    assert url == "http://ro:s3cr%40t%2F%3A@127.0.0.1:8123"
    assert url_for("http://a:b@h:8123", "reader", access) == "http://a:b@h:8123"  # URL wins
    assert url_for("chdb:///data", "reader", access) == "chdb:///data"
    assert url_for("http://h:8123", "writer", access) == "http://h:8123"  # no writer password
    missing = AccessSettings(writer_password_file=tmp_path / "absent")
    with pytest.raises(ValueError, match="RANKSCOPE_CLICKHOUSE_WRITER_PASSWORD_FILE"):
        url_for("http://h:8123", "writer", missing)


def test_compose_read_only_user_matches_the_declared_reader() -> None:
    """compose's grafana_ro is the reader role: same profile settings, constraint and grants."""
    root = ET.parse(ROOT / "compose/clickhouse/users.d/grafana_ro.xml").getroot()
    profile = root.find("profiles/grafana_ro")
    assert profile is not None
    settings = {c.tag: c.text for c in profile if c.tag != "constraints"}
    assert settings == {k: str(v) for k, v in READER.settings.items()}
    constraints = {
        c.tag: (int(c.findtext("min", "")), int(c.findtext("max", "")))
        for c in profile.iterfind("constraints/*")
        if c.find("changeable_in_readonly") is not None
    }
    assert constraints == {k: (b.min, b.max) for k, b in READER.changeable_in_readonly.items()}
    grants = [q.text for q in root.iterfind("users/grafana_ro/grants/query")]
    assert grants == READER.grants(DB)


def test_the_sink_as_writer_refuses_an_unmigrated_database(engine: Engine) -> None:
    from rankscope.sinks.kafka_sink import ClickHouseSink, SinkConfig

    url = with_login(engine.url, local_users(engine.credentials_dir)["writer"])
    with pytest.raises(RuntimeError, match="rankscope migrate"):
        ClickHouseSink(SinkConfig(bootstrap="unused:9092", clickhouse_url=url, database="fresh"))


def test_sql_statements_parse_on_the_real_engine(engine: Engine) -> None:
    """chDB cannot store users (514), but it parses each statement first: no syntax error."""
    admin = connect(engine.url)
    stmts = sql_statements(
        DB, [_user(WRITER, "w"), _user(READER, "r")], changeable_in_readonly=True
    )
    for stmt in [*stmts, "CREATE USER bad IDENTIFIED WITH sha256_hash BY 'x' NONSENSE"]:
        with pytest.raises(DatabaseError) as exc:
            admin.command(stmt)
        code = _code(exc)
        if "NONSENSE" in stmt:
            assert code == 62  # the check can tell a syntax error
        else:
            assert code in (514, 180, 511), f"{stmt}: {str(exc.value)[:300]}"


def test_ensure_users_on_chdb_says_why_not(engine: Engine) -> None:
    from rankscope.sinks.access import NoAccessStorage, ensure_users

    admin = connect(engine.url)
    assert "writer, reader skipped" in ensure_users(admin, DB, AccessSettings())
    with pytest.raises(NoAccessStorage, match=r"users\.xml"):
        ensure_users(admin, DB, AccessSettings(reader_password=SecretStr("pw")))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "160", "HOME": str(Path.home())},
    )


def test_query_on_the_local_engine_is_the_reader(engine: Engine) -> None:
    """`rankscope query` without --clickhouse-url logs in to the local engine read-only."""
    home = str(engine.home)
    r = _cli("query", "SELECT currentUser() AS who", "--home", home, "--format", "csv")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["who", "rankscope_reader"]
    r = _cli("query", f"DROP TABLE {DB}.heartbeats", "--home", home)
    assert r.returncode != 0 and "ACCESS_DENIED" in r.stdout + r.stderr
    # a login in the URL wins: the admin may still do what it likes
    r = _cli("query", "SELECT currentUser()", "--clickhouse-url", engine.url, "--format", "csv")
    assert r.returncode == 0 and r.stdout.splitlines()[1] == "default", r.stderr[-2000:]


def test_migrate_on_the_local_engine_says_where_users_come_from(engine: Engine) -> None:
    r = _cli("migrate", "--home", str(engine.home), "--database", DB)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "users.xml" in r.stdout


def test_the_local_stack_gives_the_sink_the_writer_login(engine: Engine) -> None:
    from rankscope.settings import Settings
    from rankscope.stack import _local_writer_env

    said: list[str] = []
    settings = Settings(home=engine.home, bootstrap="unused:9092", database=DB)
    env = _local_writer_env(settings, engine.url, said.append)
    assert env["RANKSCOPE_CLICKHOUSE_WRITER_USER"] == "rankscope_writer", said
    assert env["RANKSCOPE_CLICKHOUSE_WRITER_PASSWORD"] == ""
    assert "PASSWORD_FILE" in " ".join(env) and not said
    other = Settings(home=engine.home, bootstrap="unused:9092", database="other_db")
    assert _local_writer_env(other, engine.url, said.append) == {}  # not granted there
    assert said and "admin" in said[0]


def test_only_the_sink_gets_the_writer_login(tmp_path: Path) -> None:
    from rankscope.pipeline import Pipeline, PipelineConfig

    login = {"RANKSCOPE_CLICKHOUSE_WRITER_PASSWORD_FILE": str(tmp_path / "pw")}
    pipeline = Pipeline(
        PipelineConfig(
            bootstrap="unused:9092",
            clickhouse_url="http://127.0.0.1:1",
            topic_prefix="p",
            database=DB,
            home=tmp_path,
            sink_env=login,
        )
    )
    assert pipeline.sink.env == login
    assert (
        "--clickhouse-url" in pipeline.sink.argv and str(tmp_path / "pw") not in pipeline.sink.argv
    )
    for stage in (*pipeline.workers, pipeline.actuators):
        assert not set(stage.env) & set(login), stage.name
