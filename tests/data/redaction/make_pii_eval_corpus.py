"""Generate the independent PII evaluation set of issue 16 (``pii-eval-corpus.jsonl`` here).

Independent of the rules: the values come from public numbering-plan and format facts, not from
``redaction/rules.yaml``:

- **phones**: the ``phonenumbers`` library (Google's libphonenumber metadata, i.e. the ITU/national
  numbering plans) gives an example fixed-line and mobile number per region
  (``example_number_for_type``); the last digits are varied and kept only when
  ``is_valid_number`` still holds, and every number is written with ``format_number`` /
  ``format_out_of_country_calling_number`` in national form (with the trunk prefix, as
  written in that country), with the common separator variants (dashes, dots, none), and in
  international form (``+CC``, E.164, ``00CC`` and ``011 CC`` dialling prefixes);
- **IPv6**: the textual forms of RFC 4291 section 2.2 and RFC 5952 (full, ``::`` compressed,
  ``::1``, ``fe80::``, zone ids of RFC 4007 section 11, ``[addr]:port`` of RFC 3986, IPv4-mapped
  and embedded of RFC 4291/6052, upper and mixed case), in the shapes NCCL prints them
  (``[1]veth0:fe80::...%veth0<0>``, as in NVIDIA/nccl issue 529 and Oneflow issue 3586);
- **cards**: issuer ranges and lengths of ISO/IEC 7812 as listed on Wikipedia's "Payment card
  number" page (Maestro 12-19 digits, Visa 13/16/19, UnionPay 62 16-19, Discover 6011/644-649/
  65 16-19, JCB 3528-3589 16-19, Amex 34/37 15, Mastercard 51-55/2221-2720 16), Luhn-valid,
  written plain, in groups of four with spaces or dashes;
- **look-alikes** (no spans): telemetry that must stay untouched, written after real log lines
  (NCCL ``commId``/``busId`` lines as in NVIDIA/nccl issue 1267, nvidia-smi CSV, Xid lines, glog
  and ISO timestamps, byte counts, ports), invalid IPv6 (``::ffff:256.0.0.1``,
  ``1:2:3:4:5:6:7:8:9``, C++ scopes, MAC addresses, clock times, PCI ids) and card look-alikes
  (Luhn-invalid 16-digit numbers, 19-digit snowflake ids and counters outside issuer ranges).

Two splits from two seeds: ``dev`` (seed 16_101, small, not checked in) is what the rules were
tuned on; ``eval`` (seed 16_102, the default, checked in) is measured and gated by
tests/test_redaction_pii_eval.py. Items carry ``label`` (``phone:<REGION>``, ``ipv6``,
``card:<brand><length>`` or ``lookalike:<what>``) and ``syntax`` (the written form), which the
review report breaks recall and false positives down by.

    python tests/data/redaction/make_pii_eval_corpus.py [--split dev|eval] [--out PATH]
"""

# ruff: noqa: E501  (templates read best one per line)
from __future__ import annotations

import argparse
import ipaddress
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import phonenumbers as pn
from phonenumbers import PhoneNumberFormat as Fmt
from phonenumbers import PhoneNumberType as Typ

HERE = Path(__file__).resolve().parent
SEEDS = {"dev": 16_101, "eval": 16_102}
#: numbers per region and phone type (fixed line, mobile); the dev split is smaller
PER_TYPE = {"dev": 2, "eval": 6}
REGIONS = [
    "US",
    "CA",
    "GB",
    "IN",
    "DE",
    "FR",
    "JP",
    "BR",
    "CN",
    "AU",
    "MX",
    "ES",
    "IT",
    "KR",
    "NL",
    "SG",
    "ZA",
]
R = random.Random(0)


class Item:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[dict[str, object]] = []
        self.pos = 0

    def add(self, s: str, entity: str | None = None) -> Item:
        if entity:
            self.spans.append({"entity": entity, "start": self.pos, "end": self.pos + len(s)})
        self.parts.append(s)
        self.pos += len(s)
        return self

    @property
    def text(self) -> str:
        return "".join(self.parts)


def item(n: int, label: str, syntax: str, it: Item, kind: str = "span") -> dict[str, object]:
    entities = {str(s["entity"]) for s in it.spans}
    category = (
        "benign"
        if not entities
        else "contact"
        if "PHONE_NUMBER" in entities
        else "identity"
        if "CREDIT_CARD" in entities
        else "network"
    )
    field = {"span": "payload.error_message", "comm_event": "payload.message"}.get(
        kind, "payload.message"
    )
    return {
        "id": f"pii-{label.replace(':', '-')}-{syntax}-{n:04d}",
        "kind": kind,
        "field": field,
        "text": it.text,
        "spans": it.spans,
        "category": category,
        "label": label,
        "syntax": syntax,
    }


def templated(value: str, entity: str, templates: list[tuple[str, str]]) -> Item:
    before, after = R.choice(templates)
    return Item().add(before).add(value, entity).add(after)


# ---- phones -------------------------------------------------------------------------------------
PHONE_TEMPLATES = [
    ("on-call for job 48213 is reachable at ", " until 18:00 UTC"),
    ('prompt: "Hi, my phone number is ', ', please call me back about the invoice"'),
    ('{"user": "ops-team", "contact_phone": "', '", "severity": "page"}'),
    ("ticket 8812: user asked for a callback on ", " regarding the GPU quota"),
    ("PagerDuty escalation failed: could not SMS ", ""),
    ("Tel.: ", " (Mo-Fr 9-17 Uhr)"),
    ("support hotline ", " / mention your cluster name"),
    ("completion: You can reach the front desk on ", "."),
    ("contact: ", ""),
    # no context word at all: a bare run without trunk prefix is not expected to be found here
    ("escalation list for rack B7: ", ", then the storage team"),
]


def vary(region: str, typ: int) -> pn.PhoneNumber | None:
    """The region's example number with its last digits changed, if still valid and typed."""
    ex = pn.example_number_for_type(region, typ)
    if ex is None:
        return None
    nsn = str(pn.national_significant_number(ex))
    for _ in range(50):
        k = R.choice([2, 3, 4])
        cand = nsn[:-k] + "".join(R.choice("0123456789") for _ in range(k))
        num = pn.parse(f"+{ex.country_code}{cand}")
        kind = pn.number_type(num)
        if pn.is_valid_number(num) and kind in (typ, Typ.FIXED_LINE_OR_MOBILE) and cand != nsn:
            return num
    return ex


def phone_forms(num: pn.PhoneNumber) -> dict[str, str]:
    national = pn.format_number(num, Fmt.NATIONAL)
    intl = pn.format_number(num, Fmt.INTERNATIONAL)
    digits_sep = national.replace("(", "").replace(")", "")
    # dialled from abroad: from a country whose international prefix is 00 (FR, or DE for FR)
    home = pn.region_code_for_number(num)
    idd00 = pn.format_out_of_country_calling_number(num, "DE" if home == "FR" else "FR")
    assert idd00.startswith("00 "), idd00
    forms = {
        "national": national,
        "national_dashes": "-".join(digits_sep.replace("-", " ").split()),
        "national_dots": ".".join(digits_sep.replace("-", " ").split()),
        "national_compact": "".join(c for c in national if c.isdigit()),
        "international": intl,
        "e164": pn.format_number(num, Fmt.E164),
        "idd_00": idd00,
        "idd_00_compact": "00" + idd00[3:],
        "idd_011": pn.format_out_of_country_calling_number(num, "US"),
    }
    if num.country_code == 1:  # inside the NANP a long-distance call is 1-NPA-NXX-XXXX, not 011
        forms["idd_011"] = "1-" + forms["national_dashes"]
    return forms


def phone_items(split: str) -> list[dict[str, object]]:
    out = []
    n = 0
    for region in REGIONS:
        for typ in (Typ.FIXED_LINE, Typ.MOBILE):
            for _ in range(PER_TYPE[split]):
                num = vary(region, typ)
                if num is None:
                    continue
                forms = phone_forms(num)
                for syntax in R.sample(sorted(forms), 4 if split == "eval" else 3):
                    value = forms[syntax]
                    n += 1
                    it = templated(value, "PHONE_NUMBER", PHONE_TEMPLATES)
                    out.append(item(n, f"phone:{region}", f"phone_{syntax}", it))
    return out


# ---- IPv6 -----------------------------------------------------------------------------------------
def rand_ipv6(prefix: str) -> ipaddress.IPv6Address:
    base = int(ipaddress.IPv6Address(prefix))
    return ipaddress.IPv6Address(
        base | R.getrandbits(64) & ((1 << 64) - 1) if R.random() < 0.6 else base | R.getrandbits(16)
    )


def ipv4() -> str:
    return f"{R.choice([192, 198, 203, 10, 172])}.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}"


def ipv6_forms() -> dict[str, Callable[[], tuple[str, str, str]]]:
    """Each form gives (before, address, after): the address alone is the span."""

    def iface() -> str:
        return R.choice(["eth0", "ib0", "enp1s0f0", "veth25f2e72", "ens7", "bond0"])

    def full() -> tuple[str, str, str]:
        return (
            "peer address ",
            rand_ipv6(R.choice(["2001:db8::", "2a02:6b8::", "fd00:ab::"])).exploded,
            " unreachable",
        )

    def compressed() -> tuple[str, str, str]:
        return (
            "MASTER_ADDR=",
            str(rand_ipv6(R.choice(["2001:db8::", "2a02:6b8:fc1d::", "2600:1f18::"]))),
            " MASTER_PORT=29500",
        )

    def loopback() -> tuple[str, str, str]:
        return ("c10d: TCPStore listening on ", R.choice(["::1", "0:0:0:0:0:0:0:1"]), " port 29500")

    def trailing() -> tuple[str, str, str]:
        return (
            "route add ",
            R.choice(["fe80::", "2001:db8::", "2001:db8:85a3::", "fd12:3456:789a::"]),
            "/64 dev eth0",
        )

    def zone() -> tuple[str, str, str]:
        i = iface()
        return ("ping6 -c1 ", str(rand_ipv6("fe80::")), f"%{i} timed out")

    def bracket_port() -> tuple[str, str, str]:
        return (
            "connect to [",
            str(rand_ipv6(R.choice(["2001:db8::", "2a02:6b8::"]))),
            f"]:{R.choice([443, 29500, 9092, 8080])} failed: Connection refused",
        )

    def mapped() -> tuple[str, str, str]:
        return ("accepted connection from ", f"::ffff:{ipv4()}", "")

    def embedded() -> tuple[str, str, str]:
        return ("NAT64 peer ", f"64:ff9b::{ipv4()}", " reset the stream")

    def mixed_case() -> tuple[str, str, str]:
        a = str(rand_ipv6("2001:db8::"))
        return ("X-Forwarded-For: ", "".join(c.upper() if R.random() < 0.5 else c for c in a), "")

    def upper() -> tuple[str, str, str]:
        return ("client ", str(rand_ipv6("2001:db8:abcd::")).upper(), " sent RST")

    def nccl_ifname() -> tuple[str, str, str]:
        i = iface()
        return (
            f"node017:4242:4242 [0] NCCL INFO NET/Socket : Using [0]{i}:",
            str(rand_ipv6("fe80::")),
            f"%{i}<0>",
        )

    def nccl_global() -> tuple[str, str, str]:
        return (
            "NCCL INFO Bootstrap : Using [1]veth0:",
            str(rand_ipv6("2a02:6b8:fc1d:3606::")),
            "<0>",
        )

    def cidr() -> tuple[str, str, str]:
        return ("allowlist ", str(rand_ipv6("2001:db8:1234::")), "/128 added")

    return {
        "ipv6_full": full,
        "ipv6_compressed": compressed,
        "ipv6_loopback": loopback,
        "ipv6_trailing_colons": trailing,
        "ipv6_zone_id": zone,
        "ipv6_bracket_port": bracket_port,
        "ipv6_ipv4_mapped": mapped,
        "ipv6_ipv4_embedded": embedded,
        "ipv6_mixed_case": mixed_case,
        "ipv6_upper_case": upper,
        "ipv6_nccl_ifname": nccl_ifname,
        "ipv6_nccl_global": nccl_global,
        "ipv6_cidr": cidr,
    }


def ipv6_items(split: str) -> list[dict[str, object]]:
    out = []
    n = 0
    for syntax, gen in ipv6_forms().items():
        for _ in range(3 if split == "dev" else 10):
            before, addr, after = gen()
            ipaddress.IPv6Address(addr)  # every labelled address is valid
            n += 1
            out.append(
                item(
                    n,
                    "ipv6",
                    syntax,
                    Item().add(before).add(addr, "IP_ADDRESS").add(after),
                    "comm_event",
                )
            )
    return out


# ---- cards ----------------------------------------------------------------------------------------
#: (label, issuer prefixes, length): ISO/IEC 7812 issuer ranges as listed on Wikipedia's
#: "Payment card number" page
CARDS: list[tuple[str, list[str], int]] = [
    ("maestro12", ["5018", "5020", "5038", "5893", "6304", "6759", "6761", "6762", "6763"], 12),
    ("visa13", ["4"], 13),
    ("amex15", ["34", "37"], 15),
    ("mastercard16", ["51", "53", "55", "2221", "2720"], 16),
    ("visa16", ["4"], 16),
    ("maestro19", ["5018", "5020", "6304", "6759", "6763"], 19),
    ("visa19", ["4"], 19),
    ("unionpay19", ["62"], 19),
    ("discover19", ["6011", "644", "649", "65"], 19),
    ("jcb19", ["3528", "3589"], 19),
]


def luhn_complete(body: str) -> str:
    total = 0
    for i, c in enumerate(reversed(body)):
        d = int(c)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    return luhn_complete(number[:-1]) == number


def card_number(prefixes: list[str], length: int) -> str:
    p = R.choice(prefixes)
    return luhn_complete(p + "".join(R.choice("0123456789") for _ in range(length - len(p) - 1)))


def grouped(number: str, sep: str) -> str:
    if len(number) == 15:  # Amex is written 4-6-5
        return sep.join([number[:4], number[4:10], number[10:]])
    if len(number) == 13:  # 4-4-5, no lone last digit
        return sep.join([number[:4], number[4:8], number[8:]])
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


CARD_TEMPLATES = [
    ("payment declined for card ", " (insufficient funds)"),
    ('prompt: "my card number is ', ' and it expires 09/29, can you check the charge?"'),
    ('{"billing": {"card_number": "', '", "currency": "EUR"}}'),
    ("stripe webhook: charge.failed card=", " reason=do_not_honor"),
    ("user pasted ", " into the chat"),
]


def card_items(split: str) -> list[dict[str, object]]:
    out = []
    n = 0
    for label, prefixes, length in CARDS:
        for _ in range(3 if split == "dev" else 9):
            number = card_number(prefixes, length)
            for syntax, sep in (("card_plain", ""), ("card_spaces", " "), ("card_dashes", "-")):
                if R.random() < 0.34 or split == "eval":
                    n += 1
                    value = number if not sep else grouped(number, sep)
                    out.append(
                        item(
                            n,
                            f"card:{label}",
                            syntax,
                            templated(value, "CREDIT_CARD", CARD_TEMPLATES),
                        )
                    )
    return out


# ---- look-alikes ----------------------------------------------------------------------------------
def hexs(k: int) -> str:
    return "".join(R.choice("0123456789abcdef") for _ in range(k))


def luhn_bad(length: int, prefix: str) -> str:
    good = card_number([prefix], length)
    return good[:-1] + str((int(good[-1]) + R.randint(1, 9)) % 10)


def non_card_19() -> str:
    """A 19-digit number outside every issuer range of CARDS (a snowflake id, a counter)."""
    return R.choice(["1", "7", "8", "9"]) + "".join(R.choice("0123456789") for _ in range(18))


LOOKALIKES: dict[str, Callable[[], str]] = {
    "gpu_uuid": lambda: f"GPU-{hexs(8)}-{hexs(4)}-{hexs(4)}-{hexs(4)}-{hexs(12)} temperature 71 C",
    "mig_uuid": lambda: (
        f"MIG-{hexs(8)}-{hexs(4)}-{hexs(4)}-{hexs(4)}-{hexs(12)} instance 3 memory 19968 MiB"
    ),
    "pci_id": lambda: (
        f"NVRM: Xid (PCI:0000:{hexs(2)}:00): 79, pid={R.randint(1000, 99999)}, GPU has fallen off the bus."
    ),
    "nccl_comm_id": lambda: (
        f"node017:{R.randint(1000, 99999)}:{R.randint(1000, 99999)} [0] NCCL INFO comm 0x{hexs(12)} rank {R.randint(0, 63)} nranks 64 cudaDev 0 nvmlDev 0 busId {R.choice(['18000', '3b000', '86000'])} commId 0x{hexs(16)} - Init START"
    ),
    "nvidia_smi_csv": lambda: (
        f"0, NVIDIA H100 80GB HBM3, 00000000:{hexs(2).upper()}:00.0, 550.{R.randint(10, 99)}.{R.randint(1, 20)}, {R.randint(1000, 81559)} MiB, {R.randint(50, 700)}.{R.randint(10, 99)} W"
    ),
    "version": lambda: (
        f"NCCL version 2.{R.randint(10, 23)}.{R.randint(1, 9)}+cuda12.{R.randint(0, 6)} driver 550.{R.randint(10, 99)}.{R.randint(1, 20)} kernel 5.15.0-{R.randint(50, 130)}-generic"
    ),
    "step_counter": lambda: (
        f"step={R.randint(10**5, 10**9)} loss={R.random():.4f} tokens/s={R.randint(10**4, 10**6)} seq {R.randint(10**6, 10**10)}"
    ),
    "timestamp": lambda: (
        f"{R.choice(['2026-12-04 18:30:05,123', '2026-12-04T18:30:05.123456Z', 'E1204 10:12:01.123456 4242'])} watchdog fired after {R.randint(600, 1800)} s; epoch {R.randint(1_700_000_000, 1_799_999_999)}"
    ),
    "byte_count": lambda: (
        f"allreduce of {R.choice([1073741824, 2147483648, 536870912, 4294967296])} bytes took {R.randint(100, 999999)} us, {R.randint(10**9, 10**12)} B total"
    ),
    "port_number": lambda: (
        f"rendezvous at node{R.randint(100, 999)}:{R.choice([29500, 29400, 6379, 9092])} and tcp://master:{R.randint(20000, 65000)} (MASTER_PORT={R.randint(20000, 65000)})"
    ),
    "slurm_ids": lambda: (
        f"JobId={R.randint(10**6, 10**8)} JobName=pretrain UserId=svc(1001) GroupId=svc(1001) ArrayJobId={R.randint(10**6, 10**8)} NodeList=gpu[{R.randint(100, 199)}-{R.randint(200, 299)}]"
    ),
    "clock_time": lambda: (
        f"checkpoint saved at {R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d} (elapsed 01:{R.randint(10, 59)}:{R.randint(10, 59)})"
    ),
    "mac_address": lambda: (
        f"link/ether {':'.join(hexs(2) for _ in range(6))} brd ff:ff:ff:ff:ff:ff"
    ),
    "ipv6_invalid_mapped": lambda: (
        f"bad peer ::ffff:{R.randint(256, 999)}.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(0, 255)} rejected"
    ),
    "ipv6_nine_groups": lambda: (
        f"label {':'.join(str(R.randint(1, 9)) for _ in range(9))} is not an address"
    ),
    "cpp_scope": lambda: (
        f"terminate called after throwing an instance of 'c10::Error' in std::vector<at::Tensor>::at via {R.choice(['a::b', 'ab::cd', 'be::ef', 'cu::da', 'nccl::Comm'])}"
    ),
    "card_luhn_invalid": lambda: (
        f"order id {grouped(luhn_bad(16, R.choice(['4', '51', '6011'])), R.choice([' ', '-']))} shipped"
    ),
    "nineteen_digit_id": lambda: f"message_id={non_card_19()} seq={non_card_19()}",
}


def lookalike_items(split: str) -> list[dict[str, object]]:
    out = []
    n = 0
    for what, gen in LOOKALIKES.items():
        for _ in range(4 if split == "dev" else 12):
            n += 1
            out.append(item(n, f"lookalike:{what}", "log_line", Item().add(gen()), "comm_event"))
    return out


def valid_in(value: str, region: str) -> bool:
    try:
        return bool(pn.is_valid_number(pn.parse(value, region)))
    except pn.NumberParseException:
        return False


def verify(items: list[dict[str, object]]) -> None:
    ids = Counter(str(i["id"]) for i in items)
    assert max(ids.values()) == 1, ids.most_common(3)
    for i in items:
        text = str(i["text"])
        for s in i["spans"]:  # type: ignore[attr-defined]
            v = text[s["start"] : s["end"]]
            assert v and v == v.strip(), (i["id"], v)
            if s["entity"] == "CREDIT_CARD":
                assert luhn_ok(v.replace(" ", "").replace("-", "")), v
            if s["entity"] == "PHONE_NUMBER":
                region = str(i["label"]).split(":")[1]
                # national forms parse in their region, 00 and 011 forms where they are dialled
                assert any(valid_in(v, r) for r in (region, "FR", "DE", "US")), (i["id"], v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=sorted(SEEDS), default="eval")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    R.seed(SEEDS[args.split])
    items = (
        phone_items(args.split)
        + ipv6_items(args.split)
        + card_items(args.split)
        + lookalike_items(args.split)
    )
    verify(items)
    name = "pii-eval-corpus.jsonl" if args.split == "eval" else "pii-dev-corpus.jsonl"
    out = args.out or HERE / name
    out.write_text(
        "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8"
    )
    c = Counter(str(i["category"]) for i in items)
    print(
        f"{out}: {len(items)} items; {dict(c)}; {len({i['label'] for i in items})} labels",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
