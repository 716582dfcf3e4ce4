"""``rankscope demo`` (a simulated job with an injected fault through the whole local pipeline)
and ``rankscope simulate`` (a simulated job published to a running pipeline's Kafka)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from rankscope.cli.options import (
    DEFAULT_DATABASE,
    DEFAULT_HOME,
    DEFAULT_PREFIX,
    BootstrapOpt,
    ClickHouseOpt,
    DatabaseOpt,
    HomeOpt,
    PrefixOpt,
    WorkersOpt,
    console,
    err,
    local_bootstrap,
    make_settings,
)


def demo(
    ranks: Annotated[int, typer.Option(help="Simulated ranks (GPUs).")] = 16,
    duration: Annotated[
        float, typer.Option(help="Simulated job length, seconds of event time.")
    ] = 120.0,
    seed: int = 7,
    speed: Annotated[float, typer.Option(help="Playback speed; 0 = as fast as possible.")] = 0.0,
    home: HomeOpt = DEFAULT_HOME,
    bootstrap: BootstrapOpt = None,
    clickhouse_url: ClickHouseOpt = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    database: DatabaseOpt = DEFAULT_DATABASE,
    keep_services: Annotated[
        bool, typer.Option(help="Leave the local broker and engine running afterwards.")
    ] = False,
    fault: Annotated[
        str,
        typer.Option(
            help="Fault to inject: gpu_fell_off_bus, ecc_dbe, nvlink_error, ib_link_flap, "
            "thermal_straggler, input_straggler, hang, node_unresponsive, preemption, host_oom, "
            "config_drift, noise, or none."
        ),
    ] = "gpu_fell_off_bus",
    workers: WorkersOpt = 1,
) -> None:
    """Simulate a multi-rank job with an injected fault through the whole pipeline, then print
    what was stored, what was detected, and the incident report."""
    from rankscope.demo import DemoOptions, run_demo

    # librdkafka reports transient retries (e.g. "coordinator load in progress") as warnings;
    # the demo surfaces real failures through the publisher's delivery report instead.
    logging.getLogger("rankscope.collectors.publisher.librdkafka").setLevel(logging.ERROR)

    opts = DemoOptions(
        ranks=ranks,
        duration_s=duration,
        seed=seed,
        speed=speed,
        keep_services=keep_services,
        fault=fault,
        workers=workers,
    )
    settings = make_settings(home, bootstrap, clickhouse_url, prefix, database)
    code = run_demo(settings, opts, console)
    raise typer.Exit(code)


def simulate(
    bootstrap: BootstrapOpt = None,
    ranks: Annotated[int, typer.Option(help="Simulated ranks (GPUs).")] = 16,
    duration: Annotated[float, typer.Option(help="Job length, seconds of event time.")] = 120.0,
    seed: int = 7,
    speed: Annotated[float, typer.Option(help="Playback speed; 1 = real time, 0 = max.")] = 1.0,
    job_id: Annotated[str, typer.Option(help="Job id of the simulated job.")] = "sim-job-1",
    prefix: PrefixOpt = DEFAULT_PREFIX,
    home: HomeOpt = DEFAULT_HOME,
) -> None:
    """Publish a simulated synchronous training job to Kafka (no pipeline started)."""
    from rankscope.collectors.publisher import Publisher, PublisherConfig
    from rankscope.simulation.simulator import SimulationConfig, pace
    from rankscope.simulation.simulator import simulate as run_simulation

    bootstrap = bootstrap or local_bootstrap(home)
    sim = SimulationConfig(ranks=ranks, duration_s=duration, seed=seed, job_id=job_id)
    sent = 0
    with Publisher(PublisherConfig(bootstrap=bootstrap, topic_prefix=prefix)) as pub:
        pub.check_connection()
        batch = []
        for ev in pace(run_simulation(sim), speed):
            batch.append(ev)
            if len(batch) >= 500:
                pub.publish(batch)
                sent += len(batch)
                batch = []
                err.print(f"published {sent:,} events", end="\r")
        pub.publish(batch)
        sent += len(batch)
        stats = pub.flush(60)
    console.print(
        f"published {sent:,} events of job {job_id}; delivered {stats.events_delivered:,}"
    )
