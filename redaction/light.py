"""Light redaction: the same rules and tokens as the stream stage, without Presidio or an NLP model.

Why: the node agent and the in-process OTel exporter redact before anything leaves the node
(issue 16), on a budget of well under 1% of a core, and from the agent-only install, which has
no room for Presidio's spaCy (issue 18). The rules' own recognizers are ``matching.RuleMatcher``,
the one implementation the stream's Presidio wrapper calls too; Presidio's five built-ins are
``builtin``; duplicate removal is Presidio's rule (``matching.remove_duplicates``) and the
replacement follows presidio-anonymizer's conflict rules (``_anonymize``). Thresholds,
allow-lists, near-misses and the hash are the shared ``core.RedactorBase``. So a value gets the
same replacement tokens at the source as downstream: ``tests/test_redaction_light.py`` checks
light and full mode agree on every labelled corpus text.

What it leaves out: NER entities (``settings.nlp.engine: spacy`` adds PERSON downstream only),
and, when no hash key is configured at the source, the entities whose action is ``hash``
(emails, addresses, URLs, home-dir users): they cannot get the stream's tokens without its key,
so they are left to the stream stage rather than hashed differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rankscope.redaction.builtin import BuiltinRecognizer, PhoneBuiltin, builtin_recognizer
from rankscope.redaction.core import CLEAN, Finding, Redacted, RedactorBase, offline_tldextract
from rankscope.redaction.matching import Match, RuleMatcher, remove_duplicates
from rankscope.redaction.rules import NlpSettings, RuleSet

__all__ = ["LightRedactor", "light_rules"]


def light_rules(rules: RuleSet, *, with_hash: bool) -> RuleSet:
    """``rules`` as the light mode runs them: no NLP engine; without a key, no hash entities.

    One rules file: this is a view of it, never a second copy on disk.
    """
    settings = rules.settings.model_copy(update={"nlp": NlpSettings(engine="none")})
    if with_hash:
        return rules.model_copy(update={"settings": settings})
    hashed = {name for name, e in rules.entities.items() if e.action == "hash"}
    return rules.model_copy(
        update={
            "settings": settings,
            "entities": {n: e for n, e in rules.entities.items() if n not in hashed},
            "recognizers": [r for r in rules.recognizers if r.entity not in hashed],
            "allow": [
                a
                for a in rules.allow
                if a.applies_to == "all" or any(e not in hashed for e in a.applies_to)
            ],
        }
    )


Recognizer = RuleMatcher | BuiltinRecognizer | PhoneBuiltin


class LightRedactor(RedactorBase):
    """The rules' recognizers called directly on the text; no Presidio engine."""

    def __init__(self, rules: RuleSet, key: bytes | None) -> None:
        view = light_rules(rules, with_hash=key is not None)
        super().__init__(view, key)
        offline_tldextract()
        self.full_rules = rules
        timeout_s = view.settings.regex_timeout_ms / 1000
        regions = tuple(view.settings.phone_regions)
        # rules-file order, as Presidio's registry: it decides which of two same-span results
        # survives de-duplication
        self.recognizers: list[tuple[str, Recognizer]] = [
            (
                spec.entity,
                RuleMatcher(spec, timeout_s, regions)
                if spec.patterns
                else builtin_recognizer(spec, timeout_s),
            )
            for spec in view.recognizers
        ]
        self._entities = sorted({e for e, _ in self.recognizers})
        self.redact("warm up a@example.com")  # compile lazily built state at start
        self.prefiltered = self.analyzed = 0

    def recognize(
        self, text: str, nlp_artifacts: Any = None, entities: list[str] | None = None
    ) -> list[Match]:
        """Presidio's ``analyze`` minus the NLP pass and context enhancement (no NLP tokens, no
        context to enhance with): the named recognizers, then de-duplication."""
        names = set(self._entities if entities is None else entities)
        results: list[Match] = []
        for entity, rec in self.recognizers:
            if entity in names:
                results.extend(rec.match(text))
        return remove_duplicates(results)

    def apply(self, text: str, findings: list[Finding]) -> Redacted:
        if not findings:
            return Redacted(text, CLEAN)
        dims = tuple((f.entity, f.rule, f.action) for f in findings)
        dropped = [f for f in findings if f.action == "drop"]
        if dropped:
            return Redacted(f"[DROPPED:{dropped[0].entity}]", dims)
        return Redacted(_anonymize(text, findings, self.replacement), dims)


@dataclass
class _Span:
    entity: str
    start: int
    end: int
    score: float


_SPACES = re.compile(r"^( )+$")


def _anonymize(text: str, findings: list[Finding], replace: Any) -> str:
    """presidio-anonymizer 2.2.366's ``AnonymizerEngine.anonymize`` with its default conflict
    strategy (MERGE_SIMILAR_OR_CONTAINED) and whitespace merging, written over plain spans:

    1. sort by (start, end); merge intersecting spans of one entity (union, highest score);
    2. drop a span contained in another; of equal spans the highest score (the last on a tie);
    3. join two spans of one entity separated only by spaces;
    4. replace from the end of the text to its start, each with its value in the original text.
    """
    spans = sorted(
        (_Span(f.entity, f.start, f.end, f.score) for f in findings), key=lambda s: (s.start, s.end)
    )
    # 1: one sweep per entity; a merged span takes the position of the last one it absorbed
    by_entity: dict[str, list[tuple[int, _Span]]] = {}
    for pos, s in enumerate(spans):
        by_entity.setdefault(s.entity, []).append((pos, s))
    merged: list[tuple[int, _Span]] = []
    for group in by_entity.values():
        group.sort(key=lambda item: (item[1].start, item[1].end))
        pos, cur = group[0]
        for nxt_pos, s in group[1:]:
            overlap = not (cur.end < s.start or s.end < cur.start)
            if not overlap or min(cur.end, s.end) - max(cur.start, s.start) == 0:
                merged.append((pos, cur))
                pos, cur = nxt_pos, s
                continue
            cur.start, cur.end = min(cur.start, s.start), max(cur.end, s.end)
            cur.score = max(cur.score, s.score)
            pos = max(pos, nxt_pos)
        merged.append((pos, cur))
    merged.sort(key=lambda item: item[0])
    items = [s for _, s in merged]
    # 2: contained spans
    order = sorted(range(len(items)), key=lambda i: (items[i].start, -items[i].end))
    dropped: set[int] = set()
    largest_end: int | None = None
    g = 0
    while g < len(order):
        first = items[order[g]]
        h = g
        while h < len(order) and (items[order[h]].start, items[order[h]].end) == (
            first.start,
            first.end,
        ):
            h += 1
        same = order[g:h]
        if largest_end is not None and largest_end >= first.end:
            dropped.update(same)
        else:
            survivor = max(same, key=lambda i: (items[i].score, i))
            dropped.update(i for i in same if i != survivor)
        if largest_end is None or first.end > largest_end:
            largest_end = first.end
        g = h
    kept = [s for i, s in enumerate(items) if i not in dropped]
    # 3: same entity, only spaces between
    joined: list[_Span] = []
    prev: _Span | None = None
    for s in kept:
        if (
            prev is not None
            and prev.entity == s.entity
            and _SPACES.search(text[prev.end : s.start])
        ):
            joined.remove(prev)
            s.start = prev.start
        joined.append(s)
        prev = s
    # 4: from the end; a span overlapping the one after it loses its tail to that one
    out = text
    last = len(text)
    for s in sorted(joined, key=lambda s: (s.start, s.end), reverse=True):
        new = replace(s.entity, text[s.start : s.end])
        out = out[: s.start] + new + out[min(s.end, last) :]
        last = s.start
    return out
