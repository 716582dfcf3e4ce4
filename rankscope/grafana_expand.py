"""What Grafana and the ClickHouse plugin do to a panel's SQL before it reaches ClickHouse.

A module of its own because it is the tests' half of the dashboards: ``expand`` turns a panel's
SQL into what the server runs (variables interpolated as Grafana's formats write them, then the
plugin's macros), so every panel can be run against an engine loaded with a simulated job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime


def _dt(t: datetime) -> str:
    return f"toDateTime({int(t.timestamp())})"


#: what ``encodeURIComponent`` leaves alone, less ``!'()*`` (Grafana escapes those too)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
#: Grafana's variable syntax: ``$name``, ``[[name:format]]``, ``${name.fieldPath:format}``
VARIABLE_SYNTAX = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}"
)


def percent_encode(value: str) -> str:
    """Grafana's ``encodeURIComponentStrict``: UTF-8 bytes as ``%XX`` (upper-case hex) except
    ``A-Z a-z 0-9 - _ . ~``. A lone surrogate raises, as ``encodeURIComponent`` throws."""
    return "".join(
        c if c in _UNRESERVED else "".join(f"%{b:02X}" for b in c.encode("utf-8")) for c in value
    )


def format_value(value: str | list[str], fmt: str | None) -> str:
    """A variable's value as Grafana's formats write it (a list: a multi-valued variable).

    No format: the ClickHouse plugin's own (a list as ``'a','b'``, nothing escaped, a string as
    is). The unsafe formats are here so tests can show what they let through."""
    if fmt is None:
        return "'" + "','".join(value) + "'" if isinstance(value, list) else value
    if fmt == "percentencode":
        return percent_encode("{" + ",".join(value) + "}" if isinstance(value, list) else value)
    if fmt == "singlequote":
        items = value if isinstance(value, list) else [value]
        return ",".join("'" + v.replace("'", "\\'") + "'" for v in items)
    if fmt == "sqlstring":
        items = value if isinstance(value, list) else [value]
        return ",".join("'" + v.replace("'", "''").replace('"', '\\"') + "'" for v in items)
    if fmt == "raw":
        return ",".join(value) if isinstance(value, list) else value
    raise ValueError(f"variable format {fmt!r} is not emulated here")


def interpolate(sql: str, variables: Mapping[str, str | list[str]]) -> str:
    """Grafana's variable interpolation (one pass: a value is never interpolated again).

    Names starting ``__`` are left alone (the plugin's macros); Grafana leaves an unknown
    variable as written too, but here it raises, so a test cannot miss one."""

    def variable(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name.startswith("__"):
            return m.group(0)
        if m.group(5):
            raise ValueError(f"{m.group(0)}: field paths are not emulated here")
        return format_value(variables[name], fmt)

    return VARIABLE_SYNTAX.sub(variable, sql)


def expand(
    sql: str,
    start: datetime,
    end: datetime,
    interval_s: float,
    variables: Mapping[str, str | list[str]],
) -> str:
    """The SQL as it reaches ClickHouse: Grafana interpolates the variables in the browser (a
    string: a single-valued variable, a list: a multi-valued one), then the plugin's backend
    expands its macros over the whole text."""
    sql = interpolate(sql, variables)

    def macro(m: re.Match[str]) -> str:
        name, arg = m.group(1), (m.group(2) or "").strip()
        if name == "timeFilter":
            return f"{arg} >= {_dt(start)} AND {arg} <= {_dt(end)}"
        if name == "timeInterval":
            seconds = max(math.floor(interval_s), 1)
            return f"toStartOfInterval(toDateTime({arg}), INTERVAL {seconds} second)"
        if name == "fromTime":
            return _dt(start)
        if name == "toTime":
            return _dt(end)
        if name == "interval_s":
            return str(max(int(interval_s), 1))
        raise ValueError(f"macro $__{name} is not expanded here")

    return re.sub(r"\$__(\w+)(?:\(([^()]*)\))?", macro, sql)
