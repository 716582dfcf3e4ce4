"""The rules, loaded into Presidio: an AnalyzerEngine and an AnonymizerEngine, offline.

``PresidioRedactor.analyze`` is plain Presidio with our recognizers, per-entity thresholds and
allow-lists; ``redact`` adds what telemetry needs on top: a pre-filter (a text in which no
recognizer's trigger occurs cannot match, so it skips Presidio) and the keyed hash. The
benchmark compares the two on the same input and requires the same findings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

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

from rankscope.redaction.core import (
    CLEAN,
    PLACEHOLDER_ALLOW_RULE,
    Finding,
    Redacted,
    RedactionError,
    RedactionTimeout,
    RedactorBase,
    offline_tldextract,
)
from rankscope.redaction.matching import Match, RuleMatcher
from rankscope.redaction.rules import RecognizerSpec, RuleSet

__all__ = [
    "CLEAN",
    "PLACEHOLDER_ALLOW_RULE",
    "Finding",
    "PresidioRedactor",
    "Redacted",
    "RedactionError",
    "RedactionTimeout",
    "RuleRecognizer",
]

log = logging.getLogger("rankscope.redaction")


class RuleRecognizer(EntityRecognizer):
    """A rule of the rules file as a Presidio recognizer: ``matching.RuleMatcher`` (the one
    implementation of our rules, which the light engine calls directly) behind Presidio's
    interface."""

    def __init__(
        self, spec: RecognizerSpec, timeout_s: float, phone_regions: tuple[str, ...] = ()
    ) -> None:
        self.spec = spec
        self.matcher = RuleMatcher(spec, timeout_s, phone_regions)
        super().__init__(supported_entities=[spec.entity], name=spec.name, supported_language="en")

    def load(self) -> None:
        return None

    def analyze(
        self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None
    ) -> list[RecognizerResult]:
        return [
            RecognizerResult(
                entity_type=m.entity_type,
                start=m.start,
                end=m.end,
                score=m.score,
                analysis_explanation=AnalysisExplanation(
                    recognizer=m.rule, original_score=m.score, pattern_name=m.pattern_name
                ),
                recognition_metadata={
                    RecognizerResult.RECOGNIZER_NAME_KEY: m.rule,
                    RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                    NEAR_MISS_KEY: m.near_miss,
                },
            )
            for m in self.matcher.match(text)
        ]


NEAR_MISS_KEY = "near_miss"


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


class PresidioRedactor(RedactorBase):
    """Presidio engines built from a rule set (the stream stage's engine)."""

    def __init__(self, rules: RuleSet, key: bytes | None) -> None:
        offline_tldextract()
        timeout_s = rules.settings.regex_timeout_ms / 1000
        regions = tuple(rules.settings.phone_regions)
        recognizers: list[EntityRecognizer] = [
            RuleRecognizer(r, timeout_s, regions) if r.patterns else _presidio_recognizer(r)
            for r in rules.recognizers
        ]
        nlp_engine, nlp_recognizers = _nlp_engine(rules)
        super().__init__(rules, key, rules.settings.nlp.entities if nlp_recognizers else ())
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
        self.anonymizer = AnonymizerEngine()  # type: ignore[no-untyped-call]
        self._operators = {name: self._operator(name) for name in rules.entities}

    def recognize(
        self,
        text: str,
        nlp_artifacts: Any = None,
        entities: list[str] | None = None,
    ) -> list[Match]:
        """Plain Presidio, every recognizer (or those of ``entities``), no threshold."""
        results: list[RecognizerResult] = self.analyzer.analyze(
            text,
            language=self.language,
            entities=entities,
            score_threshold=0.0,
            nlp_artifacts=nlp_artifacts,
        )
        out = []
        for r in results:
            meta = r.recognition_metadata or {}
            rule = str(meta.get(RecognizerResult.RECOGNIZER_NAME_KEY, ""))
            near = bool(meta.get(NEAR_MISS_KEY))
            out.append(Match(r.entity_type, r.start, r.end, r.score, rule, near))
        return out

    # -- anonymization -----------------------------------------------------------------------
    def _operator(self, entity: str) -> OperatorConfig:
        fn: Callable[[str], str] = lambda value: self.replacement(entity, value)  # noqa: E731
        if self._action[entity] == "hash":
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

    def redact_batch(self, texts: list[str]) -> list[Redacted | RedactionError]:
        """Redact many values; with an NLP engine, tokenise the candidates in one batch.

        A failure is returned in place of its value so the caller quarantines that one alone.
        """
        if isinstance(self.nlp_engine, NoOpNlpEngine):
            return super().redact_batch(texts)
        candidates = [t for t in texts if self.may_match(t)]
        try:
            batch = self.nlp_engine.process_batch(candidates, self.language)
            artifacts: dict[str, NlpArtifacts] = {t: a for t, a in batch}
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
