"""``rankscope agent --config agent.yaml``: run the node agent in the foreground.

Meant for a systemd unit or a DaemonSet container: logs and status lines go to stderr, SIGTERM
(or Ctrl-C) stops the collectors, delivers what the spool holds within ``shutdown_timeout_s``,
keeps the rest on disk for the next start, and exits 0. Exit 2 means the configuration is
wrong (nothing was started), exit 1 that the agent could not start (e.g. the spool directory is
locked by another agent).

``rankscope agent --example-config`` prints the example config shipped in the package
(``rankscope/examples/agent.yaml``), so that a node without this repository can start from it.
The agent itself is imported lazily so that ``rankscope --help`` stays fast.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rankscope.cli.options import METRICS_PORTS, MetricsPortOpt, port_or_off

if TYPE_CHECKING:
    from rankscope.collectors.agent import Agent, AgentStats

__all__ = ["EXAMPLE_CONFIG", "agent"]

#: the example agent config, package data (every section, commented)
EXAMPLE_CONFIG = Path(__file__).parents[1] / "examples" / "agent.yaml"

_SECRET_WORDS = ("password", "secret", "token", "credential", "key")


def _say(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    typer.echo(f"{stamp} rankscope-agent: {message}", err=True)


def _started(agent: Agent) -> None:
    cfg = agent.config
    stats = agent.stats()
    _say(
        f"running on node {cfg.node!r} (cluster {cfg.cluster!r}) -> Kafka {cfg.kafka.bootstrap} "
        f"(topics {cfg.kafka.topic_prefix}.raw.*)"
    )
    sources = [
        f"{s.name} every {s.interval_s:g}s" if s.interval_s else s.name for s in stats.collectors
    ]
    _say(f"sources: {', '.join(sources)}")
    _say(
        f"spool {cfg.spool.dir} (max {cfg.spool.max_bytes / 2**20:.0f} MiB, fsync "
        f"{cfg.spool.fsync}): {agent.pending_at_start} event(s) pending from a previous run"
    )
    for c in stats.collectors:
        if c.failing:
            _say(f"collector {c.name} is failing: {c.last_error}")


def _status(stats: AgentStats) -> None:
    _say(stats.line())
    for c in stats.collectors:
        if c.failing:
            _say(f"  {c.name}: failing ({c.streak} poll(s)): {c.last_error}")


def _print_example(value: bool) -> None:
    if value:
        typer.echo(EXAMPLE_CONFIG.read_text(), nl=False)
        raise typer.Exit()


def agent(
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            "-c",
            envvar="RANKSCOPE_AGENT_CONFIG",
            help="Agent YAML config (see --example-config). Values can be overridden with "
            "RANKSCOPE_AGENT__<SECTION>__<KEY> environment variables.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
    status_interval: Annotated[
        float,
        typer.Option("--status-interval", help="Seconds between status lines on stderr; 0: none."),
    ] = 30.0,
    metrics_port: MetricsPortOpt = METRICS_PORTS["agent"],
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Validate the config and every collector section, print the effective "
            "config as JSON, and exit.",
        ),
    ] = False,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
    example_config: Annotated[
        bool,
        typer.Option(
            "--example-config",
            help="Print the example config (every section, commented) and exit.",
            is_eager=True,
            callback=_print_example,
        ),
    ] = False,
) -> None:
    """Run the node agent: sample this node's collectors, spool, and publish to Kafka."""
    from rankscope.collectors.agent import AgentConfig, AgentConfigError, run_agent
    from rankscope.collectors.spool import SpoolError

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if check:
        try:
            cfg = AgentConfig.load(config)
            sections = cfg.collector_configs()
        except AgentConfigError as exc:
            _say(f"invalid config: {exc}")
            raise typer.Exit(2) from exc
        dumped = cfg.model_dump(mode="json")
        extra = dumped["kafka"]["extra"]
        for key in extra:
            if any(word in key.lower() for word in _SECRET_WORDS):
                extra[key] = "***"  # the effective config may end up in a ticket
        typer.echo(json.dumps(dumped, indent=2))
        _say(
            f"config OK; collectors: {', '.join(sections) or '(none besides heartbeat/inventory)'}"
        )
        return
    try:
        final = run_agent(
            config,
            status=_status if status_interval > 0 else None,
            status_interval_s=status_interval,
            on_start=_started,
            metrics_port=port_or_off(metrics_port),
        )
    except AgentConfigError as exc:
        _say(f"invalid config: {exc}")
        raise typer.Exit(2) from exc
    except SpoolError as exc:
        _say(f"cannot start: {exc}")
        raise typer.Exit(1) from exc
    _say(f"stopped: {final.line()}")
    if final.pending:
        _say(f"{final.pending} event(s) stay in the spool and are sent at the next start")
