"""Issue 16: the rules on the independent credential corpus (tests/data/redaction/
make_holdout_corpus.py, split ``holdout``), gated per credential kind and per syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankscope.redaction.engine import PresidioRedactor
from rankscope.redaction.review import Evaluation, evaluate, load_corpus
from rankscope.redaction.rules import load_rules

HOLDOUT = Path(__file__).parent / "data" / "redaction" / "holdout-corpus.jsonl"


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    return evaluate(
        PresidioRedactor(load_rules(), b"holdout-test-key-0123456789"), load_corpus(HOLDOUT)
    )


def test_the_holdout_corpus_covers_many_kinds_every_syntax_and_look_alikes() -> None:
    items = load_corpus(HOLDOUT)
    kinds = {i.label for i in items if i.spans}
    lookalikes = {i.label for i in items if not i.spans}
    assert len(kinds) >= 80
    assert {"lookalike:placeholder", "lookalike:uuid_run_id", "lookalike:gpu_uuid"} <= lookalikes
    assert {"yaml", "json", "go_walrus", "make_qassign", "curl_u", "authorization_basic"} <= {
        i.syntax for i in items
    }


def test_credential_recall_and_false_positives_per_kind_and_per_syntax(
    evaluation: Evaluation,
) -> None:
    assert evaluation.group_recall["credential"] is not None
    assert evaluation.group_recall["credential"] >= 0.99
    for groups in (evaluation.by_label, evaluation.by_syntax):
        for g in groups.values():
            assert g.recall is None or g.recall >= 0.99, (g.name, g.missed)
            assert g.false_positive_rate is None or g.false_positive_rate <= 0.01, (
                g.name,
                g.flagged_ids,
            )
    failed = [(g.name, g.measured) for g in evaluation.gates if not g.passed]
    assert failed == []
    assert evaluation.prefilter_disagreements == []


def test_no_credential_of_the_holdout_survives_redaction(evaluation: Evaluation) -> None:
    leaked = {n: m.leaked for n, m in evaluation.entities.items() if m.leaked}
    assert leaked == {}
