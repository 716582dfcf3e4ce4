"""Make a cluster's topics match the table in ``rankscope.schemas.topics`` and report drift.

One module for `rankscope topics create|check`, :func:`rankscope.kafka_admin.create_pipeline_topics`
(the local services, the tests, compose) and the ACL command: whatever creates a topic reads the
same :class:`TopicSpec`. Creation never changes an existing topic; :func:`fix_drift` applies
only what is safe to apply online (configs, more partitions) and only when the operator asks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (  # re-exported by the package without __all__
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic
from pydantic import BaseModel, ConfigDict
from tenacity import retry_if_exception_type

from rankscope.kafka_retry import is_transient, kafka_error, retry_within
from rankscope.kafka_security import KafkaSecurity, kafka_config
from rankscope.schemas.topics import MANAGED_CONFIGS, TopicSpec
from rankscope.services import ServiceError

__all__ = [
    "CreateReport",
    "Drift",
    "TopicAdminError",
    "TopicState",
    "check_topics",
    "create_topics",
    "describe_topics",
    "drift",
    "fix_drift",
]


class TopicAdminError(ServiceError):
    """A topic operation the cluster refused or did not answer; the message is one line."""


class CreateReport(BaseModel):
    created: list[str]
    existing: list[str]


class TopicState(BaseModel):
    """What the cluster says about one topic."""

    model_config = ConfigDict(frozen=True)

    name: str
    partitions: int
    replication_factor: int
    #: managed config key -> current value
    configs: dict[str, str | None]
    #: managed keys set on the topic itself (not inherited from the broker)
    overridden: frozenset[str]


class Drift(BaseModel):
    """One difference between the table and the cluster."""

    model_config = ConfigDict(frozen=True)

    topic: str
    #: "missing", "partitions", "replication_factor" or a config key
    field: str
    expected: str | None
    actual: str | None
    #: applied by ``topics create --fix``: configs and a partition increase; never a decrease
    #: or a replication change (those need a new topic or a reassignment)
    fixable: bool


def _admin(bootstrap: str, security: KafkaSecurity | None) -> AdminClient:
    return AdminClient(kafka_config(bootstrap, security))


def _result(future: Future[Any], what: str, timeout_s: float) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise TopicAdminError(f"{what}: {exc.args[0] if exc.args else exc}") from exc
    except TimeoutError as exc:
        raise TopicAdminError(f"{what}: no answer in {timeout_s:.0f} s") from exc


def create_topics(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> CreateReport:
    """Create the topics of ``specs`` that do not exist (existing ones are left alone and
    reported) and wait until metadata lists every one of them."""
    admin = _admin(bootstrap, security)
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication_factor or -1,  # -1: the cluster's default
            config=s.topic_config(),
        )
        for s in specs
    ]
    return submit_new_topics(admin, new, bootstrap, timeout_s)


#: errors of one CreateTopics round that a later round can get past: librdkafka drops the
#: bootstrap broker handles once metadata names the brokers (a request in flight on one fails
#: with _DESTROY_BROKER), a freshly started KRaft cluster may not have a controller yet, and a
#: broker may be restarting. Anything else (bad config, no authorisation) is final.
_TRANSIENT_CREATE_ERRORS = frozenset(
    {
        KafkaError._DESTROY_BROKER,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.NOT_CONTROLLER,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
    }
)


class _TransientCreateError(Exception):
    """Some topics of a round failed with an error of :data:`_TRANSIENT_CREATE_ERRORS`."""


def submit_new_topics(
    admin: AdminClient, new: list[NewTopic], bootstrap: str, timeout_s: float
) -> CreateReport:
    """Create ``new`` (topics already there are reported, not an error) and wait until
    metadata lists every one: the one create path, for the table's topics and ad-hoc ones.

    A round whose failures are all transient is repeated for the topics it did not settle,
    until ``timeout_s``; a topic that a repeated round finds existing counts as created (the
    earlier round's request reached the controller before its answer was lost)."""
    if not new:
        return CreateReport(created=[], existing=[])
    deadline = time.monotonic() + timeout_s
    created: set[str] = set()
    existing: set[str] = set()
    pending = {t.topic: t for t in new}
    retried: set[str] = set()

    def one_round() -> None:
        remaining = max(1.0, deadline - time.monotonic())
        # metadata first: the bootstrap handles are replaced before CreateTopics is in flight
        with contextlib.suppress(KafkaException):  # the create below reports what is wrong
            admin.list_topics(timeout=min(5.0, remaining))
        futures = admin.create_topics(
            list(pending.values()), operation_timeout=remaining, request_timeout=remaining
        )
        transient: list[str] = []
        for name, future in futures.items():
            try:
                future.result(timeout=max(1.0, deadline - time.monotonic()))
                created.add(name)
            except KafkaException as exc:
                error = kafka_error(exc)
                if error is None:
                    raise TopicAdminError(
                        f"creating topic {name!r} on {bootstrap} failed: {exc}"
                    ) from exc
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    (created if name in retried else existing).add(name)
                elif is_transient(error, _TRANSIENT_CREATE_ERRORS):
                    transient.append(f"{name}: {error.str()}")
                    retried.add(name)
                    continue
                else:
                    raise TopicAdminError(
                        f"creating topic {name!r} on {bootstrap} failed: {error.str()}"
                    ) from exc
            except TimeoutError as exc:
                raise TopicAdminError(f"creating topic {name!r} on {bootstrap} timed out") from exc
            pending.pop(name, None)
        if transient:
            raise _TransientCreateError("; ".join(transient))

    try:
        retry_within(timeout_s, retry_if_exception_type(_TransientCreateError))(one_round)
    except _TransientCreateError as exc:
        raise TopicAdminError(
            f"creating topics on {bootstrap} did not succeed in {timeout_s:.0f} s: {exc}"
        ) from exc
    _wait_listed(admin, bootstrap, [t.topic for t in new], deadline, timeout_s)
    return CreateReport(created=sorted(created), existing=sorted(existing))


def _wait_listed(
    admin: AdminClient, bootstrap: str, names: list[str], deadline: float, timeout_s: float
) -> None:
    """Until metadata lists every topic of ``names`` with its partitions (a new topic is not
    usable the moment CreateTopics answers)."""
    missing = names
    while True:
        try:
            listed = admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        except KafkaException:
            listed = None
        if listed is not None:
            missing = [
                n
                for n in names
                if n not in listed.topics
                or listed.topics[n].error is not None
                or not listed.topics[n].partitions
            ]
            if not missing:
                return
        if time.monotonic() >= deadline:
            raise TopicAdminError(
                f"topics {missing} did not appear on {bootstrap} in {timeout_s} s"
            )
        time.sleep(0.2)


def describe_topics(
    bootstrap: str,
    names: Sequence[str],
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> dict[str, TopicState | None]:
    """Partitions, replication and managed configs of each topic; None for a missing one."""
    admin = _admin(bootstrap, security)
    out: dict[str, TopicState | None] = {}
    described = admin.describe_topics(TopicCollection(list(names)), request_timeout=timeout_s)
    present: dict[str, Any] = {}
    for name, future in described.items():
        try:
            present[name] = future.result(timeout=timeout_s + 5)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
            ):
                out[name] = None
                continue
            raise TopicAdminError(f"describing topic {name!r} on {bootstrap}: {exc}") from exc
        except TimeoutError as exc:
            raise TopicAdminError(f"describing topic {name!r} on {bootstrap} timed out") from exc
    if present:
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in present]
        configs = admin.describe_configs(resources, request_timeout=timeout_s)
        for resource, future in configs.items():
            name = resource.name
            entries: dict[str, ConfigEntry] = _result(
                future, f"describing configs of {name!r} on {bootstrap}", timeout_s + 5
            )
            desc = present[name]
            out[name] = TopicState(
                name=name,
                partitions=len(desc.partitions),
                replication_factor=min((len(p.replicas) for p in desc.partitions), default=0),
                configs={k: entries[k].value if k in entries else None for k in MANAGED_CONFIGS},
                overridden=frozenset(
                    k for k in MANAGED_CONFIGS if k in entries and _set_on_topic(entries[k])
                ),
            )
    return {name: out[name] for name in names}


def _set_on_topic(entry: ConfigEntry) -> bool:
    """True for a config set on the topic itself; describe_configs gives the source as the
    enum's int value, typed as the enum."""
    source: object = entry.source
    return source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def default_replication_factor(
    bootstrap: str, timeout_s: float = 30.0, security: KafkaSecurity | None = None
) -> int | None:
    """The cluster's ``default.replication.factor`` (what a spec without one gets), from any
    broker; None if the broker does not say."""
    admin = _admin(bootstrap, security)
    brokers = admin.list_topics(timeout=timeout_s).brokers
    if not brokers:
        return None
    resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
    future = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
    entries: dict[str, ConfigEntry] = _result(
        future, f"describing the broker configs on {bootstrap}", timeout_s + 5
    )
    entry = entries.get("default.replication.factor")
    return int(entry.value) if entry is not None and entry.value is not None else None


def drift(
    specs: Sequence[TopicSpec],
    states: dict[str, TopicState | None],
    default_rf: int | None = None,
) -> list[Drift]:
    """Every difference between ``specs`` and the cluster's ``states``, topic by topic.

    A config the spec leaves to the broker drifts only when the topic overrides it (someone
    set it by hand); a spec without a replication factor expects ``default_rf`` (skipped when
    unknown)."""
    out: list[Drift] = []
    for spec in specs:
        state = states.get(spec.name)
        if state is None:
            out.append(
                Drift(
                    topic=spec.name, field="missing", expected="present", actual=None, fixable=True
                )
            )
            continue
        if state.partitions != spec.partitions:
            out.append(
                Drift(
                    topic=spec.name,
                    field="partitions",
                    expected=str(spec.partitions),
                    actual=str(state.partitions),
                    fixable=state.partitions < spec.partitions,
                )
            )
        rf = spec.replication_factor or default_rf
        if rf is not None and state.replication_factor != rf:
            out.append(
                Drift(
                    topic=spec.name,
                    field="replication_factor",
                    expected=str(rf),
                    actual=str(state.replication_factor),
                    fixable=False,
                )
            )
        for key, want in spec.configs().items():
            have = state.configs.get(key)
            if (want is not None and have != want) or (want is None and key in state.overridden):
                out.append(
                    Drift(topic=spec.name, field=key, expected=want, actual=have, fixable=True)
                )
    return out


def check_topics(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> list[Drift]:
    """Describe the cluster and compare it with ``specs``."""
    states = describe_topics(bootstrap, [s.name for s in specs], timeout_s, security)
    default_rf = None
    if any(s.replication_factor is None for s in specs):
        default_rf = default_replication_factor(bootstrap, timeout_s, security)
    return drift(specs, states, default_rf)


def fix_drift(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    drifts: Sequence[Drift],
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> list[Drift]:
    """Apply the fixable ``drifts`` of existing topics (configs set, or reset to the broker's
    default, partitions increased); returns what was applied. Missing topics are
    :func:`create_topics`' job."""
    admin = _admin(bootstrap, security)
    by_name = {s.name: s for s in specs}
    applied: list[Drift] = []
    grow = [d for d in drifts if d.fixable and d.field == "partitions"]
    if grow:
        futures = admin.create_partitions(
            [NewPartitions(d.topic, by_name[d.topic].partitions) for d in grow],
            request_timeout=timeout_s,
        )
        for topic, future in futures.items():
            _result(future, f"adding partitions to {topic!r} on {bootstrap}", timeout_s + 5)
        applied += grow
    changes: dict[str, list[ConfigEntry]] = {}
    config_drifts = [d for d in drifts if d.fixable and d.field in MANAGED_CONFIGS]
    for d in config_drifts:
        # a key the table leaves to the broker loses its override; any other is set
        op = AlterConfigOpType.DELETE if d.expected is None else AlterConfigOpType.SET
        changes.setdefault(d.topic, []).append(
            ConfigEntry(d.field, d.expected, incremental_operation=op)
        )
    if changes:
        resources = [
            ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
            for topic, entries in changes.items()
        ]
        altered = admin.incremental_alter_configs(resources, request_timeout=timeout_s)
        for resource, future in altered.items():
            _result(future, f"altering configs of {resource.name!r} on {bootstrap}", timeout_s + 5)
        applied += config_drifts
    _wait_applied(bootstrap, specs, applied, timeout_s, security)
    return applied


def _wait_applied(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    applied: Sequence[Drift],
    timeout_s: float,
    security: KafkaSecurity | None,
) -> None:
    """Until the brokers describe what was applied: the controller's change reaches them a
    moment after the call answers, and a `topics check` right after must see it."""
    pending = {(d.topic, d.field) for d in applied}
    deadline = time.monotonic() + timeout_s
    while pending:
        left = check_topics(bootstrap, specs, timeout_s, security)
        pending &= {(d.topic, d.field) for d in left}
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TopicAdminError(f"{sorted(pending)} not applied on {bootstrap} in {timeout_s} s")
        time.sleep(0.2)
