"""Issue 16, PII: the rules on the independent PII evaluation set (tests/data/redaction/
make_pii_eval_corpus.py, split ``eval``), gated per phone region, per written form, per card
kind and on the telemetry look-alikes; and the pieces that make those figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rankscope.redaction.engine import PresidioRedactor
from rankscope.redaction.pii import valid_ip_address, valid_national_phone
from rankscope.redaction.report import write_review
from rankscope.redaction.review import Evaluation, GroupMetrics, evaluate, load_corpus
from rankscope.redaction.rules import DEFAULT_RULES_PATH, load_rules, parse_rules

EVAL = Path(__file__).parent / "data" / "redaction" / "pii-eval-corpus.jsonl"
KEY = b"pii-eval-test-key-0123456789"
PHONE_RECALL = 0.95
CARD_IP_RECALL = 0.99
MAX_FALSE_POSITIVES = 0.01


@pytest.fixture(scope="module")
def redactor() -> PresidioRedactor:
    return PresidioRedactor(load_rules(), KEY)


@pytest.fixture(scope="module")
def evaluation(redactor: PresidioRedactor) -> Evaluation:
    return evaluate(redactor, load_corpus(EVAL))


def _groups(ev: Evaluation, prefix: str) -> dict[str, GroupMetrics]:
    return {n: g for n, g in (ev.by_label | ev.by_syntax).items() if n.startswith(prefix)}


def test_the_eval_set_covers_12_regions_both_phone_forms_ipv6_forms_and_card_lengths() -> None:
    items = load_corpus(EVAL)
    regions = {i.label.split(":")[1] for i in items if i.label.startswith("phone:")}
    assert len(regions) >= 12
    for region in regions:
        forms = {i.syntax for i in items if i.label == f"phone:{region}"}
        assert any(f.startswith("phone_national") for f in forms), region
        assert forms & {"phone_international", "phone_e164", "phone_idd_00", "phone_idd_011"}
    ipv6 = {i.syntax for i in items if i.label == "ipv6"}
    assert {"ipv6_zone_id", "ipv6_bracket_port", "ipv6_ipv4_mapped", "ipv6_loopback"} <= ipv6
    assert {"ipv6_trailing_colons", "ipv6_mixed_case", "ipv6_nccl_ifname"} <= ipv6
    cards = {i.label for i in items if i.label.startswith("card:")}
    assert {"card:maestro12", "card:visa19", "card:unionpay19", "card:discover19"} <= cards
    lookalikes = {i.label for i in items if i.benign}
    assert {
        "lookalike:ipv6_invalid_mapped",
        "lookalike:cpp_scope",
        "lookalike:pci_id",
        "lookalike:nineteen_digit_id",
        "lookalike:card_luhn_invalid",
    } <= lookalikes


def test_phone_recall_per_region_and_per_form(evaluation: Evaluation) -> None:
    phone = evaluation.entities["PHONE_NUMBER"]
    assert phone.recall is not None and phone.recall >= PHONE_RECALL, phone.missed[:10]
    groups = _groups(evaluation, "phone")
    assert len(groups) >= 12 + 5
    low = {n: (g.recall, g.missed[:3]) for n, g in groups.items() if (g.recall or 0) < PHONE_RECALL}
    assert low == {}


def test_card_and_ipv6_recall_per_kind_and_per_form(evaluation: Evaluation) -> None:
    for entity in ("CREDIT_CARD", "IP_ADDRESS"):
        m = evaluation.entities[entity]
        assert m.recall is not None and m.recall >= CARD_IP_RECALL, (entity, m.missed[:10])
    groups = _groups(evaluation, "card") | _groups(evaluation, "ipv6")
    low = {
        n: (g.recall, g.missed[:3]) for n, g in groups.items() if (g.recall or 0) < CARD_IP_RECALL
    }
    assert low == {}


def test_false_positives_on_telemetry_look_alikes(evaluation: Evaluation) -> None:
    rate = evaluation.benign_false_positive_rate
    assert rate is not None and rate <= MAX_FALSE_POSITIVES, evaluation.benign_flagged
    flagged = {n: g.flagged_ids for n, g in _groups(evaluation, "lookalike").items() if g.flagged}
    assert flagged == {}


def test_the_gates_pass_and_only_missed_values_survive(evaluation: Evaluation) -> None:
    assert [(g.name, g.measured) for g in evaluation.gates if not g.passed] == []
    assert evaluation.prefilter_disagreements == []
    # a value counted as caught is never readable afterwards; cards and addresses never leak
    over = {
        n: (m.leaked, m.labelled - m.caught)
        for n, m in evaluation.entities.items()
        if m.leaked > m.labelled - m.caught
    }
    assert over == {}
    assert evaluation.entities["CREDIT_CARD"].leaked == 0
    assert evaluation.entities["IP_ADDRESS"].leaked == 0


def test_each_region_gate_uses_the_phone_threshold(evaluation: Evaluation) -> None:
    gates = {g.name: g for g in evaluation.gates}
    assert gates["recall kind phone:DE"].threshold == PHONE_RECALL
    assert gates["recall kind card:visa19"].threshold == CARD_IP_RECALL


def test_the_review_report_shows_pii_figures_per_region_and_form(
    evaluation: Evaluation, redactor: PresidioRedactor, tmp_path: Path
) -> None:
    paths = write_review(
        tmp_path, redactor.rules, "rules.yaml", evaluation, load_corpus(EVAL), [], None
    )
    md = paths.markdown.read_text(encoding="utf-8")
    for row in ("| phone:DE |", "| phone:SG |", "| phone_national_dots |", "| ipv6_zone_id |"):
        assert row in md
    assert "| card:maestro12 |" in md


@pytest.mark.parametrize(
    "text",
    [
        "bad peer ::ffff:256.0.0.1 rejected",
        "label 1:2:3:4:5:6:7:8:9 is not an address",
        "in std::vector<at::Tensor> via a::b and be::ef, c10::Error",
        "link/ether 00:1a:2b:3c:4d:5e brd ff:ff:ff:ff:ff:ff at 12:34:56",
        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "message_id=1734567890123456789 order 4111-1111-1111-1112",
        "allreduce of 1073741824 bytes, MASTER_PORT=29500, ran for 1234567 milliseconds",
        # real line shapes: a kernel log line (printk time since boot) and NCCL INFO lines as in
        # NVIDIA/nccl issue 1267 and Oneflow-Inc/oneflow issue 3586
        "Dec 04 18:30:05 node017 kernel: [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79",
        "[12345.678901] mlx5_core 0000:3b:00.0: mlx5_fw_fatal_reporter_err_work",
        "worker:101542:101934 [0] NCCL INFO threadThresholds 8/8/64 | 16/8/64 | 8/8/64",
        "instance-8g-96c-2:525781:525957 [0] NCCL INFO Channel 01/32 :    0 1 2 3 4 5 6 7",
        "[rank0]: iteration 1200/500000 | consumed samples: 1228800 | global batch size: 1024",
    ],
)
def test_look_alikes_stay_untouched(redactor: PresidioRedactor, text: str) -> None:
    assert redactor.redact(text).text == text


@pytest.mark.parametrize(
    ("text", "value", "replacement"),
    [
        ("route add fe80::/64 dev eth0", "fe80::", "[IP_ADDRESS:"),
        ("[0]veth0:fe80::380d:bfff:fe5b:54d2%veth0<0>", "fe80::380d", "[IP_ADDRESS:"),
        ("connect to [2001:db8::1]:443 failed", "2001:db8::1", "[IP_ADDRESS:"),
        ("card 6759 6498 2648 and 6011 2701 9834 8126 000", "6759 6498 2648", "[CREDIT_CARD]"),
        ("Tel.: 030 123456 (Berlin)", "030 123456", "[PHONE_NUMBER]"),
        ("reach me on 06.12.34.56.78", "06.12.34.56.78", "[PHONE_NUMBER]"),
        ("callback 810.12.34.56 please", "810.12.34.56", "[PHONE_NUMBER]"),
    ],
)
def test_pii_in_the_new_forms_is_replaced(
    redactor: PresidioRedactor, text: str, value: str, replacement: str
) -> None:
    out = redactor.redact(text).text
    assert value not in out and replacement in out


def test_a_19_digit_card_is_masked_whole(redactor: PresidioRedactor) -> None:
    out = redactor.redact("card 6011 2701 9834 8126 000 declined").text
    assert out == "card [CREDIT_CARD] declined"


def test_a_national_number_must_be_written_as_its_region_writes_it() -> None:
    regions = ("US", "GB", "DE", "SG")
    assert valid_national_phone("030 123456", regions)  # Berlin, trunk prefix 0
    assert not valid_national_phone("30 123456", regions)  # the same digits without it
    assert valid_national_phone("6123 4567", regions)  # Singapore has no trunk prefix
    assert not valid_national_phone("030 123456", ("US", "GB"))  # DE not configured
    assert not valid_national_phone("2026-12-04", regions)
    assert valid_national_phone("٠٣٠ ١٢٣٤٥٦", regions)  # Arabic-Indic digits
    fullwidth = "".join(chr(0xFF10 + int(c)) if c.isdigit() else c for c in "030 123456")
    assert valid_national_phone(fullwidth, regions)


def test_ip_validator_reads_addresses_only() -> None:
    assert valid_ip_address("fe80::1") and valid_ip_address("::ffff:192.0.2.1")
    assert not valid_ip_address("::ffff:256.0.0.1")
    assert not valid_ip_address("1:2:3:4:5:6:7:8:9")


def test_the_phone_regions_setting_decides_which_national_formats_are_found() -> None:
    doc = yaml.safe_load(DEFAULT_RULES_PATH.read_text(encoding="utf-8"))
    text = "Tel.: 030 123456 (Berlin)"
    assert (
        "[PHONE_NUMBER]"
        in PresidioRedactor(parse_rules(yaml.safe_dump(doc)), KEY).redact(text).text
    )
    doc["settings"]["phone_regions"] = ["US", "UK"]  # UK is read as GB
    rules = parse_rules(yaml.safe_dump(doc))
    assert rules.settings.phone_regions == ["US", "GB"]
    assert PresidioRedactor(rules, KEY).redact(text).text == text


def test_an_unknown_phone_region_is_refused_with_a_reason() -> None:
    doc = yaml.safe_load(DEFAULT_RULES_PATH.read_text(encoding="utf-8"))
    doc["settings"]["phone_regions"] = ["US", "XX"]
    with pytest.raises(ValueError, match=r"phone_regions: unknown regions \['XX'\]"):
        parse_rules(yaml.safe_dump(doc))
