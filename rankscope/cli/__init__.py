"""``rankscope``: the command line, built here from one module per command group.

Each command module defines its commands (or its group's ``typer.Typer``) and imports only
``rankscope.cli.options``; this module imports them all and registers them, in the order
``rankscope --help`` lists them. ``main`` is the console entry point (``rankscope.cli:main``):
the one place where failures become one line and an exit code (``rankscope.cli.errors``).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from rankscope.cli import (
    agent,
    baseline,
    capacity,
    database,
    demo,
    errors,
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

__all__ = ["app", "main", "package_version"]

app = typer.Typer(
    help="rankscope: why did my multi-node training job slow down or die?",
    no_args_is_help=True,
    add_completion=False,
    # a traceback's locals would print URLs and passwords; --debug shows the frames only
    pretty_exceptions_show_locals=False,
)

#: ``debug``: set by the global --debug flag (or RANKSCOPE_DEBUG=1): keep tracebacks
_state = {"debug": False}


def package_version() -> str:
    """The installed distribution's version (what pip and a bug report agree on)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankscope")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "0+unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"rankscope {package_version()}")
        raise typer.Exit()


@app.callback()
def _global(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            envvar="RANKSCOPE_DEBUG",
            help="Show the full traceback of a failure instead of one line.",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """rankscope: why did my multi-node training job slow down or die?"""
    _state["debug"] = debug


app.command()(stages.worker)
app.command()(stages.validator)
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
app.command()(capacity.capacity)

app.add_typer(services.services_app, name="services")
app.add_typer(grafana.grafana_app, name="grafana")
app.add_typer(redaction.redaction_app, name="redaction")
app.add_typer(recovery.recovery_app, name="recovery")
app.add_typer(topics.topics_app, name="topics")
app.add_typer(baseline.baseline_app, name="baseline")


def _command(args: list[str]) -> str:
    """``rankscope <command> [<subcommand>]`` of the command line, for an error line."""
    words = [a for a in args if not a.startswith("-")]
    groups = {g.name for g in app.registered_groups}
    return " ".join(["rankscope", *words[: 2 if words and words[0] in groups else 1]])


def main() -> None:
    import logging

    # the ClickHouse client logs a warning before it raises; the error line below says it once
    # (a command that configures logging, like the sink, still shows it)
    logging.getLogger("clickhouse_connect").addHandler(logging.NullHandler())
    try:
        app()
    except Exception as exc:
        known = None if _state["debug"] else errors.explain(exc, _command(sys.argv[1:]))
        if known is None:
            raise
        code, line = known
        print(f"rankscope: error: {' '.join(line.split())}", file=sys.stderr, flush=True)
        raise SystemExit(code) from None
