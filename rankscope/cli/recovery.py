"""``rankscope recovery``: what automated recovery did, pause/resume it, and run the actuators."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.table import Table

from rankscope.cli.options import (
    DEFAULT_DATABASE,
    DEFAULT_HOME,
    DEFAULT_PREFIX,
    METRICS_PORTS,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    FormatOpt,
    HomeOpt,
    MetricsPortOpt,
    OutputFormat,
    PrefixOpt,
    console,
    local_bootstrap,
    local_clickhouse_url,
    port_or_off,
    render,
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
    database: DatabaseOpt = DEFAULT_DATABASE,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Every recovery decision, suppression and outcome, newest first (from ClickHouse)."""
    from rankscope.sinks.clickhouse import connect
    from rankscope.sinks.named_queries import run_query

    client = connect(clickhouse_url or local_clickhouse_url(home))
    values = {"job_id": job or "", "hours": str(hours)}
    rows = list(run_query(client, "recovery_history", database, values).named_results())
    if fmt is not OutputFormat.table:
        columns = list(rows[0]) if rows else []
        render(columns, [list(r.values()) for r in rows], fmt)
        return
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


def _control(bootstrap: str | None, prefix: str, paused: bool, reason: str, home: Path) -> None:
    import getpass

    from confluent_kafka import Producer

    from rankscope.kafka_security import check_access, kafka_config
    from rankscope.schemas.derived import RecoveryControl, RecoveryInput
    from rankscope.schemas.topics import Topics
    from rankscope.streams.recovery.signing import load_keyring

    bootstrap = bootstrap or local_bootstrap(home)
    command = RecoveryControl(paused=paused, by=getpass.getuser(), reason=reason, ts=time.time_ns())
    command = load_keyring(home / "recovery.key").sign(command)  # the decider obeys only these
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
    bootstrap: BootstrapOpt = None,
    reason: Annotated[str, typer.Option(help="Why (recorded with the command).")] = "",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
) -> None:
    """Stop automated actions: the decider records matches as suppressed until resumed."""
    _control(bootstrap, prefix, True, reason, home)
    console.print("recovery paused (the decider reads it from <prefix>.recovery_input)")


@recovery_app.command()
def resume(
    bootstrap: BootstrapOpt = None,
    reason: Annotated[str, typer.Option(help="Why (recorded with the command).")] = "",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
) -> None:
    """Let the decider act again."""
    _control(bootstrap, prefix, False, reason, home)
    console.print("recovery resumed")


@recovery_app.command()
def status(
    bootstrap: BootstrapOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Paused or not (the latest signed control command), and the actions by stage (json and
    csv: one row per stage, the state on each; one row with no stage before any action)."""
    from collections import Counter

    from rankscope.kafka_admin import read_topic
    from rankscope.kafka_security import check_access
    from rankscope.schemas.derived import RecoveryControl, RecoveryEvent
    from rankscope.schemas.topics import Topics
    from rankscope.streams.recovery.signing import load_keyring

    bootstrap = bootstrap or local_bootstrap(home)
    check_access(bootstrap)  # a refused login: one line, not a traceback
    topics = Topics(prefix)
    control = [
        RecoveryControl.model_validate_json(v)
        for v in read_topic(bootstrap, topics.recovery_control)
    ]
    try:
        keyring = load_keyring(home / "recovery.key", create=False)
        signed = [c for c in control if keyring.check(c) is None]
    except (OSError, ValueError):  # no key here: no command can be verified
        signed = []
    events = [RecoveryEvent.model_validate_json(v) for v in read_topic(bootstrap, topics.recovery)]
    latest = signed[-1] if signed else None
    state = "paused" if latest and latest.paused else "active"
    last_stage: dict[str, str] = {}
    for e in events:
        last_stage[e.key] = e.stage
    counts = sorted(Counter(last_stage.values()).items())
    if fmt is not OutputFormat.table:
        # no action yet: one row with no stage, so the state is always in the output
        rows = [(state, s, n) for s, n in counts] or [(state, "", 0)]
        render(("state", "latest_stage", "actions"), rows, fmt)
        return
    by = f" (by {latest.by}: {latest.reason})" if latest and latest.by else ""
    console.print(f"recovery is [bold]{state}[/]{by}")
    if len(signed) < len(control):
        console.print(f"{len(control) - len(signed)} unsigned or forged command(s) ignored")
    render(("latest stage", "actions"), counts, fmt)


@recovery_app.command()
def run(
    bootstrap: BootstrapOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
    actuator: Annotated[
        str, typer.Option(help="dry-run, webhook, slurm or kubernetes")
    ] = "dry-run",
    webhook_url: Annotated[
        str | None,
        typer.Option(
            help="Webhook for --actuator webhook, and for escalations with the others (a "
            "secret: prefer the environment variable; it is never printed or recorded).",
            envvar="RANKSCOPE_WEBHOOK_URL",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[str, typer.Option(help="Kubernetes namespace of the jobs.")] = "default",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Run nothing, whatever the decisions' mode.")
    ] = False,
    max_age_s: Annotated[
        float, typer.Option(help="Refuse decisions signed longer ago (plus their backoff).")
    ] = 600.0,
    scontrol: Annotated[str, typer.Option(help="The scontrol program.")] = "scontrol",
    scancel: Annotated[str, typer.Option(help="The scancel program.")] = "scancel",
    kube_api_server: Annotated[
        str, typer.Option(help="Kubernetes API server.")
    ] = "https://kubernetes.default.svc",
    kube_token_file: Annotated[Path, typer.Option(help="Service-account token file.")] = Path(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ),
    metrics_port: MetricsPortOpt = METRICS_PORTS["runner"],
) -> None:
    """Run signed recovery decisions through an actuator, each key at most once (ledger and
    signing key in HOME); refusals (unsigned, forged, replayed, expired, invalid identifiers)
    are recorded as outcomes. A decision decided in dry_run mode runs nothing."""
    from confluent_kafka import Consumer, Producer

    from rankscope.kafka_security import check_access, kafka_config
    from rankscope.schemas.topics import Topics
    from rankscope.sinks.actuators.base import Actuator, ActuatorRunner, Ledger
    from rankscope.sinks.actuators.cluster import (
        KubernetesActuator,
        KubernetesConfig,
        RoutingActuator,
        SlurmActuator,
        SlurmConfig,
    )
    from rankscope.sinks.actuators.dryrun import DryRunActuator
    from rankscope.sinks.actuators.loop import run_loop
    from rankscope.sinks.actuators.webhook import WebhookActuator, WebhookConfig
    from rankscope.streams.recovery.signing import load_keyring

    bootstrap = bootstrap or local_bootstrap(home)
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
        slurm = SlurmActuator(SlurmConfig(scontrol=scontrol, scancel=scancel))
        act = RoutingActuator({"escalate": pager}, default=slurm)
    elif actuator == "kubernetes":
        k8s = KubernetesActuator(
            KubernetesConfig(
                namespace=namespace, api_server=kube_api_server, token_file=kube_token_file
            )
        )
        act = RoutingActuator({"escalate": pager, "dump_stacks": pager}, default=k8s)
    else:
        raise typer.BadParameter("dry-run, webhook, slurm or kubernetes", param_hint="--actuator")
    keyring = load_keyring(home / "recovery.key")
    runner = ActuatorRunner(
        act, Ledger(home / "recovery-ledger.db"), keyring, max_age_s=max_age_s, dry_run=dry_run
    )
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
    stop = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    outcomes: Counter[str] = Counter()
    port = port_or_off(metrics_port)
    if port is not None:
        from rankscope.observability.exporters import serve_runner

        serve_runner(outcomes, bootstrap, port)
    run_loop(runner, consumer, producer, topic, lambda: stop, outcomes=outcomes)
