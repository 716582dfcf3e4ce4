"""The rules, loaded into Presidio: an AnalyzerEngine and an AnonymizerEngine, offline.

``PresidioRedactor.analyze`` is plain Presidio with our recognizers, per-entity thresholds and
allow-lists; ``redact`` adds what telemetry needs on top: a pre-filter (a text in which no
recognizer's trigger occurs cannot match, so it skips Presidio) and the keyed hash. The
benchmark compares the two on the same input and requires the same findings.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import regex
from presidio_analyzer import (
    AnalysisExplanation,
    AnalyzerEngine,
    EntityRecognizer,
    RecognizerRegistry,
    RecognizerResult,
)
from presidio_analyzer import predefined_recognizers as presidio_recognizers
from presidio_analyzer.nlp_engine import NlpArtifacts, NlpEngine, NoOpNlpEngine
from presidio_anonymizer import AnonymizerEngine
from presidio_anonymizer.entities import OperatorConfig
from presidio_anonymizer.entities import RecognizerResult as AnonymizerResult
from regex._main import Pattern

from rankscope.redaction.keys import hash_token
from rankscope.redaction.pii import load_regions, valid_ip_address, valid_national_phone
from rankscope.redaction.placeholders import (
    is_generated_value,
    is_password_value,
    is_placeholder,
    is_secret_value,
)
from rankscope.redaction.rules import RecognizerSpec, RuleSet

log = logging.getLogger("rankscope.redaction")


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


def _offline_tldextract() -> None:
    """Presidio's email recognizer calls ``tldextract.extract``, which fetches the public
    suffix list on first use. Point it at the snapshot bundled with tldextract instead."""
    import tldextract.tldextract as tld

    if getattr(tld.TLD_EXTRACTOR, "suffix_list_urls", ()):
        tld.TLD_EXTRACTOR = tld.TLDExtract(suffix_list_urls=(), cache_dir=None)


class RuleRecognizer(EntityRecognizer):
    """A custom Presidio recognizer for one rule of the rules file.

    Unlike Presidio's PatternRecognizer it (1) reports the span of a ``value`` group, (2) applies
    context words over a character window (no NLP tokens needed), and (3) lets a regex timeout
    raise instead of skipping the pattern: a skipped pattern would let the text through raw.
    """

    def __init__(
        self, spec: RecognizerSpec, timeout_s: float, phone_regions: tuple[str, ...] = ()
    ) -> None:
        self.spec = spec
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
        super().__init__(supported_entities=[spec.entity], name=spec.name, supported_language="en")

    def load(self) -> None:
        return None

    def analyze(
        self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None
    ) -> list[RecognizerResult]:
        spec = self.spec
        results: list[RecognizerResult] = []
        for pattern, rx in self._patterns:
            for m in rx.finditer(text, timeout=self.timeout_s):
                start, end = m.span("value") if "value" in rx.groupindex else m.span()
                if start < 0 or start == end:
                    continue
                if spec.validator == "mixed_charset" and not _mixed_charset(text[start:end]):
                    continue
                if spec.validator == "luhn" and not _luhn(text[start:end]):
                    continue
                if spec.validator == "phone_national" and not valid_national_phone(
                    text[start:end], self.phone_regions
                ):
                    continue
                if spec.validator == "ip_address" and not valid_ip_address(text[start:end]):
                    continue
                score = pattern.score
                near_miss = not _VALUE_CHECKS.get(spec.validator, _any_value)(text[start:end])
                if near_miss:
                    # below every min_score (Presidio drops a score of 0): a near-miss, reported
                    # and never redacted
                    score = 0.01
                if self._context is not None and self._context.search(
                    text, max(0, start - spec.context_chars), start, timeout=self.timeout_s
                ):
                    score = min(1.0, score + spec.context_boost)
                explanation = AnalysisExplanation(
                    recognizer=spec.name,
                    original_score=pattern.score,
                    pattern_name=pattern.name,
                    pattern=pattern.regex,
                )
                results.append(
                    RecognizerResult(
                        entity_type=spec.entity,
                        start=start,
                        end=end,
                        score=score,
                        analysis_explanation=explanation,
                        recognition_metadata={
                            RecognizerResult.RECOGNIZER_NAME_KEY: spec.name,
                            RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                            NEAR_MISS_KEY: near_miss,
                        },
                    )
                )
        return results


NEAR_MISS_KEY = "near_miss"


def _any_value(value: str) -> bool:
    return True


#: validators that turn a match into a near-miss (a placeholder, a low-entropy value)
_VALUE_CHECKS: dict[str, Callable[[str], bool]] = {
    "placeholder": lambda v: not is_placeholder(v),
    "secret_value": is_secret_value,
    "password_value": is_password_value,
    "generated_value": is_generated_value,
}


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


#: the allow rule naming the tokens an earlier redaction wrote (rules.yaml)
PLACEHOLDER_ALLOW_RULE = "redaction_placeholder"


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


def _luhn(value: str) -> bool:
    digits = [int(c) for c in value if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        doubled = d * 2 - 9 if d > 4 else d * 2
        total += doubled if i % 2 else d
    return bool(digits) and total % 10 == 0


def _mixed_charset(value: str) -> bool:
    """Secrets mix cases and digits; words, paths and hex ids do not."""
    return (
        any(c.isdigit() for c in value)
        and any(c.islower() for c in value)
        and any(c.isupper() for c in value)
    )


def _presidio_recognizer(spec: RecognizerSpec) -> EntityRecognizer:
    cls = getattr(presidio_recognizers, spec.presidio or "", None)
    if cls is None:
        raise ValueError(f"recognizer {spec.name}: Presidio has no recognizer {spec.presidio}")
    kwargs: dict[str, Any] = {"name": spec.name, **spec.presidio_args}
    if spec.presidio_patterns is not None:
        own = {p.name: p for p in cls.PATTERNS}
        missing = [n for n in spec.presidio_patterns if n not in own]
        if missing:
            raise ValueError(f"recognizer {spec.name}: {spec.presidio} has no pattern {missing}")
        kwargs["patterns"] = [own[n] for n in spec.presidio_patterns]
    if "supported_regions" in kwargs:  # libphonenumber says GB, people say UK
        kwargs["supported_regions"] = [
            "GB" if r == "UK" else r for r in kwargs["supported_regions"]
        ]
    recognizer: EntityRecognizer = cls(**kwargs)
    return recognizer


def _nlp_engine(rules: RuleSet) -> tuple[NlpEngine, list[EntityRecognizer]]:
    nlp = rules.settings.nlp
    lang = rules.settings.language
    if nlp.engine == "none":
        return NoOpNlpEngine(models=[{"lang_code": lang, "model_name": "none"}]), []
    import spacy.util
    from presidio_analyzer.nlp_engine import SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import SpacyRecognizer

    if not spacy.util.is_package(nlp.model):
        raise ValueError(
            f"redaction rules ask for the spaCy model {nlp.model}, which is not installed; "
            "install it or set settings.nlp.engine: none"
        )
    engine: NlpEngine = SpacyNlpEngine(models=[{"lang_code": lang, "model_name": nlp.model}])
    return engine, [SpacyRecognizer(supported_entities=list(nlp.entities))]


class PresidioRedactor:
    """Presidio engines built from a rule set, and the keyed hash for ``hash`` actions."""

    def __init__(self, rules: RuleSet, key: bytes | None) -> None:
        _offline_tldextract()
        self.rules = rules
        self.language = rules.settings.language
        if key is None and any(e.action == "hash" for e in rules.entities.values()):
            raise ValueError("the rules hash some entities: a redaction key is required")
        self._key = key or b""
        timeout_s = rules.settings.regex_timeout_ms / 1000
        regions = tuple(rules.settings.phone_regions)
        recognizers: list[EntityRecognizer] = [
            RuleRecognizer(r, timeout_s, regions) if r.patterns else _presidio_recognizer(r)
            for r in rules.recognizers
        ]
        nlp_engine, nlp_recognizers = _nlp_engine(rules)
        nlp_engine.load()
        recognizers += nlp_recognizers
        registry = RecognizerRegistry(recognizers=recognizers, supported_languages=[self.language])
        quiet = logging.getLogger("presidio-analyzer")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # the NoOp engine warns that lemma context is unused
        try:
            self.analyzer = AnalyzerEngine(
                registry=registry, nlp_engine=nlp_engine, supported_languages=[self.language]
            )
        finally:
            quiet.setLevel(level)
        # Presidio compiles its recognizers' regexes on first use: pay that at start, not on
        # the first record (a few hundred ms); an email loads tldextract's suffix list
        self.analyzer.analyze("warm up a@example.com", language=self.language, score_threshold=0)
        self.nlp_engine = nlp_engine
        self.prefiltered = 0  # values the pre-filter let skip Presidio
        self.analyzed = 0  # values Presidio analysed
        self.anonymizer = AnonymizerEngine()  # type: ignore[no-untyped-call]
        self._min_score = {name: e.min_score for name, e in rules.entities.items()}
        self._action = {name: e.action for name, e in rules.entities.items()}
        self._allow = [(a, a.compiled()) for a in rules.allow]
        self._placeholder = next(
            (rx for a, rx in self._allow if a.name == PLACEHOLDER_ALLOW_RULE), None
        )
        self._operators = {name: self._operator(name) for name in rules.entities}
        self._budget_s = rules.settings.field_budget_ms / 1000
        # the pre-filter: lower-case keywords (substring tests) and one regex of triggers
        keywords: dict[str, list[str]] = {}
        triggers: dict[str, list[str]] = {}
        for r in rules.recognizers:
            keywords.setdefault(r.entity, []).extend(r.keywords)
            triggers.setdefault(r.entity, []).extend(r.trigger_regexes)
        if nlp_recognizers:
            for entity in rules.settings.nlp.entities:
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

    def analyze(
        self,
        text: str,
        nlp_artifacts: NlpArtifacts | None = None,
        entities: list[str] | None = None,
    ) -> list[Finding]:
        """Plain Presidio: every recognizer (or those of ``entities``), thresholds, allow-lists."""
        return self.analyze_with_near_misses(text, nlp_artifacts, entities)[0]

    def analyze_with_near_misses(
        self,
        text: str,
        nlp_artifacts: NlpArtifacts | None = None,
        entities: list[str] | None = None,
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
        kept: list[RecognizerResult] = []
        for r in results:
            if spans and any(r.start < e and s < r.end for s, e in spans):
                continue
            meta = r.recognition_metadata or {}
            if meta.get(NEAR_MISS_KEY):
                near.append((r.entity_type, str(meta.get(RecognizerResult.RECOGNIZER_NAME_KEY))))
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

    def recognize(
        self,
        text: str,
        nlp_artifacts: NlpArtifacts | None = None,
        entities: list[str] | None = None,
    ) -> list[RecognizerResult]:
        """The recognizers' raw results (near-misses included), before our thresholds."""
        results: list[RecognizerResult] = self.analyzer.analyze(
            text,
            language=self.language,
            entities=entities,
            score_threshold=0.0,
            nlp_artifacts=nlp_artifacts,
        )
        return results

    def _findings(self, text: str, results: Iterable[RecognizerResult]) -> list[Finding]:
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
                rule = (r.recognition_metadata or {}).get(RecognizerResult.RECOGNIZER_NAME_KEY, "")
                out.append(
                    Finding(
                        r.entity_type,
                        str(rule),
                        self._action[r.entity_type],
                        r.start,
                        r.end,
                        r.score,
                    )
                )
        return _drop_shadowed(out)

    # -- anonymization -----------------------------------------------------------------------
    def hash_token(self, entity: str, value: str) -> str:
        """The replacement of a hashed value: stable for one key, unreadable without it."""
        return hash_token(self._key, entity, value, self.rules.settings.hash_hex_chars)

    def _operator(self, entity: str) -> OperatorConfig:
        if self._action[entity] == "hash":
            fn: Callable[[str], str] = lambda value: self.hash_token(entity, value)  # noqa: E731
            return OperatorConfig("custom", {"lambda": fn})
        return OperatorConfig("replace", {"new_value": f"[{entity}]"})

    def apply(self, text: str, findings: list[Finding]) -> Redacted:
        """Replace the findings in ``text`` with Presidio's anonymizer."""
        if not findings:
            return Redacted(text, CLEAN)
        dims = tuple((f.entity, f.rule, f.action) for f in findings)
        dropped = [f for f in findings if f.action == "drop"]
        if dropped:
            return Redacted(f"[DROPPED:{dropped[0].entity}]", dims)
        results = [AnonymizerResult(f.entity, f.start, f.end, f.score) for f in findings]
        out = self.anonymizer.anonymize(text, results, operators=self._operators)
        return Redacted(str(out.text), dims)

    def redact_plain(self, text: str) -> Redacted:
        """The baseline: Presidio on every value, no pre-filter."""
        return self.apply(text, self.analyze(text))

    def redact(self, text: str, nlp_artifacts: NlpArtifacts | None = None) -> Redacted:
        """Pre-filter, then Presidio; raises ``RedactionError`` instead of passing text raw."""
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
        """Redact many values; with an NLP engine, tokenise the candidates in one batch.

        A failure is returned in place of its value so the caller quarantines that one alone.
        """
        artifacts: dict[str, NlpArtifacts] = {}
        if not isinstance(self.nlp_engine, NoOpNlpEngine):
            candidates = [t for t in texts if self.may_match(t)]
            try:
                batch = self.nlp_engine.process_batch(candidates, self.language)
                artifacts = {t: a for t, a in batch}
            except Exception as exc:
                failed = RedactionError(f"NLP engine failed: {type(exc).__name__}")
                return [failed if t in candidates else Redacted(t, CLEAN) for t in texts]
        out: list[Redacted | RedactionError] = []
        for t in texts:
            try:
                out.append(self.redact(t, artifacts.get(t)))
            except RedactionError as exc:
                out.append(exc)
        return out
