"""``rankscope topics create|check``: the pipeline's topics as the table in
``rankscope.schemas.topics`` says, created idempotently, and drift on a running cluster reported.

Compose runs ``topics create`` before any other service touches Kafka; operators run
``topics check`` in their own monitoring (non-zero exit on drift)."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from rankscope.cli.options import DEFAULT_PREFIX, PrefixOpt, console, env_name, err

if TYPE_CHECKING:
    from rankscope.kafka_topics import Drift
    from rankscope.schemas.topics import TopicSpec

topics_app = typer.Typer(
    help="Create the pipeline's topics from one table, or check a cluster against it.",
    no_args_is_help=True,
)


class Format(StrEnum):
    table = "table"
    json = "json"


TopicsBootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        envvar=env_name("bootstrap"),
        help="Kafka bootstrap servers (RANKSCOPE_KAFKA_* for TLS/SASL, as the admin).",
    ),
]
PartitionsOpt = Annotated[
    int,
    typer.Option(
        envvar=env_name("partitions"),
        min=1,
        help="Partitions of the keyed topics (the recovery decider's two always have 1).",
    ),
]
ReplicationOpt = Annotated[
    int | None,
    typer.Option(
        "--replication-factor",
        envvar="RANKSCOPE_REPLICATION_FACTOR",
        min=1,
        help="Replicas per partition (default: the cluster's default.replication.factor); "
        "3 or more also sets min.insync.replicas=2.",
    ),
]
RawRetentionOpt = Annotated[
    int | None,
    typer.Option(
        "--raw-retention-ms",
        envvar="RANKSCOPE_RAW_RETENTION_MS",
        min=-1,
        help="retention.ms of the raw topics, which hold unredacted text (default: 7 days).",
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", help="table or json.")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=1, help="Seconds to wait for each cluster answer.")
]


def _specs(
    prefix: str, partitions: int, replication_factor: int | None, raw_retention_ms: int | None
) -> list[TopicSpec]:
    """The table for this deployment; the OTLP topics from RANKSCOPE_OTLP_*_TOPICS as the
    worker reads them."""
    from rankscope.schemas.topics import RAW_RETENTION_MS, topic_specs
    from rankscope.settings import Settings

    topics = Settings(topic_prefix=prefix).topics
    retention = RAW_RETENTION_MS if raw_retention_ms is None else raw_retention_ms
    return topic_specs(topics, partitions, replication_factor, retention)


def _need_bootstrap(bootstrap: str | None, timeout_s: float) -> str:
    if not bootstrap:
        raise typer.BadParameter(
            "a cluster is needed (or RANKSCOPE_BOOTSTRAP)", param_hint="--bootstrap"
        )
    from rankscope.kafka_security import check_access

    check_access(bootstrap, timeout_s=timeout_s)  # unreachable or refused: one line, exit 3
    return bootstrap


def _fail(exc: Exception) -> typer.Exit:
    err.print(f"rankscope: {exc}", markup=False, highlight=False)
    return typer.Exit(3)


def _print_specs(specs: list[TopicSpec], status: dict[str, str], fmt: Format) -> None:
    if fmt is Format.json:
        rows = [{**s.model_dump(), "status": status.get(s.name)} for s in specs]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(show_lines=False)
    for col in ("topic", "parts", "rf", "cleanup", "retention.ms", "timestamp"):
        table.add_column(col, no_wrap=True)
    for col in ("status", "why"):
        table.add_column(col, overflow="fold")
    for s in specs:
        table.add_row(
            s.name,
            str(s.partitions),
            "default" if s.replication_factor is None else str(s.replication_factor),
            s.cleanup_policy,
            "default" if s.retention_ms is None else str(s.retention_ms),
            s.timestamp_type,
            status.get(s.name, ""),
            s.why,
        )
    console.print(table)


def _print_drift(drifts: list[Drift], fmt: Format, checked: int) -> None:
    if fmt is Format.json:
        doc = {"topics": checked, "drift": [d.model_dump() for d in drifts]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if not drifts:
        console.print(f"no drift: {checked} topics as the table says")
        return
    table = Table(title=f"{len(drifts)} drift(s) over {checked} topics")
    for col in ("topic", "field", "expected", "actual", "fixable"):
        table.add_column(col, overflow="fold")
    for d in drifts:
        table.add_row(
            d.topic, d.field, str(d.expected), str(d.actual), "yes" if d.fixable else "no"
        )
    console.print(table)


@topics_app.command()
def create(
    bootstrap: TopicsBootstrapOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    partitions: PartitionsOpt = 4,
    replication_factor: ReplicationOpt = None,
    raw_retention_ms: RawRetentionOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the table; contact no cluster.")
    ] = False,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Also apply drift of existing topics: configs, and partitions increased "
            "(never decreased; replication is never changed).",
        ),
    ] = False,
    fmt: FormatOpt = Format.table,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create every topic of the deployment that is missing (safe to run twice). Existing
    topics are left alone and their drift reported; --fix applies what can be applied."""
    from rankscope.kafka_topics import TopicAdminError, check_topics, create_topics, fix_drift

    specs = _specs(prefix, partitions, replication_factor, raw_retention_ms)
    if dry_run:
        _print_specs(specs, {}, fmt)
        return
    cluster = _need_bootstrap(bootstrap, timeout)
    try:
        report = create_topics(cluster, specs, timeout)
        drifts = check_topics(cluster, specs, timeout)
        applied = fix_drift(cluster, specs, drifts, timeout) if fix else []
    except TopicAdminError as exc:
        raise _fail(exc) from None
    status = dict.fromkeys(report.created, "created") | dict.fromkeys(report.existing, "exists")
    for d in drifts:
        fixed = d in applied
        status[d.topic] = f"{status.get(d.topic, '')}; {d.field} {'fixed' if fixed else 'drift'}"
    _print_specs(specs, status, fmt)
    left = [d for d in drifts if d not in applied]
    if left and fmt is Format.table:
        err.print(
            f"{len(left)} difference(s) left on existing topics: see `rankscope topics check`"
            + ("" if fix else "; --fix applies the fixable ones"),
            markup=False,
        )


@topics_app.command()
def check(
    bootstrap: TopicsBootstrapOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    partitions: PartitionsOpt = 4,
    replication_factor: ReplicationOpt = None,
    raw_retention_ms: RawRetentionOpt = None,
    fmt: FormatOpt = Format.table,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Compare the running cluster with the table: missing topics, partition counts,
    replication and each managed config (exit 1 on any drift)."""
    from rankscope.kafka_topics import TopicAdminError, check_topics

    specs = _specs(prefix, partitions, replication_factor, raw_retention_ms)
    cluster = _need_bootstrap(bootstrap, timeout)
    try:
        drifts = check_topics(cluster, specs, timeout)
    except TopicAdminError as exc:
        raise _fail(exc) from None
    _print_drift(drifts, fmt, len(specs))
    if drifts:
        raise typer.Exit(1)
