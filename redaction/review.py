"""What a security reviewer needs to sign off the rules: measured quality and what changed.

``evaluate`` runs the rules over the labelled corpus the way the stream stage does (pre-filter
included) and also plain Presidio, and reports per entity and per rule: recall (a labelled
value counts as caught only when findings of its entity cover all of it), precision, false
positives on benign look-alikes, values that survived redaction, and whether the pre-filter
ever changed a finding. ``diff_rules`` compares two versions of the rules file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rankscope.redaction.engine import Finding, PresidioRedactor
from rankscope.redaction.rules import RuleSet


class LabelledSpan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    entity: str
    start: int
    end: int


class CorpusItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    kind: str
    field: str
    text: str
    spans: list[LabelledSpan]
    category: str
    #: the credential kind (or ``lookalike:<what>``) and how it is written (issue 16 corpus)
    label: str = ""
    syntax: str = ""

    @property
    def benign(self) -> bool:
        return not self.spans


def load_corpus(path: Path) -> list[CorpusItem]:
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                items.append(CorpusItem.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not a corpus item: {exc}") from exc
    return items


@dataclass
class EntityMetrics:
    entity: str
    group: str
    action: str
    labelled: int = 0
    caught: int = 0
    findings: int = 0
    true_findings: int = 0
    leaked: int = 0  # labelled values still readable in the redacted text
    missed: list[str] = field(default_factory=list)  # corpus item ids

    @property
    def recall(self) -> float | None:
        return self.caught / self.labelled if self.labelled else None

    @property
    def precision(self) -> float | None:
        return self.true_findings / self.findings if self.findings else None


@dataclass
class RuleMetrics:
    rule: str
    entity: str
    findings: int = 0
    true_findings: int = 0


@dataclass
class GroupMetrics:
    """Items of one credential kind (``label``) or one syntax: secrets caught, look-alikes
    flagged. A secret item counts as caught when every labelled span in it is covered."""

    name: str
    secrets: int = 0
    caught: int = 0
    benign: int = 0
    flagged: int = 0
    missed: list[str] = field(default_factory=list)
    flagged_ids: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)  # of the labelled spans, for the gate

    @property
    def recall(self) -> float | None:
        return self.caught / self.secrets if self.secrets else None

    @property
    def false_positive_rate(self) -> float | None:
        return self.flagged / self.benign if self.benign else None


@dataclass
class Gate:
    name: str
    threshold: float
    measured: float | None
    kind: str  # "recall" (at least) or "false_positive_rate" (at most)

    @property
    def passed(self) -> bool:
        if self.measured is None:
            return False
        if self.kind == "recall":
            return self.measured >= self.threshold
        return self.measured <= self.threshold


@dataclass
class Evaluation:
    rules_version: str
    corpus_items: int
    entities: dict[str, EntityMetrics]
    rules: dict[str, RuleMetrics]
    group_recall: dict[str, float | None]
    benign_items: int
    benign_flagged: list[str]
    prefilter_disagreements: list[str]
    prefilter_skipped: int
    gates: list[Gate]
    #: per credential kind and per syntax, for corpora whose items carry them (issue 16)
    by_label: dict[str, GroupMetrics] = field(default_factory=dict)
    by_syntax: dict[str, GroupMetrics] = field(default_factory=dict)

    @property
    def benign_false_positive_rate(self) -> float | None:
        return len(self.benign_flagged) / self.benign_items if self.benign_items else None

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates) and not self.prefilter_disagreements

    def to_json(self) -> dict[str, object]:
        return {
            "rules_version": self.rules_version,
            "corpus_items": self.corpus_items,
            "passed": self.passed,
            "gates": [asdict(g) | {"passed": g.passed} for g in self.gates],
            "entities": {
                k: asdict(v) | {"recall": v.recall, "precision": v.precision}
                for k, v in self.entities.items()
            },
            "rules": {k: asdict(v) for k, v in self.rules.items()},
            "group_recall": self.group_recall,
            "benign_items": self.benign_items,
            "benign_flagged": self.benign_flagged,
            "benign_false_positive_rate": self.benign_false_positive_rate,
            "prefilter_disagreements": self.prefilter_disagreements,
            "prefilter_skipped": self.prefilter_skipped,
            "by_label": {
                k: asdict(v) | {"recall": v.recall, "false_positive_rate": v.false_positive_rate}
                for k, v in self.by_label.items()
            },
            "by_syntax": {
                k: asdict(v) | {"recall": v.recall, "false_positive_rate": v.false_positive_rate}
                for k, v in self.by_syntax.items()
            },
        }


def _covered(start: int, end: int, findings: Iterable[Finding]) -> bool:
    """Do the findings together cover every character of [start, end)?"""
    pos = start
    for f in sorted(findings, key=lambda f: f.start):
        if f.start > pos:
            break
        pos = max(pos, f.end)
        if pos >= end:
            return True
    return pos >= end


def evaluate(redactor: PresidioRedactor, corpus: list[CorpusItem]) -> Evaluation:
    rules = redactor.rules
    entities = {
        name: EntityMetrics(name, spec.group, spec.action) for name, spec in rules.entities.items()
    }
    per_rule = {r.name: RuleMetrics(r.name, r.entity) for r in rules.recognizers}
    benign_flagged: list[str] = []
    disagreements: list[str] = []
    by_label: dict[str, GroupMetrics] = {}
    by_syntax: dict[str, GroupMetrics] = {}
    skipped = 0
    for item in corpus:
        plain = redactor.analyze(item.text)
        if redactor.may_match(item.text):
            fast = redactor.analyze(item.text, entities=redactor.candidate_entities(item.text))
        else:
            fast, skipped = [], skipped + 1
        if fast != plain:
            disagreements.append(item.id)
        redacted = redactor.apply(item.text, fast).text
        for f in plain:
            m = entities.get(f.entity)
            r = per_rule.setdefault(f.rule, RuleMetrics(f.rule, f.entity))
            true = any(
                s.entity == f.entity and s.start < f.end and f.start < s.end for s in item.spans
            )
            r.findings += 1
            r.true_findings += true
            if m is not None:
                m.findings += 1
                m.true_findings += true
        if item.benign and plain:
            benign_flagged.append(item.id)
        _count_group(by_label, item.label, item, plain)
        _count_group(by_syntax, item.syntax, item, plain)
        for s in item.spans:
            m = entities.setdefault(s.entity, EntityMetrics(s.entity, "unknown", "none"))
            m.labelled += 1
            if _covered(s.start, s.end, [f for f in plain if f.entity == s.entity]):
                m.caught += 1
            else:
                m.missed.append(item.id)
            if item.text[s.start : s.end] in redacted:
                m.leaked += 1
    groups: dict[str, list[EntityMetrics]] = {}
    for m in entities.values():
        groups.setdefault(m.group, []).append(m)
    group_recall: dict[str, float | None] = {}
    for g, ms in groups.items():
        labelled = sum(m.labelled for m in ms)
        group_recall[g] = sum(m.caught for m in ms) / labelled if labelled else None
    benign = sum(1 for i in corpus if i.benign)
    ev = Evaluation(
        rules_version=rules.version,
        corpus_items=len(corpus),
        entities=entities,
        rules=per_rule,
        group_recall=group_recall,
        benign_items=benign,
        benign_flagged=benign_flagged,
        prefilter_disagreements=disagreements,
        prefilter_skipped=skipped,
        gates=[],
        by_label=dict(sorted(by_label.items())),
        by_syntax=dict(sorted(by_syntax.items())),
    )
    for name, threshold in rules.thresholds.recall.items():
        measured = entities[name].recall if name in entities else group_recall.get(name)
        if measured is None and ev.by_label:
            continue  # a credential-kind corpus (issue 16) need not hold every entity
        ev.gates.append(Gate(f"recall {name}", threshold, measured, "recall"))
    ev.gates.append(
        Gate(
            "false positives on benign look-alikes",
            rules.thresholds.max_benign_false_positive_rate,
            ev.benign_false_positive_rate,
            "false_positive_rate",
        )
    )
    # a corpus with kinds and syntaxes is gated per kind and per syntax too, each group at the
    # strictest recall threshold of the entities labelled in it (a phone region at PHONE_NUMBER's)
    for what, by in (("kind", ev.by_label), ("syntax", ev.by_syntax)):
        for grp in by.values():
            at_least = _recall_threshold(rules, grp.entities)
            if grp.secrets and at_least is not None:
                ev.gates.append(Gate(f"recall {what} {grp.name}", at_least, grp.recall, "recall"))
            if grp.benign:
                ev.gates.append(
                    Gate(
                        f"false positives {what} {grp.name}",
                        rules.thresholds.max_benign_false_positive_rate,
                        grp.false_positive_rate,
                        "false_positive_rate",
                    )
                )
    return ev


def _recall_threshold(rules: RuleSet, entities: list[str]) -> float | None:
    found = []
    for name in entities:
        spec = rules.entities.get(name)
        t = rules.thresholds.recall.get(name)
        if t is None and spec is not None:
            t = rules.thresholds.recall.get(spec.group)
        if t is not None:
            found.append(t)
    return max(found) if found else None


def _count_group(
    groups: dict[str, GroupMetrics], name: str, item: CorpusItem, findings: list[Finding]
) -> None:
    if not name:
        return
    g = groups.setdefault(name, GroupMetrics(name))
    if item.benign:
        g.benign += 1
        if findings:
            g.flagged += 1
            g.flagged_ids.append(item.id)
        return
    g.secrets += 1
    g.entities.extend(e for e in {s.entity for s in item.spans} if e not in g.entities)
    if all(
        _covered(s.start, s.end, [f for f in findings if f.entity == s.entity]) for s in item.spans
    ):
        g.caught += 1
    else:
        g.missed.append(item.id)


# -- what changed between two versions of the rules -------------------------------------------
@dataclass(frozen=True)
class RuleChange:
    area: str  # recognizer, entity, allow, field, threshold, setting
    name: str
    change: str  # added, removed, loosened, tightened, changed
    detail: str


_ACTION_STRENGTH = {"pass": 0, "scan": 1, "mask": 1, "hash": 1, "drop": 2}


def diff_rules(old: RuleSet, new: RuleSet) -> list[RuleChange]:
    """Added, removed, loosened and tightened rules; "changed" where only a human can judge
    (a rewritten regex)."""
    out: list[RuleChange] = []
    olds = {r.name: r for r in old.recognizers}
    news = {r.name: r for r in new.recognizers}
    for name in sorted(olds.keys() - news.keys()):
        out.append(
            RuleChange("recognizer", name, "removed", f"no longer finds {olds[name].entity}")
        )
    for name in sorted(news.keys() - olds.keys()):
        out.append(RuleChange("recognizer", name, "added", f"finds {news[name].entity}"))
    for name in sorted(olds.keys() & news.keys()):
        a, b = olds[name], news[name]
        pa = {p.name: p for p in a.patterns}
        pb = {p.name: p for p in b.patterns}
        for p in sorted(pa.keys() - pb.keys()):
            out.append(RuleChange("recognizer", name, "loosened", f"pattern {p} removed"))
        for p in sorted(pb.keys() - pa.keys()):
            out.append(RuleChange("recognizer", name, "tightened", f"pattern {p} added"))
        for p in sorted(pa.keys() & pb.keys()):
            x, y = pa[p], pb[p]
            if y.score < x.score:
                out.append(
                    RuleChange("recognizer", name, "loosened", f"{p}: score {x.score} -> {y.score}")
                )
            elif y.score > x.score:
                out.append(
                    RuleChange(
                        "recognizer", name, "tightened", f"{p}: score {x.score} -> {y.score}"
                    )
                )
            if (x.regex, x.ignore_case, x.dotall) != (y.regex, y.ignore_case, y.dotall):
                out.append(RuleChange("recognizer", name, "changed", f"{p}: regex rewritten"))
        if set(b.context) < set(a.context):
            out.append(RuleChange("recognizer", name, "loosened", "context words removed"))
        elif set(b.context) != set(a.context):
            out.append(RuleChange("recognizer", name, "changed", "context words changed"))
        if (a.presidio, a.presidio_patterns, a.presidio_args) != (
            b.presidio,
            b.presidio_patterns,
            b.presidio_args,
        ):
            out.append(RuleChange("recognizer", name, "changed", "Presidio recognizer options"))
    for name in sorted(old.entities.keys() | new.entities.keys()):
        ea, eb = old.entities.get(name), new.entities.get(name)
        if ea is None or eb is None:
            change = "added" if ea is None else "removed"
            out.append(RuleChange("entity", name, change, ""))
            continue
        if eb.min_score > ea.min_score:
            out.append(
                RuleChange(
                    "entity", name, "loosened", f"min_score {ea.min_score} -> {eb.min_score}"
                )
            )
        elif eb.min_score < ea.min_score:
            out.append(
                RuleChange(
                    "entity", name, "tightened", f"min_score {ea.min_score} -> {eb.min_score}"
                )
            )
        if ea.action != eb.action:
            delta = _ACTION_STRENGTH[eb.action] - _ACTION_STRENGTH[ea.action]
            change = "loosened" if delta < 0 else "tightened" if delta > 0 else "changed"
            out.append(RuleChange("entity", name, change, f"action {ea.action} -> {eb.action}"))
    aa = {a.name: a for a in old.allow}
    ab = {a.name: a for a in new.allow}
    for name in sorted(ab.keys() - aa.keys()):
        out.append(RuleChange("allow", name, "loosened", "new allow-list entry"))
    for name in sorted(aa.keys() - ab.keys()):
        out.append(RuleChange("allow", name, "tightened", "allow-list entry removed"))
    for name in sorted(aa.keys() & ab.keys()):
        if aa[name].regex != ab[name].regex or aa[name].applies_to != ab[name].applies_to:
            out.append(RuleChange("allow", name, "changed", "regex or entities changed"))
    out.extend(_diff_fields(old, new))
    for name in sorted(old.thresholds.recall.keys() | new.thresholds.recall.keys()):
        ta, tb = old.thresholds.recall.get(name), new.thresholds.recall.get(name)
        if ta != tb:
            change = "loosened" if tb is None or (ta is not None and tb < ta) else "tightened"
            out.append(RuleChange("threshold", f"recall {name}", change, f"{ta} -> {tb}"))
    sa, sb = old.settings, new.settings
    if sb.regex_timeout_ms != sa.regex_timeout_ms or sb.field_budget_ms != sa.field_budget_ms:
        out.append(
            RuleChange(
                "setting",
                "fail-closed budgets",
                "changed",
                f"regex {sa.regex_timeout_ms} -> {sb.regex_timeout_ms} ms, field "
                f"{sa.field_budget_ms} -> {sb.field_budget_ms} ms",
            )
        )
    return out


def _diff_fields(old: RuleSet, new: RuleSet) -> list[RuleChange]:
    out = []

    def flat(rs: RuleSet) -> dict[str, str]:
        d: dict[str, str] = {f"envelope.{k}": v for k, v in rs.fields.envelope.items()}
        for kind, fields in rs.fields.kinds.items():
            d.update({f"{kind}.{k}": v for k, v in fields.items()})
        return d

    fa, fb = flat(old), flat(new)
    for name in sorted(fa.keys() | fb.keys()):
        a = fa.get(name, old.fields.default)
        b = fb.get(name, new.fields.default)
        if a != b:
            delta = _ACTION_STRENGTH[b] - _ACTION_STRENGTH[a]
            change = "loosened" if delta < 0 else "tightened" if delta > 0 else "changed"
            out.append(RuleChange("field", name, change, f"{a} -> {b}"))
    if old.fields.default != new.fields.default:
        out.append(
            RuleChange(
                "field", "(default)", "changed", f"{old.fields.default} -> {new.fields.default}"
            )
        )
    return out


def write_json(path: Path, ev: Evaluation, changes: list[RuleChange], since: str | None) -> None:
    doc = ev.to_json() | {"since": since, "changes": [asdict(c) for c in changes]}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
