"""Topic creation repeats a round whose failures are transient, and only then.

A clean-clone run once failed creating the three-broker fault test's topics with librdkafka's
_DESTROY_BROKER: the client dropped its bootstrap broker handle (metadata had named the real
brokers) while CreateTopics was in flight on it. No live broker fails that way on demand, so
these tests drive :func:`submit_new_topics` with an admin stand-in whose CreateTopics answers
are scripted; the create path against real brokers is covered by ``test_topics_cli.py``.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from rankscope.kafka_topics import TopicAdminError, submit_new_topics


@dataclass
class _Partitions:
    partitions: dict[int, object]
    error: object = None


@dataclass
class _Metadata:
    topics: dict[str, _Partitions]


@dataclass
class ScriptedAdmin:
    """Answers each CreateTopics round from ``rounds`` (topic -> error code, None: created);
    a topic answered created or already-existing is listed by metadata from then on."""

    rounds: list[dict[str, int | None]]
    listed: set[str] = field(default_factory=set)
    asked: list[list[str]] = field(default_factory=list)

    def list_topics(self, timeout: float = -1) -> _Metadata:
        return _Metadata({n: _Partitions({0: object()}) for n in self.listed})

    def create_topics(self, new: list[NewTopic], **_: Any) -> dict[str, Future[None]]:
        answers = self.rounds[min(len(self.asked), len(self.rounds) - 1)]
        self.asked.append([t.topic for t in new])
        futures: dict[str, Future[None]] = {}
        for t in new:
            future: Future[None] = Future()
            code = answers.get(t.topic)
            if code is None:
                self.listed.add(t.topic)
                future.set_result(None)
            else:
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    self.listed.add(t.topic)
                future.set_exception(KafkaException(KafkaError(code)))
            futures[t.topic] = future
        return futures


def _create(admin: ScriptedAdmin, names: list[str], timeout_s: float = 10.0) -> Any:
    new = [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]
    return submit_new_topics(cast(AdminClient, admin), new, "scripted:9092", timeout_s)


def test_a_destroyed_broker_handle_is_retried_for_the_topics_it_hit_only() -> None:
    admin = ScriptedAdmin(
        rounds=[{"a": KafkaError._DESTROY_BROKER, "b": None}, {"a": None}],
    )
    report = _create(admin, ["a", "b"])
    assert admin.asked == [["a", "b"], ["a"]]
    assert report.created == ["a", "b"]
    assert report.existing == []


def test_a_retried_topic_found_existing_counts_as_created_and_a_prior_one_as_existing() -> None:
    admin = ScriptedAdmin(
        rounds=[
            {"a": KafkaError._TRANSPORT, "old": KafkaError.TOPIC_ALREADY_EXISTS},
            {"a": KafkaError.TOPIC_ALREADY_EXISTS},
        ],
    )
    report = _create(admin, ["a", "old"])
    assert report.created == ["a"]
    assert report.existing == ["old"]


def test_a_final_error_fails_at_once_with_the_topic_named() -> None:
    admin = ScriptedAdmin(rounds=[{"a": KafkaError.INVALID_REPLICATION_FACTOR}])
    with pytest.raises(TopicAdminError, match="'a'") as raised:
        _create(admin, ["a"])
    assert len(admin.asked) == 1
    assert "\n" not in str(raised.value)


def test_an_error_that_never_clears_gives_up_at_the_timeout_and_says_why() -> None:
    admin = ScriptedAdmin(rounds=[{"a": KafkaError._DESTROY_BROKER}])
    with pytest.raises(TopicAdminError, match="did not succeed in 2 s") as raised:
        _create(admin, ["a"], timeout_s=2.0)
    assert len(admin.asked) >= 2
    assert "a:" in str(raised.value)
