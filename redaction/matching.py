"""Our rules' matching logic, with no Presidio in it: one implementation of the rules file's
patterns, validators and context words, called by the full engine's Presidio recognizer
(``engine.RuleRecognizer``) and directly by the light engine (``light.LightRedactor``).

Also Presidio's duplicate removal (``EntityRecognizer.remove_duplicates``, presidio-analyzer
2.2.366), rewritten over ``Match`` so that the light engine resolves overlaps as the stream does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby

import regex

from rankscope.redaction.pii import load_regions, valid_ip_address, valid_national_phone
from rankscope.redaction.placeholders import (
    is_generated_value,
    is_password_value,
    is_placeholder,
    is_secret_value,
)
from rankscope.redaction.rules import RecognizerSpec

__all__ = ["Match", "RuleMatcher", "luhn", "mixed_charset", "remove_duplicates"]


@dataclass
class Match:
    """A recognizer's raw result (a near-miss included), before thresholds and allow-lists.

    Equality and hash are Presidio's ``RecognizerResult``'s: span, entity and score, not the
    rule, so de-duplication keeps the first of two rules that found the same thing.
    """

    entity_type: str
    start: int
    end: int
    score: float
    rule: str
    near_miss: bool = False
    pattern_name: str = ""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Match):
            return NotImplemented
        return (self.entity_type, self.start, self.end, self.score) == (
            other.entity_type,
            other.start,
            other.end,
            other.score,
        )

    def __hash__(self) -> int:
        return hash((self.entity_type, self.start, self.end, self.score))

    def contained_in(self, other: Match) -> bool:
        return self.start >= other.start and self.end <= other.end


def remove_duplicates(results: list[Match]) -> list[Match]:
    """Presidio's rule: per entity, drop a zero score, an exact duplicate (the first is kept) and
    a result inside another of the same entity scoring as high or higher."""
    unique = list(dict.fromkeys(results))  # set(), keeping the first of equal results
    unique.sort(key=lambda r: (r.entity_type, r.start, -(r.end - r.start), -r.score))
    kept: list[Match] = []
    for _, group in groupby(unique, key=lambda r: r.entity_type):
        active: list[Match] = []
        for r in group:
            if r.score == 0:
                continue
            active = [a for a in active if a.end >= r.start]
            if any(r.contained_in(a) and r.score <= a.score for a in active):
                continue
            kept.append(r)
            active.append(r)
    return kept


def _any_value(value: str) -> bool:
    return True


def luhn(value: str) -> bool:
    digits = [int(c) for c in value if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        doubled = d * 2 - 9 if d > 4 else d * 2
        total += doubled if i % 2 else d
    return bool(digits) and total % 10 == 0


def mixed_charset(value: str) -> bool:
    """Secrets mix cases and digits; words, paths and hex ids do not."""
    return (
        any(c.isdigit() for c in value)
        and any(c.islower() for c in value)
        and any(c.isupper() for c in value)
    )


#: validators that turn a match into a near-miss (a placeholder, a low-entropy value)
_VALUE_CHECKS: dict[str, Callable[[str], bool]] = {
    "placeholder": lambda v: not is_placeholder(v),
    "secret_value": is_secret_value,
    "password_value": is_password_value,
    "generated_value": is_generated_value,
}


class RuleMatcher:
    """One rule of the rules file. Unlike Presidio's PatternRecognizer it (1) reports the span
    of a ``value`` group, (2) applies context words over a character window (no NLP tokens
    needed), and (3) lets a regex timeout raise: a skipped pattern would let the text through."""

    def __init__(
        self, spec: RecognizerSpec, timeout_s: float, phone_regions: tuple[str, ...] = ()
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.timeout_s = timeout_s
        self.phone_regions = phone_regions  # for validator: phone_national
        if spec.validator == "phone_national":
            load_regions(phone_regions)  # at start, not on the first record
        self._patterns = [(p, p.compiled()) for p in spec.patterns]
        self._context = (
            regex.compile("|".join(regex.escape(w) for w in spec.context), regex.IGNORECASE)
            if spec.context
            else None
        )

    def match(self, text: str) -> list[Match]:
        spec = self.spec
        results: list[Match] = []
        for pattern, rx in self._patterns:
            for m in rx.finditer(text, timeout=self.timeout_s):
                start, end = m.span("value") if "value" in rx.groupindex else m.span()
                if start < 0 or start == end:
                    continue
                value = text[start:end]
                if spec.validator == "mixed_charset" and not mixed_charset(value):
                    continue
                if spec.validator == "luhn" and not luhn(value):
                    continue
                if spec.validator == "phone_national" and not valid_national_phone(
                    value, self.phone_regions
                ):
                    continue
                if spec.validator == "ip_address" and not valid_ip_address(value):
                    continue
                score = pattern.score
                near_miss = not _VALUE_CHECKS.get(spec.validator, _any_value)(value)
                if near_miss:
                    # below every min_score (Presidio drops a score of 0): a near-miss, reported
                    # and never redacted
                    score = 0.01
                if self._context is not None and self._context.search(
                    text, max(0, start - spec.context_chars), start, timeout=self.timeout_s
                ):
                    score = min(1.0, score + spec.context_boost)
                results.append(
                    Match(spec.entity, start, end, score, spec.name, near_miss, pattern.name)
                )
        return results
