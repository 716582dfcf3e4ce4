"""``rankscope recovery``: what automated recovery did, pause/resume it, and run the actuators."""

from __future__ import annotations

import json
import signal
import time
from types import FrameType
from typing import Annotated

import typer
from rich.table import Table

from rankscope.cli.options import (
    DEFAULT_HOME,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    PrefixOpt,
    RequiredBootstrapOpt,
    console,
    local_clickhouse_url,
)

recovery_app = typer.Typer(
    help="Automated recovery: history, status, pause/resume, and the actuator runner.",
    no_args_is_help=True,
)


@recovery_app.command()
def history(
    job: Annotated[str | None, typer.Option(help="Only this job.")] = None,
    hours: Annotated[int, typer.Option(help="Look back this many hours.")] = 24,
    clickhouse_url: ClickHouseOpt = None,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = "rankscope",
) -> None:
    """Every recovery decision, suppression and outcome, newest first (from ClickHouse)."""
    from rankscope.sinks.clickhouse import connect
    from rankscope.sinks.named_queries import run_query

    client = connect(clickhouse_url or local_clickhouse_url(home))
    values = {"job_id": job or "", "hours": str(hours)}
    rows = list(run_query(client, "recovery_history", database, values).named_results())
    table = Table("time (UTC)", "job", "action", "stage", "try", "where", "why", title="recovery")
    for r in rows:
        where = r["node"] + (f" rank {r['rank']}" if r["rank"] >= 0 else "")
        table.add_row(
            f"{r['ts']:%m-%d %H:%M:%S}",
            r["job_id"] or "(fleet)",
            r["action"],
            r["stage"],
            str(r["attempt"]),
            where,
            r["reason"][:120],
        )
    console.print(table)
    console.print(f"{len(rows)} record(s)")


def _control(bootstrap: str, prefix: str, paused: bool, reason: str) -> None:
    import getpass

    from confluent_kafka import Producer

    from rankscope.kafka_security import check_access, kafka_config
    from rankscope.schemas.derived import RecoveryControl, RecoveryInput
    from rankscope.schemas.topics import Topics

    command = RecoveryControl(paused=paused, by=getpass.getuser(), reason=reason, ts=time.time_ns())
    topics = Topics(prefix)
    check_access(bootstrap)  # a refused login: one line, not a 30 s wait for the flush
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True}))
    # the compacted topic keeps the latest command for good (status, a decider rebuilding);
    # the decider's input carries it in order with the findings it applies to
    producer.produce(topics.recovery_control, key=b"pause", value=command.model_dump_json())
    producer.produce(
        topics.recovery_input, key=b"pause", value=RecoveryInput(control=command).model_dump_json()
    )
    if producer.flush(30) != 0:
        raise typer.Exit(1)


@recovery_app.command()
def pause(
    bootstrap: RequiredBootstrapOpt,
    reason: Annotated[str, typer.Option(help="Why (recorded with the command).")] = "",
    prefix: PrefixOpt = "rankscope",
) -> None:
    """Stop automated actions: the decider records matches as suppressed until resumed."""
    _control(bootstrap, prefix, True, reason)
    console.print("recovery paused (the decider reads it from <prefix>.recovery_input)")


@recovery_app.command()
def resume(
    bootstrap: RequiredBootstrapOpt,
    reason: Annotated[str, typer.Option(help="Why (recorded with the command).")] = "",
    prefix: PrefixOpt = "rankscope",
) -> None:
    """Let the decider act again."""
    _control(bootstrap, prefix, False, reason)
    console.print("recovery resumed")


@recovery_app.command()
def status(
    bootstrap: RequiredBootstrapOpt,
    prefix: PrefixOpt = "rankscope",
) -> None:
    """Paused or not (the latest control command), and the actions on the topic by stage."""
    from collections import Counter

    from rankscope.kafka_admin import read_topic
    from rankscope.kafka_security import check_access
    from rankscope.schemas.derived import RecoveryControl, RecoveryEvent
    from rankscope.schemas.topics import Topics

    check_access(bootstrap)  # a refused login: one line, not a traceback
    topics = Topics(prefix)
    control = [
        RecoveryControl.model_validate_json(v)
        for v in read_topic(bootstrap, topics.recovery_control)
    ]
    events = [RecoveryEvent.model_validate_json(v) for v in read_topic(bootstrap, topics.recovery)]
    latest = control[-1] if control else None
    state = "paused" if latest and latest.paused else "active"
    by = f" (by {latest.by}: {latest.reason})" if latest and latest.by else ""
    console.print(f"recovery is [bold]{state}[/]{by}")
    last_stage: dict[str, str] = {}
    for e in events:
        last_stage[e.key] = e.stage
    counts = Counter(last_stage.values())
    table = Table("latest stage", "actions")
    for stage_name, n in sorted(counts.items()):
        table.add_row(stage_name, str(n))
    console.print(table)


def _log_line(record: dict[str, object]) -> None:
    """One JSON object per line (not wrapped like rich's console output), for log shippers."""
    print(json.dumps(record), flush=True)


@recovery_app.command()
def run(
    bootstrap: RequiredBootstrapOpt,
    prefix: PrefixOpt = "rankscope",
    home: HomeOpt = DEFAULT_HOME,
    actuator: Annotated[
        str, typer.Option(help="dry-run, webhook, slurm or kubernetes")
    ] = "dry-run",
    webhook_url: Annotated[
        str | None,
        typer.Option(help="Webhook for --actuator webhook, and for escalations with the others."),
    ] = None,
    namespace: Annotated[str, typer.Option(help="Kubernetes namespace of the jobs.")] = "default",
) -> None:
    """Run recovery decisions through an actuator, each key at most once (ledger in HOME)."""
    from confluent_kafka import Consumer, KafkaError, Producer

    from rankscope.kafka_security import check_access, kafka_config
    from rankscope.schemas.derived import RecoveryEvent
    from rankscope.schemas.topics import Topics
    from rankscope.sinks.actuators.base import Actuator, ActuatorRunner, Ledger
    from rankscope.sinks.actuators.cluster import (
        KubernetesActuator,
        KubernetesConfig,
        RoutingActuator,
        SlurmActuator,
    )
    from rankscope.sinks.actuators.dryrun import DryRunActuator
    from rankscope.sinks.actuators.webhook import WebhookActuator, WebhookConfig

    act: Actuator
    pager: Actuator = (
        WebhookActuator(WebhookConfig(url=webhook_url)) if webhook_url else DryRunActuator()
    )
    if actuator == "webhook":
        if not webhook_url:
            raise typer.BadParameter("--actuator webhook needs --webhook-url")
        act = pager
    elif actuator == "dry-run":
        act = DryRunActuator()
    elif actuator == "slurm":
        act = RoutingActuator({"escalate": pager}, default=SlurmActuator())
    elif actuator == "kubernetes":
        k8s = KubernetesActuator(KubernetesConfig(namespace=namespace))
        act = RoutingActuator({"escalate": pager, "dump_stacks": pager}, default=k8s)
    else:
        raise typer.BadParameter("dry-run, webhook, slurm or kubernetes", param_hint="--actuator")
    runner = ActuatorRunner(act, Ledger(home / "recovery-ledger.db"))
    topic = Topics(prefix).recovery
    check_access(bootstrap)  # a refused login: one line and an exit, not endless retries
    consumer = Consumer(
        {
            **kafka_config(bootstrap),
            "group.id": f"{prefix}-actuators",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # a runner that died hands its decisions to a standby within 10 s (librdkafka
            # heartbeats from its own thread, so a slow actuator call does not miss them)
            "session.timeout.ms": 10_000,
        }
    )
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True}))
    consumer.subscribe([topic])
    stop = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    waiting: list[RecoveryEvent] = []  # decisions still in their backoff
    announced: set[str] = set()  # keys whose wait was logged
    try:
        while not stop:
            msgs = consumer.consume(100, timeout=0.5)
            batch = list(waiting)
            waiting.clear()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        console.print(f"consumer error: {err}")
                    continue
                try:
                    batch.append(RecoveryEvent.model_validate_json(msg.value() or b""))
                except ValueError:
                    continue
            for decision in batch:
                if decision.stage != "decided":
                    continue
                outcome = runner.run(decision)
                if outcome is None:
                    if decision.not_before_ts > time.time_ns():
                        waiting.append(decision)
                        if decision.key not in announced:
                            announced.add(decision.key)
                            wait_s = (decision.not_before_ts - time.time_ns()) / 1e9
                            _log_line({"key": decision.key, "stage": "waiting", "wait_s": wait_s})
                    continue
                producer.produce(
                    topic, key=outcome.job_id.encode(), value=outcome.model_dump_json()
                )
                _log_line(
                    {"key": outcome.key, "stage": outcome.stage, "reason": outcome.reason[:200]}
                )
            producer.flush(30)
            # a decision waiting for its backoff must be read again after a restart, so offsets
            # are committed only when none waits (the ledger drops what already ran)
            if msgs and not waiting:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
