"""The runner's consume loop: decisions from ``<p>.recovery`` through an ``ActuatorRunner``,
outcomes back onto the same topic (and so into ``recovery_actions``).

Kept apart from the CLI so tests can run it in-process with the actuators' fakes behind their
seams (the Slurm command runner, the Kubernetes API server).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Producer

from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.base import ActuatorRunner

log = logging.getLogger("rankscope.recovery")


def log_line(record: dict[str, object]) -> None:
    """One JSON object per line (not wrapped like rich's console output), for log shippers."""
    print(json.dumps(record), flush=True)


def run_loop(
    runner: ActuatorRunner,
    consumer: Consumer,
    producer: Producer,
    topic: str,
    stop: Callable[[], bool],
    emit: Callable[[dict[str, object]], None] = log_line,
    outcomes: Counter[str] | None = None,
) -> None:
    """Until ``stop()``: read decisions, run each once, publish the outcomes. The caller makes
    the clients (and so their security settings); the consumer is closed at the end.
    ``outcomes`` counts the published outcomes by stage (the runner's metrics read it)."""
    consumer.subscribe([topic])
    waiting: list[tuple[RecoveryEvent, str]] = []  # decisions still in their backoff
    announced: set[str] = set()  # keys whose wait was logged
    try:
        while not stop():
            msgs = consumer.consume(100, timeout=0.5)
            batch = list(waiting)
            waiting.clear()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        emit({"stage": "consumer_error", "error": str(err)})
                    continue
                try:
                    decision = RecoveryEvent.model_validate_json(msg.value() or b"")
                except ValueError:
                    continue
                batch.append((decision, f"{msg.topic()}/{msg.partition()}/{msg.offset()}"))
            for decision, source in batch:
                if decision.stage != "decided":
                    continue
                outcome = runner.run(decision, source=source)
                if outcome is None:
                    if decision.not_before_ts > time.time_ns():
                        waiting.append((decision, source))
                        if decision.key not in announced:
                            announced.add(decision.key)
                            wait_s = (decision.not_before_ts - time.time_ns()) / 1e9
                            emit({"key": decision.key, "stage": "waiting", "wait_s": wait_s})
                    continue
                producer.produce(
                    topic, key=outcome.job_id.encode(), value=outcome.model_dump_json()
                )
                emit({"key": outcome.key, "stage": outcome.stage, "reason": outcome.reason[:200]})
                if outcomes is not None:
                    outcomes[outcome.stage] += 1
            producer.flush(30)
            # a decision waiting for its backoff must be read again after a restart, so offsets
            # are committed only when none waits (the ledger drops what already ran)
            if msgs and not waiting:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
