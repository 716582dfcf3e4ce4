"""Issue 14: a Grafana variable holding ``'`` or ``\\`` cannot change a panel's query.

Job ids, cluster and node names come from telemetry and schedulers, and a dashboard URL sets
any variable to any text. The dashboards pass every variable through Grafana's
``percentencode`` format into ``decodeURLComponent('...')`` (``rankscope.grafana.value_of``,
``values_of``). These tests check that no SQL of a committed dashboard uses a variable any
other way, that ``expand`` encodes as Grafana does, and, on the real engine, that hostile
values arrive as the exact text and select what that text selects, while the splices used
before (``'${job}'``, ``${x:singlequote}``, ``${x:sqlstring}``) let the same values rewrite
the query.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Collection, Iterator
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from rankscope.grafana import (
    DASHBOARDS,
    DASHBOARDS_DIR,
    IDENTIFIER_VARIABLES,
    JOB,
    MULTI_VARIABLES,
    identifier_of,
    panels,
    value_of,
    values_of,
    variable_queries,
)
from rankscope.grafana_expand import VARIABLE_SYNTAX, expand, format_value, percent_encode
from rankscope.sinks.clickhouse import connect, migrate
from tests.conftest import Services
from tests.demo_data import DemoData, load_demo

#: values a job id, cluster or node name could hold (none of them exists in the data)
HOSTILE = [
    "a'b",
    "a\\",
    "a'b\\",
    "a\\'); DROP TABLE x; --",
    "'",
    "\\\\'",
    "x' OR '1'='1",
    "\\' OR 1=1 OR job_id=\\'",
    "\\' OR 1=1 --",
    "line\nbreak\r\t\x00end",
    "\u2019\u2018\u02bc\uff07\u201c quote look-alikes",
    "$__fromTime $__timeFilter(ts) ${job} $job [[job]]",
    "%27 %5C %zz %% + ~",
    "é 漢字 🙂",
    "{braces}",
    "x" * 300,
]
#: the characters ``percentencode`` can write
SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~%")
START = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.UTC)


def _queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, SQL) of every panel target and every variable query of a built dashboard."""
    return panels(doc) + variable_queries(doc)


def unsafe_splices(sql: str, multi: Collection[str]) -> list[str]:
    """Every way ``sql`` uses a Grafana variable other than ``value_of``/``values_of``."""
    found = []
    for m in VARIABLE_SYNTAX.finditer(sql):
        name = m.group(1) or m.group(2) or m.group(4)
        if name.startswith("__"):  # the plugin's macros
            continue
        if m.group(0) != f"${{{name}:percentencode}}":
            found.append(m.group(0))
    rest = sql
    for name in IDENTIFIER_VARIABLES:
        rest = rest.replace(identifier_of(name), "")
    for name in {m.group(4) for m in VARIABLE_SYNTAX.finditer(sql) if m.group(4)}:
        if name not in multi and values_of(name) in rest:
            found.append(f"{name} (single-valued) read as a list")
        rest = rest.replace(values_of(name) if name in multi else value_of(name), "")
    found += [m.group(0) for m in VARIABLE_SYNTAX.finditer(rest) if m.group(4)]
    return found


def test_no_dashboard_sql_uses_a_variable_unencoded() -> None:
    checked = 0
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        listed = doc.get("templating", {}).get("list", [])
        declared = {v["name"]: bool(v.get("multi")) for v in listed}
        assert {n for n, multi in declared.items() if multi} <= set(MULTI_VARIABLES)
        multi = {n for n in MULTI_VARIABLES if declared.get(n)}
        for title, sql in _queries(doc):
            assert not unsafe_splices(sql, multi), (path.name, title, unsafe_splices(sql, multi))
            for m in VARIABLE_SYNTAX.finditer(sql):
                name = m.group(1) or m.group(2) or m.group(4)
                assert name.startswith("__") or name in declared, (path.name, title, name)
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    "sql",
    [
        "job_id = '${job}'",
        "job_id = $job",
        "job_id = '[[job]]'",
        "cluster IN (${cluster:singlequote})",
        "job_id = ${job:sqlstring}",
        "job_id = '${job:raw}'",
        "job_id = '${job:percentencode}'",  # encoded but never decoded
        f"has({value_of('node')}, node)",  # a multi-valued variable read as one value
        f"has({values_of('job')}, job_id)",  # a single-valued one read as a list
    ],
)
def test_the_lint_refuses_the_old_splices(sql: str) -> None:
    assert unsafe_splices(sql, MULTI_VARIABLES)


def test_percent_encode_is_grafanas_encode_uri_component_strict() -> None:
    # encodeURIComponent, then !'()* as %XX: what Grafana's percentencode format writes
    assert percent_encode("a'b\\ (x)!*~é") == "a%27b%5C%20%28x%29%21%2A~%C3%A9"
    assert percent_encode('+&=/?#;,:@$"<>[]{}|^`') == (
        "%2B%26%3D%2F%3F%23%3B%2C%3A%40%24%22%3C%3E%5B%5D%7B%7D%7C%5E%60"
    )
    assert percent_encode("🙂\n\x00") == "%F0%9F%99%82%0A%00"
    assert percent_encode("AZaz09-_.~") == "AZaz09-_.~"
    # a list is encoded as {a,b}: the values joined, not escaped one by one
    assert format_value(["a", "b,c"], "percentencode") == "%7Ba%2Cb%2Cc%7D"
    assert format_value([], "percentencode") == "%7B%7D"
    with pytest.raises(UnicodeEncodeError):  # encodeURIComponent throws URIError
        percent_encode("\ud800")
    for value in HOSTILE:
        assert set(percent_encode(value)) <= SAFE
        assert set(format_value([value, value], "percentencode")) <= SAFE


@pytest.fixture(scope="module")
def engine(services: Services) -> Client:
    return connect(services.clickhouse_url)


@pytest.mark.parametrize("value", [*HOSTILE, "", "a,b"])
def test_a_hostile_value_reaches_clickhouse_as_the_exact_text(engine: Client, value: str) -> None:
    end = START + dt.timedelta(hours=1)
    one = expand(f"SELECT {value_of('job')}", START, end, 10, {"job": value})
    assert engine.query(one).result_rows == [(value,)]
    nodes = [value, "n2"]
    many = expand(f"SELECT {values_of('node')}", START, end, 10, {"node": nodes})
    # documented: the list is split at ',' (only "a,b" differs from the values here)
    assert engine.query(many).result_rows == [(",".join(nodes).split(","),)]


# -- every panel on the demo data ---------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(services: Services) -> Iterator[tuple[Client, DemoData]]:
    db = f"ge{uuid.uuid4().hex[:10]}"
    data = load_demo(connect(services.clickhouse_url), db)
    yield connect(services.clickhouse_url, database=db), data


def _rows(client: Client, sql: str, value: str, plain: str) -> list[str]:
    """The result as sorted text, the value (where a query echoes it) written as ``plain``."""
    rows = client.query(sql).result_rows
    return sorted(repr(tuple(plain if c == value else c for c in row)) for row in rows)


def test_every_query_with_hostile_values_answers_as_with_a_plain_unknown_one(
    demo: tuple[Client, DemoData],
) -> None:
    """cluster, job, node and rank all set to each hostile value: every panel and variable
    query must run and return what it returns for a plain name that does not exist (with the
    value echoed back exactly where the query selects it). A value that reached the SQL as
    code would fail to parse or select rows of other jobs."""
    client, data = demo
    start = dt.datetime.fromtimestamp(data.start_ns / 1e9 - 300, tz=dt.UTC)
    end = dt.datetime.fromtimestamp(data.end_ns / 1e9 + 300, tz=dt.UTC)
    plain = "no-such-name"

    db = client.database or ""

    def variables(v: str) -> dict[str, str | list[str]]:
        return {"database": db, "cluster": v, "job": v, "node": [v], "rank": [v]}

    checked = 0
    for spec in DASHBOARDS:
        for title, sql in _queries(json.loads((DASHBOARDS_DIR / f"{spec.uid}.json").read_text())):
            want = _rows(client, expand(sql, start, end, 10, variables(plain)), plain, plain)
            for value in HOSTILE:
                expanded = expand(sql, start, end, 10, variables(value))
                assert _rows(client, expanded, value, plain) == want, (spec.uid, title, value)
            checked += 1
    assert checked >= 20


def test_a_hostile_database_name_names_a_database_that_does_not_exist(
    demo: tuple[Client, DemoData],
) -> None:
    """The database variable is an identifier: whatever its value, every panel and variable
    query either reads that (missing) database and fails as such, or runs unchanged."""
    client, data = demo
    start = dt.datetime.fromtimestamp(data.start_ns / 1e9 - 300, tz=dt.UTC)
    end = start + dt.timedelta(hours=1)
    checked = 0
    for spec in DASHBOARDS:
        for title, sql in _queries(json.loads((DASHBOARDS_DIR / f"{spec.uid}.json").read_text())):
            if identifier_of("database") not in sql:
                continue
            for value in [*HOSTILE, "x--", "x/*", "a`b", "system", ""]:
                variables: dict[str, str | list[str]] = {
                    "database": value, "cluster": "sim", "job": data.job_id,
                    "node": ["n"], "rank": ["0"],
                }  # fmt: skip
                with pytest.raises(DatabaseError) as err:
                    client.query(expand(sql, start, end, 10, variables))
                text = str(err.value)
                # the empty name is an empty identifier: refused by the parser
                want = ("SYNTAX_ERROR",) if value == "" else ("UNKNOWN_DATABASE", "UNKNOWN_TABLE")
                assert any(w in text for w in want), (title, value, text)
            checked += 1
    assert checked >= 20


# -- a hostile job selected, and nothing else ----------------------------------------------------
H_CLUSTER = "c\\'); --"
H_JOB = "a'b\\"
H_NODE = "n'1\\"
#: (cluster, job, node, rank): neighbours a broken literal could reach
SPANS = [
    (H_CLUSTER, H_JOB, H_NODE, 0),
    (H_CLUSTER, H_JOB, "n1", 1),
    (H_CLUSTER, "a'b", H_NODE, 2),
    (H_CLUSTER, "a", "n1", 3),
    (H_CLUSTER, "a\\'b", "n1", 4),
    ("sim", H_JOB, H_NODE, 5),
    ("x' OR '1'='1", "x' OR '1'='1", "n1", 6),
]


@pytest.fixture(scope="module")
def hostile_db(services: Services) -> tuple[Client, dt.datetime]:
    db = f"gh{uuid.uuid4().hex[:10]}"
    migrate(connect(services.clickhouse_url), db)
    client = connect(services.clickhouse_url, database=db)
    t0 = (time.time_ns() // 10**9 - 600) * 10**9
    rows = []
    for i, (cluster, job, node, rank) in enumerate(SPANS):
        for j, phase in enumerate(("step", "forward")):
            start = t0 + (i * 2 + j) * 10**9
            rows.append(
                [
                    f"e{i}-{j}", "span/1", cluster, job, node, rank, 0, 0, start, start,
                    f"{i:032d}", f"{i * 2 + j:016d}", "", phase, phase,
                    start, start + 10**9, 1, "ok",
                ]
            )  # fmt: skip
    client.insert(
        "spans",
        rows,
        column_names=[
            "event_id", "schema", "cluster", "job_id", "node", "rank", "local_rank", "gpu",
            "ts_ns", "observed_ts_ns", "trace_id", "span_id", "parent_span_id", "name", "phase",
            "start_ns", "end_ns", "step", "status",
        ],
    )  # fmt: skip
    return client, dt.datetime.fromtimestamp(t0 / 1e9 - 60, tz=dt.UTC)


def _query(uid: str, title: str) -> str:
    doc = json.loads((DASHBOARDS_DIR / f"{uid}.json").read_text())
    return dict(_queries(doc))[title]


def test_the_job_dashboard_selects_the_hostile_job_and_nothing_else(
    hostile_db: tuple[Client, dt.datetime],
) -> None:
    client, start = hostile_db
    end = start + dt.timedelta(hours=1)
    sel: dict[str, str | list[str]] = {
        "database": client.database or "",
        "cluster": H_CLUSTER,
        "job": H_JOB,
        "node": [H_NODE, "n1"],
        "rank": ["0", "2", "5"],
    }

    def run(title: str) -> list[tuple[Any, ...]]:
        return client.query(expand(_query("rankscope-job", title), start, end, 10, sel)).result_rows

    assert {r[0] for r in run("variable job")} == {H_JOB, "a'b", "a", "a\\'b"}
    assert {r[0] for r in run("variable node")} == {H_NODE, "n1"}
    assert [r[0] for r in run("variable rank")] == [0, 1]
    # ranks 2 and 5 are selected too, but belong to other jobs or clusters
    assert {r[1] for r in run("Step time of the 10 slowest selected ranks (s)")} == {"0"}
    compute = expand(
        _query(
            "rankscope-stragglers", "Compute (forward + backward) time of the 10 slowest ranks (s)"
        ),
        start,
        end,
        10,
        sel,
    )
    assert {r[1] for r in client.query(compute).result_rows} == {"0", "1"}


def test_the_splices_used_before_let_the_same_values_rewrite_the_query(
    hostile_db: tuple[Client, dt.datetime],
) -> None:
    """What this issue fixes: each old form, given one of the values above, selects every row
    or does not parse; the form the dashboards use now selects the one job named."""
    client, start = hostile_db
    end = start + dt.timedelta(hours=1)
    total = client.query("SELECT count() FROM spans").result_rows[0][0]
    assert total == 2 * len(SPANS)

    def count(where: str, job: str) -> int:
        sql = expand(f"SELECT count() FROM spans WHERE {where}", start, end, 10, {"job": job})
        return int(client.query(sql).result_rows[0][0])

    assert count("job_id = '${job}'", "x' OR '1'='1") == total
    # singlequote writes \' as \\' (the backslash stays, the quote closes the literal)
    assert count("job_id = ${job:singlequote}", "\\' OR 1=1 --") == total
    # sqlstring writes \' as \'' (an escaped quote, then the closing one)
    assert count("job_id = ${job:sqlstring}", "\\' OR 1=1 --") == total
    for broken in ("job_id = ${job:singlequote}", "job_id = ${job:sqlstring}"):
        with pytest.raises(DatabaseError):  # a value ending in \ leaves the literal open
            count(broken, H_JOB)
    for job in ("x' OR '1'='1", "\\' OR 1=1 --", H_JOB):
        assert count(f"job_id = {JOB}", job) == 2 * sum(1 for r in SPANS if r[1] == job)
