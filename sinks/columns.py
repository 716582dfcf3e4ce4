"""Table columns declared once, row writers derived from them.

A table is a tuple of ``Column`` declarations: the ClickHouse column name, the model attribute
it reads and how the value is normalised for ClickHouse. ``TableSpec`` turns that declaration
into the column list an insert names and the ``to_row`` writer that fills it, so a column is
added in one place (plus its migration) and the list and the writer cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

from pydantic import BaseModel

Row = list[Any]
Fix = Callable[[Any], Any]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: ``Column.missing`` of a key that must be present (the default)
REQUIRED: Final[Any] = _Required()


@dataclass(frozen=True, slots=True)
class Column:
    """One ClickHouse column and where its value comes from.

    ``attr``: the model attribute (default: the column name). ``fix``: turns the value into its
    column form. ``key`` and ``missing`` only matter for event tables read from the validate
    stage's JSON (``event_tables``): the document's key (default: ``attr``) and what a document
    without it reads as before ``fix`` (``REQUIRED``: a ``KeyError``).
    """

    name: str
    attr: str = ""
    fix: Fix | None = None
    key: str = ""
    missing: Any = REQUIRED

    @property
    def source(self) -> str:
        return self.attr or self.name

    @property
    def json_key(self) -> str:
        return self.key or self.source


def _minus_one(value: int | None) -> int:
    return -1 if value is None else value


def _str_map(value: dict[str, Any] | None) -> dict[str, str]:
    return {k: str(v) for k, v in (value or {}).items()}


def nullable_int(name: str, attr: str = "") -> Column:
    """An optional integer written as -1 when unset: sort keys hold no NULL."""
    return Column(name, attr, fix=_minus_one, missing=None)


def str_map(name: str, attr: str = "") -> Column:
    """A ``Map(String, String)`` column: values as strings, empty when unset."""
    return Column(name, attr, fix=_str_map, missing=None)


def as_columns(columns: Sequence[str | Column]) -> tuple[Column, ...]:
    """A plain name stands for ``Column(name)``: same column, attribute and JSON key."""
    return tuple(Column(c) if isinstance(c, str) else c for c in columns)


def fixes_of(columns: Sequence[Column]) -> tuple[tuple[int, Fix], ...]:
    """(position, fix) of every column that normalises its value."""
    return tuple((i, c.fix) for i, c in enumerate(columns) if c.fix is not None)


def _check_path(model: type[BaseModel], path: str, table: str) -> None:
    """Fail at import, not on the first row, when a column names an attribute the model lacks."""
    owner: Any = model
    for part in path.split("."):
        fields = getattr(owner, "model_fields", {})
        if part not in fields:
            raise ValueError(f"{table}: {model.__name__} has no field {path!r}")
        owner = fields[part].annotation


def _attr_row(paths: Sequence[str], fixes: tuple[tuple[int, Fix], ...]) -> Callable[[Any], Row]:
    """Row writer reading every path (dotted ones too) through one C-level ``attrgetter``."""
    many = attrgetter(*paths)
    get: Callable[[Any], Any] = many
    if len(paths) == 1:  # attrgetter of one name returns the value, not a tuple
        get = lambda obj: (many(obj),)  # noqa: E731

    def to_row(obj: Any) -> Row:
        row = list(get(obj))
        for i, fix in fixes:
            row[i] = fix(row[i])
        return row

    return to_row


class TableSpec:
    """One ClickHouse table: its columns in order and the ``to_row`` writer derived from them.

    ``paths``: where each column is read on the model, when that is not ``Column.source``
    (event tables reach into ``payload``).
    """

    def __init__(
        self,
        table: str,
        model: type[BaseModel],
        columns: Sequence[str | Column],
        *,
        paths: Sequence[str] | None = None,
    ) -> None:
        cols = as_columns(columns)
        names = [c.name for c in cols]
        if len(set(names)) != len(names):
            raise ValueError(f"{table}: a column is declared twice in {names}")
        paths = [c.source for c in cols] if paths is None else list(paths)
        if len(paths) != len(cols):
            raise ValueError(f"{table}: {len(paths)} paths for {len(cols)} columns")
        for path in paths:
            _check_path(model, path, table)
        self.table = table
        self.model = model
        #: column names in table order (an insert's ``column_names``)
        self.columns = names
        #: where each column is read on the model (dotted into ``payload`` for event tables)
        self.paths = paths
        #: the row of one record of ``model``
        self.to_row = _attr_row(paths, fixes_of(cols))


__all__ = [
    "REQUIRED",
    "Column",
    "Row",
    "TableSpec",
    "as_columns",
    "fixes_of",
    "nullable_int",
    "str_map",
]
