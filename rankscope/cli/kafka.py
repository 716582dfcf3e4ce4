"""``rankscope kafka-acls``: print the Kafka ACL plan, or apply it as the admin principal."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_PREFIX,
    BootstrapOpt,
    PrefixOpt,
    console,
)


def kafka_acls(
    prefix: PrefixOpt = DEFAULT_PREFIX,
    bootstrap: BootstrapOpt = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Create the ACLs (RANKSCOPE_KAFKA_* as the admin).")
    ] = False,
    create_topics: Annotated[
        bool,
        typer.Option(
            "--create-topics",
            help="With --apply: also create the pipeline's topics first (no principal of the "
            "plan may create topics, so a broker with ACLs does not auto-create them for them).",
        ),
    ] = False,
    partitions: Annotated[int, typer.Option(help="Partitions of created topics.")] = 4,
    agent: Annotated[str, typer.Option(help="SASL user of the node agents.")] = "rankscope-agent",
    worker: Annotated[str, typer.Option(help="SASL user of the stream workers.")] = (
        "rankscope-worker"
    ),
    sink: Annotated[str, typer.Option(help="SASL user of the ClickHouse sink.")] = "rankscope-sink",
    runner: Annotated[str, typer.Option(help="SASL user of the recovery runner.")] = (
        "rankscope-runner"
    ),
    operator: Annotated[
        str, typer.Option(help="SASL user of `rankscope recovery pause|resume|status`.")
    ] = "rankscope-operator",
) -> None:
    """Least-privilege ACLs per role: agents write raw, workers read raw and write derived, the
    sink reads derived, the runner reads decisions and writes outcomes. Prints the plan; with
    --apply also creates it on --bootstrap (and the topics, with --create-topics)."""
    from rankscope.kafka_acls import Principals, apply_acls, format_plan
    from rankscope.kafka_admin import create_pipeline_topics
    from rankscope.kafka_security import check_access
    from rankscope.schemas.topics import Topics

    topics = Topics(prefix)
    principals = Principals(agent=agent, worker=worker, sink=sink, runner=runner, operator=operator)
    print(format_plan(topics, principals))
    if create_topics and not apply:
        raise typer.BadParameter("--create-topics needs --apply", param_hint="--create-topics")
    if apply:
        if not bootstrap:
            raise typer.BadParameter("--apply needs --bootstrap", param_hint="--bootstrap")
        check_access(bootstrap, timeout_s=60)  # a refused login: one line, not a long wait
        if create_topics:
            create_pipeline_topics(bootstrap, topics, partitions)
            console.print(f"pipeline topics ({prefix}.*) present on {bootstrap}")
        count = apply_acls(bootstrap, topics, principals)
        console.print(f"{count} ACL bindings created on {bootstrap}")
