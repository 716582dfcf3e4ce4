"""The redaction stage: validated events in, redacted events, quarantine records and audit
counts out. Pure: no Kafka here; the stream worker calls ``process`` once per raw record.

Fast path, in order: fields the policy passes are never looked at; a value seen before in the
same field comes from a per-field cache (log lines repeat); a value in which no recognizer's
keyword or trigger occurs skips Presidio; the rest of a record's values go to Presidio together.

Fail closed: when a value cannot be redacted (a recognizer raised or ran past its budget), its
event is quarantined: every scanned and dropped field of it is emptied, the quarantine record
says which field failed and why (never the content), and only the emptied copy goes on.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rankscope.redaction.core import Redacted, RedactionError, RedactionTimeout, RedactorBase
from rankscope.redaction.policy import FieldPolicy, FieldRule
from rankscope.redaction.rules import RuleSet
from rankscope.redaction.source_audit import audit_rows, parse_report
from rankscope.schemas.derived import QuarantinedEvent, RedactionAudit, RedactionStageName
from rankscope.schemas.events import Event, dump_event

DROPPED = "[DROPPED]"
QUARANTINED = "[QUARANTINED]"


@dataclass
class RedactionStats:
    values_seen: int = 0
    cache_hits: int = 0
    values_redacted: int = 0
    values_dropped: int = 0
    events_quarantined: int = 0


@dataclass
class StageResult:
    events: list[Event] = field(default_factory=list)
    quarantined: list[QuarantinedEvent] = field(default_factory=list)
    audit: list[RedactionAudit] = field(default_factory=list)


class _Cache:
    """A bounded value -> result map; the oldest entry goes first (dicts keep insertion order)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.data: dict[str, Redacted] = {}

    def get(self, value: str) -> Redacted | None:
        return self.data.get(value)

    def put(self, value: str, result: Redacted) -> None:
        if self.capacity <= 0:
            return
        if len(self.data) >= self.capacity:
            del self.data[next(iter(self.data))]
        self.data[value] = result


# (rule, dict key or None, value) for one value of one event
_Slot = tuple[FieldRule, str | None, str]
# (on the envelope, attribute, the rules reading it)
_Reader = tuple[bool, str, tuple[FieldRule, ...]]


def _readers(rules: list[FieldRule]) -> list[_Reader]:
    """Consecutive rules on one attribute as one reader, so the slots keep the rules' order."""
    readers: list[_Reader] = []
    for r in rules:
        if readers and readers[-1][:2] == (r.on_envelope, r.attr):
            on_envelope, attr, group = readers[-1]
            readers[-1] = (on_envelope, attr, (*group, r))
        else:
            readers.append((r.on_envelope, r.attr, (r,)))
    return readers


class RedactionStage:
    def __init__(
        self,
        rules: RuleSet,
        key: bytes | None,
        redactor: RedactorBase | None = None,
        *,
        stage: RedactionStageName = "stream",
    ) -> None:
        self.stage = stage  # written on every audit row: where the findings were made
        self.rules = rules
        self.version = rules.version
        self.policy = FieldPolicy(rules)
        if redactor is None:  # the stream's engine; Presidio is imported only when it is built
            from rankscope.redaction.engine import PresidioRedactor

            redactor = PresidioRedactor(rules, key)
        self.redactor: RedactorBase = redactor
        self.stats = RedactionStats()
        self._active = {kind: self.policy.active(kind) for kind in self.policy.by_kind}
        #: per kind, the dict keys that have a rule of their own: computed once, not per event
        self._keyed = {
            kind: frozenset(r.key for r in rules if r.key is not None)
            for kind, rules in self._active.items()
        }
        #: per kind, its rules grouped by the attribute they read (runs of one attribute, in
        #: the policy's order): what ``slots`` walks
        self._readers = {kind: _readers(rules) for kind, rules in self._active.items()}
        self._caches: dict[str, _Cache] = {}
        #: rule (by identity: the policy's rules live as long as the stage) -> its field's cache
        self._cache_of: dict[int, _Cache] = {}
        self._window_ns = rules.settings.audit_window_s * 1_000_000_000
        self._capacity = rules.settings.cache_entries_per_field

    # -- reading the values a policy touches ---------------------------------------------------
    def slots(self, ev: Event) -> list[_Slot]:
        """The values of ``ev`` that its kind's policy scans or drops, in the policy's order.

        Each attribute is read once for all of its rules (a span has eight rules on three
        attributes), and an empty one (most spans' attributes) skips them all: this runs for
        every event, so it was a third of the stage's time."""
        readers = self._readers.get(ev.kind)
        if not readers:
            return []
        payload = ev.payload
        slots: list[_Slot] = []
        for on_envelope, attr, rules in readers:
            value = getattr(ev if on_envelope else payload, attr, None)
            if not value:
                continue  # None, "" or {}: no rule finds a value in it
            if isinstance(value, str):
                slots.extend((r, None, value) for r in rules if r.shape != "dict" and r.key is None)
            elif isinstance(value, dict):
                for r in rules:
                    if r.shape == "dict":
                        keyed = self._keyed[ev.kind]
                        slots.extend(
                            (r, k, v)
                            for k, v in value.items()
                            if isinstance(v, str) and v and k not in keyed
                        )
                    elif r.key is not None:
                        v = value.get(r.key)
                        if isinstance(v, str) and v:
                            slots.append((r, r.key, v))
        return slots

    def _cache(self, rule: FieldRule) -> _Cache:
        """The field's cache (one per kind and field, whichever of its rules asks)."""
        cache = self._cache_of.get(id(rule))
        if cache is None:
            name = f"{rule.kind}.{rule.attr}"
            cache = self._caches.get(name)
            if cache is None:
                cache = self._caches[name] = _Cache(self._capacity)
            self._cache_of[id(rule)] = cache
        return cache

    # -- the stage -----------------------------------------------------------------------------
    def process(self, events: list[Event], record: str) -> StageResult:
        """Redact one record's events. ``record`` (topic:partition:offset) keys the audit rows,
        so a record read again after a crash rewrites its rows instead of adding to them."""
        out = StageResult()
        per_event = [self.slots(ev) for ev in events]
        # a value's result does not depend on its field: one entry per distinct value
        results: dict[str, Redacted | RedactionError] = {}
        pending: dict[str, list[_Cache]] = {}
        stats = self.stats
        dropping = False
        for slots in per_event:
            for rule, _, value in slots:
                if rule.action != "scan":
                    dropping = True
                    continue
                stats.values_seen += 1
                cache = self._cache(rule)
                hit = cache.get(value)
                if hit is not None:
                    stats.cache_hits += 1
                    results[value] = hit
                else:
                    pending.setdefault(value, []).append(cache)
        if pending:
            texts = list(pending)
            for text, res in zip(texts, self.redactor.redact_batch(texts), strict=True):
                results[text] = res
                if isinstance(res, Redacted):
                    for cache in pending[text]:
                        cache.put(text, res)
        audit: Counter[tuple[int, str, str, str, str, str, str, str]] = Counter()
        if not dropping and all(
            isinstance(res, Redacted) and not res.changed and not res.near_misses
            for res in results.values()
        ):
            # every value clean and nothing to drop (most records): the events go on as they are
            out.events.extend(events)
        else:
            self._apply_results(events, per_event, results, record, out, audit)
        if self.stage == "stream":  # what producers redacted before publishing, by stage
            for i, ev in enumerate(events):
                report = parse_report(ev)
                if report is not None:
                    out.audit.extend(audit_rows(ev, report, record, i))
        for (window, cluster, job, kind, path, entity, rule_name, action), n in audit.items():
            out.audit.append(
                RedactionAudit(
                    audit_id=RedactionAudit.make_id(
                        record, str(window), cluster, job, kind, path, entity, rule_name, action
                    )
                    if self.stage == "stream"  # (ids of rows written before stages existed)
                    else RedactionAudit.make_id(
                        record,
                        str(window),
                        cluster,
                        job,
                        kind,
                        path,
                        entity,
                        rule_name,
                        action,
                        self.stage,
                    ),
                    window_start_ns=window,
                    cluster=cluster,
                    job_id=job,
                    kind=kind,
                    field=path,
                    entity=entity,
                    rule=rule_name,
                    action=action,
                    count=n,
                    rules_version=self.version,
                    stage=self.stage,
                )
            )
        return out

    def _apply_results(
        self,
        events: list[Event],
        per_event: list[list[_Slot]],
        results: dict[str, Redacted | RedactionError],
        record: str,
        out: StageResult,
        audit: Counter[tuple[int, str, str, str, str, str, str, str]],
    ) -> None:
        """Each event with its values redacted, dropped or quarantined, counted in ``audit``."""
        stats = self.stats
        for ev, slots in zip(events, per_event, strict=True):
            if not slots:
                out.events.append(ev)
                continue
            window = ev.ts - ev.ts % self._window_ns
            failed: list[tuple[str, RedactionError]] = []
            changes: list[tuple[FieldRule, str | None, str]] = []
            for rule, key, value in slots:
                if rule.action == "drop":
                    if value == DROPPED:  # dropped before publishing: counted where it was
                        continue
                    changes.append((rule, key, DROPPED))
                    stats.values_dropped += 1
                    path = _path(rule, key)
                    dims = (window, ev.cluster, ev.job_id, ev.kind, path, "", "field_policy")
                    audit[(*dims, "drop")] += 1
                    continue
                res = results[value]
                if isinstance(res, RedactionError):
                    failed.append((_path(rule, key), res))
                    continue
                if not res.changed and not res.near_misses:
                    continue  # a clean value (most of them): nothing to count or change
                path = _path(rule, key)
                for entity, rule_name in res.near_misses:
                    dims = (window, ev.cluster, ev.job_id, ev.kind, path, entity, rule_name)
                    audit[(*dims, "near_miss")] += 1
                if not res.changed:
                    continue
                stats.values_redacted += 1
                changes.append((rule, key, res.text))
                for entity, rule_name, action in res.findings:
                    audit[
                        (window, ev.cluster, ev.job_id, ev.kind, path, entity, rule_name, action)
                    ] += 1
            if failed:
                stripped = _strip(ev, slots)
                out.quarantined.append(self._quarantine(ev, stripped, failed, slots, record))
                out.events.append(stripped)
                stats.events_quarantined += 1
                dims = (window, ev.cluster, ev.job_id, ev.kind, failed[0][0], "", "fail_closed")
                audit[(*dims, "quarantine")] += 1
                continue
            out.events.append(_apply(ev, changes) if changes else ev)

    def quarantine_all(self, events: list[Event], record: str, reason: str) -> StageResult:
        """Fail closed for a whole record: every event emptied and quarantined, no analysis."""
        out = StageResult()
        failure = RedactionError(reason)
        for ev in events:
            slots = self.slots(ev)
            if not slots:
                out.events.append(ev)
                continue
            stripped = _strip(ev, slots)
            path = slots[0][0].path
            out.quarantined.append(self._quarantine(ev, stripped, [(path, failure)], slots, record))
            out.events.append(stripped)
            self.stats.events_quarantined += 1
        return out

    def _quarantine(
        self,
        ev: Event,
        stripped: Event,
        failed: list[tuple[str, RedactionError]],
        slots: list[_Slot],
        record: str,
    ) -> QuarantinedEvent:
        topic, _, rest = record.rpartition(":")
        topic, _, partition = topic.rpartition(":")
        reason = "; ".join(f"{path}: {exc}" for path, exc in failed)
        timed_out = any(isinstance(exc, RedactionTimeout) for _, exc in failed)
        code = "redaction_timeout" if timed_out else "redaction_error"
        removed = sorted({r.path if k is None or r.key else f"{r.path}.{k}" for r, k, _ in slots})
        return QuarantinedEvent(
            quarantine_id=ev.event_id,
            reason_code=code,
            reason=reason[:2048],
            fields_removed=removed,
            rules_version=self.version,
            source_topic=topic,
            partition=int(partition) if partition.isdigit() else -1,
            offset=int(rest) if rest.isdigit() else -1,
            quarantined_ts=time.time_ns(),
            event_id=ev.event_id,
            schema_id=ev.schema_id,
            kind=ev.kind,
            cluster=ev.cluster,
            job_id=ev.job_id,
            node=ev.node,
            ts=ev.ts,
            event_json=dump_event(stripped).decode(),
        )


def _path(rule: FieldRule, key: str | None) -> str:
    """The field's name in audit rows: ``attributes.<key>`` for a value of a scanned dict."""
    return rule.path if key is None or rule.key is not None else f"{rule.path}.{key}"


def fit(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit]


def _strip(ev: Event, slots: list[_Slot]) -> Event:
    return _apply(ev, [(r, k, DROPPED if r.action == "drop" else QUARANTINED) for r, k, _ in slots])


def _apply(ev: Event, changes: list[tuple[FieldRule, str | None, str]]) -> Event:
    """A copy of ``ev`` with the changed values (models are frozen; no re-validation needed:
    a replacement is shorter than the field's limit or cut to it)."""
    envelope: dict[str, Any] = {}
    payload: dict[str, Any] = {}
    for rule, key, text in changes:
        target = envelope if rule.on_envelope else payload
        if key is None:
            target[rule.attr] = fit(text, rule.max_length)
        else:
            current = target.get(rule.attr)
            if current is None:
                source = ev if rule.on_envelope else ev.payload
                current = target[rule.attr] = dict(getattr(source, rule.attr))
            current[key] = text
    if payload:
        envelope["payload"] = ev.payload.model_copy(update=payload)
    copied: Event = ev.model_copy(update=envelope)
    return copied
