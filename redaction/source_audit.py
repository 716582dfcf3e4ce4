"""How the agent's and the exporter's redaction counts reach the audit table: on the raw topic.

Why not straight to the audit topic: the Kafka ACL plan lets a node agent write the raw topics
only (a compromised node can add telemetry, nothing else). So a producer that redacted before
publishing reports its counts as an ``agent_event`` (``event_type: other``, ``collector:
redaction``) whose message is a :class:`SourceAuditReport` (counts, names of rules and fields,
never a value); the stream stage turns each into ``RedactionAudit`` rows with the producer's
stage (``agent`` or ``exporter``), keyed by the raw record so a re-read rewrites them. A
message that is not a valid report is an ordinary agent event (scanned like any other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from rankscope.schemas.derived import RedactionAudit
from rankscope.schemas.events import AgentEventEvent, Event
from rankscope.schemas.payloads import AgentEvent

__all__ = [
    "REPORT_COLLECTOR",
    "SourceAuditReport",
    "SourceFinding",
    "parse_report",
    "report_payloads",
]

REPORT_COLLECTOR = "redaction"
#: findings per report event (a report stays well under the 16 KiB message limit)
_PER_EVENT = 40

Name = Annotated[str, StringConstraints(max_length=256, pattern=r"^[A-Za-z0-9_.:/\-]*$")]
SourceAction = Literal["mask", "hash", "drop", "near_miss", "quarantine"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceFinding(_Strict):
    """One audit row's dimensions and count, as the producer's stage counted them."""

    window_start_ns: int = Field(ge=0)
    job_id: Name
    kind: Name
    field: Name
    entity: Name
    rule: Name
    action: SourceAction
    count: int = Field(ge=1, le=2**32)


class SourceAuditReport(_Strict):
    stage: Literal["agent", "exporter"]
    rules_version: Name
    findings: list[SourceFinding] = Field(min_length=1, max_length=_PER_EVENT)


def report_payloads(rows: Sequence[RedactionAudit], *, agent: str) -> list[AgentEvent]:
    """The ``agent_event`` payloads that carry ``rows`` (a producer's own audit rows)."""
    out = []
    for i in range(0, len(rows), _PER_EVENT):
        chunk = rows[i : i + _PER_EVENT]
        first = chunk[0]
        report = SourceAuditReport(
            stage="exporter" if first.stage == "exporter" else "agent",
            rules_version=first.rules_version,
            findings=[
                SourceFinding(
                    window_start_ns=r.window_start_ns,
                    job_id=r.job_id,
                    kind=r.kind,
                    field=r.field,
                    entity=r.entity,
                    rule=r.rule,
                    action=r.action,
                    count=r.count,
                )
                for r in chunk
            ],
        )
        out.append(
            AgentEvent(
                event_type="other",
                agent=agent,
                collector=REPORT_COLLECTOR,
                count=sum(r.count for r in chunk),
                message=report.model_dump_json(),
            )
        )
    return out


def parse_report(ev: Event) -> SourceAuditReport | None:
    """The report ``ev`` carries, or None (not a report, or not a valid one)."""
    if not isinstance(ev, AgentEventEvent):
        return None
    p = ev.payload
    if p.event_type != "other" or p.collector != REPORT_COLLECTOR or not p.message:
        return None
    try:
        return SourceAuditReport.model_validate_json(p.message)
    except ValidationError:
        return None


def audit_rows(
    ev: Event, report: SourceAuditReport, record: str, index: int
) -> list[RedactionAudit]:
    """The stream's audit rows for one report (ids from the raw record: re-reads rewrite)."""
    rows = []
    for f in report.findings:
        dims = (str(f.window_start_ns), ev.cluster, f.job_id, f.kind, f.field, f.entity, f.rule)
        rows.append(
            RedactionAudit(
                audit_id=RedactionAudit.make_id(
                    record, *dims, f.action, report.stage, ev.event_id, str(index)
                ),
                window_start_ns=f.window_start_ns,
                cluster=ev.cluster,
                job_id=f.job_id,
                kind=f.kind,
                field=f.field,
                entity=f.entity,
                rule=f.rule,
                action=f.action,
                count=f.count,
                rules_version=report.rules_version,
                stage=report.stage,
            )
        )
    return rows


#: builds the envelope of a report event for one producer
ReportEventFactory = Callable[[AgentEvent], AgentEventEvent]
