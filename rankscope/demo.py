"""``rankscope demo``: a simulated multi-rank job through the real pipeline, then a summary.

Services -> topics -> migrations -> stream worker + sink processes -> simulator publishes ->
wait until both consumer groups have committed everything -> summary from ClickHouse SQL.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from clickhouse_connect.driver.client import Client
from confluent_kafka import Producer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rankscope.collectors.publisher import Publisher
from rankscope.incident_report import write_incident_report
from rankscope.kafka_security import kafka_config
from rankscope.pipeline import Pipeline
from rankscope.plots import heatmap_png, timeline_png
from rankscope.schemas.envelope import kind_of
from rankscope.schemas.events import Event
from rankscope.settings import Settings
from rankscope.simulation.faults import FaultLabel, parse_faults, simulate_with_faults
from rankscope.simulation.simulator import SimulationConfig, pace, simulate
from rankscope.sinks.clickhouse import storage_tables
from rankscope.stack import local_stack


@dataclass(frozen=True)
class DemoOptions:
    ranks: int = 16
    duration_s: float = 120.0
    seed: int = 7
    speed: float = 0.0
    keep_services: bool = False
    inject_bad_records: bool = True
    drain_timeout_s: float = 300.0
    #: a fault-catalogue scenario to inject (rankscope.simulation.faults.SCENARIOS), or "none"
    fault: str = "gpu_fell_off_bus"
    #: stream worker processes
    workers: int = 1


#: Records a buggy collector might send; the validate stage must dead-letter each with a reason.
BAD_RECORDS: list[tuple[str, bytes]] = [
    ("not JSON", b"GPU0 util=97% temp=71C"),
    ("unknown schema", json.dumps({"schema": "gpu_sample/9", "kind": "gpu_sample"}).encode()),
    (
        "missing required fields",
        json.dumps({"schema": "heartbeat/1", "kind": "heartbeat", "cluster": "sim"}).encode(),
    ),
]


#: Fake secrets the demo plants in its job's telemetry, the way real jobs leak them; the
#: redaction stage must remove each before any table or derived topic (the summary checks).
DEMO_SECRETS = {
    "hf_token": "hf_DemoOnlyNotARealTokenQwErTyUiOp12",
    # random-looking: "0123456789abcdef..." reads as a placeholder and is left alone (issue 16)
    "wandb_key": "7f3a9c2e1b8d4f6a0c5e9b2d7a1f4c8e3b6d9a20",
    "db_password": "Demo-Passw0rd!",
    "user": "alice",
    "email": "alice.demo@example.com",
    "aws_key": "AKIADEMO0NOTAREALKEY",
}


def _leaky_events(events: list[Event]) -> list[Event]:
    """Agent errors echoing a launcher command line, a traceback with a home path and a DSN,
    and an HTTP error with a signed URL (agent events: the root-cause analysis ignores them, so
    the demo's incident stays the injected fault)."""
    from rankscope.schemas.events import AgentEventEvent
    from rankscope.schemas.payloads import AgentEvent

    first = next((e for e in events if e.rank is not None), None)
    if first is None:
        return []
    s = DEMO_SECRETS
    messages = {
        "launcher": (
            f"srun env HF_TOKEN={s['hf_token']} WANDB_API_KEY={s['wandb_key']} torchrun "
            f"--nnodes 2 /home/{s['user']}/llm/train.py exited 1; owner {s['email']}"
        ),
        "metrics_exporter": (
            f'Traceback (most recent call last):\n  File "/home/{s["user"]}/llm/metrics.py", '
            f"line 88\npsycopg2.OperationalError: connection to postgresql://trainer:"
            f"{s['db_password']}@metrics-db:5432/runs failed"
        ),
        "checkpoint_uploader": (
            "HTTPError: 403 Forbidden for url: https://ckpt.s3.amazonaws.com/step_100.pt?"
            f"X-Amz-Credential={s['aws_key']}%2F20261203%2Fus-east-1&X-Amz-Signature="
            "4f1c0ffee0ddba11cafe4f1c0ffee0ddba11cafe4f1c0ffee0ddba11cafe4f1c"
        ),
    }
    return [
        AgentEventEvent(
            event_id=f"{first.job_id[:40]}-leak-{i}",
            schema_id="agent_event/1",
            kind="agent_event",
            cluster=first.cluster,
            job_id=first.job_id,
            node=first.node,
            ts=first.ts + i,
            observed_ts=first.observed_ts + i,
            payload=AgentEvent(event_type="collector_error", collector=name, message=text),
        )
        for i, (name, text) in enumerate(messages.items())
    ]


def run_demo(settings: Settings, opts: DemoOptions, console: Console) -> int:
    settings.home.mkdir(parents=True, exist_ok=True)
    sim = SimulationConfig(ranks=opts.ranks, duration_s=opts.duration_s, seed=opts.seed)
    job_id = f"{sim.job_id}-s{opts.seed}-{int(time.time())}"
    sim = sim.model_copy(update={"job_id": job_id})
    t0 = time.monotonic()
    with local_stack(settings, console.print, keep_services=opts.keep_services) as stack:
        bootstrap, client = stack.bootstrap, stack.client
        console.print(f"[bold]kafka[/] {bootstrap}   [bold]clickhouse[/] {stack.clickhouse_url}")
        events, labels = _events(sim, opts)
        events += _leaky_events(events)
        with stack.pipeline(opts.workers) as pipeline:
            produced = _publish(settings, bootstrap, sim, opts, console, events)
            bad = _inject_bad(settings, bootstrap, job_id) if opts.inject_bad_records else 0
            _wait(pipeline, opts, console)
        report = _summary(client, settings.database, job_id, produced, bad, console)
        report += _redaction(client, settings.database, job_id, console)
        report += _recovery(client, settings.database, job_id, console)
        report += _findings(client, settings.database, job_id, labels, console)
        path = settings.home / "reports" / f"{job_id}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report)
        failed = demo_checks(
            client,
            settings.database,
            job_id,
            produced,
            bad,
            expect_incident=any(label.outcome != "none" for label in labels),
        )
        page = write_incident_report(client, settings.database, job_id, path.parent)
        pictures = [
            p
            for p in (
                heatmap_png(client, settings.database, job_id, path.with_suffix(".heatmap.png")),
                timeline_png(client, settings.database, job_id, path.with_suffix(".timeline.png")),
            )
            if p is not None
        ]
        console.print(
            f"\nreport written to [bold]{path}[/]; incident report for a reviewer: "
            f"[bold]{page}[/]; pictures: {', '.join(str(p) for p in pictures) or 'none'}   "
            f"({time.monotonic() - t0:.1f}s in all)"
        )
    for failure in failed:
        console.print(f"[red]demo check failed:[/] {failure}")
    return 1 if failed else 0


def demo_checks(
    client: Client,
    database: str,
    job_id: str,
    produced: Counter[str],
    bad: int,
    expect_incident: bool,
) -> list[str]:
    """What the demo promises, checked on what was stored (empty: all held): every kind it
    published reached its table, every malformed record became a dead letter, and an injected
    fault became an incident. ``rankscope demo`` exits 1 when one fails."""
    from rankscope.sinks.rows import EVENT_TABLES

    tables = {kind_of(m): spec.table for m, spec in EVENT_TABLES.items()}
    failed: list[str] = []
    for kind, n in sorted(produced.items()):
        if not n or kind not in tables:
            continue
        stored = client.query(
            f"SELECT count() FROM {database}.{tables[kind]} FINAL WHERE job_id = %(j)s",
            parameters={"j": job_id},
        ).result_rows[0][0]
        if not stored:
            failed.append(f"none of the {n:,} {kind} events reached {database}.{tables[kind]}")
    letters = client.query(
        f"SELECT count() FROM {database}.deadletter FINAL "
        "WHERE job_id = %(j)s OR (job_id = '' AND source_topic LIKE '%%.raw.%%')",
        parameters={"j": job_id},
    ).result_rows[0][0]
    if letters < bad:
        failed.append(f"{bad} malformed records injected, {letters} dead letter(s) stored")
    incidents = client.query(
        f"SELECT count() FROM {database}.incidents FINAL WHERE job_id = %(j)s",
        parameters={"j": job_id},
    ).result_rows[0][0]
    if expect_incident and not incidents:
        failed.append("a fault was injected but no incident was found")
    return failed


def _events(sim: SimulationConfig, opts: DemoOptions) -> tuple[list[Event], list[FaultLabel]]:
    if opts.fault == "none":
        return list(simulate(sim)), []
    fault = parse_faults([{"scenario": opts.fault}])
    sim = sim.model_copy(update={"inventory": True, "fabric_interval_s": 2.0})
    events, labels = simulate_with_faults(sim, fault)
    return list(events), labels


def _publish(
    settings: Settings,
    bootstrap: str,
    sim: SimulationConfig,
    opts: DemoOptions,
    console: Console,
    events: list[Event],
) -> Counter[str]:
    counts: Counter[str] = Counter(e.kind for e in events)
    config = settings.publisher(bootstrap).model_copy(update={"max_batch_event_span_s": 1.0})
    with (
        Publisher(config) as pub,
        Progress(
            TextColumn("[bold]publishing[/] {task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,} events"),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        pub.check_connection()
        task = progress.add_task(f"{sim.ranks} ranks x {sim.duration_s:g}s", total=len(events))
        chunk: list[Event] = []
        for ev in pace(events, opts.speed):
            chunk.append(ev)
            if len(chunk) >= 2000:
                pub.publish(chunk)
                progress.advance(task, len(chunk))
                chunk = []
        pub.publish(chunk)
        progress.advance(task, len(chunk))
        pub.flush(60)
    return counts


def _inject_bad(settings: Settings, bootstrap: str, job_id: str) -> int:
    """Send malformed records with a bare producer, as a broken collector would."""
    topic = settings.topics.raw
    p = Producer(kafka_config(bootstrap))
    for _, value in BAD_RECORDS:
        p.produce(topic, key=job_id.encode(), value=value)
    p.flush(30)
    return len(BAD_RECORDS)


def _wait(pipeline: Pipeline, opts: DemoOptions, console: Console) -> None:
    with console.status("processing: waiting for the stream worker and the sink to drain") as st:

        def show(worker_lag: int, sink_lag: int) -> None:
            st.update(f"processing: worker lag {worker_lag:,} records, sink lag {sink_lag:,}")

        pipeline.wait_drained(opts.drain_timeout_s, on_poll=show)


def _summary(
    client: Client, database: str, job_id: str, produced: Counter[str], bad: int, console: Console
) -> str:
    db = database
    from rankscope.sinks.rows import EVENT_TABLES

    tables = {kind_of(m): spec.table for m, spec in EVENT_TABLES.items()}
    md: list[str] = [f"# rankscope demo: job `{job_id}`", ""]

    t = Table(title=f"events of job {job_id}")
    for c in ("kind", "produced", "stored (distinct)", "table"):
        t.add_column(c, justify="right" if c != "kind" else "left")
    md += ["| kind | produced | stored | table |", "|---|---:|---:|---|"]
    total_stored = 0
    for kind, table in tables.items():
        if not produced.get(kind):
            continue
        stored = client.query(
            f"SELECT count() FROM {db}.{table} FINAL WHERE job_id = %(j)s", parameters={"j": job_id}
        ).result_rows[0][0]
        total_stored += stored
        t.add_row(kind, f"{produced.get(kind, 0):,}", f"{stored:,}", f"{db}.{table}")
        md.append(f"| {kind} | {produced.get(kind, 0):,} | {stored:,} | `{db}.{table}` |")
    total = sum(produced.values())
    t.add_row("[bold]total", f"[bold]{total:,}", f"[bold]{total_stored:,}", "")
    console.print(t)
    md.append(f"| **total** | **{total:,}** | **{total_stored:,}** | |")

    dl = client.query(
        f"SELECT reason_code, count(), any(reason) FROM {db}.deadletter FINAL "
        "WHERE job_id = %(j)s OR (job_id = '' AND source_topic LIKE '%%.raw.%%') "
        "GROUP BY reason_code ORDER BY reason_code",
        parameters={"j": job_id},
    ).result_rows
    d = Table(title=f"dead letters ({bad} malformed records injected)")
    for c in ("reason", "count", "example"):
        d.add_column(c)
    md += ["", f"## Dead letters ({bad} malformed records injected)", ""]
    for code, n, reason in dl:
        d.add_row(code, str(n), reason)
        md.append(f"- **{code}** x{n}: {reason}")
    console.print(d)
    late = client.query(
        f"SELECT count() FROM {db}.late_events FINAL WHERE job_id = %(j)s", parameters={"j": job_id}
    ).result_rows[0][0]
    console.print(f"late events (arrived after their window closed): {late}")
    md.append(f"\nLate events (arrived after their window closed): {late}")

    w = client.query(
        f"SELECT rank, any(node), count(), sum(step_count), round(avg(step_time_mean_s), 3), "
        f"round(avg(gpu_util_mean_pct), 1) FROM {db}.rank_windows FINAL WHERE job_id = %(j)s "
        "GROUP BY rank ORDER BY rank",
        parameters={"j": job_id},
    ).result_rows
    wt = Table(title="event-time windows per rank (5 s tumbling)")
    for c in ("rank", "node", "windows", "steps", "mean step s", "mean GPU util %"):
        wt.add_column(c, justify="right")
    md += [
        "",
        "## Windows per rank",
        "",
        "| rank | node | windows | steps | mean step s | GPU util % |",
    ]
    md.append("|---:|---|---:|---:|---:|---:|")
    for r in w:
        wt.add_row(*(str(x) for x in r))
        md.append("| " + " | ".join(str(x) for x in r) + " |")
    console.print(wt)

    hints = [
        f'rankscope query "SELECT rank, avg(duration_s) FROM {db}.spans FINAL '
        f"WHERE job_id='{job_id}' AND phase='collective' GROUP BY rank ORDER BY rank\"",
        f'rankscope query "SELECT reason_code, reason FROM {db}.deadletter FINAL"',
        f"rankscope query \"SELECT * FROM {db}.rank_windows FINAL WHERE job_id='{job_id}' "
        'ORDER BY window_start_ns, rank LIMIT 20"',
    ]
    console.print("\n[bold]Look further with SQL:[/]")
    for h in hints:
        console.print(f"  {h}", soft_wrap=True)
    md += ["", "## Look further with SQL", "", *[f"    {h}" for h in hints], ""]
    return "\n".join(md)


def _redaction(client: Client, database: str, job_id: str, console: Console) -> str:
    """What the redaction stage removed from this job's telemetry, and proof that the planted
    secrets are nowhere in ClickHouse."""
    from rankscope.sinks.named_queries import run_query

    rows = [
        (r["kind"], r["field"], r["entity"], r["action"], r["findings"])
        for r in run_query(client, "redaction_audit", database, {"job_id": job_id}).named_results()
    ]
    t = Table(title="redaction (counts from redaction_audit; values are never stored)")
    for c in ("kind", "field", "entity", "action", "findings"):
        t.add_column(c, justify="right" if c == "findings" else "left")
    md = [
        "",
        "## Redaction",
        "",
        "| kind | field | entity | action | findings |",
        "|---|---|---|---|---:|",
    ]
    for kind, field, entity, action, n in rows:
        t.add_row(kind, field, entity or "-", action, str(n))
        md.append(f"| {kind} | {field} | {entity or '-'} | {action} | {n} |")
    console.print(t)
    tables = storage_tables(client, database)
    secrets = list(DEMO_SECRETS.values())
    secrets.remove(DEMO_SECRETS["user"])  # a common word; the hash proves it is gone
    found = sum(
        int(
            client.query(
                f"SELECT count() FROM {database}.{table} WHERE "
                "multiSearchAny(formatRow('TSVRaw', *), %(s)s)",
                parameters={"s": secrets},
            ).result_rows[0][0]
        )
        for table in tables
    )
    line = (
        f"planted secrets readable in any of {len(tables)} tables: {found} "
        f"(rankscope redaction audit --job {job_id})"
    )
    console.print(f"[bold]{line}[/]")
    md.append(f"\n{line}")
    return "\n".join(md) + "\n"


def _recovery(client: Client, database: str, job_id: str, console: Console) -> str:
    """What automated recovery decided and the (dry-run) actuator did for this job."""
    from rankscope.sinks.named_queries import run_query

    rows = list(run_query(client, "recovery_history", database, {"job_id": job_id}).named_results())
    t = Table(title="automated recovery (policy mode: dry run)")
    for c in ("time (UTC)", "action", "stage", "where", "why"):
        t.add_column(c)
    md = ["", "## Automated recovery", ""]
    for r in reversed(rows):  # oldest first reads as a story
        where = r["node"] + (f" rank {r['rank']}" if r["rank"] >= 0 else "")
        t.add_row(f"{r['ts']:%H:%M:%S}", r["action"], r["stage"], where, r["reason"][:110])
        md.append(f"- {r['ts']:%H:%M:%S} **{r['action']}** {r['stage']} ({where}): {r['reason']}")
    console.print(t)
    return "\n".join(md) + "\n"


def _findings(
    client: Client, database: str, job_id: str, labels: list[FaultLabel], console: Console
) -> str:
    """What the detectors found, the incident timeline, and the injected truth to compare."""
    from rankscope.report import print_incidents

    md = ["", "## Findings", ""]
    dets = client.query(
        f"SELECT detection_type, straggler_class, node, rank, summary FROM {database}.detections "
        "FINAL WHERE job_id = %(j)s ORDER BY detected_ts_ns",
        parameters={"j": job_id},
    ).result_rows
    t = Table(title="detections")
    for c in ("type", "class", "node", "rank", "summary"):
        t.add_column(c)
    for kind, cls, node, rank, summary in dets:
        t.add_row(kind, cls, node, "" if rank < 0 else str(rank), summary)
        md.append(f"- **{kind}** {cls} {node} rank {rank}: {summary}")
    console.print(t)
    console.rule("incident report")
    n = print_incidents(client, database, console, job_id=job_id)
    for row in client.query(
        f"SELECT cause_class, node, rank, confidence, summary FROM {database}.incidents FINAL "
        "WHERE job_id = %(j)s",
        parameters={"j": job_id},
    ).result_rows:
        md.append(f"- **incident** {row[0]} on {row[1]} rank {row[2]} ({row[3]:.2f}): {row[4]}")
    for label in labels:
        truth = (
            f"injected: {label.scenario} -> expected {label.outcome} "
            f"{label.cause_class or ''} on {label.node or '-'}"
            + (f" rank {label.rank}" if label.rank is not None else "")
            + (f" GPU {label.gpu}" if label.gpu is not None else "")
        )
        console.print(f"[bold]{truth}[/]   ({n} incident(s), {len(dets)} detection(s))")
        md.append(f"\n{truth}")
    return "\n".join(md) + "\n"


__all__ = ["BAD_RECORDS", "DEMO_SECRETS", "DemoOptions", "Path", "run_demo"]
