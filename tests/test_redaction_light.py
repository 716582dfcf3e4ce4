"""Light redaction (issue 16, redaction at the source): the same rules and tokens as the stream
stage without an NLP model or Presidio's per-call engine; the stream leaves its output alone;
fail closed; audit rows say where the finding was made. No Kafka here (the canary test runs
the real pipeline)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import regex

from rankscope.redaction.engine import Finding, PresidioRedactor, Redacted, RedactionTimeout
from rankscope.redaction.light import LightRedactor, light_rules
from rankscope.redaction.review import load_corpus
from rankscope.redaction.rules import load_rules
from rankscope.redaction.source import SourceRedaction, SourceRedactionConfig
from rankscope.redaction.stage import QUARANTINED, RedactionStage
from rankscope.schemas.events import CommEventEvent
from tests.factories import comm

ROOT = Path(__file__).resolve().parents[1]
CORPORA = (
    ROOT / "rankscope" / "examples" / "redaction-corpus.jsonl",
    ROOT / "tests" / "data" / "redaction" / "holdout-corpus.jsonl",
    ROOT / "tests" / "data" / "redaction" / "pii-eval-corpus.jsonl",
)
KEY = b"light-test-key-0123456789abcdef"
RULES = load_rules()
TEXTS = [item.text for path in CORPORA for item in load_corpus(path)]
# Formats from docs/redaction-formats.md (vendors' documented prefixes and lengths); the values
# are generated for this test. The NCCL line is the shape of NCCL's "NET/IB : Got completion
# ... with error" warning as tests/test_nccl_log.py records it.
GH_TOKEN = "ghp_R8vKq2LmX7tZp4WnY9cBd3HfJs6GaE1uQo5V"
NCCL_LINE = (
    "node001:12345:12389 [3] NCCL INFO NET/IB : Got completion from peer 10.0.3.7<43210> with "
    f"error 12, opcode 0, len 0, vendor err 129 (export GITHUB_TOKEN={GH_TOKEN})"
)


def _entities(near: tuple[tuple[str, str], ...]) -> Counter[str]:
    return Counter(entity for entity, _ in near)


@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
def test_light_mode_redacts_every_corpus_text_as_the_stream_stage_does(with_key: bool) -> None:
    """Same text, same findings (entity, rule, action) on all three labelled corpora, light mode
    (no Presidio) against Presidio over the same rules: with the workers' key, and without one
    (the rules as the light mode runs them then: no hash entities). Near-misses: the same
    entities (when two rules decline the same span, Presidio keeps one of them in an order it
    takes from a set, so the rule name of such a near-miss is not stable in either)."""
    key = KEY if with_key else None
    full = PresidioRedactor(light_rules(RULES, with_hash=with_key), key)
    light = LightRedactor(RULES, key)
    assert len(TEXTS) > 3800
    differ = []
    for text in TEXTS:
        a, b = full.redact(text), light.redact(text)
        if (a.text, a.findings) != (b.text, b.findings) or _entities(a.near_misses) != _entities(
            b.near_misses
        ):
            differ.append((text, a, b))
    assert differ == []
    assert light.analyzed > 1000  # the light path really ran recognizers, not only the pre-filter
    found = Counter(f[0] for text in TEXTS for f in light.redact(text).findings)
    # each of Presidio's five built-ins' entities was found and compared (no key: no hashed ones)
    builtins = {"PHONE_NUMBER", "CREDIT_CARD"} | (
        {"EMAIL_ADDRESS", "IP_ADDRESS", "URL"} if with_key else set()
    )
    assert builtins <= set(found)


def _random_findings(rng: random.Random, length: int) -> list[Finding]:
    entities = ["API_TOKEN", "EMAIL_ADDRESS", "URL"]
    out = []
    for _ in range(rng.randint(1, 6)):
        start = rng.randrange(0, length - 1)
        end = rng.randint(start + 1, min(length, start + 12))
        out.append(
            Finding(rng.choice(entities), "r", "mask", start, end, rng.choice([0.4, 0.6, 0.9]))
        )
    return out


def test_overlapping_findings_are_replaced_as_presidio_anonymizer_does() -> None:
    """The conflict rules (merge one entity's overlaps, drop contained spans, join spans of one
    entity across spaces, trim a span overlapping the next) on random overlapping findings,
    against presidio-anonymizer itself: the corpora rarely produce overlaps."""
    rng = random.Random(16)
    full = PresidioRedactor(RULES, KEY)
    light = LightRedactor(RULES, KEY)
    text = "ab cd  ef gh ij kl mn op qr st uv"
    for _ in range(3000):
        findings = _random_findings(rng, len(text))
        assert light.apply(text, findings) == full.apply(text, findings), findings


def test_light_mode_needs_no_nlp_engine_even_when_the_rules_ask_for_spacy() -> None:
    spacy_rules = RULES.model_copy(
        update={
            "settings": RULES.settings.model_copy(
                update={"nlp": RULES.settings.nlp.model_copy(update={"engine": "spacy"})}
            )
        }
    )
    view = light_rules(spacy_rules, with_hash=True)
    assert view.settings.nlp.engine == "none"
    assert view.recognizers == spacy_rules.recognizers  # a view of the one rules file
    redactor = LightRedactor(spacy_rules, KEY)  # would raise if it tried to load a spaCy model
    assert GH_TOKEN not in redactor.redact(NCCL_LINE).text


def test_without_a_key_hash_entities_are_left_to_the_stream() -> None:
    """No key at the source: credentials are masked, the peer address stays for the stream
    stage, which hashes it with its key (a different key would make tokens that do not join)."""
    redactor = LightRedactor(RULES, None)
    out = redactor.redact(NCCL_LINE)
    assert GH_TOKEN not in out.text and "[API_TOKEN]" in out.text
    assert "10.0.3.7" in out.text
    stream = PresidioRedactor(RULES, KEY).redact(out.text)
    assert "10.0.3.7" not in stream.text and "[API_TOKEN]" in stream.text
    assert [f[0] for f in stream.findings] == ["IP_ADDRESS"]


def _events(texts: list[str]) -> list[CommEventEvent]:
    return [comm(t, rank=i % 8) for i, t in enumerate(texts)]


def test_the_stream_stage_leaves_source_redacted_values_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every corpus text redacted at the agent (with the workers' key) passes the stream stage
    unchanged and with no findings: the replacement tokens are the stream's own."""
    monkeypatch.setenv(RULES.settings.key_env, KEY.decode())
    source = SourceRedaction(SourceRedactionConfig(), stage="agent", origin="node001")
    events = _events(TEXTS)
    redacted, audit = source.apply(events)
    changed = [a for a, b in zip(events, redacted, strict=True) if a != b]
    assert len(changed) > 1000
    assert audit and {a.stage for a in audit} == {"agent"}
    stream = RedactionStage(RULES, KEY)
    again = stream.process(redacted, "rankscope.raw.events:0:1")
    token = regex.compile(r"\[[A-Z][A-Z_]+(?::[0-9a-f]{8,64})?\]")
    redone = []
    for before, after in zip(redacted, again.events, strict=True):
        # every token the agent wrote reaches the tables as it wrote it
        assert Counter(token.findall(before.payload.message)) <= Counter(
            token.findall(after.payload.message)
        )
        if before != after:
            redone.append(before.payload.message)
    # The one exception, a known limit (docs/open-items.md): a context-window rule (a long
    # mixed-case string within 32 characters after "token") can newly apply when a redaction
    # shortened the text between the word and the string: two environment dumps of 2401 texts.
    assert len(redone) <= 2
    assert {(a.rule, a.action) for a in again.audit if a.action != "near_miss"} <= {
        ("secret_near_keyword", "mask")
    }
    # and what the stream would have made of the raw values is exactly what the agent made
    direct = RedactionStage(RULES, KEY).process(events, "rankscope.raw.events:0:2")
    assert [e.payload.message for e in direct.events] == [e.payload.message for e in redacted]


def test_audit_rows_say_where_the_finding_was_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RULES.settings.key_env, raising=False)
    agent = SourceRedaction(SourceRedactionConfig(), stage="agent", origin="node001")
    exporter = SourceRedaction(SourceRedactionConfig(), stage="exporter", origin="node001")
    ev = _events([NCCL_LINE])
    (a_ev,), a_audit = agent.apply(ev)
    (x_ev,), x_audit = exporter.apply(ev)
    assert a_ev.payload.message == x_ev.payload.message
    assert GH_TOKEN not in a_ev.payload.message
    assert [(r.stage, r.entity, r.rule, r.action) for r in a_audit] == [
        ("agent", "API_TOKEN", "github_token", "mask")
    ]
    assert [(r.stage, r.entity) for r in x_audit] == [("exporter", "API_TOKEN")]
    assert a_audit[0].audit_id != x_audit[0].audit_id
    # the stream stage's rows keep their stage name (and their ids from before stages)
    stream_audit = RedactionStage(RULES, KEY).process(ev, "t:0:1").audit
    assert {r.stage for r in stream_audit} == {"stream"}
    # two batches of one agent never share an audit id (a restart gets a new origin id too)
    _, again = agent.apply(ev)
    assert again[0].audit_id != a_audit[0].audit_id


class _Failing(LightRedactor):
    def __init__(self, exc: Exception) -> None:
        super().__init__(RULES, None)
        self.exc = exc

    def redact_batch(self, texts: list[str]) -> list[Redacted | Exception]:  # type: ignore[override]
        raise self.exc


def _source_with(redactor: LightRedactor, *, stage_error: bool = False) -> SourceRedaction:
    source = SourceRedaction(SourceRedactionConfig(), stage="agent", origin="node001")
    source.stage.redactor = redactor
    return source


def test_a_value_that_times_out_is_replaced_by_the_quarantine_marker() -> None:
    """A regex past its budget: the event's scanned fields become [QUARANTINED], counted."""
    source = _source_with(LightRedactor(RULES, None))
    source.stage.redactor._budget_s = -1.0  # every analysed value is over its budget
    (out,), audit = source.apply(_events([NCCL_LINE]))
    assert out.payload.message == QUARANTINED
    assert [(a.action, a.rule, a.stage) for a in audit] == [("quarantine", "fail_closed", "agent")]
    clean = comm("NCCL WARN Cuda failure 'out of memory'")
    assert source.apply([clean])[0] == [clean]  # the pre-filter: nothing to analyse, no failure


def test_a_failing_stage_empties_the_batch_and_never_passes_it_raw() -> None:
    source = _source_with(_Failing(RuntimeError("bug")))
    events = _events([NCCL_LINE, "NCCL WARN Cuda failure 'out of memory'"])
    out, _ = source.apply(events)
    assert [e.payload.message for e in out] == [QUARANTINED, QUARANTINED]
    assert source.stats.stage_failures == 1


def test_a_regex_timeout_inside_a_recognizer_fails_closed() -> None:
    """A real catastrophic pattern, not a patched budget: the regex module's timeout raises."""
    redactor = LightRedactor(RULES, None)
    rec = next(r for _, r in redactor.recognizers if r.name == "github_token")
    slow = regex.compile(r"(?P<value>ghp_(?:a|aa)+b)")
    rec._patterns = [(rec._patterns[0][0], slow)]  # type: ignore[attr-defined]
    rec.timeout_s = 0.01  # type: ignore[attr-defined]
    with pytest.raises(RedactionTimeout):
        redactor.redact("ghp_" + "a" * 40 + "!")
