"""The Kafka ACL plan: which principal may do what on one deployment's topics and groups.

Least privilege per role, so a compromised node agent can only add telemetry (which the
validate stage checks) and cannot read what the workers derived or write decisions:

* agent: write raw topics;
* worker: read raw, write derived, read and write its own internal topics, its group;
* sink: read derived topics, its group;
* runner: read decisions and write outcomes (both on ``<p>.recovery``), its group;
* operator: ``rankscope recovery pause|resume|status``: write the control commands, read the
  recovery topics;
* admin: a super user on the broker (``super.users``): creates topics and these ACLs.

``rankscope kafka-acls`` prints the plan or applies it with the admin's credentials.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import (  # not re-exported
    AclBinding,
    AclOperation,
    AclPermissionType,
)
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from pydantic import BaseModel, ConfigDict

from rankscope.kafka_security import KafkaSecurity, kafka_config
from rankscope.schemas.topics import Topics, streams_group, validate_group

__all__ = ["AclRule", "Principals", "acl_bindings", "acl_plan", "apply_acls", "format_plan"]

Role = Literal["agent", "worker", "sink", "runner", "operator"]
Op = Literal["READ", "WRITE", "DESCRIBE"]


class Principals(BaseModel):
    """The SASL user of each role (``User:<name>`` on the broker)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = "rankscope-agent"
    worker: str = "rankscope-worker"
    sink: str = "rankscope-sink"
    runner: str = "rankscope-runner"
    operator: str = "rankscope-operator"


class AclRule(BaseModel):
    """One allow rule: ``role`` may ``operations`` on a topic or group (literal or prefix)."""

    model_config = ConfigDict(frozen=True)

    role: Role
    resource: Literal["topic", "group"]
    name: str
    prefixed: bool = False
    operations: tuple[Op, ...]


def acl_plan(topics: Topics) -> list[AclRule]:
    """The rules for the deployment whose topics are ``topics`` (prefix ``topics.prefix``)."""
    p = topics.prefix
    derived_out = topics.worker_outputs
    # read back by the worker itself (the windows agent, snapshots, the decider's input)
    worker_own = [
        topics.events,
        topics.recovery,
        topics.worker_state,
        topics.recovery_input,
        topics.recovery_control,
        topics.baselines,  # read whole by every worker, assigned, never committing (issue 19)
        topics.fleet_input,
    ]
    sink_reads = [topics.events, *derived_out, topics.recovery, topics.baselines]

    def topic(role: Role, name: str, *ops: Op) -> AclRule:
        return AclRule(role=role, resource="topic", name=name, operations=ops)

    def group(role: Role, name: str, op: Op, *, prefixed: bool = False) -> AclRule:
        return AclRule(role=role, resource="group", name=name, prefixed=prefixed, operations=(op,))

    rules: list[AclRule] = []
    rules += [topic("agent", t, "WRITE", "DESCRIBE") for t in topics.all_raw]
    rules += [topic("worker", t, "READ", "DESCRIBE") for t in topics.all_raw]
    rules += [topic("worker", t, "WRITE", "DESCRIBE") for t in derived_out]
    rules += [topic("worker", t, "READ", "WRITE", "DESCRIBE") for t in worker_own]
    rules += [
        group("worker", streams_group(p), "READ"),
        # ``rankscope validator`` logs in as the worker: it reads raw and writes what the
        # worker's validate agent writes, in a group of its own
        group("worker", validate_group(streams_group(p)), "READ"),
        # probes that read offsets or partitions under a throwaway group id, never joining it
        group("worker", "rankscope-state", "DESCRIBE"),
        group("worker", "rankscope-replay-", "DESCRIBE", prefixed=True),
    ]
    rules += [topic("sink", t, "READ", "DESCRIBE") for t in sink_reads]
    rules.append(group("sink", f"{p}-sink", "READ"))
    rules.append(topic("runner", topics.recovery, "READ", "WRITE", "DESCRIBE"))
    rules.append(group("runner", f"{p}-actuators", "READ"))
    rules += [
        topic("operator", topics.recovery_control, "READ", "WRITE", "DESCRIBE"),
        topic("operator", topics.recovery_input, "WRITE", "DESCRIBE"),
        topic("operator", topics.recovery, "READ", "DESCRIBE"),
        topic("operator", topics.baselines, "READ", "WRITE", "DESCRIBE"),  # `baseline record`
        # `recovery status` reads whole topics under a throwaway group id
        group("operator", "read-", "DESCRIBE", prefixed=True),
        group("operator", "rankscope-replay-", "DESCRIBE", prefixed=True),
    ]
    return rules


def _bindings(rule: AclRule, principals: Principals) -> Iterator[AclBinding]:
    user = getattr(principals, rule.role)
    for op in rule.operations:
        yield AclBinding(
            ResourceType.TOPIC if rule.resource == "topic" else ResourceType.GROUP,
            rule.name,
            ResourcePatternType.PREFIXED if rule.prefixed else ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            getattr(AclOperation, op),
            AclPermissionType.ALLOW,
        )


def acl_bindings(topics: Topics, principals: Principals) -> list[AclBinding]:
    return [b for rule in acl_plan(topics) for b in _bindings(rule, principals)]


def format_plan(topics: Topics, principals: Principals) -> str:
    """The plan as a Markdown table (what ``rankscope kafka-acls --print`` shows)."""
    lines = ["| principal | resource | name | operations |", "|---|---|---|---|"]
    for rule in acl_plan(topics):
        name = f"{rule.name}* (prefix)" if rule.prefixed else rule.name
        user = getattr(principals, rule.role)
        ops = ", ".join(rule.operations)
        lines.append(f"| User:{user} ({rule.role}) | {rule.resource} | {name} | {ops} |")
    lines.append("| admin | cluster | (super.users) | everything: topics, ACLs |")
    return "\n".join(lines)


def apply_acls(
    bootstrap: str,
    topics: Topics,
    principals: Principals,
    security: KafkaSecurity | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Create the plan's ACLs (idempotent on the broker) with the admin's credentials."""
    admin = AdminClient(kafka_config(bootstrap, security))
    bindings = acl_bindings(topics, principals)
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise RuntimeError(f"creating ACL {binding} failed: {exc}") from exc
    return len(bindings)
