"""The rules measured on the labelled corpus, and the security review report."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rankscope.cli import app
from rankscope.cli.redaction import REFERENCE_CORPUS
from rankscope.redaction.engine import PresidioRedactor
from rankscope.redaction.review import Evaluation, evaluate, load_corpus
from rankscope.redaction.rules import DEFAULT_RULES_PATH, load_rules

CORPUS = REFERENCE_CORPUS


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    return evaluate(
        PresidioRedactor(load_rules(), b"review-test-key-0123456789"), load_corpus(CORPUS)
    )


def test_the_corpus_covers_every_credential_entity_and_benign_look_alikes() -> None:
    items = load_corpus(CORPUS)
    rules = load_rules()
    credential = {n for n, e in rules.entities.items() if e.group == "credential"}
    labelled = {s.entity for i in items for s in i.spans}
    assert credential - {"GENERIC_SECRET"} <= labelled
    assert sum(1 for i in items if i.benign) >= 200
    for item in items:
        for s in item.spans:
            value = item.text[s.start : s.end]
            assert value and value == value.strip(), item.id


def test_the_default_rules_meet_their_thresholds_on_the_corpus(evaluation: Evaluation) -> None:
    failed = [(g.name, g.measured, g.threshold) for g in evaluation.gates if not g.passed]
    assert failed == []
    assert evaluation.group_recall["credential"] is not None
    assert evaluation.group_recall["credential"] >= 0.99
    for entity in ("EMAIL_ADDRESS", "IP_ADDRESS", "PHONE_NUMBER"):
        recall = evaluation.entities[entity].recall
        assert recall is not None and recall >= 0.95, entity
    assert evaluation.benign_false_positive_rate is not None
    assert evaluation.benign_false_positive_rate <= 0.01


def test_the_prefilter_never_changes_what_presidio_finds(evaluation: Evaluation) -> None:
    assert evaluation.prefilter_disagreements == []
    assert evaluation.prefilter_skipped > 100  # and it does skip Presidio on clean values


def test_no_labelled_secret_survives_redaction(evaluation: Evaluation) -> None:
    leaked = {
        name: m.leaked
        for name, m in evaluation.entities.items()
        if m.leaked and name != "PERSON"  # names need the optional NER engine
    }
    assert leaked == {}


class _Tables(HTMLParser):
    """Rows of each table by id, keyed by their data-row attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, list[str]]] = {}
        self._table: str | None = None
        self._row: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and (a.get("id") or "").startswith("table-"):
            self._table = str(a["id"])[6:]
            self.rows[self._table] = {}
        elif tag == "tr" and self._table and a.get("data-row"):
            self._row = str(a["data-row"])
            self.rows[self._table][self._row] = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table and self._row is not None:
            self.rows[self._table][self._row].append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None


def test_the_review_report_lists_every_rule_and_every_entity_with_metrics(tmp_path: Path) -> None:
    older = yaml.safe_load(DEFAULT_RULES_PATH.read_text())
    older["recognizers"] = [r for r in older["recognizers"] if r["name"] != "jwt"]
    older["entities"]["URL"]["min_score"] = 0.9
    older_path = tmp_path / "older.yaml"
    older_path.write_text(yaml.safe_dump(older))
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["redaction", "review", "--out", str(out), "--since", str(older_path)]
    )
    assert result.exit_code == 0, result.output
    page = (out / "redaction-review.html").read_text()
    assert page.startswith("<!doctype html>") and "<script" not in page
    tables = _Tables()
    tables.feed(page)
    rules = load_rules()
    assert set(tables.rows["recognizers"]) == {r.name for r in rules.recognizers}
    assert set(tables.rows["entities"]) >= set(rules.entities)
    for name, cells in tables.rows["entities"].items():
        assert len(cells) == 11, name
        assert cells[6] == "n/a" or 0.0 <= float(cells[6]) <= 1.0, name  # recall
    assert float(tables.rows["entities"]["API_TOKEN"][6]) >= 0.99
    assert set(tables.rows["allow"]) == {a.name for a in rules.allow}
    assert tables.rows["fields"]["comm_event.message"][2] == "scan"
    assert tables.rows["fields"]["span.attributes.prompt"][2] == "drop"
    changes = {key: cells[2] for key, cells in tables.rows["changes"].items()}
    assert changes["recognizer.jwt"] == "added"  # new relative to the older file
    assert changes["entity.URL"] == "tightened"  # min_score went down: more findings
    md = (out / "redaction-review.md").read_text()
    assert all(f"| {r.name} |" in md for r in rules.recognizers)
    assert '"passed": true' in (out / "redaction-review.json").read_text()


def test_the_review_exits_non_zero_under_a_recall_threshold(tmp_path: Path) -> None:
    weaker = yaml.safe_load(DEFAULT_RULES_PATH.read_text())
    weaker["recognizers"] = [r for r in weaker["recognizers"] if r["name"] != "aws_access_key_id"]
    path = tmp_path / "weaker.yaml"
    path.write_text(yaml.safe_dump(weaker))
    result = CliRunner().invoke(
        app, ["redaction", "review", "--rules", str(path), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 1
    assert "FAIL" in result.output
