"""The "rankscope health" Grafana dashboard: the pipeline's own metrics, from Prometheus.

Built with grafana-foundation-sdk like the ClickHouse dashboards in ``rankscope.grafana``, but
kept apart from them: its panels are PromQL over the metrics declared in
``rankscope.observability.metrics`` (a test checks every name used here is declared), and the
Prometheus datasource is a dashboard variable, so it loads in any Grafana that scrapes the
processes. Written to ``dashboards/health/`` beside the others (Grafana's file provisioning
reads subfolders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

__all__ = ["HEALTH_UID", "PANELS", "build_health_dashboard", "write_health_dashboard"]

HEALTH_UID = "rankscope-health"
#: the Prometheus datasource, chosen in the dashboard (no uid tied to one installation)
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Panel:
    title: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = ""
    kind: Literal["timeseries", "stat"] = "timeseries"
    width: int = 12
    description: str = ""


def _quantiles(metric: str, by: str = "") -> tuple[tuple[str, str], ...]:
    labels = f"le{', ' + by if by else ''}"
    legend = f"{{{{{by}}}}} " if by else ""
    return tuple(
        (
            f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket{RATE})))",
            f"{legend}p{int(q * 100)}",
        )
        for q in (0.5, 0.99)
    )


PANELS: tuple[Panel, ...] = (
    Panel(
        "Processes up",
        (("sum by (role) (rankscope_up)", "{{role}}"),),
        kind="stat",
        width=24,
        description="Processes of each role whose /metrics answers.",
    ),
    Panel(
        "Throughput per stage",
        (
            (f"sum by (topic) (rate(rankscope_worker_records_in_total{RATE}))", "raw {{topic}}"),
            (f"sum(rate(rankscope_worker_events_valid_total{RATE}))", "validate: events out"),
            (f"sum(rate(rankscope_worker_window_records_in_total{RATE}))", "windows: records in"),
            (f"sum(rate(rankscope_worker_windows_emitted_total{RATE}))", "windows: emitted"),
            (f"sum(rate(rankscope_sink_records_total{RATE}))", "sink: records in"),
            (f"sum by (table) (rate(rankscope_sink_rows_total{RATE}))", "sink: {{table}}"),
            (f"sum(rate(rankscope_sink_batches_total{RATE}))", "sink: batches"),
            (f"sum by (source) (rate(rankscope_agent_events_total{RATE}))", "agents: {{source}}"),
            (f"sum(rate(rankscope_agent_delivered_total{RATE}))", "agents: delivered"),
        ),
        unit="ops",
    ),
    Panel(
        "Dead letters by reason",
        (
            (f"sum by (reason) (rate(rankscope_worker_dead_letters_total{RATE}))", "{{reason}}"),
            (
                f"sum by (reason) (rate(rankscope_sink_dead_letters_total{RATE}))",
                "sink: {{reason}}",
            ),
        ),
        unit="ops",
    ),
    Panel(
        "Consumer lag per partition",
        (
            (
                "sum by (role, topic, partition) (rankscope_consumer_lag)",
                "{{role}} {{topic}}/{{partition}}",
            ),
        ),
        unit="short",
        description="High watermark minus the consumer's position, per process role.",
    ),
    Panel(
        "Late events and records held",
        (
            (f"sum(rate(rankscope_worker_late_events_total{RATE}))", "late events/s"),
            ("sum(rankscope_worker_records_held)", "records held (not acknowledged)"),
        ),
        unit="short",
    ),
    Panel(
        "Back-pressure",
        (
            (f"sum(increase(rankscope_worker_raw_pauses_total{RATE}))", "raw topic pauses"),
            (
                f"sum(rate(rankscope_worker_events_parsed_again_total{RATE}))",
                "events records parsed again/s",
            ),
            (
                f"sum(rate(rankscope_worker_handoff_not_held_total{RATE}))",
                "records not held (handoff full)/s",
            ),
            ("sum(rankscope_worker_handoff_held_events)", "events held parsed"),
        ),
        unit="short",
        description="Pauses: validation ran ahead of the windows agent (a backlog). Parsed "
        "again: records this worker no longer held parsed (another worker's, a restart, or "
        "not held because the handoff was full).",
    ),
    Panel(
        "Window close delay",
        _quantiles("rankscope_worker_window_close_delay_seconds"),
        unit="s",
        description="Wall clock at emission minus the window's end (event time).",
    ),
    Panel(
        "ClickHouse insert latency",
        _quantiles("rankscope_sink_insert_seconds", "table"),
        unit="s",
    ),
    Panel(
        "Rows per batch",
        _quantiles("rankscope_sink_batch_rows"),
        unit="short",
    ),
    Panel(
        "ClickHouse outages",
        (
            ("max(rankscope_sink_in_outage)", "in outage"),
            (f"sum(increase(rankscope_sink_outages_total{RATE}))", "outages"),
            (f"sum(rate(rankscope_sink_outage_seconds_total{RATE}))", "share of time waiting"),
        ),
    ),
    Panel(
        "Redaction",
        (
            (f"sum(rate(rankscope_worker_quarantined_total{RATE}))", "quarantined"),
            (
                f"sum by (entity, action) (rate(rankscope_worker_redaction_findings_total{RATE}))",
                "{{entity}} {{action}}",
            ),
        ),
        unit="ops",
    ),
    Panel(
        "Detections and recovery",
        (
            (f"sum by (type) (increase(rankscope_worker_detections_total{RATE}))", "{{type}}"),
            (f"sum(increase(rankscope_worker_incidents_total{RATE}))", "incidents"),
            (
                f"sum by (stage, action) (increase(rankscope_worker_recovery_events_total{RATE}))",
                "decider: {{stage}} {{action}}",
            ),
            (
                f"sum by (outcome) (increase(rankscope_runner_decisions_total{RATE}))",
                "runner: {{outcome}}",
            ),
        ),
        unit="short",
    ),
    Panel(
        "Agents: spool and delivery failures",
        (
            ("sum(rankscope_agent_spool_events)", "events in spools"),
            ("sum(rankscope_agent_spool_bytes)", "spool bytes"),
            (f"sum(rate(rankscope_agent_collector_errors_total{RATE}))", "collector errors/s"),
            (f"sum(rate(rankscope_agent_delivery_failures_total{RATE}))", "failed batches/s"),
            (f"sum(rate(rankscope_agent_dropped_total{RATE}))", "dropped/s"),
        ),
        unit="short",
    ),
)


def _panel(spec: Panel) -> Any:
    builder = stat.Panel() if spec.kind == "stat" else timeseries.Panel()
    p = builder.title(spec.title).datasource(DATASOURCE).height(8).span(spec.width)
    for i, (expr, legend) in enumerate(spec.targets):
        p = p.with_target(
            prometheus.Dataquery()
            .ref_id(chr(ord("A") + i))
            .datasource(DATASOURCE)
            .expr(expr)
            .legend_format(legend)
        )
    if spec.unit:
        p = p.unit(spec.unit)
    if spec.description:
        p = p.description(spec.description)
    return p


def build_health_dashboard() -> dict[str, Any]:
    d = (
        gd.Dashboard("rankscope health")
        .uid(HEALTH_UID)
        .description("The pipeline's own metrics: throughput, dead letters, lag, latencies.")
        .tags(["rankscope", "generated", "self-monitoring"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("utc")
        .with_variable(gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    for panel in PANELS:
        d = d.with_panel(_panel(panel))
    doc: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    return doc


def write_health_dashboard(out: Path) -> Path:
    """``out/health/rankscope-health.json``: a subfolder, apart from the ClickHouse ones."""
    path = out / "health" / f"{HEALTH_UID}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build_health_dashboard(), indent=2, sort_keys=True) + "\n")
    return path
