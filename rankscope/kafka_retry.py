"""Asking a Kafka cluster again while it answers "not yet": one backoff for the admin helpers.

A cluster in flux (a broker starting or just killed, a coordinator or a leader moving, the
client swapping its bootstrap connections) answers with errors that clear by themselves; each
caller names which codes those are for its request, and this module holds how to tell and how
long to wait between tries.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from tenacity import Retrying, stop_before_delay, wait_exponential_jitter
from tenacity.retry import retry_base


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The :class:`KafkaError` a confluent-kafka call raised, or None for anything else."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def is_transient(error: KafkaError, codes: frozenset[int]) -> bool:
    """``error`` is one of ``codes`` or librdkafka marked it retriable."""
    return error.code() in codes or error.retriable()


def retry_within(seconds: float, retry: retry_base) -> Retrying:
    """Call again while ``retry`` says so, with jittered backoff (0.2 s doubling to 2 s) and no
    sleep that would end past ``seconds``; then the last error propagates."""
    return Retrying(
        retry=retry,
        stop=stop_before_delay(seconds),
        wait=wait_exponential_jitter(multiplier=0.2, max=2.0, jitter=0.2),
        reraise=True,
    )
