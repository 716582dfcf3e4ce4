"""What both redaction engines share, with no Presidio in it: findings, the pre-filter, our
thresholds, allow-lists, near-misses and keyed hash, and the fail-closed ``redact``.

Why a base: the full engine (``engine.PresidioRedactor``, the stream stage) and the light engine
(``light.LightRedactor``, the node agent) must give a value the same tokens; they differ only in
how the recognizers run (``recognize``) and how the replacements are written (``apply``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import regex
from regex._main import Pattern

from rankscope.redaction.keys import hash_token
from rankscope.redaction.matching import Match
from rankscope.redaction.rules import RuleSet

__all__ = [
    "CLEAN",
    "PLACEHOLDER_ALLOW_RULE",
    "Finding",
    "Redacted",
    "RedactionError",
    "RedactionTimeout",
    "RedactorBase",
]


class RedactionError(Exception):
    """Redaction could not be completed for a value: the caller must fail closed."""


class RedactionTimeout(RedactionError):
    pass


@dataclass(frozen=True)
class Finding:
    entity: str
    rule: str
    action: str
    start: int
    end: int
    score: float


@dataclass(frozen=True)
class Redacted:
    """A value after redaction, with what was found in it (never the found text)."""

    text: str
    findings: tuple[tuple[str, str, str], ...]  # (entity, rule, action) per finding
    #: (entity, rule) per value a rule matched and then declined (a placeholder, low entropy)
    near_misses: tuple[tuple[str, str], ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.findings)


CLEAN = ()

#: the allow rule naming the tokens an earlier redaction wrote (rules.yaml)
PLACEHOLDER_ALLOW_RULE = "redaction_placeholder"


def offline_tldextract() -> None:
    """Presidio's email check calls ``tldextract.extract``, which fetches the public suffix list
    on first use. Point it at the snapshot bundled with tldextract instead."""
    import tldextract.tldextract as tld

    if getattr(tld.TLD_EXTRACTOR, "suffix_list_urls", ()):
        tld.TLD_EXTRACTOR = tld.TLDExtract(suffix_list_urls=(), cache_dir=None)


def _compile_any(patterns: list[str]) -> re.Pattern[str] | Pattern[str]:
    """One alternation; the stdlib engine is several times faster on this kind of scan."""
    joined = "|".join(f"(?:{p})" for p in patterns)
    try:
        return re.compile(joined)
    except re.error:
        return regex.compile(joined)


def _drop_shadowed(findings: list[Finding]) -> list[Finding]:
    """One value, one entity: a finding inside another entity's finding that scores higher (or
    as high, over a longer span) is the same secret seen twice (an HF token is also a
    "secret near a keyword"; an address inside a URL is part of the URL)."""
    keep = []
    for f in findings:
        shadowed = any(
            g.entity != f.entity
            and g.start <= f.start
            and f.end <= g.end
            and (g.score > f.score or (g.score == f.score and g.end - g.start > f.end - f.start))
            for g in findings
        )
        if not shadowed:
            keep.append(f)
    keep.sort(key=lambda f: (f.start, f.end, f.entity))
    return keep


def _neutral(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span turned into ``[xxxx]`` of its length (offsets unchanged)."""
    parts = []
    at = 0
    for start, end in spans:
        parts.append(text[at:start])
        parts.append("[" + "x" * (end - start - 2) + "]")
        at = end
    parts.append(text[at:])
    return "".join(parts)


class RedactorBase:
    """The rules' thresholds, allow-lists, pre-filter and hash key; subclasses recognize and
    apply."""

    def __init__(self, rules: RuleSet, key: bytes | None, nlp_entities: Iterable[str] = ()) -> None:
        self.rules = rules
        self.language = rules.settings.language
        if key is None and any(e.action == "hash" for e in rules.entities.values()):
            raise ValueError("the rules hash some entities: a redaction key is required")
        self._key = key or b""
        self.prefiltered = 0  # values the pre-filter let skip analysis
        self.analyzed = 0  # values analysed
        self._min_score = {name: e.min_score for name, e in rules.entities.items()}
        self._action = {name: e.action for name, e in rules.entities.items()}
        self._allow = [(a, a.compiled()) for a in rules.allow]
        self._placeholder = next(
            (rx for a, rx in self._allow if a.name == PLACEHOLDER_ALLOW_RULE), None
        )
        self._budget_s = rules.settings.field_budget_ms / 1000
        # the pre-filter: lower-case keywords (substring tests) and one regex of triggers
        keywords: dict[str, list[str]] = {}
        triggers: dict[str, list[str]] = {}
        for r in rules.recognizers:
            keywords.setdefault(r.entity, []).extend(r.keywords)
            triggers.setdefault(r.entity, []).extend(r.trigger_regexes)
        for entity in nlp_entities:
            triggers.setdefault(entity, []).append(r"[A-Z][a-z]")  # a name has a capital
        self._keywords = sorted({k for ks in keywords.values() for k in ks})
        self._trigger = _compile_any([t for ts in triggers.values() for t in ts])
        self._entity_triggers = [
            (e, tuple(keywords.get(e, ())), _compile_any(triggers[e]) if triggers.get(e) else None)
            for e in sorted(set(keywords) | set(triggers))
        ]

    # -- analysis ----------------------------------------------------------------------------
    def may_match(self, text: str) -> bool:
        """The pre-filter: False only when no recognizer can match ``text``."""
        lowered = text.lower()
        return any(k in lowered for k in self._keywords) or self._trigger.search(text) is not None

    def candidate_entities(self, text: str) -> list[str]:
        """Entities whose recognizers can match ``text`` (the others cannot: no trigger)."""
        lowered = text.lower()
        return [
            e
            for e, kws, rx in self._entity_triggers
            if any(k in lowered for k in kws) or (rx is not None and rx.search(text) is not None)
        ]

    def recognize(
        self, text: str, nlp_artifacts: Any = None, entities: list[str] | None = None
    ) -> list[Match]:
        """The recognizers' raw results (near-misses included), before our thresholds."""
        raise NotImplementedError

    def apply(self, text: str, findings: list[Finding]) -> Redacted:
        """Replace the findings in ``text``."""
        raise NotImplementedError

    def analyze(
        self, text: str, nlp_artifacts: Any = None, entities: list[str] | None = None
    ) -> list[Finding]:
        """Every recognizer (or those of ``entities``), thresholds, allow-lists."""
        return self.analyze_with_near_misses(text, nlp_artifacts, entities)[0]

    def analyze_with_near_misses(
        self, text: str, nlp_artifacts: Any = None, entities: list[str] | None = None
    ) -> tuple[list[Finding], list[tuple[str, str]]]:
        """``analyze``, and the (entity, rule) of each value a rule declined (a near-miss).

        Tokens of an earlier redaction (``[API_TOKEN]``, ``[EMAIL_ADDRESS:9ef9...]``: the
        ``redaction_placeholder`` allow rule) are analysed as ``[xxxx]`` of the same length and
        no result touching one is kept: their words (TOKEN, SECRET, PASSWORD) would otherwise
        act as key words for the text after them, and a rule could match across one, so a value
        redacted at the source would be redacted again, differently, by the stream stage.
        """
        spans = self._placeholder_spans(text)
        analysed = _neutral(text, spans) if spans else text
        results = self.recognize(analysed, nlp_artifacts, entities)
        near: list[tuple[str, str]] = []
        kept: list[Match] = []
        for r in results:
            if spans and any(r.start < e and s < r.end for s, e in spans):
                continue
            if r.near_miss:
                near.append((r.entity_type, r.rule))
            else:
                kept.append(r)
        findings = self._findings(text, kept)
        if near and findings:  # a declined value inside a finding is part of that finding
            near = [n for n in near if not any(f.entity == n[0] for f in findings)]
        return findings, near

    def _placeholder_spans(self, text: str) -> list[tuple[int, int]]:
        if self._placeholder is None or "[" not in text:
            return []
        return [m.span() for m in self._placeholder.finditer(text)]

    def _findings(self, text: str, results: Iterable[Match]) -> list[Finding]:
        kept = [r for r in results if r.score >= self._min_score.get(r.entity_type, 1.1)]
        if not kept:
            return []
        spans: dict[str, list[tuple[int, int]]] = {}
        out = []
        for r in kept:
            allowed = False
            for spec, rx in self._allow:
                if not spec.covers(r.entity_type):
                    continue
                if spec.name not in spans:
                    spans[spec.name] = [m.span() for m in rx.finditer(text)]
                if any(s <= r.start and r.end <= e for s, e in spans[spec.name]):
                    allowed = True
                    break
            if not allowed:
                out.append(
                    Finding(
                        r.entity_type, r.rule, self._action[r.entity_type], r.start, r.end, r.score
                    )
                )
        return _drop_shadowed(out)

    # -- anonymization -----------------------------------------------------------------------
    def hash_token(self, entity: str, value: str) -> str:
        """The replacement of a hashed value: stable for one key, unreadable without it."""
        return hash_token(self._key, entity, value, self.rules.settings.hash_hex_chars)

    def replacement(self, entity: str, value: str) -> str:
        """What a finding of ``entity`` is replaced with (``mask``: the entity's token)."""
        if self._action[entity] == "hash":
            return self.hash_token(entity, value)
        return f"[{entity}]"

    def redact_plain(self, text: str) -> Redacted:
        """The baseline: every recognizer on every value, no pre-filter."""
        return self.apply(text, self.analyze(text))

    def redact(self, text: str, nlp_artifacts: Any = None) -> Redacted:
        """Pre-filter, then analysis; raises ``RedactionError`` instead of passing text raw."""
        if not self.may_match(text):
            self.prefiltered += 1
            return Redacted(text, CLEAN)
        candidates = self.candidate_entities(text)
        if not candidates:  # (an empty list would make Presidio run every recognizer)
            self.prefiltered += 1
            return Redacted(text, CLEAN)
        self.analyzed += 1
        started = time.perf_counter()
        try:
            findings, near = self.analyze_with_near_misses(text, nlp_artifacts, candidates)
        except TimeoutError as exc:
            raise RedactionTimeout(
                f"a recognizer exceeded regex_timeout_ms={self.rules.settings.regex_timeout_ms:g}"
            ) from exc
        except Exception as exc:
            raise RedactionError(f"analysis failed: {type(exc).__name__}") from exc
        spent = time.perf_counter() - started
        if spent > self._budget_s:
            raise RedactionTimeout(
                f"analysis took {spent * 1000:.0f} ms > field_budget_ms="
                f"{self.rules.settings.field_budget_ms:g}"
            )
        try:
            out = self.apply(text, findings)
        except Exception as exc:
            raise RedactionError(f"anonymization failed: {type(exc).__name__}") from exc
        if near:
            return Redacted(out.text, out.findings, tuple(near))
        return out

    def redact_batch(self, texts: list[str]) -> list[Redacted | RedactionError]:
        """Redact many values; a failure is returned in place of its value so the caller
        quarantines that one alone."""
        out: list[Redacted | RedactionError] = []
        for t in texts:
            try:
                out.append(self.redact(t))
            except RedactionError as exc:
                out.append(exc)
        return out
