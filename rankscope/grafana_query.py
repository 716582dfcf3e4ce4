"""The ClickHouse datasource plugin's query model (grafana-clickhouse-datasource v4), in pydantic.

The SDK has no ClickHouse query type, and Grafana loads a target it cannot read as an empty panel,
with no error anywhere at build time; so every target the dashboards carry is built through this
model, and the tests validate the committed JSON against it. Written from the plugin's own
TypeScript types (repository grafana/clickhouse-datasource, v4): ``src/types/sql.ts``
(``CHQueryBase``, ``CHSqlQuery``, ``EditorType``) and ``src/types/queryBuilder.ts``
(``QueryType``, ``QueryBuilderOptions``); the ``format`` numbers are grafana-plugin-sdk-go's
``sqlutil.FormatQueryOption`` (TimeSeries 0, Table 1, Logs 2, Trace 3, Multi 4), and which one
goes with each query type is the plugin's ``mapQueryTypeToGrafanaFormat`` (``src/data/utils.ts``).
Fields of Grafana's own ``DataQuery`` (``refId``, ``hide``, ``key``, ``datasource``) come from
``@grafana/schema``.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

#: the plugin release the dashboards are written for; compose installs the same one
#: (``GF_PLUGINS_PREINSTALL_SYNC`` in compose/docker-compose.yml, checked by a test)
PLUGIN_ID = "grafana-clickhouse-datasource"
PLUGIN_VERSION = "4.11.2"


class EditorType(StrEnum):
    SQL = "sql"
    BUILDER = "builder"


class QueryType(StrEnum):
    """v4's query types (v3 wrote ``timeSeries`` and kept ``format`` apart)."""

    TABLE = "table"
    LOGS = "logs"
    TIMESERIES = "timeseries"
    TRACES = "traces"


class Format(IntEnum):
    """sqlds' ``FormatQueryOption``: how the plugin's backend shapes the frame."""

    TIME_SERIES = 0  # long frames made wide (LongToWide): one field per label set
    TABLE = 1
    LOGS = 2
    TRACE = 3
    MULTI = 4


#: ``mapQueryTypeToGrafanaFormat`` in the plugin (traces: 3 in trace-id mode, else 1)
FORMAT_OF: dict[QueryType, frozenset[Format]] = {
    QueryType.TABLE: frozenset({Format.TABLE}),
    QueryType.LOGS: frozenset({Format.LOGS}),
    QueryType.TIMESERIES: frozenset({Format.TIME_SERIES}),
    QueryType.TRACES: frozenset({Format.TRACE, Format.TABLE}),
}


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class DataSourceRef(_Model):
    type: str | None = None
    uid: str | None = None


class BuilderOptions(BaseModel):
    """``QueryBuilderOptions``: only its required fields are checked (the dashboards never
    write builder options; a query edited in the builder keeps them in ``meta``)."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    database: str
    table: str
    query_type: QueryType


class QueryMeta(_Model):
    timezone: str | None = None
    builder_options: BuilderOptions | None = None


class ClickHouseSqlQuery(_Model):
    """``CHSqlQuery``: a target written in the plugin's SQL editor."""

    # DataQuery
    ref_id: str = Field(min_length=1)
    hide: bool | None = None
    key: str | None = None
    datasource: DataSourceRef | None = None
    # CHQueryBase
    plugin_version: str = Field(pattern=r"^\d+\.\d+\.\d+")
    editor_type: Literal[EditorType.SQL] = EditorType.SQL
    raw_sql: str = Field(min_length=1)
    format: Format | None = None
    # CHSqlQuery
    query_type: QueryType | None = None
    meta: QueryMeta | None = None
    expand: bool | None = None

    @model_validator(mode="after")
    def _format_matches_query_type(self) -> Self:
        qt, fmt = self.query_type, self.format
        if qt is not None and fmt is not None and fmt not in FORMAT_OF[qt]:
            raise ValueError(f"format {fmt.value} does not go with queryType {qt}")
        return self

    def to_target(self) -> dict[str, object]:
        """The target as the dashboard JSON holds it."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
