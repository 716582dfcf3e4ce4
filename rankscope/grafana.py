"""Grafana dashboards as code, built with grafana-foundation-sdk; ``rankscope grafana build``.

Panels query the official ClickHouse datasource plugin with raw SQL: the plugin's macros
(``$__timeFilter(ts)``, ``$__timeInterval(ts)``) and dashboard variables (``cluster``, ``job``,
``node``, ``rank``). Where a panel answers a question of the named SQL library it runs that
file, its parameters bound to variables, so the dashboards and the CLI cannot drift apart.
The datasource and the database are dashboard variables too (``datasource``, of the plugin's
type; ``database``, default ``rankscope``): the dashboards load in any Grafana with the plugin,
whatever the datasource's uid and default database. Targets are the plugin's v4 query model
(``rankscope.grafana_query``).

Variables reach the SQL only percent-encoded and decoded by ClickHouse (``value_of``,
``values_of``): Grafana's ``percentencode`` format writes nothing but ``A-Z a-z 0-9 - _ . ~ %``,
so no value (job ids and node names come from telemetry) can close the string literal it sits
in, whatever quotes or backslashes it holds. ``singlequote`` and ``sqlstring`` leave ``\\``
alone, which ClickHouse reads as an escape; they are not used. The database, an identifier,
is written `` `${database:percentencode}` ``: in a back-quoted identifier none of those
characters can end it or start a comment, so an odd value names a database that does not
exist, nothing else.

``rankscope.grafana_expand.expand`` does what Grafana and the plugin do to a panel's SQL before
it reaches ClickHouse; the tests run every panel that way against an engine loaded with a
simulated job.

The built JSON ships in the package (``rankscope/dashboards``: what compose provisions and
``packaged_dashboards`` lists); after changing a dashboard here, refresh it with
``rankscope grafana build --out rankscope/dashboards`` (a test fails until then).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import heatmap, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import HeatmapCellLayout
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DynamicConfigValue,
    VariableOption,
)

from rankscope import grafana_query as chq
from rankscope.sinks.named_queries import default_price_per_gpu_hour, load_queries

#: every panel and variable queries the datasource the ``datasource`` variable selects
DATASOURCE = DataSourceRef(type_val=chq.PLUGIN_ID, uid="${datasource}")
DEFAULT_DATABASE = "rankscope"
#: the built dashboards, package data (``write_dashboards`` writes wherever it is told)
DASHBOARDS_DIR = Path(__file__).with_name("dashboards")
Format = Literal["table", "time_series"]


class _ClickHouseQuery(cogvariants.Dataquery):
    """The ClickHouse plugin's query model (raw SQL editor)."""

    def __init__(self, ref_id: str, sql: str, fmt: Format) -> None:
        self.ref_id, self.sql, self.fmt = ref_id, sql, fmt

    def to_json(self) -> dict[str, Any]:
        series = self.fmt == "time_series"
        return chq.ClickHouseSqlQuery(
            ref_id=self.ref_id,
            datasource=chq.DataSourceRef(type=DATASOURCE.type_val, uid=DATASOURCE.uid),
            plugin_version=chq.PLUGIN_VERSION,
            raw_sql=self.sql,
            query_type=chq.QueryType.TIMESERIES if series else chq.QueryType.TABLE,
            format=chq.Format.TIME_SERIES if series else chq.Format.TABLE,
        ).to_target()


class ClickHouseSql(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, sql: str, fmt: Format = "table", ref_id: str = "A") -> None:
        self._query = _ClickHouseQuery(ref_id, sql, fmt)

    def build(self) -> cogvariants.Dataquery:
        return self._query


def value_of(name: str) -> str:
    """SQL (a String) for the value of the single-valued variable ``name``.

    Grafana's ``percentencode`` is ``encodeURIComponent`` with ``!'()*`` escaped as well, so the
    literal holds only ``A-Z a-z 0-9 - _ . ~ %``; ``decodeURLComponent`` gives back the value's
    bytes (it leaves ``+`` alone, and the format writes ``+`` as ``%2B``)."""
    return f"decodeURLComponent('${{{name}:percentencode}}')"


def values_of(name: str) -> str:
    """SQL (an Array(String)) for the values of the multi-valued variable ``name``.

    ``percentencode`` writes a list as the encoding of ``{v1,v2}`` (the values joined by ``,``
    first, then the whole encoded), so the braces are dropped and the text split at ``,``. A value
    that itself holds ``,`` arrives in pieces: it can narrow or widen the selection, never change
    the query. "All" is the list of every option (the variables set no custom all value)."""
    return (
        "splitByChar(',', replaceRegexpOne(replaceRegexpOne("
        f"{value_of(name)}, '^[{{]', ''), '[}}]$', ''))"
    )


def identifier_of(name: str) -> str:
    """SQL (a quoted identifier) for the value of the single-valued variable ``name``: the
    ``percentencode`` alphabet cannot close a back-quoted identifier (no `` ` `` or ``\\``)
    nor start a comment inside one. A name outside ``A-Z a-z 0-9 - _ . ~`` arrives encoded."""
    return f"`${{{name}:percentencode}}`"


#: every way a dashboard's SQL may use a variable; tests refuse any other
CLUSTER, JOB = value_of("cluster"), value_of("job")
NODES, RANKS = values_of("node"), values_of("rank")
DB = identifier_of("database")
MULTI_VARIABLES = ("node", "rank")
IDENTIFIER_VARIABLES = ("database",)


def named(name: str, **params: str) -> str:
    """A named query's SQL for a panel: its parameters bound to SQL expressions (variables as
    ``value_of`` gives them), the database the ``database`` variable."""
    q = load_queries()[name]
    sql = q.sql.replace("{db:Identifier}.", f"{DB}.")
    for p in q.params:
        value = params.get(p.name)
        if value is None:
            if p.default is None:
                raise ValueError(f"{name}: panel must bind {p.name}")
            value = p.default if p.type in ("Identifier",) else _literal(p.type, p.default)
        sql = sql.replace(f"{{{p.name}:{p.type}}}", value)
    return sql


def _literal(ptype: str, value: str) -> str:
    return f"'{value}'" if ptype == "String" else value


# -- the dashboards ------------------------------------------------------------------------------
JOB_FILTER = f"cluster = {CLUSTER} AND job_id = {JOB}"
GPU_FILTER = f"{JOB_FILTER} AND $__timeFilter(ts) AND has({NODES}, node)"
STEP_FILTER = (
    f"{JOB_FILTER} AND $__timeFilter(ts) AND phase = 'step' AND has({RANKS}, toString(rank))"
)
FABRIC_FILTER = f"$__timeFilter(ts) AND cluster = {CLUSTER} AND has({NODES}, node)"
COMPUTE_FILTER = f"{JOB_FILTER} AND $__timeFilter(ts) AND phase IN ('forward', 'backward')"
#: lines a per-rank (per-GPU) time series panel draws at most, whatever the job size
TOP_K = 10
#: the hours since the dashboard's start, for named queries that take ``hours``
SINCE_FROM = "toUInt32((now() - $__fromTime) / 3600 + 1)"
#: money in the dashboards: the SQL library's default price per GPU-hour (goodput.sql's)
PRICE = default_price_per_gpu_hour()


def top_k(column: str, table: str, where: str, order: str) -> str:
    """``column IN (...)``: the ``TOP_K`` values of ``column`` first by ``order`` (an aggregate,
    with its direction) among ``table``'s rows matching ``where``; ties go to the lowest."""
    return (
        f"{column} IN (SELECT {column} FROM {DB}.{table} WHERE {where} "
        f"GROUP BY {column} ORDER BY {order}, {column} LIMIT {TOP_K})"
    )


def drill_down(uid: str, variable: str, carry: tuple[str, ...]) -> dict[str, str]:
    """A data link opening dashboard ``uid`` for the clicked value as ``variable``, with the time
    range and the ``carry`` variables (datasource and database always) as they are here."""
    params = [
        "${__url_time_range}",
        *(f"${{{v}:queryparam}}" for v in ("datasource", "database", *carry)),
        f"var-{variable}=${{__value.raw:percentencode}}",
    ]
    return {"title": f"Open {uid} for this {variable}", "url": f"/d/{uid}/{uid}?{'&'.join(params)}"}


@dataclass(frozen=True)
class PanelSpec:
    title: str
    kind: Literal["timeseries", "table", "stat", "heatmap"]
    sql: str
    fmt: Format = "table"
    unit: str = ""
    width: int = 12
    height: int = 8
    description: str = ""
    #: column name -> data link (``drill_down``) on its cells
    links: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    panels: list[PanelSpec]
    variables: list[str] = field(default_factory=lambda: ["cluster", "job", "node", "rank"])


def _variables() -> dict[str, str]:
    """Variable name -> its query (each narrows by the ones before it)."""
    return {
        "cluster": (
            f"SELECT DISTINCT cluster FROM {DB}.spans WHERE $__timeFilter(ts) ORDER BY cluster"
        ),
        "job": (
            f"SELECT job_id FROM {DB}.spans WHERE $__timeFilter(ts) AND cluster = {CLUSTER} "
            "GROUP BY job_id ORDER BY max(ts) DESC"
        ),
        "node": (
            f"SELECT DISTINCT node FROM {DB}.spans WHERE {JOB_FILTER} AND $__timeFilter(ts) "
            "ORDER BY node"
        ),
        "rank": (
            f"SELECT DISTINCT rank FROM {DB}.spans WHERE {JOB_FILTER} AND $__timeFilter(ts) "
            "ORDER BY rank"
        ),
    }


DASHBOARDS: list[DashboardSpec] = [
    DashboardSpec(
        "rankscope-fleet",
        "rankscope / fleet overview",
        "Every job in the time range: size, progress, incidents, stragglers, hangs.",
        [
            PanelSpec(
                "Jobs",
                "table",
                named(
                    "jobs_overview",
                    hours="toUInt32(($__toTime - $__fromTime) / 3600 + 1)",
                    cluster=CLUSTER,
                ),
                width=24,
                links={"job_id": drill_down("rankscope-job", "job", ("cluster",))},
            ),
            PanelSpec(
                "Incidents per hour by cause",
                "timeseries",
                "SELECT $__timeInterval(first_cause_ts) AS time, cause_class, count() AS incidents "
                f"FROM {DB}.incidents FINAL WHERE $__timeFilter(first_cause_ts) "
                f"AND cluster = {CLUSTER} GROUP BY time, cause_class ORDER BY time",
                fmt="time_series",
            ),
            PanelSpec(
                "GPU utilisation by job (from the per-minute rollup)",
                "timeseries",
                "SELECT $__timeInterval(minute) AS time, job_id, avgMerge(util_avg) AS util "
                f"FROM {DB}.gpu_minute WHERE minute >= toStartOfMinute($__fromTime) "
                "AND minute <= $__toTime AND job_id != '' "
                "GROUP BY time, job_id ORDER BY time",
                fmt="time_series",
                unit="percent",
            ),
            PanelSpec(
                "Hardware and NCCL errors per hour (from the per-node rollup)",
                "timeseries",
                "SELECT $__timeInterval(hour) AS time, sum(xids) AS xids, "
                "sum(link_errors) AS link_errors, sum(nccl_errors) AS nccl_errors "
                f"FROM {DB}.node_hour "
                "WHERE hour >= toStartOfHour($__fromTime) AND hour <= $__toTime "
                f"AND cluster = {CLUSTER} GROUP BY time ORDER BY time",
                fmt="time_series",
            ),
        ],
        variables=["cluster"],
    ),
    DashboardSpec(
        "rankscope-job",
        "rankscope / job drill-down",
        "One job: step time heatmap over runs of ranks, the slowest ranks (drill down to their "
        "nodes), the incident timeline, recovery, and the slowest and least utilised ranks.",
        [
            PanelSpec(
                "Step time per run of ranks, worst rank of each run (s)",
                "heatmap",
                "SELECT time, ranks, value FROM ("
                + named("rank_heatmap_buckets", job_id=JOB, interval_s="$__interval_s")
                + ") WHERE $__timeFilter(time) ORDER BY time, ranks",
                fmt="time_series",
                unit="s",
                width=24,
                description="At most 64 rows whatever the job size (rank_heatmap_buckets).",
            ),
            PanelSpec(
                f"Slowest {TOP_K} ranks",
                "table",
                named("slowest_ranks", job_id=JOB, k=str(TOP_K), hours=SINCE_FROM),
                width=24,
                links={"node": drill_down("rankscope-node", "node", ("cluster", "job"))},
            ),
            PanelSpec(
                "Incident timeline",
                "table",
                named("incident_timeline", job_id=JOB),
                width=24,
            ),
            PanelSpec(
                "Automated recovery",
                "table",
                named(
                    "recovery_history",
                    job_id=JOB,
                    hours="toUInt32((now() - $__fromTime) / 3600 + 1)",
                ),
                width=24,
            ),
            PanelSpec(
                f"GPU utilisation of the {TOP_K} least utilised ranks",
                "timeseries",
                "SELECT $__timeInterval(ts) AS time, toString(rank) AS rank, avg(sm_util_pct) "
                f"AS util FROM {DB}.gpu_samples WHERE {GPU_FILTER} AND "
                + top_k("rank", "gpu_samples", GPU_FILTER, "avg(sm_util_pct) ASC")
                + " GROUP BY time, rank ORDER BY time",
                fmt="time_series",
                unit="percent",
            ),
            PanelSpec(
                f"Step time of the {TOP_K} slowest selected ranks (s)",
                "timeseries",
                "SELECT $__timeInterval(ts) AS time, toString(rank) AS rank, avg(duration_s) "
                f"AS step_s FROM {DB}.spans WHERE {STEP_FILTER} AND "
                + top_k("rank", "spans", STEP_FILTER, "avg(duration_s) DESC")
                + " GROUP BY time, rank ORDER BY time",
                fmt="time_series",
                unit="s",
            ),
        ],
    ),
    DashboardSpec(
        "rankscope-stragglers",
        "rankscope / stragglers",
        "Straggler findings and the compute time of each rank relative to the job's median.",
        [
            PanelSpec(
                "Straggler findings",
                "table",
                named("straggler_history", job_id=JOB),
                width=24,
            ),
            PanelSpec(
                f"Compute (forward + backward) time of the {TOP_K} slowest ranks (s)",
                "timeseries",
                "SELECT $__timeInterval(ts) AS time, toString(rank) AS rank, sum(duration_s) "
                f"AS compute_s FROM {DB}.spans WHERE {COMPUTE_FILTER} AND "
                + top_k("rank", "spans", COMPUTE_FILTER, "sum(duration_s) DESC")
                + " GROUP BY time, rank ORDER BY time",
                fmt="time_series",
                unit="s",
                width=24,
            ),
        ],
    ),
    DashboardSpec(
        "rankscope-fabric",
        "rankscope / fabric",
        "XIDs and link errors per node against the NCCL errors that followed; port counters.",
        [
            PanelSpec(
                "Hardware errors and the NCCL errors that followed",
                "table",
                named(
                    "xid_link_vs_nccl",
                    hours="toUInt32(($__toTime - $__fromTime) / 3600 + 1)",
                    cluster=CLUSTER,
                ),
                width=24,
            ),
            PanelSpec(
                f"IB transmit rate of the {TOP_K} nodes sending least (bytes/s)",
                "timeseries",
                "SELECT $__timeInterval(ts) AS time, node, "
                f"sum(rates_per_s['port_xmit_data']) * 4 AS xmit_bytes_s FROM {DB}.fabric_counters "
                f"WHERE {FABRIC_FILTER} AND "
                + top_k(
                    "node",
                    "fabric_counters",
                    FABRIC_FILTER,
                    "sum(rates_per_s['port_xmit_data']) ASC",
                )
                + " GROUP BY time, node ORDER BY time",
                fmt="time_series",
                unit="Bps",
                width=24,
            ),
        ],
    ),
    DashboardSpec(
        "rankscope-goodput",
        "rankscope / goodput and energy",
        "Productive GPU time versus time lost, its cost, and energy per step.",
        [
            PanelSpec("Goodput", "table", named("goodput", job_id=JOB), width=24),
            PanelSpec("Energy", "table", named("energy_per_step", job_id=JOB), width=24),
            PanelSpec(
                "Power per node (W)",
                "timeseries",
                "SELECT $__timeInterval(ts) AS time, node, sum(power_w) / "
                f"greatest(uniqExact(ts), 1) * uniqExact(gpu) AS power_w FROM {DB}.gpu_samples "
                f"WHERE {JOB_FILTER} AND $__timeFilter(ts) GROUP BY time, node ORDER BY time",
                fmt="time_series",
                unit="watt",
                width=24,
            ),
        ],
    ),
    DashboardSpec(
        "rankscope-runs",
        "rankscope / runs and their cost",
        "Runs across job attempts (requeues, restarts, dependency chains): the cost of each "
        "completed run with its failed attempts charged to it, GPU-hours and energy lost per "
        "cause class, goodput per run. Money at the SQL library's default price per GPU-hour.",
        [
            PanelSpec(
                "Cost per completed run",
                "table",
                named("run_cost", hours=SINCE_FROM, price_per_gpu_hour=PRICE),
                width=24,
            ),
            PanelSpec(
                "GPU-hours and energy lost per cause class",
                "table",
                named("run_losses", hours=SINCE_FROM, price_per_gpu_hour=PRICE),
                width=24,
            ),
            PanelSpec("Goodput per run", "table", named("run_goodput", hours=SINCE_FROM), width=24),
        ],
        variables=[],
    ),
    DashboardSpec(
        "rankscope-efficiency",
        "rankscope / throughput per GPU, per watt and per dollar",
        "Samples and tokens per second per GPU, per joule (= per W) and per dollar, by job, "
        "model and GPU model, from the step spans' rankscope.samples / rankscope.tokens; and the "
        "throughput-gap and fleet-drift findings.",
        [
            PanelSpec(
                f"By {by.replace('_', ' ')}",
                "table",
                named(
                    "efficiency",
                    by=f"'{by}'",
                    job_id="''",
                    hours=SINCE_FROM,
                    price_per_gpu_hour=PRICE,
                ),
                width=24,
            )
            for by in ("job", "model", "gpu_model")
        ]
        + [
            PanelSpec(
                "Throughput gaps and drifted nodes",
                "table",
                "SELECT onset_ts AS onset, detection_type, job_id, node, score, summary "
                f"FROM {DB}.detections FINAL WHERE detection_type IN ('throughput_gap', "
                f"'node_drift') AND $__timeFilter(onset_ts) AND cluster = {CLUSTER} "
                "ORDER BY onset DESC LIMIT 200",
                width=24,
            ),
        ],
        variables=["cluster"],
    ),
    DashboardSpec(
        "rankscope-node",
        "rankscope / node",
        "The selected nodes of one job: their GPUs, their ranks, their hardware and NCCL errors.",
        [
            PanelSpec(
                f"GPU utilisation of the {TOP_K} least utilised GPUs",
                "timeseries",
                "SELECT $__timeInterval(ts) AS time, "
                "concat(node, ' gpu ', toString(gpu)) AS gpu_id, "
                f"avg(sm_util_pct) AS util FROM {DB}.gpu_samples WHERE {GPU_FILTER} AND "
                + top_k("(node, gpu)", "gpu_samples", GPU_FILTER, "avg(sm_util_pct) ASC")
                + " GROUP BY time, gpu_id ORDER BY time",
                fmt="time_series",
                unit="percent",
                width=24,
            ),
            PanelSpec(
                "Ranks on the selected nodes, slowest first",
                "table",
                "SELECT rank, node, avg(step_time_mean_s) AS mean_step_s, "
                "max(step_time_max_s) AS max_step_s, avg(gpu_util_mean_pct) AS gpu_util_pct "
                f"FROM {DB}.rank_windows FINAL WHERE {JOB_FILTER} AND has({NODES}, node) "
                "AND $__timeFilter(window_start) GROUP BY rank, node "
                "ORDER BY mean_step_s DESC, rank LIMIT 64",
            ),
            PanelSpec(
                "XIDs, link and NCCL errors per hour (from the per-node rollup)",
                "timeseries",
                "SELECT $__timeInterval(hour) AS time, sum(xids) AS xids, "
                "sum(link_errors) AS link_errors, sum(nccl_errors) AS nccl_errors "
                f"FROM {DB}.node_hour WHERE hour >= toStartOfHour($__fromTime) "
                f"AND hour <= $__toTime AND cluster = {CLUSTER} AND has({NODES}, node) "
                "GROUP BY time ORDER BY time",
                fmt="time_series",
            ),
        ],
        variables=["cluster", "job", "node"],
    ),
    DashboardSpec(
        "rankscope-redaction",
        "rankscope / redaction audit",
        "What redaction found and did (counts, never values), and quarantined events.",
        [
            PanelSpec(
                "Findings",
                "table",
                named(
                    "redaction_audit",
                    hours="toUInt32(($__toTime - $__fromTime) / 3600 + 1)",
                    job_id="''",
                ),
                width=24,
            ),
            PanelSpec(
                "Findings over time by entity",
                "timeseries",
                "SELECT $__timeInterval(window_start) AS time, entity, sum(count) AS findings "
                f"FROM {DB}.redaction_audit FINAL WHERE $__timeFilter(window_start) "
                "GROUP BY time, entity ORDER BY time",
                fmt="time_series",
                width=24,
            ),
        ],
        variables=[],
    ),
    DashboardSpec(
        "rankscope-drift",
        "rankscope / fleet drift",
        "Nodes whose configuration diverges from their pool's majority (issue 19): what differs "
        "and since when, how much slower their jobs run, and what the recovery policy did.",
        [
            PanelSpec(
                "Drifted nodes per pool",
                "table",
                "SELECT pool, max(pool_size) AS pool_size, count() AS drifted_nodes, "
                "arrayStringConcat(groupUniqArrayArray(splitByChar(',', differs)), ', ') "
                f"AS attributes FROM ({named('fleet_drift', cluster=CLUSTER)}) "
                "GROUP BY pool ORDER BY drifted_nodes DESC, pool",
                width=24,
            ),
            PanelSpec(
                "Drifted nodes: what differs from the pool's majority, since when",
                "table",
                named("fleet_drift", cluster=CLUSTER, include_cleared="1"),
                width=24,
                description="One row per node and configuration; cleared: back with its pool.",
            ),
            PanelSpec(
                "Jobs on drifted nodes: step time against clean jobs",
                "table",
                named(
                    "drift_slowdown",
                    cluster=CLUSTER,
                    hours="toUInt32(($__toTime - $__fromTime) / 3600 + 1)",
                ),
                width=24,
                description="slowdown_pct: the job's step time against jobs that never ran on "
                "a drifted node, same stretch; vs_same_job_pct: the drifted node's ranks against "
                "the job's other ranks.",
            ),
            PanelSpec(
                "Drift actions (recovery policy)",
                "table",
                "SELECT ts, stage, action, node, rule, reason "
                f"FROM {DB}.recovery_actions FINAL WHERE cluster = {CLUSTER} "
                "AND startsWith(job_id, 'fleet:') AND $__timeFilter(ts) ORDER BY ts, node, stage",
                width=24,
            ),
        ],
        variables=["cluster"],
    ),
]


def _panel(spec: PanelSpec) -> Any:
    builders: dict[str, Any] = {
        "timeseries": timeseries.Panel,
        "table": table.Panel,
        "stat": stat.Panel,
        "heatmap": heatmap.Panel,
    }
    p = (
        builders[spec.kind]()
        .title(spec.title)
        .datasource(DATASOURCE)
        .with_target(ClickHouseSql(spec.sql, spec.fmt))
        .height(spec.height)
        .span(spec.width)
    )
    if spec.kind == "heatmap":
        # pre-bucketed rows (one field per run of ranks), not a histogram Grafana computes
        p = (
            p.calculate(False)
            .rows_frame(heatmap.RowsHeatmapOptions().layout(HeatmapCellLayout.UNKNOWN))
            .cell_values(heatmap.CellValues().unit(spec.unit))
            .y_axis(heatmap.YAxisConfig().reverse(True))
            .display_name("${__field.labels.ranks}")
        )
    elif spec.unit:
        p = p.unit(spec.unit)
    for column, link in spec.links.items():
        p = p.override_by_name(column, [DynamicConfigValue(id_val="links", value=[link])])
    if spec.description:
        p = p.description(spec.description)
    return p


def build_dashboard(spec: DashboardSpec) -> dict[str, Any]:
    d = (
        gd.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(["rankscope", "generated"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("utc")
    )
    d = d.with_variable(
        gd.DatasourceVariable("datasource").label("ClickHouse").type(chq.PLUGIN_ID)
    ).with_variable(
        gd.TextBoxVariable("database")
        .label("database")
        .default_value(DEFAULT_DATABASE)
        .current(VariableOption(selected=True, text=DEFAULT_DATABASE, value=DEFAULT_DATABASE))
    )
    queries = _variables()
    for name in spec.variables:
        multi = name in MULTI_VARIABLES
        v = (
            gd.QueryVariable(name)
            .label(name)
            .query(queries[name])
            .datasource(DATASOURCE)
            .multi(multi)
            .include_all(multi)
        )
        d = d.with_variable(v)
    for panel in spec.panels:
        d = d.with_panel(_panel(panel))
    doc: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    return doc


def packaged_dashboards() -> list[Path]:
    """The dashboards' JSON files shipped in the package, sorted by name."""
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def write_dashboards(out: Path) -> list[Path]:
    """Build every dashboard into ``out`` as ``<uid>.json`` (Grafana's file provisioning)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in DASHBOARDS:
        path = out / f"{spec.uid}.json"
        path.write_text(json.dumps(build_dashboard(spec), indent=2, sort_keys=True) + "\n")
        paths.append(path)
    from rankscope.observability.dashboard import write_health_dashboard  # Prometheus, not SQL

    paths.append(write_health_dashboard(out))
    return paths


def panels(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, rawSql) of every panel target of a built dashboard."""
    return [(p["title"], t["rawSql"]) for p in doc.get("panels", []) for t in p.get("targets", [])]


def variable_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """("variable NAME", SQL) of every query variable of a built dashboard (the datasource and
    database variables hold a plugin id and a name, not SQL)."""
    return [
        (f"variable {v['name']}", v["query"])
        for v in doc.get("templating", {}).get("list", [])
        if v["type"] == "query"
    ]
