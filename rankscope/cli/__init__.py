"""``rankscope``: the command line, built here from one module per command group.

Each command module defines its commands (or its group's ``typer.Typer``) and imports only
``rankscope.cli.options``; this module imports them all and registers them, in the order
``rankscope --help`` lists them. ``main`` is the console entry point (``rankscope.cli:main``).
"""

from __future__ import annotations

import sys

import typer

from rankscope.cli import (
    agent,
    database,
    demo,
    evaluation,
    grafana,
    incidents,
    kafka,
    recovery,
    redaction,
    replay,
    schemas,
    services,
    stages,
    topics,
)

__all__ = ["app", "main"]

app = typer.Typer(
    help="rankscope: why did my multi-node training job slow down or die?",
    no_args_is_help=True,
    add_completion=False,
)

app.command()(stages.worker)
app.command()(stages.sink)
app.command()(database.migrate)
app.command()(database.query)
app.command()(database.queries)
app.command()(demo.demo)
app.command()(demo.simulate)
app.command("eval")(evaluation.eval_command)
app.command()(incidents.incidents)
app.command()(replay.replay)
app.command("schemas-export")(schemas.schemas_export)
app.command("agent")(agent.agent)
app.command("kafka-acls")(kafka.kafka_acls)

app.add_typer(services.services_app, name="services")
app.add_typer(grafana.grafana_app, name="grafana")
app.add_typer(redaction.redaction_app, name="redaction")
app.add_typer(recovery.recovery_app, name="recovery")
app.add_typer(topics.topics_app, name="topics")


def main() -> None:
    from rankscope.kafka_security import KafkaAuthError, KafkaUnreachableError
    from rankscope.sinks.clickhouse import InsecureClickHouseURL

    try:
        app()
    except (KafkaAuthError, KafkaUnreachableError, InsecureClickHouseURL) as exc:
        # one line an operator can act on (wrong password, CA, broker down), not a traceback
        print(f"rankscope: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
