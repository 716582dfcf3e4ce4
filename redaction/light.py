"""Light redaction: the same rules, without an NLP model and without Presidio's per-call engine.

Why: the node agent and the in-process OTel exporter redact before anything leaves the node
(issue 16), on a budget of well under 1% of a core. ``PresidioRedactor`` is already cheap for
clean text (the pre-filter), but each value that passes it goes through
``AnalyzerEngine.analyze``: an NLP pass, a registry lookup, context enhancement over every
recognizer. Here the recognizers that the pre-filter names are called directly on the text,
then Presidio's own duplicate removal and *our* thresholds, allow-lists, near-miss logic and
anonymizer run exactly as in the stream stage (inherited, not copied), so a value gets the same
replacement tokens at the source as it would downstream. ``tests/test_redaction_light.py``
checks that light and full mode agree on the whole labelled corpus.

What it leaves out: NER entities (``settings.nlp.engine: spacy`` adds PERSON downstream only),
and, when no hash key is configured at the source, the entities whose action is ``hash``
(emails, addresses, URLs, home-dir users): they cannot get the stream's tokens without its key,
so they are left to the stream stage rather than hashed differently.
"""

from __future__ import annotations

from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

from rankscope.redaction.engine import PresidioRedactor
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


class LightRedactor(PresidioRedactor):
    """``PresidioRedactor`` whose analysis calls the candidate recognizers directly."""

    def __init__(self, rules: RuleSet, key: bytes | None) -> None:
        super().__init__(light_rules(rules, with_hash=key is not None), key)
        self.full_rules = rules
        self._recognizers: list[EntityRecognizer] = list(self.analyzer.registry.recognizers)
        self._entities = sorted({e for r in self._recognizers for e in r.supported_entities})
        # what Presidio hands recognizers with no NLP model: no tokens, no entities
        self._empty = self.nlp_engine.process_text("", self.language)

    def recognize(
        self,
        text: str,
        nlp_artifacts: NlpArtifacts | None = None,
        entities: list[str] | None = None,
    ) -> list[RecognizerResult]:
        """Presidio's ``analyze`` minus the NLP pass and context enhancement (no NLP tokens
        means no lemma context to enhance with): the named recognizers, then de-duplication."""
        wanted = self._entities if entities is None else entities
        names = set(wanted)
        results: list[RecognizerResult] = []
        # registry order, as Presidio: it decides which of two same-span results survives
        for rec in self._recognizers:
            if names.isdisjoint(rec.supported_entities):
                continue
            for r in rec.analyze(text=text, entities=wanted, nlp_artifacts=self._empty) or ():
                meta = r.recognition_metadata
                if meta is None:
                    meta = r.recognition_metadata = {}
                meta.setdefault(RecognizerResult.RECOGNIZER_NAME_KEY, str(getattr(rec, "name", "")))
                meta.setdefault(RecognizerResult.RECOGNIZER_IDENTIFIER_KEY, rec.id)
                results.append(r)
        deduped: list[RecognizerResult] = EntityRecognizer.remove_duplicates(results)
        return deduped
