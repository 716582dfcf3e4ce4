"""A fake 2-rank training job traced with rankscope's OTel API, spans sent to Kafka.

No torch, no GPU: each rank sleeps through data/forward/backward/optimizer phases and meets
its peers in a fake all-reduce (a multiprocessing barrier). Rank 1 raises a CUDA-like error in
step 3; rank 0 then times out in the collective of step 3, as NCCL peers of a dead rank do.
Both failures are recorded on the spans (``exception`` events with rank, job and step) and
delivered before the processes exit: the root-cause stage should blame rank 1, not rank 0.

Run it against the local services (from the repository root)::

    .venv/bin/rankscope services up     # prints "kafka 127.0.0.1:PORT" and a clickhouse URL
    .venv/bin/python examples/train_loop.py --bootstrap 127.0.0.1:PORT
    # optional, to see the spans in ClickHouse: the pipeline stages, in two other shells
    .venv/bin/rankscope worker --bootstrap 127.0.0.1:PORT
    .venv/bin/rankscope sink --bootstrap 127.0.0.1:PORT --clickhouse-url URL
    .venv/bin/rankscope services down

``--topic-prefix`` (default ``rankscope``) must match the pipeline's ``--topic-prefix``.

The spans land on ``<topic-prefix>.raw.events`` (one JSON array of ``span/1`` events per batch,
keyed by job id). Each rank reads its identity the way a real job does, from RANK /
LOCAL_RANK / WORLD_SIZE and RANKSCOPE_JOB_ID, which this script sets for its children.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from queue import Empty
from threading import BrokenBarrierError
from typing import Any

from rankscope.collectors.otel import KafkaSpanExporter, OtelExportConfig, RankTracer
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.schemas.payloads import SpanPhase

#: nominal seconds per phase of one step
PHASE_TIME: dict[SpanPhase, float] = {
    "data": 0.01,
    "forward": 0.03,
    "backward": 0.06,
    "optimizer": 0.01,
}


@dataclass(frozen=True)
class RankReport:
    rank: int
    spans_published: int
    spans_rejected: int
    delivered: bool
    error: str


def all_reduce(barrier: Barrier, timeout_s: float) -> None:
    """Every rank waits for the last one; a missing peer means a timeout, like NCCL's."""
    try:
        barrier.wait(timeout_s)
    except BrokenBarrierError:
        raise TimeoutError(f"all_reduce: a peer did not arrive within {timeout_s:g}s") from None


def train(tracer: RankTracer, rank: int, args: argparse.Namespace, barrier: Barrier) -> None:
    rng = random.Random(rank)
    for step in range(args.steps):
        with tracer.step(step):
            for phase, seconds in PHASE_TIME.items():
                with tracer.phase(phase):
                    time.sleep(seconds * args.speed * rng.uniform(0.9, 1.1))
                    if phase == "backward" and rank == args.fail_rank and step == args.fail_step:
                        raise RuntimeError("CUDA error: an illegal memory access was encountered")
            with tracer.phase("collective", name="nccl:all_reduce", bucket_mb=25):
                all_reduce(barrier, args.collective_timeout)


def run_rank(rank: int, args: argparse.Namespace, barrier: Barrier, results: Any) -> None:
    """One training process: identity from the env, like torchrun's children."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(args.ranks),
        RANKSCOPE_JOB_ID=args.job_id,
    )
    config = OtelExportConfig(
        publisher=PublisherConfig(
            bootstrap=args.bootstrap,
            topic_prefix=args.topic_prefix,
            client_id=f"train-loop-rank{rank}",
        ),
        cluster=args.cluster,
        schedule_delay_ms=200,
    )
    tracer = RankTracer.from_env(config)
    error = ""
    try:
        train(tracer, rank, args, barrier)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise  # the process dies with the error, as a real rank would
    finally:
        delivered = tracer.force_flush()
        tracer.shutdown()
        exporter = tracer.exporter
        stats = exporter.stats if isinstance(exporter, KafkaSpanExporter) else None
        results.put(
            RankReport(
                rank=rank,
                spans_published=stats.spans_published if stats else 0,
                spans_rejected=stats.spans_rejected if stats else 0,
                delivered=delivered,
                error=error,
            )
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--bootstrap",
        default=os.environ.get("RANKSCOPE_BOOTSTRAP"),
        required="RANKSCOPE_BOOTSTRAP" not in os.environ,
        help="Kafka bootstrap servers (as printed by `rankscope services up`).",
    )
    p.add_argument("--topic-prefix", default=os.environ.get("RANKSCOPE_TOPIC_PREFIX", "rankscope"))
    p.add_argument("--job-id", default=f"train-{uuid.uuid4().hex[:8]}")
    p.add_argument("--cluster", default="local")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--fail-rank", type=int, default=1, help="Rank that raises (-1: none).")
    p.add_argument("--fail-step", type=int, default=3)
    p.add_argument("--speed", type=float, default=1.0, help="Multiplies every phase time.")
    p.add_argument("--collective-timeout", type=float, default=2.0)
    p.add_argument(
        "--no-create-topics",
        action="store_true",
        help="Do not create the pipeline topics first (they must exist already).",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Publisher(PublisherConfig(bootstrap=args.bootstrap)) as probe:
        probe.check_connection(timeout_s=10)  # a clear message instead of a silent hang
    if not args.no_create_topics:
        from rankscope.kafka_admin import create_pipeline_topics
        from rankscope.schemas.topics import Topics

        create_pipeline_topics(args.bootstrap, Topics(args.topic_prefix), partitions=2)

    ctx = mp.get_context("spawn")  # no librdkafka/OTel threads inherited through fork
    barrier = ctx.Barrier(args.ranks)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=run_rank, args=(r, args, barrier, results), name=f"rank{r}")
        for r in range(args.ranks)
    ]
    print(f"job {args.job_id}: {args.ranks} ranks, {args.steps} steps -> {args.bootstrap}")
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    reports: list[RankReport] = []
    for _ in procs:
        try:
            reports.append(results.get(timeout=5))
        except Empty:
            break
    for rep in sorted(reports, key=lambda r: r.rank):
        exit_code = procs[rep.rank].exitcode
        outcome = rep.error or "completed"
        print(
            f"rank {rep.rank}: exit {exit_code}, {rep.spans_published} spans published, "
            f"delivered={rep.delivered}, {outcome}"
        )
    topic = f"{args.topic_prefix}.raw.events"
    all_delivered = len(reports) == args.ranks and all(r.delivered for r in reports)
    print(f"spans on {topic}: {'all delivered' if all_delivered else 'NOT all delivered'}")
    return 0 if all_delivered else 1


if __name__ == "__main__":
    sys.exit(main())
