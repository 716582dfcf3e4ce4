"""The named SQL library: one file per question in ``sinks/sql/``, with typed parameters.

A file starts with a header of comments::

    -- name: straggler_history
    -- summary: one line for listings
    -- more lines of description
    -- param: job_id String  the job
    -- param: hours UInt32 = 24  how far back
    -- param: cluster String = ''  one cluster (empty: all)

and its SQL uses ClickHouse's server-side parameters (``{job_id:String}``), plus
``{db:Identifier}`` for the database, so values are never spliced into the text.
``{named:other}`` stands for another file's SQL as a subquery (its parameters must be declared
here too): one query builds on another without a copy (a parameterized view cannot be called as
``{db:Identifier}.view(...)``). The CLI
(``rankscope query NAME --param k=v``), the reports, the tests and the benchmark all run the
same files.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.query import QueryResult

SQL_DIR = Path(__file__).with_name("sql")

_PARAM = re.compile(r"^--\s*param:\s*(\w+)\s+([\w()]+)(?:\s*=\s*(\S*))?\s*(.*)$")
_PLACEHOLDER = re.compile(r"\{(\w+):([\w()]+)\}")
_INCLUDE = re.compile(r"\{named:(\w+)\}")


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None  # None: required
    description: str


@dataclass(frozen=True)
class NamedQuery:
    name: str
    summary: str
    description: str
    params: tuple[Param, ...]
    sql: str
    path: Path

    def bind(self, values: dict[str, str], database: str) -> dict[str, Any]:
        """Parameters for the server: given values, then defaults; unknown or missing refused."""
        known = {p.name for p in self.params}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"{self.name}: unknown parameter(s) {unknown}; it takes {sorted(known)}"
            )
        bound: dict[str, Any] = {"db": database}
        for p in self.params:
            value = values.get(p.name, p.default)
            if value is None:
                raise ValueError(f"{self.name}: parameter {p.name} ({p.type}) is required")
            bound[p.name] = value
        return bound


def parse(path: Path) -> NamedQuery:
    text = path.read_text(encoding="utf-8")
    header: list[str] = []
    body: list[str] = []
    for line in text.splitlines():
        if not body and line.startswith("--"):
            header.append(line)
        elif body or line.strip():
            body.append(line)
    name = summary = ""
    description: list[str] = []
    params: list[Param] = []
    for line in header:
        if m := _PARAM.match(line):
            pname, ptype, default, desc = m.groups()
            if default is not None and default in ("''", '""'):
                default = ""
            params.append(Param(pname, ptype, default, desc.strip()))
        elif line.startswith("-- name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("-- summary:"):
            summary = line.split(":", 1)[1].strip()
        else:
            description.append(line[2:].strip())
    sql = "\n".join(body).strip()
    sql = _INCLUDE.sub(lambda m: f"(\n{parse(path.with_name(m.group(1) + '.sql')).sql}\n)", sql)
    if name != path.stem:
        raise ValueError(f"{path.name}: header name {name!r} must match the file name")
    declared = {p.name: p.type for p in params} | {"db": "Identifier"}
    for pname, ptype in _PLACEHOLDER.findall(sql):
        if declared.get(pname) != ptype:
            raise ValueError(f"{path.name}: {{{pname}:{ptype}}} is not a declared parameter")
    return NamedQuery(name, summary, "\n".join(description), tuple(params), sql, path)


@functools.cache
def load_queries(directory: Path = SQL_DIR) -> dict[str, NamedQuery]:
    """Every named query, parsed once per process (callers read, never change, the dict)."""
    return {q.name: q for q in (parse(p) for p in sorted(directory.glob("*.sql")))}


#: the parameter of every query that puts a price on GPU time
PRICE_PARAM = "price_per_gpu_hour"


def default_price_per_gpu_hour() -> str:
    """The price per GPU-hour when none is configured: goodput.sql's declared default, the one
    place it is written. Queries added later declare the parameter without a default and
    callers (``rankscope query``, the bench) fill it from the ``price_per_gpu_hour`` setting or
    from here, so a second default cannot drift from the first."""
    for p in load_queries()["goodput"].params:
        if p.name == PRICE_PARAM and p.default is not None:
            return p.default
    raise LookupError("goodput.sql declares no default price_per_gpu_hour")


def run_query(
    client: Client, name: str, database: str, values: dict[str, str] | None = None
) -> QueryResult:
    """Run one named query against ``database``."""
    queries = load_queries()
    if name not in queries:
        raise KeyError(f"no named query {name!r}; known: {', '.join(sorted(queries))}")
    q = queries[name]
    return client.query(q.sql, parameters=q.bind(values or {}, database))
