"""The lag probe asks again only where the cluster says "not known yet".

A clean-clone-style run of the three-broker fault test failed in ``Pipeline.wait_drained``:
after a broker was SIGKILLed, the new leader of one of its partitions refused its high
watermark (OFFSET_NOT_AVAILABLE, "Leader high watermark is not caught up") until the dead
replica left the in-sync set, longer than the probe's old five quick attempts. The three-broker
test is the end-to-end check; these pin which answers are asked again and which are raised.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from rankscope.kafka_admin import transient_lag_error


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    ],
)
def test_a_cluster_in_flux_is_asked_again(code: int) -> None:
    assert transient_lag_error(KafkaException(KafkaError(code)))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.INVALID_GROUP_ID,
    ],
)
def test_a_refusal_is_raised_at_once(code: int) -> None:
    assert not transient_lag_error(KafkaException(KafkaError(code)))


def test_errors_that_are_not_kafkas_are_raised() -> None:
    assert not transient_lag_error(ValueError("bug"))
    assert not transient_lag_error(KafkaException("no error object"))
