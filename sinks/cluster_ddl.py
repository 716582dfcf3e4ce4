"""Render the single-node migrations as DDL for a ClickHouse cluster (issue 18 point 6).

Why a rewrite and not a second set of migration files: one place per fact. Every statement of
``sinks/migrations`` is rewritten here, generically (no per-file cases):

* every ``CREATE``/``ALTER``/``DROP``/``EXCHANGE``/``TRUNCATE`` gets ``ON CLUSTER``;
* a ``*MergeTree`` table becomes ``<name>_local`` with a ``Replicated*MergeTree`` engine, plus a
  ``Distributed`` table with the plain name, so the named queries, views and dashboards that read
  ``db.spans`` read the whole cluster unchanged;
* a materialized view writes to the local table (``TO db.x_local``) and fires on inserts into the
  local source table (the Distributed table hands each row to one shard's local table);
* ``ALTER ... ADD/DROP/MODIFY COLUMN`` runs on the local and the Distributed table, other
  ``ALTER``s (indexes, TTL) on the local table only;
* ``INSERT ... SELECT`` (backfills) goes through the Distributed tables, synchronously, so the
  statement after it sees the rows.

The SQL is never regenerated: sqlglot's ClickHouse tokenizer finds the positions (it knows
strings, quoted names, comments and ``{param:Type}``), and the original text is spliced there.
sqlglot's generator rewrites ClickHouse SQL (``toStartOfMinute`` becomes ``dateTrunc``, ``CREATE
TABLE x AS y ENGINE`` is reordered, ``EXCHANGE`` and ``ADD INDEX`` are not parsed), so it is
used for tokens only (docs/decisions.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlglot import Token, TokenType
from sqlglot.dialects.dialect import Dialect

#: rows of one job stay on one shard: a job's queries read one shard's parts, and a re-delivered
#: row (same job_id) lands where its first copy is, so ReplacingMergeTree still collapses it
DEFAULT_SHARDING_KEY = "cityHash64(job_id)"
#: ClickHouse's own default_replica_path / default_replica_name
UUID_PATH = "/clickhouse/tables/{uuid}/{shard}"
TABLE_PATH = "/clickhouse/tables/{shard}/{database}/{table}"
REPLICA_NAME = "{replica}"

_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
_DIALECT = Dialect.get_or_raise("clickhouse")
_PLAIN_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ClusterDDLError(ValueError):
    """A statement this renderer cannot turn into correct cluster DDL (one line, with why)."""


class ReplicaPath(StrEnum):
    """Which Keeper path the Replicated engines get."""

    #: ``'/clickhouse/tables/{uuid}/{shard}'``: unique per table even after EXCHANGE or a drop and
    #: re-create; needs ON CLUSTER and an Atomic database (both given here)
    UUID = "uuid"
    #: ``'/clickhouse/tables/{shard}/{database}/{table}'``: readable, unfolded at CREATE time
    TABLE = "table"
    #: no path arguments: the servers' ``default_replica_path``/``default_replica_name``
    SERVER = "server"


class ClusterSpec(BaseModel):
    """Where and how the schema is laid out on a cluster (``rankscope migrate --cluster``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: a cluster of the servers' ``remote_servers`` section
    name: Annotated[str, StringConstraints(pattern=_NAME)]
    #: Replicated*MergeTree engines (needs Keeper and the ``{shard}``/``{replica}`` macros);
    #: False for a sharded cluster without replicas
    replicated: bool = True
    replica_path: ReplicaPath = ReplicaPath.UUID
    #: table -> sharding expression, for tables whose default does not fit
    sharding_keys: dict[str, str] = Field(default_factory=dict)
    local_suffix: Annotated[str, StringConstraints(pattern=r"^_[A-Za-z0-9_]{1,20}$")] = "_local"
    #: False where something else spreads the DDL (a Replicated database engine), or to check
    #: the Distributed layout on one server without Keeper (tests/test_cluster_ddl.py)
    on_cluster: bool = True

    def sharding_key(self, table: str, columns: Sequence[str], sorting_key: str | None) -> str:
        """The table's override, else ``cityHash64(job_id)``, else a hash of its sorting key
        (a deterministic function of the row's identity, so duplicates meet on one shard)."""
        if table in self.sharding_keys:
            return self.sharding_keys[table]
        if "job_id" in columns:
            return DEFAULT_SHARDING_KEY
        if sorting_key:
            inner = sorting_key[1:-1] if sorting_key.startswith("(") else sorting_key
            return f"cityHash64({inner})"
        return "rand()"

    def engine_args(self) -> list[str]:
        if self.replica_path is ReplicaPath.SERVER:
            return []
        path = UUID_PATH if self.replica_path is ReplicaPath.UUID else TABLE_PATH
        return [f"'{path}'", f"'{REPLICA_NAME}'"]

    @property
    def clause(self) -> str:
        """`` ON CLUSTER 'name'`` (with its leading space), or nothing."""
        return f" ON CLUSTER '{self.name}'" if self.on_cluster else ""


@dataclass
class _Table:
    """A storage table as the migrations so far left it."""

    columns: list[str]
    sorting_key: str | None


@dataclass
class _Edit:
    start: int
    end: int  # exclusive
    text: str


def _tokenize(sql: str, offset: int = 0) -> list[Token]:
    """Tokens with positions in ``sql``; a word the tokenizer takes for a whole command
    (``EXCHANGE``, ``RENAME``) swallows the rest as one string, so the rest is tokenized too."""
    out: list[Token] = []
    for t in _DIALECT.tokenize(sql):
        kind = TokenType.VAR if t.token_type is TokenType.COMMAND else t.token_type
        out.append(Token(kind, t.text, t.line, t.col, t.start + offset, t.end + offset))
        if t.token_type is TokenType.COMMAND:
            rest = t.end + 1
            return out + _tokenize(sql[rest:], offset + rest)
    return out


@dataclass
class _Stmt:
    """One statement and its tokens, with helpers to splice its original text."""

    sql: str
    tokens: list[Token] = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = _tokenize(self.sql)

    def word(self, i: int) -> str:
        return self.tokens[i].text.upper() if i < len(self.tokens) else ""

    def words(self, i: int, *expected: str) -> bool:
        return all(self.word(i + k) == w for k, w in enumerate(expected))

    def name_at(self, i: int) -> tuple[str | None, str, int, int, int]:
        """(database, table, start, end exclusive, index after) of a ``[db.]name`` at ``i``."""
        t = self.tokens
        if i >= len(t) or t[i].token_type in (TokenType.L_PAREN, TokenType.STRING):
            where = self.sql[t[i].start :][:40] if i < len(t) else "the end"
            raise ClusterDDLError(f"expected a table name at {where!r} in {self.sql[:60]!r}")
        if i + 2 < len(t) and t[i + 1].token_type is TokenType.DOT:
            return t[i].text, t[i + 2].text, t[i].start, t[i + 2].end + 1, i + 3
        return None, t[i].text, t[i].start, t[i].end + 1, i + 1

    def skip_if(self, i: int, *words: str) -> int:
        return i + len(words) if self.words(i, *words) else i

    def find(self, word: str, start: int = 0, depth0: bool = True) -> int | None:
        depth = 0
        for i in range(start, len(self.tokens)):
            tt = self.tokens[i].token_type
            if depth == 0 and self.word(i) == word:
                return i
            if depth0 and tt is TokenType.L_PAREN:
                depth += 1
            elif depth0 and tt is TokenType.R_PAREN:
                depth -= 1
        return None

    def close_paren(self, i: int) -> int:
        """Index of the ``)`` that closes the ``(`` at ``i``."""
        depth = 0
        for j in range(i, len(self.tokens)):
            if self.tokens[j].token_type is TokenType.L_PAREN:
                depth += 1
            elif self.tokens[j].token_type is TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    return j
        raise ClusterDDLError(f"unbalanced parentheses in {self.sql[:60]!r}")

    def apply(self, edits: Iterable[_Edit]) -> str:
        out = self.sql
        for e in sorted(edits, key=lambda e: e.start, reverse=True):
            out = out[: e.start] + e.text + out[e.end :]
        return out


def _quote(name: str) -> str:
    return name if _PLAIN_ID.match(name) else f"`{name}`"


#: clause keywords that end a CREATE TABLE's ORDER BY expression
_AFTER_ORDER = frozenset(
    ("PARTITION BY", "PRIMARY", "PRIMARY KEY", "SAMPLE", "TTL", "SETTINGS", "COMMENT", "AS")
)
#: ALTER actions that change the column list, so the Distributed table must follow them
_COLUMN_ACTIONS = ("ADD COLUMN", "DROP COLUMN", "MODIFY COLUMN", "RENAME COLUMN", "COMMENT COLUMN")


class ClusterRenderer:
    """Rewrites statements in migration order, remembering the storage tables they create."""

    def __init__(self, spec: ClusterSpec, database: str) -> None:
        self.spec = spec
        self.database = database
        self.tables: dict[str, _Table] = {}

    # -- names ----------------------------------------------------------------------------------

    def local(self, table: str) -> str:
        return f"{table}{self.spec.local_suffix}"

    def _is_storage(self, db: str | None, table: str) -> bool:
        return (db or self.database) == self.database and table in self.tables

    def _local_ref(self, db: str | None, table: str) -> str:
        return f"{_quote(db or self.database)}.{_quote(self.local(table))}"

    # -- entry point ----------------------------------------------------------------------------

    def render(self, sql: str) -> list[str]:
        """The cluster statements for one single-node statement."""
        s = _Stmt(sql)
        if not s.tokens:
            return []
        head = s.word(0)
        if head == "CREATE":
            return self._create(s)
        if head == "ALTER" and s.word(1) == "TABLE":
            return self._alter(s)
        if head in ("DROP", "TRUNCATE") and s.word(1) in ("TABLE", "VIEW", "DATABASE"):
            return self._drop(s)
        if head == "EXCHANGE" and s.word(1) == "TABLES":
            return self._exchange(s)
        if head == "INSERT":
            return [self._insert(s)]
        raise ClusterDDLError(
            f"no cluster form for {' '.join(t.text for t in s.tokens[:3])!r} "
            "(rankscope.sinks.cluster_ddl renders CREATE, ALTER TABLE, DROP, TRUNCATE, "
            "EXCHANGE TABLES and INSERT)"
        )

    # -- CREATE ---------------------------------------------------------------------------------

    def _create(self, s: _Stmt) -> list[str]:
        i = s.skip_if(1, "OR", "REPLACE")
        kind = s.word(i)
        if kind == "DATABASE":
            i = s.skip_if(i + 1, "IF", "NOT", "EXISTS")
            _, _, _, end, _ = s.name_at(i)
            return [s.apply([_Edit(end, end, self.spec.clause)])]
        if kind == "MATERIALIZED" and s.word(i + 1) == "VIEW":
            return [self._materialized_view(s, i + 2)]
        if kind == "VIEW":
            i = s.skip_if(i + 1, "IF", "NOT", "EXISTS")
            _, _, _, end, _ = s.name_at(i)
            return [s.apply([_Edit(end, end, self.spec.clause)])]
        if kind == "TABLE":
            return self._table(s, i + 1)
        raise ClusterDDLError(f"no cluster form for CREATE {kind}")

    def _table(self, s: _Stmt, i: int) -> list[str]:
        if_not_exists = s.words(i, "IF", "NOT", "EXISTS")
        i = s.skip_if(i, "IF", "NOT", "EXISTS")
        db, table, name_start, name_end, after = s.name_at(i)
        on = self.spec.clause
        engine_at = s.find("ENGINE", after)
        if engine_at is not None and (
            not s.words(engine_at + 1, "=") or engine_at + 2 >= len(s.tokens)
        ):
            raise ClusterDDLError(f"CREATE TABLE {table}: expected ENGINE = name")
        engine_name = s.tokens[engine_at + 2].text if engine_at is not None else ""
        if engine_at is None or not engine_name.endswith("MergeTree"):
            if s.word(after) == "AS" and self._is_storage(*s.name_at(after + 1)[:2]):
                raise ClusterDDLError(
                    f"CREATE TABLE {table} AS a storage table needs its own ENGINE clause on a "
                    "cluster (the copied engine would share the Keeper path)"
                )
            return [s.apply([_Edit(name_end, name_end, on)])]
        if (db or self.database) != self.database:
            raise ClusterDDLError(f"{db}.{table}: migrations create tables in {self.database}")
        edits = [
            _Edit(name_start, name_end, self._local_ref(db, table)),
            _Edit(name_end, name_end, on),
        ]
        columns: list[str]
        if s.word(after) == "AS":
            if s.word(after + 1) == "SELECT":
                raise ClusterDDLError(f"CREATE TABLE {table} ... AS SELECT: create, then INSERT")
            src_db, src, src_start, src_end, _ = s.name_at(after + 1)
            if not self._is_storage(src_db, src):
                raise ClusterDDLError(f"CREATE TABLE {table} AS {src}: {src} is no storage table")
            edits.append(_Edit(src_start, src_end, self._local_ref(src_db, src)))
            columns = list(self.tables[src].columns)
        elif s.tokens[after].token_type is TokenType.L_PAREN:
            columns = self._columns(s, after)
        else:
            raise ClusterDDLError(f"CREATE TABLE {table}: expected a column list or AS")
        edits.append(self._engine_edit(s, engine_at))
        self.tables[table] = _Table(columns, self._sorting_key(s, engine_at))
        key = self.spec.sharding_key(table, columns, self.tables[table].sorting_key)
        exists = " IF NOT EXISTS" if if_not_exists else ""
        plain = f"{_quote(self.database)}.{_quote(table)}"
        distributed = (
            f"CREATE TABLE{exists} {plain}{on} AS {self._local_ref(db, table)}\n"
            f"ENGINE = Distributed('{self.spec.name}', '{self.database}', "
            f"'{self.local(table)}', {key})"
        )
        return [s.apply(edits), distributed]

    def _columns(self, s: _Stmt, open_at: int) -> list[str]:
        """Column names of the list that opens at ``open_at`` (not its INDEX/PROJECTION items)."""
        close = s.close_paren(open_at)
        out, depth, expect = [], 0, True
        for j in range(open_at + 1, close):
            tt = s.tokens[j].token_type
            if expect and depth == 0:
                if s.word(j) not in ("INDEX", "PROJECTION", "CONSTRAINT"):
                    out.append(s.tokens[j].text)
                expect = False
            if tt is TokenType.L_PAREN:
                depth += 1
            elif tt is TokenType.R_PAREN:
                depth -= 1
            elif tt is TokenType.COMMA and depth == 0:
                expect = True
        return out

    def _sorting_key(self, s: _Stmt, engine_at: int) -> str | None:
        at = next(
            (j for j in range(engine_at, len(s.tokens)) if s.word(j) == "ORDER BY"),
            None,
        )
        if at is None or at + 1 >= len(s.tokens):
            return None
        end, depth = at + 1, 0
        while end < len(s.tokens):
            tt = s.tokens[end].token_type
            depth += (tt is TokenType.L_PAREN) - (tt is TokenType.R_PAREN)
            if depth == 0 and s.word(end) in _AFTER_ORDER and end > at + 1:
                break
            end += 1
        return s.sql[s.tokens[at + 1].start : s.tokens[end - 1].end + 1].strip()

    def _engine_edit(self, s: _Stmt, engine_at: int) -> _Edit:
        """``ENGINE = XMergeTree[(args)]`` -> the Replicated form with the Keeper path first."""
        name_tok = s.tokens[engine_at + 2]
        end, args = name_tok.end + 1, ""
        nxt = engine_at + 3
        if nxt < len(s.tokens) and s.tokens[nxt].token_type is TokenType.L_PAREN:
            close = s.close_paren(nxt)
            args = s.sql[s.tokens[nxt].end + 1 : s.tokens[close].start].strip()
            end = s.tokens[close].end + 1
        name = name_tok.text
        if not self.spec.replicated or name.startswith("Replicated"):
            return _Edit(name_tok.start, end, s.sql[name_tok.start : end])
        all_args = [*self.spec.engine_args(), *([args] if args else [])]
        return _Edit(name_tok.start, end, f"Replicated{name}({', '.join(all_args)})")

    def _materialized_view(self, s: _Stmt, i: int) -> str:
        i = s.skip_if(i, "IF", "NOT", "EXISTS")
        _, view, _, name_end, after = s.name_at(i)
        edits = [_Edit(name_end, name_end, self.spec.clause)]
        if s.word(after) != "TO":
            raise ClusterDDLError(
                f"materialized view {view}: give it a TO table (on a cluster its rows must land "
                "in a local table with a Distributed twin)"
            )
        tdb, target, t_start, t_end, after_to = s.name_at(after + 1)
        if self._is_storage(tdb, target):
            edits.append(_Edit(t_start, t_end, self._local_ref(tdb, target)))
        from_at = s.find("FROM", after_to)  # the outer query's, not a subquery's
        if from_at is not None and s.tokens[from_at + 1].token_type is not TokenType.L_PAREN:
            sdb, src, s_start, s_end, _ = s.name_at(from_at + 1)
            if self._is_storage(sdb, src):
                # the view fires on inserts into its first FROM table: the shard's local table
                edits.append(_Edit(s_start, s_end, self._local_ref(sdb, src)))
        return s.apply(edits)

    # -- ALTER, DROP, EXCHANGE, INSERT ----------------------------------------------------------

    def _alter(self, s: _Stmt) -> list[str]:
        db, table, start, end, after = s.name_at(2)
        on = _Edit(end, end, self.spec.clause)
        if not self._is_storage(db, table):
            return [s.apply([on])]
        local = s.apply([_Edit(start, end, self._local_ref(db, table)), on])
        actions = self._actions(s, after)
        column_ops = [a for a in actions if any(a.startswith(c) for c in _COLUMN_ACTIONS)]
        if not column_ops:
            return [local]
        if len(column_ops) != len(actions):
            raise ClusterDDLError(
                f"ALTER TABLE {table}: split column changes from other actions (the Distributed "
                "table takes only the column changes)"
            )
        for j, action in enumerate(actions):
            if action.startswith("ADD COLUMN"):
                self.tables[table].columns.append(self._added_column(s, after, j))
        return [local, s.apply([on])]

    def _actions(self, s: _Stmt, start: int) -> list[str]:
        """The first two words of each comma-separated ALTER action."""
        out, depth, begin = [], 0, start
        for j in range(start, len(s.tokens) + 1):
            tt = s.tokens[j].token_type if j < len(s.tokens) else None
            if tt is TokenType.L_PAREN:
                depth += 1
            elif tt is TokenType.R_PAREN:
                depth -= 1
            elif (tt is TokenType.COMMA and depth == 0) or tt is None:
                out.append(f"{s.word(begin)} {s.word(begin + 1)}")
                begin = j + 1
        return out

    def _added_column(self, s: _Stmt, start: int, nth: int) -> str:
        seen = -1
        for j in range(start, len(s.tokens)):
            if s.words(j, "ADD", "COLUMN"):
                seen += 1
                if seen == nth:
                    k = s.skip_if(j + 2, "IF", "NOT", "EXISTS")
                    return s.tokens[k].text
        return ""

    def _drop(self, s: _Stmt) -> list[str]:
        i = s.skip_if(2, "IF", "EXISTS")
        db, table, start, end, _ = s.name_at(i)
        on = _Edit(end, end, self.spec.clause)
        if s.word(1) == "DATABASE" or not self._is_storage(db, table):
            return [s.apply([on])]
        local = s.apply([_Edit(start, end, self._local_ref(db, table)), on])
        if s.word(0) == "TRUNCATE":
            return [local]
        del self.tables[table]
        return [s.apply([on]), local]

    def _exchange(self, s: _Stmt) -> list[str]:
        a_db, a, a_start, a_end, after = s.name_at(2)
        if s.word(after) != "AND":
            raise ClusterDDLError("EXCHANGE TABLES a AND b: expected AND")
        b_db, b, b_start, b_end, _ = s.name_at(after + 1)
        on = _Edit(b_end, b_end, self.spec.clause)
        if not (self._is_storage(a_db, a) and self._is_storage(b_db, b)):
            return [s.apply([on])]
        # only the local tables trade places: each Distributed table names its local table, so
        # after the swap db.a reads the new a_local (the column lists match: b was made AS a)
        self.tables[a], self.tables[b] = self.tables[b], self.tables[a]
        return [
            s.apply(
                [
                    _Edit(a_start, a_end, self._local_ref(a_db, a)),
                    _Edit(b_start, b_end, self._local_ref(b_db, b)),
                    on,
                ]
            )
        ]

    def _insert(self, s: _Stmt) -> str:
        """Backfills read and write the Distributed tables; synchronously, so the next statement
        (an EXCHANGE, say) sees every row on its shard."""
        body = next(
            (j for j in range(2, len(s.tokens)) if s.word(j) in ("SELECT", "WITH", "VALUES")),
            None,
        )
        if body is None or s.find("SETTINGS", 2) is not None:
            return s.sql
        at = s.tokens[body].start
        return s.apply([_Edit(at, at, "SETTINGS insert_distributed_sync = 1\n")])


def terminated(sql: str) -> str:
    """``sql;`` for a script, with the ``;`` on its own line when a comment ends the text."""
    tokens = _tokenize(sql)
    ends_in_comment = bool(tokens) and tokens[-1].end + 1 < len(sql.rstrip())
    return f"{sql}\n;" if ends_in_comment else f"{sql};"


def render_statements(
    statements: Iterable[str],
    spec: ClusterSpec,
    database: str,
    renderer: ClusterRenderer | None = None,
) -> list[str]:
    """Cluster DDL for ``statements`` in order (a fresh renderer unless one is given)."""
    r = renderer or ClusterRenderer(spec, database)
    return [out for stmt in statements for out in r.render(stmt)]


#: access statements: (leading words, whether a name follows them before ON CLUSTER)
_ACCESS_HEADS = (
    ("CREATE SETTINGS PROFILE", True),
    ("ALTER SETTINGS PROFILE", True),
    ("CREATE USER", True),
    ("ALTER USER", True),
    ("CREATE ROLE", True),
    ("ALTER ROLE", True),
    ("DROP USER", True),
    ("DROP SETTINGS PROFILE", True),
    ("GRANT", False),
    ("REVOKE", False),
)


def access_on_cluster(sql: str, cluster: str) -> str:
    """A user/profile/grant statement with ``ON CLUSTER``: needed where the servers keep users
    in their local access storage (not where ``user_directories`` is replicated)."""
    s = _Stmt(sql)
    on = ClusterSpec(name=cluster).clause
    for head, named in _ACCESS_HEADS:
        words = head.split()
        if not s.words(0, *words):
            continue
        i = len(words)
        if not named:
            end = s.tokens[i - 1].end + 1
            return s.apply([_Edit(end, end, on)])
        i = s.skip_if(i, "IF", "NOT", "EXISTS")
        i = s.skip_if(i, "IF", "EXISTS")
        end = s.tokens[i].end + 1
        return s.apply([_Edit(end, end, on)])
    raise ClusterDDLError(f"no cluster form for access statement {sql[:40]!r}")
