"""Generate the labelled redaction corpus: ``rankscope/examples/redaction-corpus.jsonl``.

Deterministic (``random.Random(20261203)``, standard library only): running

    python tests/data/redaction/make_corpus.py

rewrites ``redaction-corpus.jsonl`` byte for byte. Every text is built piece by piece, and the
offsets of each sensitive value are taken while it is appended, so no offset is ever written by
hand. The script then reads the file back and checks every span (see ``verify``). Labelling
conventions: ``README.md`` next to this file.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import random
import re
import string
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

SEED = 20261203
#: shipped in the package: ``rankscope redaction review`` reads it from an installed wheel too
OUT = Path(__file__).resolve().parents[3] / "rankscope" / "examples" / "redaction-corpus.jsonl"
MAX_CHARS = 4000
SHORT_TEXT = 256  # NodeInventory.extra values are ShortText

R = random.Random(SEED)
T = TypeVar("T")

KINDS = (
    "gpu_event",
    "comm_event",
    "span",
    "scheduler_event",
    "fabric_event",
    "agent_event",
    "node_inventory",
)
CREDENTIAL = (
    "CLOUD_ACCESS_KEY",
    "CLOUD_SECRET_KEY",
    "API_TOKEN",
    "BEARER_TOKEN",
    "JWT",
    "PRIVATE_KEY",
    "PASSWORD",
    "URL_SIGNATURE",
)
CONTACT = ("EMAIL_ADDRESS", "PHONE_NUMBER")
IDENTITY = ("PERSON", "HOME_DIR_USER", "CREDIT_CARD")
NETWORK = ("IP_ADDRESS", "URL")
ENTITIES = CREDENTIAL + CONTACT + IDENTITY + NETWORK

F_MSG = "payload.message"
F_ERR = "payload.error_message"
F_REASON = "payload.reason"
F_CMD = "payload.attributes.cmdline"
F_XCMD = "payload.extra.cmdline"

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B32 = string.ascii_uppercase + "234567"
URLSAFE = ALNUM + "_-"
PW_CHARS = ALNUM + "!#%^*_-+"
PW_URL_CHARS = ALNUM + "!*_-"
BEARER_CHARS = ALNUM + "._~+/-"


# ---------------------------------------------------------------------------------------------
# Text builder: appends pieces and records where each labelled value lands.
# ---------------------------------------------------------------------------------------------


class S:
    """A labelled piece: ``entity`` covers exactly what ``parts`` append (spans may nest)."""

    __slots__ = ("entity", "parts")

    def __init__(self, entity: str, *parts: Piece) -> None:
        assert entity in ENTITIES, entity
        self.entity = entity
        self.parts = parts


Piece = str | int | S | Sequence["Piece"]


@dataclass
class Span:
    entity: str
    start: int
    end: int


class Text:
    def __init__(self) -> None:
        self._parts: list[str] = []
        self._pos = 0
        self.spans: list[Span] = []

    def _append(self, s: str) -> None:
        self._parts.append(s)
        self._pos += len(s)

    def put(self, *pieces: Piece) -> Text:
        for p in pieces:
            if isinstance(p, str):
                self._append(p)
            elif isinstance(p, int):
                self._append(str(p))
            elif isinstance(p, S):
                span = Span(p.entity, self._pos, -1)
                self.spans.append(span)  # appended before its children: spans stay in start order
                self.put(*p.parts)
                span.end = self._pos
            else:
                self.put(*p)
        return self

    def fmt(self, template: str, **kw: Piece) -> Text:
        """``str.format``-style: each ``{name}`` is replaced by the piece ``kw[name]``."""
        for literal, name, _spec, _conv in string.Formatter().parse(template):
            self._append(literal)
            if name is not None:
                self.put(kw[name])
        return self

    @property
    def text(self) -> str:
        return "".join(self._parts)


def txt(*pieces: Piece) -> Text:
    return Text().put(*pieces)


Draft = tuple[str, str, Text]  # (kind, field, text)
Template = Callable[[], Draft]


# ---------------------------------------------------------------------------------------------
# Random helpers and value generators
# ---------------------------------------------------------------------------------------------


def pick(seq: Sequence[T]) -> T:
    return R.choice(seq)


def chance(p: float) -> bool:
    return R.random() < p


def rs(alphabet: str, n: int) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def edge_alnum(alphabet: str, n: int) -> str:
    """n chars of alphabet whose first and last char are alphanumeric."""
    if n <= 2:
        return rs(ALNUM, n)
    return rs(ALNUM, 1) + rs(alphabet, n - 2) + rs(ALNUM, 1)


def digits(n: int) -> str:
    return str(R.randint(1, 9)) + rs(string.digits, n - 1)


def hexid(n: int) -> str:
    return rs(HEX, n)


def uuid4() -> str:
    h = hexid(32)
    variant = pick("89ab")
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:32]}"


def b64(n_bytes: int) -> str:
    return base64.b64encode(R.randbytes(n_bytes)).decode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def aws_key_id(temporary: bool = False) -> str:
    return ("ASIA" if temporary else "AKIA") + rs(B32, 16)


def aws_secret() -> str:
    return rs(ALNUM + "/+", 40)


def google_api_key() -> str:
    return "AIza" + ("Sy" + rs(URLSAFE, 33) if chance(0.8) else rs(URLSAFE, 35))


def hf_token() -> str:
    return "hf_" + rs(string.ascii_letters, 34)


def github_token(prefix: str | None = None) -> str:
    return (prefix or pick(("ghp_", "gho_", "ghs_"))) + rs(ALNUM, 36)


def github_pat() -> str:
    return "github_pat_" + rs(ALNUM, 22) + "_" + rs(ALNUM, 59)


def openai_key() -> str:
    if chance(0.4):
        return "sk-" + rs(ALNUM, 20) + "T3BlbkFJ" + rs(ALNUM, 20)
    n = R.randint(100, 156)
    k = R.randint(40, n - 40)
    return "sk-proj-" + rs(URLSAFE, k) + "T3BlbkFJ" + edge_alnum(URLSAFE, n - 8 - k)


def slack_token() -> str:
    kind = pick(("xoxb", "xoxp"))
    tail = rs(ALNUM, 24) if kind == "xoxb" else hexid(32)
    return f"{kind}-{digits(R.randint(10, 13))}-{digits(R.randint(10, 13))}-{tail}"


def gitlab_pat() -> str:
    return "glpat-" + rs(URLSAFE, 20)


def wandb_key() -> str:
    return hexid(40)


def generic_token() -> str:
    style = R.randrange(6)
    if style == 0:
        return rs(ALNUM, R.randint(24, 48))
    if style == 1:
        return "dapi" + hexid(32)
    if style == 2:
        return uuid4()
    if style == 3:
        return f"{rs(string.ascii_lowercase, 3)}_{rs(ALNUM, 8)}.{rs(ALNUM, R.randint(20, 36))}"
    if style == 4:
        return rs(ALNUM, 25)
    return edge_alnum(ALNUM + "_-.", R.randint(16, 64))


def bearer_token() -> str:
    style = R.randrange(4)
    if style == 0:
        tok = "ya29." + edge_alnum(URLSAFE, R.randint(20, 55))
    elif style == 1:
        tok = edge_alnum(BEARER_CHARS, R.randint(20, 60))
    elif style == 2:
        tok = rs(ALNUM, R.randint(20, 40))
    else:
        tok = f"{rs(ALNUM, 8)}.{rs(ALNUM, 12)}~{rs(ALNUM, R.randint(8, 20))}"
    tok = tok[:60]
    if tok.startswith("eyJ"):
        tok = "A" + tok[1:]
    return tok


JWT_ISSUERS = (
    "https://auth.corp.example",
    "https://login.acme-ai.com/oauth2",
    "kubernetes/serviceaccount",
    "https://sso.example.com/realms/ml",
    "rankscope-gateway",
)
JWT_SUBJECTS = (
    "system:serviceaccount:ml-train:trainer",
    "ckpt-uploader",
    "user:8412",
    "svc-rankscope-agent",
    "ray-job-submitter",
    "c3a1f0de-7b2e-4c1a-9f3d-5e6a7b8c9d0e",
)


def jwt() -> str:
    header: dict[str, str] = {"alg": "HS256", "typ": "JWT"}
    if chance(0.3):
        header = {"typ": "JWT", "alg": "HS256"}
    if chance(0.3):
        header["kid"] = f"k{R.randint(1, 9)}-2026"
    iat = 1796200000 + R.randint(0, 90000)
    claims: dict[str, object] = {"sub": pick(JWT_SUBJECTS), "iss": pick(JWT_ISSUERS)}
    if chance(0.6):
        claims["aud"] = pick(("rankscope", "ray-dashboard", "mlflow", "object-proxy"))
    claims["iat"] = iat
    claims["exp"] = iat + pick((900, 3600, 86400))
    if chance(0.5):
        claims["scope"] = pick(("read:metrics", "jobs:submit", "ckpt:write ckpt:read", "admin"))
    if chance(0.3):
        claims["jti"] = uuid4()
    seg = [
        b64url(json.dumps(header, separators=(",", ":")).encode()),
        b64url(json.dumps(claims, separators=(",", ":")).encode()),
        b64url(R.randbytes(32)),
    ]
    return ".".join(seg)


# DER prefixes, so the bodies start the way real keys do ("MIIEpAIBAAKCAQEA...").
PEM_KINDS: dict[str, tuple[str, str, int, int]] = {
    # name: (PEM label, DER prefix hex, total DER bytes, line width)
    "rsa2048": ("RSA PRIVATE KEY", "308204a40201000282010100", 1192, 64),
    "rsa1024": ("RSA PRIVATE KEY", "3082025c02010002818100", 608, 64),
    "pkcs8-rsa": (
        "PRIVATE KEY",
        "308204be020100300d06092a864886f70d0101010500048204a8308204a40201000282010100",
        1218,
        64,
    ),
    "pkcs8-ec": (
        "PRIVATE KEY",
        "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420",
        138,
        64,
    ),
    "ec": ("EC PRIVATE KEY", "30770201010420", 121, 64),
    "openssh": (
        "OPENSSH PRIVATE KEY",
        # "openssh-key-v1\0", cipher "none", kdf "none", no kdf options, 1 key, ssh-ed25519
        "6f70656e7373682d6b65792d763100000000046e6f6e65000000046e6f6e6500000000000000"
        "01000000330000000b7373682d6564323535313900000020",
        234,
        70,
    ),
}


def pem_block(kind: str | None = None) -> str:
    kind = kind or pick(tuple(PEM_KINDS))
    label, prefix_hex, total, width = PEM_KINDS[kind]
    prefix = bytes.fromhex(prefix_hex)
    if kind == "ec":
        body = (
            prefix
            + R.randbytes(32)
            + bytes.fromhex("a00a06082a8648ce3d030107a144034200")
            + b"\x04"
            + R.randbytes(64)
        )
    else:
        body = prefix + R.randbytes(total - len(prefix))
    enc = base64.b64encode(body).decode()
    lines = [enc[i : i + width] for i in range(0, len(enc), width)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


def password(in_url: bool = False) -> str:
    alphabet = PW_URL_CHARS if in_url else PW_CHARS
    style = R.randrange(3)
    if style == 0:
        n = R.randint(8, 32)
        pw = rs(ALNUM, 1) + rs(alphabet, n - 2) + rs(string.digits, 1)
    elif style == 1:
        word = pick(
            ("Summer", "Llama", "Hopper", "Welcome", "Grafana", "Mlflow", "Train", "Optuna")
        )
        sym = pick("!*_-" if in_url else "!#%^*_-+")
        pw = f"{word}{R.randint(2019, 2026)}{sym}{rs(ALNUM, R.randint(1, 6))}"
    else:
        pw = rs(ALNUM, R.randint(12, 24))
    return pw[:32]


def amz_security_token() -> str:
    raw = "IQoJb3JpZ2luX2VjE" + b64(R.randint(180, 420))
    return quote(raw, safe="")


def cloudfront_signature() -> str:
    return b64(128).translate(str.maketrans("+=/", "-_~"))


def azure_sig() -> str:
    return quote(b64(32), safe="")


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + rs(string.digits, length - len(prefix) - 1)
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return body + str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    ds = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, digit in enumerate(reversed(ds)):
        d = digit * (2 if i % 2 == 1 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def card_number() -> str:
    brand = R.randrange(5)
    if brand == 0:
        num = "4111111111111111"
    elif brand == 1:
        num = luhn_complete("4", 16)
    elif brand == 2:
        num = luhn_complete(pick(("51", "52", "53", "54", "55", "2221", "2720")), 16)
    elif brand == 3:
        num = luhn_complete(pick(("34", "37")), 15)
    else:
        num = pick(("5555555555554444", "378282246310005", "4012888888881881", "6011111111111117"))
    sep = pick(("", " ", "-", " "))
    if len(num) == 15:
        return sep.join((num[:4], num[4:10], num[10:]))
    return sep.join(num[i : i + 4] for i in range(0, 16, 4))


# Phone numbers: each one is checked valid (for its region) with `phonenumbers` outside this
# script; the generator only picks from this fixed list.
PHONES = (
    "+1 650-253-0000",
    "(650) 253-0000",
    "+1 201-555-0123",
    "(415) 555-0132",
    "617-555-0199",
    "+1 (212) 555-0147",
    "650.253.0000",
    "+1 312 555 0175",
    "+1-646-555-0113",
    "+1 415 555 2671",
    "+1 (617) 555-0162",
    "+44 20 7946 0958",
    "020 7946 0958",
    "+44 161 496 0321",
    "0113 496 0744",
    "+44 (0)20 7946 0112",
    "+44 117 496 0555",
    "+44 7400 123456",
    "07400 123456",
    "(020) 7946 0018",
    "+49 30 901820",
    "030 901820",
    "+49 30 23125000",
    "+49 89 636 48018",
    "+49 151 23456789",
    "0151 23456789",
    "+49 (0)30 901820",
    "+49 40 428280",
    "+49 172 3456789",
    "+49 221 2212345",
    "+91 98765 43210",
    "098765 43210",
    "+91 80 2345 6789",
    "+91 22 2345 6789",
    "+91 99887 76655",
    "+91-11-2334-5678",
    "+91 70123 45678",
    "+91 44 2811 2345",
)

PEOPLE = (
    ("Priya", "Raman"),
    ("John", "Smith"),
    ("Wei", "Zhang"),
    ("María", "García"),
    ("Oluwaseun", "Adeyemi"),
    ("Hans", "Müller"),
    ("Aarav", "Sharma"),
    ("Emily", "Chen"),
    ("Kenji", "Watanabe"),
    ("Fatima", "Al-Sayed"),
    ("Lukas", "Becker"),
    ("Sofia", "Rossi"),
    ("Ananya", "Iyer"),
    ("James", "O'Connor"),
    ("Chloé", "Dubois"),
    ("Mohammed", "Khan"),
    ("Olivia", "Brown"),
    ("Rahul", "Verma"),
    ("Anna", "Kowalski"),
    ("Diego", "Fernández"),
    ("Mei", "Lin"),
    ("Thomas", "Wright"),
    ("Grace", "Okafor"),
    ("Sven", "Lindqvist"),
    ("Hannah", "Schmidt"),
    ("Arjun", "Nair"),
    ("Laura", "Martínez"),
    ("David", "Cohen"),
    ("Yuki", "Tanaka"),
    ("Sarah", "Johnson"),
)
EMAIL_DOMAINS = (
    "example.com",
    "corp.example",
    "gmail.com",
    "outlook.com",
    "acme-ai.com",
    "contoso.com",
    "fabrikam.io",
    "initech.dev",
    "example.org",
    "mail.example.net",
)
USERS = (
    "alice",
    "bob",
    "carol",
    "dave",
    "priya",
    "jsmith",
    "alice.smith",
    "wzhang",
    "mgarcia",
    "oadeyemi",
    "hmueller",
    "ubuntu",
    "aarav.sharma",
    "echen",
    "kwatanabe",
    "svc-train",
    "r.verma",
    "ml_ops",
)


def ascii_fold(s: str) -> str:
    norm = unicodedata.normalize("NFKD", s)
    return "".join(c for c in norm if c.isascii() and (c.isalnum() or c in ".-_"))


def person() -> tuple[str, str]:
    return pick(PEOPLE)


def full_name() -> str:
    first, last = person()
    return f"{first} {last}"


def email(first: str | None = None, last: str | None = None) -> str:
    if first is None or last is None:
        first, last = person()
    f, la = ascii_fold(first).lower(), ascii_fold(last).lower()
    local = pick(
        (f"{f}.{la}", f"{f[0]}{la}", f"{f}_{la}", f"{f}{R.randint(1, 99)}", f"{f}.{la}+ml", f)
    )
    return f"{local}@{pick(EMAIL_DOMAINS)}"


def ip4_private() -> str:
    style = R.randrange(3)
    if style == 0:
        return f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}"
    if style == 1:
        return f"172.{R.randint(16, 31)}.{R.randint(0, 255)}.{R.randint(1, 254)}"
    return f"192.168.{R.randint(0, 255)}.{R.randint(1, 254)}"


def ip4_public() -> str:
    return pick(
        (
            f"203.0.113.{R.randint(1, 254)}",
            f"198.51.100.{R.randint(1, 254)}",
            f"192.0.2.{R.randint(1, 254)}",
            f"52.217.{R.randint(0, 255)}.{R.randint(1, 254)}",
            f"3.5.{R.randint(0, 255)}.{R.randint(1, 254)}",
            f"34.{R.randint(64, 127)}.{R.randint(0, 255)}.{R.randint(1, 254)}",
        )
    )


def ip6() -> str:
    style = R.randrange(5)
    if style == 0:
        return pick(("fe80::1ff:fe23:4567:890a", "2001:db8::8a2e:370:7334"))
    if style == 1:
        return f"2001:db8:{R.randint(1, 0xFFFF):x}::{R.randint(1, 0xFFFF):x}"
    if style == 2:
        g = [f"{R.randint(0, 0xFFFF):x}" for _ in range(4)]
        return "fe80::" + ":".join(g)
    if style == 3:
        g = [f"{R.randint(1, 0xFFFF):x}" for _ in range(6)]
        return "2001:db8:" + ":".join(g)
    return f"fd00:{R.randint(1, 0xFFFF):x}:{R.randint(0, 0xFFFF):x}::{R.randint(1, 0xFF):x}"


# ---------------------------------------------------------------------------------------------
# Context pools (benign)
# ---------------------------------------------------------------------------------------------

MODELS = (
    "llama-70b",
    "llama3-8b",
    "mixtral-8x22b",
    "gpt-neox-20b",
    "qwen2-72b",
    "mistral-7b",
    "olmo-7b",
    "dense-405b",
)
HF_REPOS = (
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mixtral-8x22B-v0.1",
    "Qwen/Qwen2-72B",
    "EleutherAI/gpt-neox-20b",
    "allenai/OLMo-7B",
    "tiiuae/falcon-40b",
)
BUCKETS = (
    "llm-ckpts-prod",
    "acme-train-artifacts",
    "rankscope-spool",
    "datasets-fineweb-us-east",
    "ml-ckpt-backup",
    "tok-shards",
)
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-south-1", "eu-central-1")
SITE_PACKAGES = (
    "/opt/conda/lib/python3.11/site-packages",
    "/usr/local/lib/python3.11/dist-packages",
    "/opt/venv/lib/python3.11/site-packages",
    "/usr/lib/python3/dist-packages",
)
PROJECTS = ("llm-train", "megatron-lm", "nanotron", "work/llama", "src/rlhf", "repos/torchtitan")
HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")
NCCL_VERSIONS = ("2.18.6", "2.19.3", "2.20.5", "2.21.5", "2.23.4")
DRIVERS = ("535.161.08", "550.54.15", "550.90.07", "560.35.03", "565.57.01")
GPU_MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA GH200 480GB")


def hostname() -> str:
    n = R.randint(1, 256)
    return pick(
        (
            f"node{n:03d}.cluster.internal",
            f"node{n:03d}",
            f"gpu-h100-{n:03d}",
            f"dgx{n % 64:02d}.hpc.corp.example",
            f"a3-mega-{n:04d}",
            f"trn-{pick('abcd')}{n % 32:02d}-gpu",
        )
    )


def short_host() -> str:
    return f"node{R.randint(1, 256):03d}"


def job_id() -> str:
    return str(R.randint(80000, 9_999_999))


def site() -> str:
    return pick(SITE_PACKAGES)


def ts_iso() -> str:
    return (
        f"2026-12-{R.randint(1, 9):02d}T{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:"
        f"{R.randint(0, 59):02d}.{R.randint(0, 999999):06d}Z"
    )


def glog_ts() -> str:
    return (
        f"1203 {R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}."
        f"{R.randint(0, 999999):06d}"
    )


def nccl_prefix(host: str | None = None) -> str:
    h = host or short_host()
    pid = R.randint(1000, 400000)
    return f"{h}:{pid}:{pid + R.randint(1, 900)} [{R.randint(0, 7)}] "


def step_no() -> int:
    return R.randint(1, 250000)


def ckpt_path() -> str:
    model = pick(MODELS)
    n = pick((8, 16, 30, 64))
    return (
        f"/checkpoints/{model}/step_{step_no()}/model-{R.randint(1, n):05d}-of-{n:05d}.safetensors"
    )


def home(user: str, rest: str, style: str = "linux") -> list[Piece]:
    if style == "mac":
        return ["/Users/", S("HOME_DIR_USER", user), "/" + rest]
    if style == "win":
        return ["C:\\Users\\", S("HOME_DIR_USER", user), "\\" + rest.replace("/", "\\")]
    return ["/home/", S("HOME_DIR_USER", user), "/" + rest]


def frame(path: Piece, line: int, func: str, src: Piece | None = None) -> list[Piece]:
    out: list[Piece] = ['  File "', path, f'", line {line}, in {func}\n']
    if src is not None:
        out += ["    ", src, "\n"]
        if isinstance(src, str) and chance(0.3):
            out.append("    " + "^" * min(len(src), R.randint(8, 40)) + "\n")
    return out


def lib_frame(rel: str, func: str, src: str | None = None) -> list[Piece]:
    return frame(f"{site()}/{rel}", R.randint(40, 2400), func, src)


def user_script(user: str | None = None, proj: str | None = None) -> Piece:
    name = pick(("train.py", "pretrain.py", "finetune.py", "main.py", "launch.py"))
    if user is None:
        return pick(
            (
                f"/workspace/{pick(PROJECTS)}/{name}",
                f"/app/{name}",
                f"/scratch/job_{job_id()}/src/{name}",
                f"/opt/{pick(PROJECTS)}/{name}",
            )
        )
    return home(user, f"{proj or pick(PROJECTS)}/{name}")


def tb(*frames: Piece, final: Piece) -> list[Piece]:
    return ["Traceback (most recent call last):\n", *frames, final]


# ---------------------------------------------------------------------------------------------
# Composite pieces: URLs (with nested credentials), launchers, env dumps
# ---------------------------------------------------------------------------------------------


def amz_date() -> str:
    return f"20261203T{R.randint(0, 23):02d}{R.randint(0, 59):02d}{R.randint(0, 59):02d}Z"


def s3_key() -> str:
    model = pick(MODELS)
    return pick(
        (
            f"{model}/step_{step_no()}/model-{R.randint(1, 30):05d}-of-00030.safetensors",
            f"ckpt/step_{step_no()}.pt",
            f"{model}/optim/rank_{R.randint(0, 1023):05d}.pt",
            f"datasets/fineweb/shard-{R.randint(0, 9999):05d}.tar",
            f"spool/{short_host()}/{R.randint(1, 99999):08d}.jsonl.zst",
        )
    )


def s3_presigned(temporary: bool | None = None) -> S:
    temp = chance(0.35) if temporary is None else temporary
    bucket, region = pick(BUCKETS), pick(REGIONS)
    host_path = pick(
        (
            f"{bucket}.s3.amazonaws.com/{s3_key()}",
            f"{bucket}.s3.{region}.amazonaws.com/{s3_key()}",
            f"s3.{region}.amazonaws.com/{bucket}/{s3_key()}",
        )
    )
    parts: list[Piece] = [
        "https://",
        host_path,
        "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=",
        S("CLOUD_ACCESS_KEY", aws_key_id(temp)),
        f"%2F20261203%2F{region}%2Fs3%2Faws4_request&X-Amz-Date={amz_date()}"
        f"&X-Amz-Expires={pick((300, 900, 3600, 43200, 604800))}",
    ]
    if temp:
        parts += ["&X-Amz-Security-Token=", S("URL_SIGNATURE", amz_security_token())]
    parts += ["&X-Amz-SignedHeaders=host&X-Amz-Signature=", S("URL_SIGNATURE", hexid(64))]
    if chance(0.25):
        parts.append("&x-id=GetObject")
    return S("URL", *parts)


def gcs_signed() -> S:
    bucket = pick(BUCKETS)
    project = pick(("ml-train-prod", "acme-research", "llm-eval-42"))
    sa = pick(("ckpt-writer", "trainer", "rankscope-agent", "data-loader"))
    if chance(0.7):
        return S(
            "URL",
            f"https://storage.googleapis.com/{bucket}/{s3_key()}"
            "?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential="
            f"{sa}%40{project}.iam.gserviceaccount.com%2F20261203%2Fauto%2Fstorage%2Fgoog4_request"
            f"&X-Goog-Date={amz_date()}&X-Goog-Expires={pick((600, 3600, 86400))}"
            "&X-Goog-SignedHeaders=host&X-Goog-Signature=",
            S("URL_SIGNATURE", hexid(512)),
        )
    return S(
        "URL",
        f"https://storage.googleapis.com/{bucket}/{s3_key()}?GoogleAccessId="
        f"{sa}%40{project}.iam.gserviceaccount.com&Expires={1796200000 + R.randint(0, 99999)}"
        "&Signature=",
        S("URL_SIGNATURE", quote(b64(256), safe="")),
    )


def azure_sas() -> S:
    acct = pick(("acmetrainckpt", "mlartifactsprod", "llmdatasets01", "rankscopespool"))
    container = pick(("checkpoints", "datasets", "spool", "eval-results"))
    st = f"2026-12-03T{R.randint(0, 11):02d}%3A00%3A00Z"
    se = f"2026-12-{R.randint(3, 10):02d}T{R.randint(12, 23):02d}%3A00%3A00Z"
    sig = S("URL_SIGNATURE", azure_sig())
    base = f"https://{acct}.blob.core.windows.net/{container}/{s3_key()}?"
    if chance(0.5):
        return S("URL", base, f"sp=r&st={st}&se={se}&spr=https&sv=2022-11-02&sr=b&sig=", sig)
    return S(
        "URL",
        base,
        f"sv=2022-11-02&ss=b&srt=co&sp=rwdlacx&se={se}&st={st}&spr=https&sig=",
        sig,
        pick(("", "&rscd=attachment", "&comp=block&blockid=QmxvY2tJZDAwMDAx")),
    )


def cloudfront_signed() -> S:
    dist = "d" + rs(string.ascii_lowercase + string.digits, 13)
    return S(
        "URL",
        f"https://{dist}.cloudfront.net/{s3_key()}?Expires={1796200000 + R.randint(0, 99999)}"
        "&Signature=",
        S("URL_SIGNATURE", cloudfront_signature()),
        f"&Key-Pair-Id=K{rs(B32, 13)}",
    )


def signed_url() -> S:
    return pick((s3_presigned, s3_presigned, gcs_signed, azure_sas, cloudfront_signed))()


def master_addr() -> Piece:
    return S("IP_ADDRESS", ip4_private()) if chance(0.5) else hostname()


def torchrun(endpoint: Piece | None = None) -> list[Piece]:
    nn = pick((2, 4, 8, 16, 32, 64, 128, 256))
    eq = pick((" ", "="))
    ep: Piece = endpoint if endpoint is not None else master_addr()
    head = pick(("torchrun", "python -m torch.distributed.run"))
    return [
        f"{head} --nnodes{eq}{nn} --nproc_per_node{eq}8 --rdzv_backend{eq}c10d --rdzv_endpoint{eq}",
        ep,
        f":{pick((29400, 29500, 29501))} --rdzv_id{eq}{job_id()} ",
    ]


def train_args() -> str:
    model = pick(MODELS)
    opts = [
        f"--config configs/{model}.yaml",
        f"--micro-batch-size {pick((1, 2, 4))}",
        f"--seq-len {pick((2048, 4096, 8192))}",
        f"--wandb-project {model}",
        f"--save /checkpoints/{model}",
        "--bf16",
        f"--tp {pick((1, 2, 4, 8))} --pp {pick((1, 2, 4, 8))}",
        f"--lr {pick(('3e-4', '1.5e-4', '6e-5'))}",
    ]
    R.shuffle(opts)
    return " ".join(opts[: R.randint(2, 5)])


def srun_head() -> str:
    n = pick((2, 4, 8, 16, 32, 64, 128))
    return (
        f"srun --nodes={n} --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task="
        f"{pick((8, 12, 16))} --job-name={pick(MODELS)}"
    )


ENV_BENIGN: tuple[tuple[str, Callable[[], str]], ...] = (
    ("PATH", lambda: "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/bin:/bin"),
    ("CUDA_VISIBLE_DEVICES", lambda: "0,1,2,3,4,5,6,7"),
    ("NCCL_DEBUG", lambda: pick(("INFO", "WARN"))),
    ("NCCL_IB_HCA", lambda: "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"),
    ("NCCL_SOCKET_IFNAME", lambda: pick(("ib0", "eth0", "bond0"))),
    ("OMP_NUM_THREADS", lambda: str(pick((1, 4, 8)))),
    ("LOCAL_RANK", lambda: str(R.randint(0, 7))),
    ("RANK", lambda: str(R.randint(0, 1023))),
    ("WORLD_SIZE", lambda: str(pick((64, 256, 1024)))),
    ("MASTER_PORT", lambda: "29500"),
    ("SLURM_JOB_ID", job_id),
    ("SLURM_NODELIST", lambda: f"node[{R.randint(1, 9):03d}-{R.randint(64, 256):03d}]"),
    ("HF_HOME", lambda: "/data/hf"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", lambda: "1"),
    ("PYTHONUNBUFFERED", lambda: "1"),
    ("AWS_DEFAULT_REGION", lambda: pick(REGIONS)),
    ("HF_HUB_ENABLE_HF_TRANSFER", lambda: "1"),
)


def env_entries(
    secret: list[tuple[str, Piece]], n_benign: int | None = None
) -> list[tuple[str, Piece]]:
    k = n_benign if n_benign is not None else R.randint(3, 8)
    benign: list[tuple[str, Piece]] = [(k_, f()) for k_, f in R.sample(ENV_BENIGN, k)]
    out = benign + secret
    R.shuffle(out)
    return out


def env_dump(entries: list[tuple[str, Piece]], style: str) -> list[Piece]:
    out: list[Piece] = []
    if style in ("dict", "environ"):
        out.append("environ({" if style == "environ" else "{")
        for i, (k, v) in enumerate(entries):
            out += [", " if i else "", f"'{k}': '", v, "'"]
        out.append("})" if style == "environ" else "}")
    elif style == "proc":
        out.append("b'")
        for i, (k, v) in enumerate(entries):
            out += ["\\x00" if i else "", f"{k}=", v]
        out.append("\\x00'")
    else:  # lines
        for k, v in entries:
            out += [f"{k}=", v, "\n"]
    return out


# ---------------------------------------------------------------------------------------------
# Credential templates
# ---------------------------------------------------------------------------------------------


def c_aws_srun_env() -> Draft:
    t = Text().fmt(
        "srun: error: {host}: task {task}: Exited with exit code {code}\n"
        "Command={head} env AWS_ACCESS_KEY_ID={akid} AWS_SECRET_ACCESS_KEY={secret} "
        "AWS_DEFAULT_REGION={region} python -u -m ckpt_sync --src /checkpoints/{model} "
        "--dst s3://{bucket}/{model}/",
        host=short_host(),
        task=R.randint(0, 1023),
        code=pick((1, 2, 137)),
        head=srun_head(),
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        region=pick(REGIONS),
        model=pick(MODELS),
        bucket=pick(BUCKETS),
    )
    return "scheduler_event", F_REASON, t


def c_aws_credentials_file() -> Draft:
    spaced = chance(0.6)
    eq = " = " if spaced else "="
    t = Text().fmt(
        "collector_error: s3 spool uploader: could not parse {path} (line {line}): "
        "section header not closed\n[default]\naws_access_key_id{eq}{akid}\n"
        "aws_secret_access_key{eq}{secret}\nregion{eq}{region}\n[ckpt-writer\n",
        path=pick(("/root/.aws/credentials", "/etc/rankscope/aws.ini", "/var/lib/rankscope/.aws")),
        line=5,
        eq=eq,
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        region=pick(REGIONS),
    )
    return "agent_event", F_MSG, t


def c_aws_boto3_tb() -> Draft:
    akid, secret = aws_key_id(), aws_secret()
    proj = pick(PROJECTS)
    q = pick(('"', "'"))
    src: list[Piece] = [
        f"s3 = boto3.client({q}s3{q}, aws_access_key_id={q}",
        S("CLOUD_ACCESS_KEY", akid),
        f"{q}, aws_secret_access_key={q}",
        S("CLOUD_SECRET_KEY", secret),
        f"{q})",
    ]
    user = pick(USERS) if chance(0.4) else None
    err = pick(
        (
            "botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId) when calling "
            "the PutObject operation: The AWS Access Key Id you provided does not exist in our "
            "records.",
            "botocore.exceptions.ClientError: An error occurred (SignatureDoesNotMatch) when "
            "calling the CreateMultipartUpload operation: The request signature we calculated "
            "does not match the signature you provided. Check your key and signing method.",
            "botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the "
            "ListObjectsV2 operation: Access Denied",
        )
    )
    t = txt(
        tb(
            frame(user_script(user, proj), R.randint(100, 900), "main", "save_checkpoint(step)"),
            frame(
                home(user, f"{proj}/ckpt/s3.py") if user else "/workspace/llm-train/ckpt/s3.py",
                R.randint(20, 200),
                "upload_shard",
                src,
            ),
            lib_frame(
                "botocore/client.py",
                "_api_call",
                "return self._make_api_call(operation_name, kwargs)",
            ),
            lib_frame(
                "botocore/client.py",
                "_make_api_call",
                "raise error_class(parsed_response, operation_name)",
            ),
            final=err,
        )
    )
    return "span", F_ERR, t


def c_aws_create_access_key() -> Draft:
    t = Text().fmt(
        'Init:Error: init container "fetch-creds" exited with code 1; last output: '
        '{{"AccessKey": {{"UserName": "{user}", "AccessKeyId": "{akid}", "Status": "Active", '
        '"SecretAccessKey": "{secret}", "CreateDate": "2026-12-03T{hh}:{mm}:07+00:00"}}}}\n'
        "error: aws s3 sync s3://{bucket}/{model}/ /checkpoints/{model}/ failed: "
        "An error occurred (InvalidAccessKeyId) when calling the ListObjectsV2 operation",
        user=pick(("ckpt-uploader", "svc-train", "rankscope-spool")),
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        hh=f"{R.randint(0, 23):02d}",
        mm=f"{R.randint(0, 59):02d}",
        bucket=pick(BUCKETS),
        model=pick(MODELS),
    )
    return "scheduler_event", F_REASON, t


def c_aws_yaml_config() -> Draft:
    region = pick(REGIONS)
    endpoint = S("URL", f"https://s3.{region}.amazonaws.com")
    t = Text().fmt(
        "omegaconf.errors.ValidationError: Value 'ten' of type 'str' could not be converted to "
        "Integer\n    full_key: storage.s3.max_retries\n    object_type=StorageConfig\n"
        "resolved config:\nstorage:\n  s3:\n    endpoint: {endpoint}\n    access_key: {akid}\n"
        "    secret_key: {secret}\n    bucket: {bucket}\n    max_retries: ten\n",
        endpoint=endpoint,
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        bucket=pick(BUCKETS),
    )
    return "span", F_ERR, t


def c_aws_s3cfg() -> Draft:
    t = Text().fmt(
        "collector_error: spool uploader: s3cmd exited 77: ERROR: S3 error: 403 "
        "(SignatureDoesNotMatch)"
        "\nconfig {path}:\n[default]\naccess_key = {akid}\nsecret_key = {secret}\n"
        "host_base = s3.{region}.amazonaws.com\nuse_https = True",
        path=pick(("/root/.s3cfg", "/etc/rankscope/s3cfg")),
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        region=pick(REGIONS),
    )
    return "agent_event", F_MSG, t


def c_aws_env_dict() -> Draft:
    entries = env_entries(
        [
            ("AWS_ACCESS_KEY_ID", S("CLOUD_ACCESS_KEY", aws_key_id())),
            ("AWS_SECRET_ACCESS_KEY", S("CLOUD_SECRET_KEY", aws_secret())),
        ]
    )
    t = txt(
        f"[rank{R.randint(0, 1023)}]: RuntimeError: checkpoint writer failed to start; "
        "os.environ: ",
        env_dump(entries, pick(("dict", "environ"))),
    )
    return "span", F_ERR, t


def c_aws_node_extra() -> Draft:
    t = txt(
        "AWS_ACCESS_KEY_ID=",
        S("CLOUD_ACCESS_KEY", aws_key_id()),
        " AWS_SECRET_ACCESS_KEY=",
        S("CLOUD_SECRET_KEY", aws_secret()),
        f" rankscope-agent --spool s3://{pick(BUCKETS)}/spool",
    )
    return "node_inventory", pick(("payload.extra.agent_env", F_XCMD)), t


def c_aws_s3_xml() -> Draft:
    t = Text().fmt(
        "checkpoint upload failed: 403 Forbidden\n"
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InvalidAccessKeyId</Code>'
        "<Message>The AWS Access Key Id you provided does not exist in our records.</Message>"
        "<AWSAccessKeyId>{akid}</AWSAccessKeyId><RequestId>{rid}</RequestId>"
        "<HostId>{hid}</HostId></Error>",
        akid=S("CLOUD_ACCESS_KEY", aws_key_id(chance(0.3))),
        rid=rs(string.ascii_uppercase + string.digits, 16),
        hid=b64(54),
    )
    return "span", F_ERR, t


def c_aws_export_lines() -> Draft:
    t = Text().fmt(
        "+ export AWS_ACCESS_KEY_ID={akid}\n+ export AWS_SECRET_ACCESS_KEY={secret}\n"
        "+ aws s3 cp --recursive /checkpoints/{model}/step_{step} "
        "s3://{bucket}/{model}/step_{step}\n"
        "upload failed: An error occurred (ExpiredToken) when calling the "
        "CreateMultipartUpload operation: The provided token has expired.",
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        model=pick(MODELS),
        step=step_no(),
        bucket=pick(BUCKETS),
    )
    return "scheduler_event", F_REASON, t


def c_aws_kwargs_span_attr() -> Draft:
    t = Text().fmt(
        "python -m ckpt.uploader --bucket {bucket} --aws_access_key_id={akid} "
        "--aws_secret_access_key={secret} --workers {w}",
        bucket=pick(BUCKETS),
        akid=S("CLOUD_ACCESS_KEY", aws_key_id()),
        secret=S("CLOUD_SECRET_KEY", aws_secret()),
        w=pick((4, 8, 16)),
    )
    return "span", F_CMD, t


def c_gapi_url() -> Draft:
    model = pick(("gemini-1.5-pro", "gemini-1.5-flash", "text-embedding-004"))
    url = S(
        "URL",
        f"https://generativelanguage.googleapis.com/v1beta/models/{model}:generateContent?key=",
        S("CLOUD_ACCESS_KEY", google_api_key()),
    )
    t = txt(
        "eval judge call failed: POST ",
        url,
        " returned 400 INVALID_ARGUMENT (API key not valid. Please pass a valid API key.)",
    )
    return "span", F_ERR, t


def c_gapi_env() -> Draft:
    t = txt(
        srun_head(),
        " env GOOGLE_API_KEY=",
        S("CLOUD_ACCESS_KEY", google_api_key()),
        f" python eval/judge.py --model gemini-1.5-pro --shards {R.randint(8, 64)}",
    )
    return "span", F_CMD, t


def c_gapi_header() -> Draft:
    t = txt(
        "send: b'POST /v1beta/models/gemini-1.5-flash:countTokens HTTP/1.1\\r\\n"
        "Host: generativelanguage.googleapis.com\\r\\nx-goog-api-key: ",
        S("CLOUD_ACCESS_KEY", google_api_key()),
        "\\r\\nContent-Type: application/json\\r\\n\\r\\n'",
    )
    return "agent_event", F_MSG, t


def c_gapi_flag() -> Draft:
    t = txt(
        "python tools/translate_eval.py --api-key ",
        S("CLOUD_ACCESS_KEY", google_api_key()),
        f" --lang de,fr,hi --limit {R.randint(100, 5000)}",
    )
    return "node_inventory", F_XCMD, t


# ---- API tokens ----


def c_tok_torchrun_hf() -> Draft:
    t = txt(torchrun(), "train.py ", train_args(), " --hf-token=", S("API_TOKEN", hf_token()))
    if chance(0.4):
        t.put(f" --output-dir /checkpoints/{pick(MODELS)}")
    return "span", F_CMD, t


def c_tok_srun_env() -> Draft:
    t = txt(
        srun_head(),
        " env HF_TOKEN=",
        S("API_TOKEN", hf_token()),
        " WANDB_API_KEY=",
        S("API_TOKEN", wandb_key()),
        " python -u train.py ",
        train_args(),
    )
    return "scheduler_event", F_REASON, t


def c_tok_accelerate() -> Draft:
    tok = pick((openai_key, generic_token))()
    eq = pick((" ", "="))
    t = txt(
        f"accelerate launch --num_machines {pick((2, 4, 16))} --num_processes "
        f"{pick((16, 32, 128))} --machine_rank {R.randint(0, 15)} --main_process_ip ",
        S("IP_ADDRESS", ip4_private()),
        " --main_process_port 29500 eval_harness.py --judge gpt-4o",
        f" --api-key{eq}",
        S("API_TOKEN", tok),
        f" --max-samples {R.randint(100, 2000)}",
    )
    return "span", pick((F_CMD, "payload.attributes.process.command_line")), t


def c_tok_xtrace_wandb() -> Draft:
    t = txt(
        "+ wandb login ",
        S("API_TOKEN", wandb_key()),
        "\nwandb: ERROR Error while calling W&B API: user is not logged in (<Response [401]>)",
        "\nsrun: error: ",
        short_host(),
        f": task 0: Exited with exit code 1\nslurmstepd: error: *** STEP {job_id()}.0 "
        f"ON {short_host()} CANCELLED AT 2026-12-03T10:{R.randint(10, 59)}:17 ***",
    )
    return "scheduler_event", F_REASON, t


def c_tok_k8s_args() -> Draft:
    t = txt(
        "Error: failed to create containerd task: failed to create shim task: OCI runtime create "
        "failed: runc create failed: unable to start container process: exec: "
        '"huggingface-cli login --token ',
        S("API_TOKEN", hf_token()),
        ' && python train.py": executable file not found in $PATH: unknown',
    )
    return "scheduler_event", F_REASON, t


def c_tok_hf_login_tb() -> Draft:
    user = pick(USERS) if chance(0.5) else None
    q = pick(('"', "'"))
    t = txt(
        tb(
            frame(
                user_script(user),
                R.randint(10, 80),
                "<module>",
                ["huggingface_hub.login(token=", q, S("API_TOKEN", hf_token()), q, ")"],
            ),
            lib_frame(
                "huggingface_hub/_login.py",
                "login",
                "_login(token, add_to_git_credential=add_to_git_credential)",
            ),
            lib_frame("huggingface_hub/hf_api.py", "whoami", "hf_raise_for_status(r)"),
            final=[
                "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: ",
                S("URL", "https://huggingface.co/api/whoami-v2"),
                " (Request ID: Root=1-",
                hexid(8),
                "-",
                hexid(24),
                ")\n\nInvalid user token.",
            ],
        )
    )
    return "span", F_ERR, t


def c_tok_git_clone() -> Draft:
    kind = R.randrange(3)
    if kind == 0:
        url = S(
            "URL",
            "https://oauth2:",
            S("API_TOKEN", gitlab_pat()),
            f"@gitlab.corp.example/ml/{pick(PROJECTS).split('/')[-1]}.git",
        )
    elif kind == 1:
        url = S(
            "URL",
            "https://x-access-token:",
            S("API_TOKEN", github_token("ghs_")),
            f"@github.com/acme-ai/{pick(PROJECTS).split('/')[-1]}.git/",
        )
    else:
        url = S(
            "URL",
            "https://",
            pick(("ci-bot", "trainer", "oauth")),
            ":",
            S("API_TOKEN", github_pat()),
            "@github.com/acme-ai/private-kernels.git",
        )
    t = txt(
        "fatal: unable to access '",
        url,
        "': The requested URL returned error: ",
        pick(("403", "401", "404")),
    )
    return "scheduler_event", F_REASON, t


def c_tok_pip_git() -> Draft:
    t = txt(
        "ERROR: Command errored out with exit status 128: git clone --filter=blob:none --quiet ",
        S("URL", "https://", S("API_TOKEN", github_token()), "@github.com/acme-ai/fused-kernels"),
        f" /tmp/pip-req-build-{rs(string.ascii_lowercase + string.digits, 8)} "
        "Check the logs for full command output.",
    )
    return "agent_event", F_MSG, t


def c_tok_openai_tb() -> Draft:
    user = pick(USERS) if chance(0.3) else None
    q = pick(('"', "'"))
    t = txt(
        tb(
            frame(
                user_script(user),
                R.randint(30, 300),
                "judge",
                ["client = OpenAI(api_key=", q, S("API_TOKEN", openai_key()), q, ")"],
            ),
            lib_frame(
                "openai/_base_client.py",
                "_request",
                "raise self._make_status_error_from_response(err.response) from None",
            ),
            final="openai.AuthenticationError: Error code: 401 - {'error': {'message': 'Incorrect "
            "API key provided.', 'type': 'invalid_request_error', 'param': None, 'code': "
            "'invalid_api_key'}}",
        )
    )
    return "span", F_ERR, t


def c_tok_openai_env() -> Draft:
    t = txt(
        "env: OPENAI_API_KEY=",
        S("API_TOKEN", openai_key()),
        f" python -m eval.run --suite mt-bench --judge gpt-4o --workers {pick((8, 16, 32))}",
    )
    return "span", F_CMD, t


def c_tok_slack() -> Draft:
    if chance(0.5):
        t = txt(
            "collector_error: alert sink slack: token=",
            S("API_TOKEN", slack_token()),
            f" channel=#llm-train-alerts: invalid_auth (attempt {R.randint(1, 5)}/5)",
        )
        return "agent_event", F_MSG, t
    t = txt(
        tb(
            frame(
                "/opt/rankscope/notify/slack.py",
                R.randint(20, 90),
                "post",
                ["client = WebClient(token='", S("API_TOKEN", slack_token()), "')"],
            ),
            lib_frame(
                "slack_sdk/web/base_client.py",
                "api_call",
                "return self._sync_send(api_url=api_url, req_args=req_args)",
            ),
            final=[
                "slack_sdk.errors.SlackApiError: The request to the Slack API failed. (url: ",
                S("URL", "https://slack.com/api/chat.postMessage"),
                ")\nThe server responded with: {'ok': False, 'error': 'invalid_auth'}",
            ],
        )
    )
    return "span", F_ERR, t


def c_tok_generic_flag() -> Draft:
    form = R.randrange(4)
    tok = S("API_TOKEN", generic_token())
    if form == 0:
        t = txt(
            "mlflow-sync --tracking-uri ",
            S("URL", "https://mlflow.corp.example"),
            " --token ",
            tok,
            " --run-id ",
            hexid(32),
        )
    elif form == 1:
        t = txt(
            "python log_uploader.py --api-key=",
            tok,
            f" --project {pick(MODELS)} --offline-dir /scratch/job_{job_id()}/logs",
        )
    elif form == 2:
        t = txt(
            "databricks-sync --host ",
            S("URL", "https://adb-" + digits(16) + ".7.azuredatabricks.net"),
            " --api-key ",
            tok,
        )
    else:
        t = txt(
            "ray job submit --address ",
            S("URL", "http://", S("IP_ADDRESS", ip4_private()), ":8265"),
            " --token ",
            tok,
            " -- python train.py",
        )
    return "span", F_CMD, t


def c_tok_api_key_repr() -> Draft:
    tok = S("API_TOKEN", generic_token())
    t = txt(
        "TypeError: CometLogger.__init__() got an unexpected keyword argument 'workspace_name'\n"
        "  called as CometLogger(api_key='",
        tok,
        f"', project_name='{pick(MODELS)}', workspace_name='acme-ai', offline=False)",
    )
    return "span", F_ERR, t


def c_tok_json_api_key() -> Draft:
    t = txt(
        "ValueError: unsupported judge backend 'vllm-remote' in eval config ",
        '{"judge": {"backend": "vllm-remote", "endpoint": "',
        S("URL", "http://", S("IP_ADDRESS", ip4_private()), ":8000/v1"),
        '", "api_key": "',
        S("API_TOKEN", generic_token()),
        f'", "max_tokens": {pick((512, 1024, 2048))}}}}}',
    )
    return "span", F_ERR, t


def c_tok_url_token() -> Draft:
    url = S(
        "URL",
        "https://metrics.corp.example/api/v1/push",
        f"?job={pick(MODELS)}&rank={R.randint(0, 255)}&token=",
        S("API_TOKEN", generic_token()),
    )
    t = txt(
        "collector_error: pushgateway: POST ",
        url,
        f" failed: 401 Unauthorized (retry {R.randint(1, 9)} in {pick((2, 4, 8))}s)",
    )
    return "agent_event", F_MSG, t


def c_tok_hf_env_var() -> Draft:
    t = txt(
        "HF_TOKEN=",
        S("API_TOKEN", hf_token()),
        " python -c 'from huggingface_hub import snapshot_download; "
        f'snapshot_download("{pick(HF_REPOS)}")\'',
    )
    return "node_inventory", F_XCMD, t


def c_tok_gh_env() -> Draft:
    t = txt(
        "GH_TOKEN=",
        S("API_TOKEN", pick((github_pat, github_token))()),
        " gh release download v0.4.1 --repo acme-ai/nccl-tests-ci --pattern '*.tar.gz'",
    )
    return "span", F_CMD, t


def c_tok_mpirun() -> Draft:
    t = txt(
        f"mpirun -np {pick((64, 256, 1024))} -npernode 8 --hostfile /etc/mpi/hostfile "
        "-x NCCL_DEBUG=INFO -x HF_TOKEN=",
        S("API_TOKEN", hf_token()),
        " -x WANDB_API_KEY=",
        S("API_TOKEN", wandb_key()),
        " python pretrain.py ",
        train_args(),
        "\n--------------------------------------------------------------------------\n"
        "Primary job  terminated normally, but 1 process returned\na non-zero exit code.",
    )
    return "scheduler_event", F_REASON, t


def c_tok_sbatch_export() -> Draft:
    t = txt(
        "SubmitLine=sbatch --export=ALL,HF_TOKEN=",
        S("API_TOKEN", hf_token()),
        ",WANDB_API_KEY=",
        S("API_TOKEN", wandb_key()),
        f" --nodes={pick((8, 16, 64))} run_{pick(MODELS)}.sbatch State=FAILED ExitCode=1:0",
    )
    return "scheduler_event", F_REASON, t


def c_tok_hf_tokenflag_node() -> Draft:
    t = txt(
        "python -m vllm.entrypoints.openai.api_server --model ",
        pick(HF_REPOS),
        " --tensor-parallel-size 8 --hf-token=",
        S("API_TOKEN", hf_token()),
    )
    return "node_inventory", F_XCMD, t


def c_tok_glpat_ci() -> Draft:
    t = txt(
        "pip download failed: GET ",
        S(
            "URL",
            "https://gitlab.corp.example/api/v4/projects/412/packages/pypi/simple/rankscope-kernels/?private_token=",
            S("API_TOKEN", gitlab_pat()),
        ),
        " returned 403",
    )
    return "agent_event", F_MSG, t


def c_tok_wandb_env_lines() -> Draft:
    t = txt(
        "wandb: Network error (ReadTimeout), entering retry loop.\n"
        "wandb: ERROR Run initialization has timed out after 90.0 sec.\nlauncher env:\n",
        env_dump(
            env_entries(
                [("WANDB_API_KEY", S("API_TOKEN", wandb_key())), ("WANDB_PROJECT", pick(MODELS))], 3
            ),
            "lines",
        ),
    )
    return "span", F_ERR, t


def c_tok_token_eq() -> Draft:
    t = txt(
        "tensorboard-uploader: refusing to start: token=",
        S("API_TOKEN", generic_token()),
        f" is scoped to project {pick(MODELS)!r}, not {pick(MODELS)!r}",
    )
    return "agent_event", F_MSG, t


API_TOKEN_TEMPLATES: tuple[Template, ...] = (
    c_tok_torchrun_hf,
    c_tok_srun_env,
    c_tok_accelerate,
    c_tok_xtrace_wandb,
    c_tok_k8s_args,
    c_tok_hf_login_tb,
    c_tok_git_clone,
    c_tok_pip_git,
    c_tok_openai_tb,
    c_tok_openai_env,
    c_tok_slack,
    c_tok_generic_flag,
    c_tok_api_key_repr,
    c_tok_json_api_key,
    c_tok_url_token,
    c_tok_hf_env_var,
    c_tok_gh_env,
    c_tok_mpirun,
    c_tok_sbatch_export,
    c_tok_hf_tokenflag_node,
    c_tok_glpat_ci,
    c_tok_wandb_env_lines,
    c_tok_token_eq,
)


# ---- Bearer tokens ----


def bearer_header(token_piece: S, lower: bool = False) -> list[Piece]:
    return ["authorization: bearer " if lower else "Authorization: Bearer ", token_piece]


def api_url() -> S:
    return pick(
        (
            lambda: S("URL", f"https://api.corp.example/v1/jobs/{job_id()}/metrics"),
            lambda: S("URL", "https://mlflow.corp.example/api/2.0/mlflow/runs/log-batch"),
            lambda: S("URL", f"https://storage.googleapis.com/storage/v1/b/{pick(BUCKETS)}/o"),
            lambda: S("URL", "http://", S("IP_ADDRESS", ip4_private()), ":4318/v1/traces"),
            lambda: S(
                "URL",
                f"https://registry.corp.example/v2/llm/train/manifests/2026.{R.randint(1, 12)}",
            ),
            lambda: S("URL", "https://otel-gw.monitoring.svc.cluster.local:4318/v1/metrics"),
        )
    )()


def c_bear_curl(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    q = pick(('"', "'"))
    t = txt(
        f"+ curl -sS -f -X {pick(('GET', 'POST', 'PUT'))} -H {q}",
        bearer_header(tok, lower=chance(0.2)),
        f"{q} ",
        api_url(),
        f"\ncurl: (22) The requested URL returned error: {pick((401, 403, 502))}",
    )
    return "scheduler_event", F_REASON, t


def c_bear_send(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    t = txt(
        "send: b'POST /api/2.0/mlflow/runs/log-batch HTTP/1.1\\r\\nHost: mlflow.corp.example\\r\\n"
        "User-Agent: python-requests/2.32.3\\r\\nAccept-Encoding: gzip, deflate\\r\\n",
        "Authorization: Bearer ",
        tok,
        f"\\r\\nContent-Length: {R.randint(200, 9000)}\\r\\nContent-Type: "
        "application/json\\r\\n\\r\\n'",
    )
    return "span", F_ERR, t


def c_bear_headers_dict(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    t = txt(
        f"collector_error: otlp exporter: export of {R.randint(10, 5000)} spans failed (503), "
        "headers={'User-Agent': 'rankscope-agent/0.1.0', 'Authorization': 'Bearer ",
        tok,
        "', 'Content-Type': 'application/x-protobuf'}, endpoint=",
        pick(
            (
                lambda: S("URL", "https://otel-gw.corp.example:4318/v1/traces"),
                lambda: S("URL", "http://", S("IP_ADDRESS", ip4_private()), ":4318/v1/traces"),
                lambda: S("URL", "https://otel-gw.monitoring.svc.cluster.local:4318/v1/metrics"),
            )
        )(),
    )
    return "agent_event", F_MSG, t


def c_bear_grpc(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    t = txt(
        "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
        '\tstatus = StatusCode.UNAUTHENTICATED\n\tdetails = "invalid credentials"\n'
        f'\tdebug_error_string = "UNKNOWN:Error received from peer  {{grpc_message:"invalid '
        f'credentials", grpc_status:16, created_time:"{ts_iso()}"}}"\n>\n'
        "call metadata: (('authorization', 'bearer ",
        tok,
        "'), ('x-rank', '",
        str(R.randint(0, 1023)),
        "'))",
    )
    return "span", F_ERR, t


def c_bear_otel_env(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    t = txt(
        "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer ",
        tok,
        " OTEL_EXPORTER_OTLP_ENDPOINT=",
        S("URL", "https://otel-gw.corp.example:4318"),
        " python train.py",
    )
    if len(t.text) > SHORT_TEXT:  # a JWT does not fit a NodeInventory.extra value
        return "span", F_CMD, t
    return "node_inventory", F_XCMD, t


def c_bear_httpx(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    url = api_url()
    t = txt(
        "httpx.HTTPStatusError: Client error '401 Unauthorized' for url '",
        url,
        "'\nFor more information check: ",
        S("URL", "https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/401"),
        "\nrequest headers: accept=*/* accept-encoding=gzip authorization='Bearer ",
        tok,
        "'",
    )
    return "span", F_ERR, t


def c_bear_requests_tb(tok: S | None = None) -> Draft:
    tok = tok or S("BEARER_TOKEN", bearer_token())
    user = pick(USERS) if chance(0.4) else None
    t = txt(
        tb(
            frame(
                user_script(user),
                R.randint(50, 500),
                "report_metrics",
                [
                    'r = requests.post(url, json=payload, headers={"Authorization": "Bearer ',
                    tok,
                    '"})',
                ],
            ),
            lib_frame(
                "requests/models.py",
                "raise_for_status",
                "raise HTTPError(http_error_msg, response=self)",
            ),
            final=[
                "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: ",
                api_url(),
            ],
        )
    )
    return "span", F_ERR, t


BEARER_TEMPLATES = (
    c_bear_curl,
    c_bear_send,
    c_bear_headers_dict,
    c_bear_grpc,
    c_bear_otel_env,
    c_bear_httpx,
    c_bear_requests_tb,
)


# ---- JWTs ----


def j_bearer() -> Draft:
    return pick(BEARER_TEMPLATES)(S("JWT", jwt()))


def j_kubeconfig() -> Draft:
    t = txt(
        "kubernetes collector: watch pods failed: 401 Unauthorized; kubeconfig in use:\n"
        "apiVersion: v1\nclusters:\n- cluster:\n    server: ",
        S("URL", "https://", S("IP_ADDRESS", ip4_private()), ":6443"),
        "\n  name: gpu-prod\nusers:\n- name: rankscope-agent\n  user:\n    token: ",
        S("JWT", jwt()),
        "\n",
    )
    return "agent_event", F_MSG, t


def j_cookie() -> Draft:
    t = txt(
        "ray dashboard request rejected: GET /api/jobs/ Cookie: session=",
        S("JWT", jwt()),
        f"; _ga=GA1.2.{digits(10)}.{1796200000 + R.randint(0, 99999)}; theme=dark",
    )
    return "span", F_ERR, t


def j_url_query() -> Draft:
    url = S(
        "URL",
        "http://",
        S("IP_ADDRESS", ip4_private()),
        f":8265/api/jobs/raysubmit_{rs(ALNUM, 16)}/logs?access_token=",
        S("JWT", jwt()),
    )
    t = txt("collector_error: ray job logs: GET ", url, " -> 401")
    return "agent_event", F_MSG, t


def j_wss() -> Draft:
    t = txt(
        "websocket closed (code 1008, policy violation) for wss://stream.corp.example/v1/metrics"
        f"?run={pick(MODELS)}&token=",
        S("JWT", jwt()),
        f" after {R.randint(1, 900)}s",
    )
    return "agent_event", F_MSG, t


def j_token_flag() -> Draft:
    t = txt(
        "rankscope-agent --collector kubernetes --api-server ",
        S("URL", "https://", S("IP_ADDRESS", ip4_private()), ":6443"),
        " --token ",
        S("JWT", jwt()),
    )
    return "span", "payload.attributes.process.command_line", t


def j_oauth_json() -> Draft:
    t = txt(
        "token refresh response did not contain 'refresh_token': ",
        '{"access_token": "',
        S("JWT", jwt()),
        f'", "token_type": "Bearer", "expires_in": {pick((299, 3599))}, "scope": "jobs:submit"}}',
    )
    return "span", F_ERR, t


def j_env() -> Draft:
    entries = env_entries([("RAY_JOB_TOKEN", S("JWT", jwt()))], R.randint(2, 5))
    t = txt("ray: job driver env (debug): ", env_dump(entries, "dict"))
    return "span", F_ERR, t


JWT_TEMPLATES = (
    j_bearer,
    j_bearer,
    j_kubeconfig,
    j_cookie,
    j_url_query,
    j_wss,
    j_token_flag,
    j_oauth_json,
    j_env,
)


# ---- Private keys ----


def k_tls_switched() -> Draft:
    kind = pick(("ec", "pkcs8-ec", "pkcs8-rsa", "rsa1024"))
    params = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
    t = txt(
        "collector_error: kafka sink: tls: failed to find certificate PEM data in certificate "
        "input, but did find a private key; PEM inputs may have been switched\ninput was:\n",
        params if kind == "ec" and chance(0.5) else "",
        S("PRIVATE_KEY", pem_block(kind)),
        "\n",
    )
    return "agent_event", F_MSG, t


def k_x509_parse() -> Draft:
    kind = pick(("ec", "rsa2048", "rsa1024"))
    hint = {
        "ec": "use ParseECPrivateKey instead for this key format",
        "rsa2048": "use ParsePKCS1PrivateKey instead for this key format",
        "rsa1024": "use ParsePKCS1PrivateKey instead for this key format",
    }[kind]
    t = txt(
        "collector_error: dcgm: failed to configure TLS from RANKSCOPE_DCGM_TLS_KEY:\n",
        S("PRIVATE_KEY", pem_block(kind)),
        f"\nerror: x509: failed to parse private key ({hint})",
    )
    return "agent_event", F_MSG, t


def sa_json(quote_style: str) -> list[Piece]:
    project = pick(("ml-train-prod", "acme-research", "llm-eval-42"))
    sa = pick(("ckpt-writer", "trainer", "rankscope-agent", "data-loader"))
    client_email = f"{sa}@{project}.iam.gserviceaccount.com"
    key = pem_block("pkcs8-rsa").replace("\n", "\\n") + "\\n"
    q = '"' if quote_style == "json" else "'"
    sep = ": "
    return [
        "{",
        f"{q}type{q}{sep}{q}service_account{q}, {q}project_id{q}{sep}{q}{project}{q}, ",
        f"{q}private_key_id{q}{sep}{q}{hexid(40)}{q}, {q}private_key{q}{sep}{q}",
        S("PRIVATE_KEY", key[:-2]),
        f"\\n{q}, {q}client_email{q}{sep}{q}",
        S("EMAIL_ADDRESS", client_email),
        f"{q}, {q}client_id{q}{sep}{q}{digits(21)}{q}, {q}auth_uri{q}{sep}{q}",
        S("URL", "https://accounts.google.com/o/oauth2/auth"),
        f"{q}, {q}token_uri{q}{sep}{q}",
        S("URL", "https://oauth2.googleapis.com/token"),
        f"{q}, {q}auth_provider_x509_cert_url{q}{sep}{q}",
        S("URL", "https://www.googleapis.com/oauth2/v1/certs"),
        f"{q}, {q}client_x509_cert_url{q}{sep}{q}",
        S(
            "URL",
            f"https://www.googleapis.com/robot/v1/metadata/x509/{sa}%40{project}.iam.gserviceaccount.com",
        ),
        f"{q}, {q}universe_domain{q}{sep}{q}googleapis.com{q}}}",
    ]


def k_gcp_sa_json() -> Draft:
    if chance(0.5):
        t = txt(
            "google.auth.exceptions.RefreshError: ('invalid_grant: Invalid JWT Signature.', "
            "{'error': 'invalid_grant', 'error_description': 'Invalid JWT Signature.'})\n"
            "while loading credentials from GOOGLE_APPLICATION_CREDENTIALS_JSON=",
            sa_json("json"),
        )
        return "span", F_ERR, t
    t = txt(
        "collector_error: gcs spool: could not build credentials from info dict ",
        sa_json("repr"),
        ": ValueError: ('Could not deserialize key data.',)",
    )
    return "agent_event", F_MSG, t


def k_bytes_repr() -> Draft:
    kind = pick(("pkcs8-rsa", "rsa1024", "ec", "pkcs8-ec"))
    user = pick(USERS) if chance(0.4) else None
    t = txt(
        tb(
            frame(
                user_script(user),
                R.randint(20, 200),
                "load_signer",
                "key = serialization.load_pem_private_key(data, password=None)",
            ),
            lib_frame(
                "cryptography/hazmat/primitives/serialization/base.py",
                "load_pem_private_key",
                "return rust_openssl.keys.load_pem_private_key(",
            ),
            final=[
                "ValueError: Could not deserialize key data. The data may be in an incorrect "
                "format, the provided password may be incorrect, it may be encrypted with an "
                "unsupported algorithm, or it may be an unsupported key type. data=b'",
                S("PRIVATE_KEY", pem_block(kind).replace("\n", "\\n")),
                "\\n'",
            ],
        )
    )
    return "span", F_ERR, t


def k_env_openssh() -> Draft:
    key = pem_block("openssh").replace("\n", "\\n")
    entries = env_entries([("SSH_PRIVATE_KEY", [S("PRIVATE_KEY", key), "\\n"])], R.randint(2, 5))
    t = txt(
        'collector_error: ssh fan-out for pdsh: Load key "/run/secrets/ssh_key": error in '
        "libcrypto; environ snapshot ",
        env_dump(entries, "dict"),
    )
    return "agent_event", F_MSG, t


def k_paramiko() -> Draft:
    kind = pick(("openssh", "rsa1024", "ec"))
    t = txt(
        "paramiko.ssh_exception.SSHException: not a valid ",
        "OPENSSH" if kind == "openssh" else ("EC" if kind == "ec" else "RSA"),
        " private key file\nkey material read from secret volume (",
        str(R.randint(200, 2000)),
        " bytes):\n",
        S("PRIVATE_KEY", pem_block(kind)),
    )
    return "span", F_ERR, t


def k_k8s_secret_echo() -> Draft:
    t = txt(
        'Error: container "ssh-setup" exited with code 1; last 40 lines of output:\n'
        "+ mkdir -p /root/.ssh\n+ echo '",
        S("PRIVATE_KEY", pem_block(pick(("openssh", "rsa1024")))),
        "'\n+ chmod 600 /root/.ssh/id_ed25519\nchmod: cannot access '/root/.ssh/id_ed25519': "
        "No such file or directory",
    )
    return "scheduler_event", F_REASON, t


PEM_TEMPLATES = (
    k_tls_switched,
    k_x509_parse,
    k_gcp_sa_json,
    k_bytes_repr,
    k_env_openssh,
    k_paramiko,
    k_k8s_secret_echo,
)


# ---- Passwords ----


def dsn(
    scheme: str, user: str, host: Piece, port: int, db: str, in_url_pw: str | None = None
) -> list[Piece]:
    pw = in_url_pw or password(in_url=True)
    return [f"{scheme}://{user}:", S("PASSWORD", pw), "@", host, f":{port}/{db}"]


def db_host() -> Piece:
    return (
        S("IP_ADDRESS", ip4_private())
        if chance(0.5)
        else pick(
            (
                "db01.corp.example",
                "postgres.mlops.svc.cluster.local",
                "pg-metrics-primary",
                "mlflow-db.internal",
            )
        )
    )


def p_mlflow_pg() -> Draft:
    ip = ip4_private()
    name = pick(("db01.corp.example", "mlflow-db.internal", "pg-metrics-primary"))
    host: Piece = S("IP_ADDRESS", ip) if chance(0.5) else name
    t = txt(
        "mlflow server --backend-store-uri ",
        dsn(pick(("postgresql", "postgresql+psycopg2")), "mlflow", host, 5432, "mlflow"),
        f" --default-artifact-root s3://{pick(BUCKETS)}/mlflow --port 5000\n",
        "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at ",
        ['"', S("IP_ADDRESS", ip), '"']
        if isinstance(host, S)
        else [f'"{name}" (', S("IP_ADDRESS", ip), ")"],
        ", port 5432 failed: FATAL:  password authentication "
        'failed for user "mlflow"\n(Background on this error at: ',
        S("URL", "https://sqlalche.me/e/20/e3q8"),
        ")",
    )
    return "span", F_ERR, t


def p_optuna_mysql() -> Draft:
    host = S("IP_ADDRESS", ip4_private())
    t = txt(
        "optuna.exceptions.StorageInternalError: An exception is raised during the commit. "
        "storage='",
        dsn("mysql+pymysql", "optuna", host, 3306, "optuna"),
        "'\npymysql.err.OperationalError: (1045, \"Access denied for user 'optuna'@'",
        S("IP_ADDRESS", ip4_private()),
        "' (using password: YES)\")",
    )
    return "span", F_ERR, t


def p_mongo() -> Draft:
    t = txt(
        "pymongo.errors.OperationFailure: bad auth : Authentication failed., full error: "
        "{'ok': 0, 'errmsg': 'bad auth : Authentication failed.', 'code': 8000, 'codeName': "
        "'AtlasError'} (uri=mongodb+srv://",
        pick(("evalbot", "trainer", "ml-logger")),
        ":",
        S("PASSWORD", password(in_url=True)),
        f"@cluster0.{rs(string.ascii_lowercase + string.digits, 5)}.mongodb.net/",
        "?retryWrites=true&w=majority)",
    )
    return "span", F_ERR, t


def p_redis() -> Draft:
    t = txt(
        "collector_error: dedup cache: redis.exceptions.AuthenticationError: invalid "
        "username-password pair or user is disabled. (url=redis://:",
        S("PASSWORD", password(in_url=True)),
        "@",
        db_host(),
        f":6379/{R.randint(0, 15)})",
    )
    return "agent_event", F_MSG, t


def p_amqp() -> Draft:
    t = txt(
        "kombu.exceptions.OperationalError: [Errno 111] Connection refused\n"
        "celery worker config: broker_url='",
        dsn("amqp", pick(("celery", "evalq", "ml")), db_host(), 5672, pick(("ml", "eval", "%2F"))),
        "' result_backend='redis://",
        db_host(),
        ":6379/1'",
    )
    return "span", F_ERR, t


def p_https_index() -> Draft:
    pw = password(in_url=True)
    url = S(
        "URL",
        f"https://{pick(('ci-bot', 'pypi-reader', 'trainer'))}:",
        S("PASSWORD", pw),
        "@pypi.corp.example/simple/",
    )
    t = txt(
        "pip install --index-url ",
        url,
        f" flash-attn=={pick(('2.6.3', '2.5.9.post1', '2.7.0'))} transformer-engine\n"
        "ERROR: Could not find a version that satisfies the requirement flash-attn",
    )
    return "scheduler_event", F_REASON, t


def p_redfish() -> Draft:
    url = S(
        "URL",
        "https://admin:",
        S("PASSWORD", password(in_url=True)),
        "@",
        S("IP_ADDRESS", ip4_private()),
        f"/redfish/v1/Systems/{pick(('1', 'System.Embedded.1', 'Self'))}",
    )
    t = txt(f"BMC poll for {short_host()} failed (HTTP 401): GET ", url, ". Retrying in 60 s.")
    return "fabric_event", F_MSG, t


def p_proxy() -> Draft:
    url = S(
        "URL",
        "http://svc-proxy:",
        S("PASSWORD", password(in_url=True)),
        f"@proxy.corp.example:{pick((3128, 8080))}",
    )
    t = txt(
        "HTTPS_PROXY=",
        url,
        " NO_PROXY=localhost,.cluster.internal python -m rankscope.agent",
    )
    return "node_inventory", F_XCMD, t


def p_libpq_kv() -> Draft:
    t = txt(
        "psycopg2.OperationalError: connection to server failed: FATAL:  password authentication "
        'failed for user "grafana"\ndsn=\'host=',
        db_host(),
        " port=5432 dbname=metrics user=grafana password=",
        S("PASSWORD", password()),
        " sslmode=require'",
    )
    return "span", F_ERR, t


def p_pgpassword() -> Draft:
    t = txt(
        "PGPASSWORD=",
        S("PASSWORD", password()),
        " psql -h ",
        db_host(),
        ' -U rankscope -d telemetry -c "\\copy incidents to /scratch/incidents.csv csv header"',
    )
    return "span", F_CMD, t


def p_clickhouse_flag() -> Draft:
    t = txt(
        "clickhouse-client --host ch01.corp.example --secure --user rankscope --password ",
        S("PASSWORD", password()),
        " --query \"SELECT count() FROM rank_window WHERE job_id = '",
        job_id(),
        "'\"\nCode: 516. DB::Exception: rankscope: Authentication failed: password is incorrect, "
        "or there is no user with such name. (AUTHENTICATION_FAILED)",
    )
    return "scheduler_event", F_REASON, t


def p_json_password() -> Draft:
    t = txt(
        "clickhouse_connect.driver.exceptions.DatabaseError: HTTPDriver for ",
        S("URL", "https://ch01.corp.example:8443"),
        " received ClickHouse error code 516\nconnection settings: ",
        '{"host": "ch01.corp.example", "port": 8443, "username": "default", "password": "',
        S("PASSWORD", password()),
        '", "secure": true, "database": "rankscope"}',
    )
    return "agent_event", F_MSG, t


def p_kafka_sasl() -> Draft:
    t = txt(
        "collector_error: kafka sink: %3|",
        str(1796200000 + R.randint(0, 99999)),
        ".123|FAIL|rdkafka#producer-1| [thrd:sasl_ssl://",
        S("IP_ADDRESS", ip4_private()),
        ":9093/bootstrap]: SASL authentication error: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
        "(config: sasl.username=rankscope sasl.password=",
        S("PASSWORD", password()),
        ")",
    )
    return "agent_event", F_MSG, t


def p_env_dump() -> Draft:
    entries = env_entries(
        [
            ("PGPASSWORD", S("PASSWORD", password())),
            ("PGHOST", db_host()),
        ],
        R.randint(2, 5),
    )
    t = txt("eval-harness: results writer failed; env: ", env_dump(entries, "dict"))
    return "span", F_ERR, t


def p_https_userinfo_tb() -> Draft:
    user = pick(USERS) if chance(0.4) else None
    url = S(
        "URL",
        "https://eval:",
        S("PASSWORD", password(in_url=True)),
        "@results.corp.example/upload/",
    )
    t = txt(
        tb(
            frame(
                user_script(user),
                R.randint(20, 600),
                "upload_results",
                ['requests.put("', url, '", data=blob).raise_for_status()'],
            ),
            lib_frame(
                "requests/models.py",
                "raise_for_status",
                "raise HTTPError(http_error_msg, response=self)",
            ),
            final=[
                "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: ",
                S("URL", "https://results.corp.example/upload/"),
            ],
        )
    )
    return "span", F_ERR, t


PASSWORD_TEMPLATES = (
    p_mlflow_pg,
    p_optuna_mysql,
    p_mongo,
    p_redis,
    p_amqp,
    p_https_index,
    p_redfish,
    p_proxy,
    p_libpq_kv,
    p_pgpassword,
    p_clickhouse_flag,
    p_json_password,
    p_kafka_sasl,
    p_env_dump,
    p_https_userinfo_tb,
)


# ---- URL signatures ----


def sig_requests_403() -> Draft:
    url = signed_url()
    t = txt(
        "requests.exceptions.HTTPError: ",
        pick(("403 Client Error: Forbidden", "400 Client Error: Bad Request")),
        " for url: ",
        url,
    )
    return "span", F_ERR, t


def sig_tb() -> Draft:
    user = pick(USERS) if chance(0.4) else None
    proj = pick(PROJECTS)
    url = signed_url()
    t = txt(
        tb(
            frame(
                user_script(user, proj),
                R.randint(50, 700),
                "load_shard",
                "resp = session.get(url, stream=True, timeout=30)",
            ),
            frame(
                home(user, f"{proj}/data/remote.py")
                if user
                else "/workspace/llm-train/data/remote.py",
                R.randint(50, 400),
                "fetch",
                "resp.raise_for_status()",
            ),
            lib_frame(
                "requests/models.py",
                "raise_for_status",
                "raise HTTPError(http_error_msg, response=self)",
            ),
            final=["requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: ", url],
        )
    )
    return "span", F_ERR, t


def sig_span_attr() -> Draft:
    t = txt(signed_url())
    return "span", pick(("payload.attributes.http.url", "payload.attributes.url.full")), t


def sig_wget() -> Draft:
    url = s3_presigned()
    host = str(url.parts[1]).split("/", 1)[0]
    ip = ip4_public()
    hh, mm, ss = R.randint(0, 23), R.randint(0, 58), R.randint(10, 58)
    t = txt(
        f"--2026-12-03 {hh:02d}:{mm:02d}:{ss:02d}--  ",
        url,
        f"\nResolving {host} ({host})... ",
        S("IP_ADDRESS", ip),
        f"\nConnecting to {host} ({host})|",
        S("IP_ADDRESS", ip),
        "|:443... connected.\nHTTP request sent, awaiting response... 403 Forbidden\n"
        f"2026-12-03 {hh:02d}:{mm:02d}:{ss + 1:02d} ERROR 403: Forbidden.",
    )
    return "scheduler_event", F_REASON, t


def sig_azure() -> Draft:
    t = txt(
        "azure.core.exceptions.ClientAuthenticationError: Server failed to authenticate the "
        "request. Make sure the value of Authorization header is formed correctly including the "
        f"signature.\nRequestId:{uuid4()}\nTime:2026-12-03T10:{R.randint(10, 59)}:"
        f"{R.randint(10, 59)}.{R.randint(1000000, 9999999)}Z\nErrorCode:AuthenticationFailed\n"
        "url: ",
        azure_sas(),
    )
    return "span", F_ERR, t


def sig_webdataset() -> Draft:
    q = pick(("'", '"'))
    t = txt(
        f"webdataset: exception while reading shard pipe:curl -s -L -f {q}",
        pick((s3_presigned, cloudfront_signed, gcs_signed))(),
        f"{q}: ValueError: ",
        "command exited with status 22 (HTTP 403)",
    )
    return "span", F_ERR, t


def sig_cloudfront_urllib() -> Draft:
    t = txt(
        "urllib.error.HTTPError: HTTP Error 403: Forbidden (GET ",
        cloudfront_signed(),
        f") while prefetching dataset shard {R.randint(0, 9999)}",
    )
    return "span", F_ERR, t


def sig_gcs_resumable() -> Draft:
    t = txt(
        "google.resumable_media.common.InvalidResponse: ('Request failed with status code', 403, "
        "'Expected one of', <HTTPStatus.OK: 200>, <HTTPStatus.PARTIAL_CONTENT: 206>)\nsigned url: ",
        gcs_signed(),
    )
    return "agent_event", F_MSG, t


SIG_TEMPLATES = (
    sig_requests_403,
    sig_tb,
    sig_span_attr,
    sig_wget,
    sig_azure,
    sig_webdataset,
    sig_cloudfront_urllib,
    sig_gcs_resumable,
)


# ---- Mixed env dumps and launchers ----


def m_env_dump() -> Draft:
    user = pick(USERS)
    secrets: list[tuple[str, Piece]] = [
        ("HF_TOKEN", S("API_TOKEN", hf_token())),
        ("WANDB_API_KEY", S("API_TOKEN", wandb_key())),
        ("MASTER_ADDR", master_addr()),
        ("HOME", ["/home/", S("HOME_DIR_USER", user)]),
    ]
    if chance(0.6):
        secrets += [
            ("AWS_ACCESS_KEY_ID", S("CLOUD_ACCESS_KEY", aws_key_id())),
            ("AWS_SECRET_ACCESS_KEY", S("CLOUD_SECRET_KEY", aws_secret())),
        ]
    if chance(0.4):
        secrets.append(("OPENAI_API_KEY", S("API_TOKEN", openai_key())))
    if chance(0.3):
        secrets.append(("MLFLOW_TRACKING_URI", S("URL", "https://mlflow.corp.example")))
    entries = env_entries(secrets, R.randint(4, 9))
    head = pick(
        (
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "
            f"{pick(('train.py', 'pretrain.py'))} "
            f"FAILED\nroot cause (first observed failure): rank {R.randint(0, 1023)} (local_rank: "
            f"{R.randint(0, 7)}) exitcode: 1; worker env: ",
            f"[rank{R.randint(0, 1023)}]: launch failed on {short_host()}; os.environ: ",
            f"/proc/{R.randint(1000, 99999)}/environ of failed worker: ",
        )
    )
    if head.startswith("/proc/"):
        # no URL in a NUL-separated dump: where a URL ends before "\x00" is not a convention here
        entries = [e for e in entries if e[0] != "MLFLOW_TRACKING_URI"]
        return "agent_event", F_MSG, txt(head, env_dump(entries, "proc"))
    return "span", F_ERR, txt(head, env_dump(entries, pick(("dict", "environ", "lines"))))


def m_launcher() -> Draft:
    t = txt(
        srun_head(),
        " --export=ALL,HF_TOKEN=",
        S("API_TOKEN", hf_token()),
        " ",
        torchrun(),
        "train.py ",
        train_args(),
        " --wandb-key ",
        "$WANDB_API_KEY" if chance(0.5) else "${WANDB_API_KEY}",
        " --s3-presign-base ",
        s3_presigned(),
    )
    return "span", F_CMD, t


MIXED_TEMPLATES = (m_env_dump, m_env_dump, m_launcher)

AWS_TEMPLATES = (
    c_aws_srun_env,
    c_aws_credentials_file,
    c_aws_boto3_tb,
    c_aws_create_access_key,
    c_aws_yaml_config,
    c_aws_s3cfg,
    c_aws_env_dict,
    c_aws_node_extra,
    c_aws_s3_xml,
    c_aws_export_lines,
    c_aws_kwargs_span_attr,
)
GAPI_TEMPLATES = (c_gapi_url, c_gapi_env, c_gapi_header, c_gapi_flag)


# ---------------------------------------------------------------------------------------------
# Network templates (IP addresses, URLs)
# ---------------------------------------------------------------------------------------------

IB_STATUS = (
    ("IBV_WC_RETRY_EXC_ERR", 12),
    ("IBV_WC_RNR_RETRY_EXC_ERR", 13),
    ("IBV_WC_WR_FLUSH_ERR", 5),
    ("IBV_WC_REM_ACCESS_ERR", 10),
    ("IBV_WC_LOC_PROT_ERR", 4),
)


def nccl_host() -> str:
    n = R.randint(1, 256)
    return pick((f"node{n:03d}.cluster.internal", f"node{n:03d}", f"gpu-h100-{n:03d}"))


def n_ib_completion() -> Draft:
    peer = ip4_private()
    local = peer.rsplit(".", 1)[0] + f".{R.randint(1, 254)}"  # same subnet as the peer
    name, code = pick(IB_STATUS)
    if chance(0.6):
        t = txt(
            nccl_prefix(nccl_host()),
            "NCCL INFO NET/IB : Got completion from peer ",
            S("IP_ADDRESS", peer),
            f"<{R.randint(30000, 65000)}> with status={name}({code}) opcode={pick((0, 1, 128))} "
            f"len={pick((0, 0, 524288))} vendor err {pick((129, 244, 136))} localGid ",
            S("IP_ADDRESS", f"::ffff:{local}"),
            " remoteGids",
            S("IP_ADDRESS", f"::ffff:{peer}"),
            f" hca {pick(HCAS)}",
        )
    else:
        t = txt(
            nccl_prefix(nccl_host()),
            "NCCL WARN NET/IB : Got completion from peer ",
            S("IP_ADDRESS", peer),
            f"<{R.randint(30000, 65000)}> with error {code}, opcode {pick((0, 1))}, len 0, vendor "
            f"err {pick((129, 244))} ({pick(('Recv', 'Send'))}) localGid ",
            S("IP_ADDRESS", ip6()),
            " remoteGid ",
            S("IP_ADDRESS", ip6()),
        )
    return "comm_event", F_MSG, t


def n_bootstrap() -> Draft:
    ifname = pick(("ib0", "eth0", "bond0", "enp12s0"))
    if chance(0.5):
        t = txt(
            nccl_prefix(),
            f"NCCL INFO Bootstrap : Using {ifname}:",
            S("IP_ADDRESS", ip4_private()),
            "<0>",
        )
    elif chance(0.5):
        t = txt(
            nccl_prefix(),
            "NCCL INFO NET/Socket : Using [0]ib0:",
            S("IP_ADDRESS", ip4_private()),
            "<0> [1]eth0:",
            S("IP_ADDRESS", ip4_private()),
            "<0>",
        )
    else:
        t = txt(
            nccl_prefix(),
            f"NCCL INFO NET/IB : Using [0]{pick(HCAS)}:1/IB [1]{pick(HCAS)}:1/IB [RO]; OOB "
            f"{ifname}:",
            S("IP_ADDRESS", ip4_private() if chance(0.7) else ip6()),
            "<0>",
        )
    return "comm_event", F_MSG, t


def n_socket_err() -> Draft:
    addr = ip4_private() if chance(0.8) else ip6()
    port = R.randint(30000, 65000)
    what = pick(
        (
            ("socketProgressOpt: Call to recv from ", "failed : Connection reset by peer"),
            ("socketStartConnect: Connect to ", "failed : Software caused connection abort"),
            ("Net : Call to recv from ", "failed : Broken pipe"),
            (
                "socketPollConnect: Connect to ",
                "returned 110(Connection timed out) errno 115(Operation now in progress)",
            ),
        )
    )
    prefix = nccl_prefix(nccl_host())
    t = txt(prefix, "NCCL WARN ", what[0], S("IP_ADDRESS", addr), f"<{port}> ", what[1])
    if chance(0.3):
        t.put(f"\n{prefix}NCCL INFO transport/net_ib.cc:{R.randint(900, 1500)} -> 6")
    return "comm_event", F_MSG, t


def n_c10d_client() -> Draft:
    addr = ip4_private() if chance(0.75) else ip6()
    err = pick(
        ("111 - Connection refused", "110 - Connection timed out", "101 - Network is unreachable")
    )
    t = txt(
        f"[W{glog_ts()} {R.randint(1000, 99999)} torch/csrc/distributed/c10d/socket.cpp:"
        f"{pick((663, 684, 752))}] [c10d] The client socket has failed to connect to [",
        S("IP_ADDRESS", addr),
        f"]:{pick((29500, 29400, 29501))} (errno: {err}).",
    )
    return "comm_event", F_MSG, t


def n_rendezvous() -> Draft:
    t = txt(
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to "
        "the C10d store has failed. See inner exception for details.\n(rdzv_endpoint=",
        S("IP_ADDRESS", ip4_private()),
        f":29400, rdzv_id={job_id()}, local node {short_host()})",
    )
    return "span", F_ERR, t


def n_ssh() -> Draft:
    ip = S("IP_ADDRESS", ip4_private())
    form = R.randrange(3)
    if form == 0:
        t = txt(
            "ssh: connect to host ",
            ip,
            " port 22: ",
            pick(("Connection timed out", "No route to host")),
        )
    elif form == 1:
        t = txt(
            pick(USERS), "@", ip, ": Permission denied (publickey,gssapi-keyex,gssapi-with-mic)."
        )
    else:
        t = txt(f"pdsh@{short_host()}: ", ip, ": ssh exited with exit code 255")
    return "agent_event", F_MSG, t


def n_ufm() -> Draft:
    t = txt(
        f"UFM event 113 (Link went down): Switch leaf-{R.randint(1, 48):02d} (mgmt ",
        S("IP_ADDRESS", ip4_private()),
        f") port {R.randint(1, 64)} <-> Computer {short_host()} HCA-{R.randint(1, 8)} "
        f"({pick(HCAS)}) port 1; severity Warning",
    )
    return "fabric_event", F_MSG, t


def n_fabric_misc() -> Draft:
    form = R.randrange(4)
    ip = S("IP_ADDRESS", ip4_private())
    if form == 0:
        t = txt("BGP neighbor ", ip, f" (AS {R.randint(64512, 65534)}) Down: Hold Timer Expired")
    elif form == 1:
        t = txt(
            f"RoCE: PFC pause storm on eth{R.randint(0, 3)} of {short_host()}: "
            f"{R.randint(100, 900)}k pause frames/s towards peer ",
            ip,
        )
    elif form == 2:
        t = txt("arp: neighbour ", ip, f" on bond0 FAILED (no reply after {pick((3, 5))} probes)")
    else:
        t = txt("nfs: server ", ip, " not responding, still trying")
    return "fabric_event", F_MSG, t


def n_lustre() -> Draft:
    t = txt(
        f"LustreError: 11-0: scratch-OST{R.randint(0, 63):04x}-osc-ffff{hexid(12)}: operation "
        f"{pick(('ost_write', 'ost_read', 'obd_ping'))} to node ",
        S("IP_ADDRESS", ip4_private()),
        "@o2ib failed: rc = -107",
    )
    return "fabric_event", F_MSG, t


def n_k8s_probe() -> Draft:
    ip = ip4_private()
    port = pick((8080, 8000, 9400))
    t = txt(
        f'{pick(("Liveness", "Readiness"))} probe failed: Get "',
        S("URL", "http://", S("IP_ADDRESS", ip), f":{port}/healthz"),
        '": dial tcp ',
        S("IP_ADDRESS", ip),
        f":{port}: connect: connection refused",
    )
    return "scheduler_event", F_REASON, t


def n_k8s_sandbox() -> Draft:
    ip = f"10.96.0.{pick((1, 10))}"
    t = txt(
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network "
        f'for sandbox "{hexid(64)}": plugin type="calico" failed (add): error getting '
        'ClusterInformation: Get "',
        S(
            "URL",
            "https://",
            S("IP_ADDRESS", ip),
            ":443/apis/crd.projectcalico.org/v1/clusterinformations/default",
        ),
        '": dial tcp ',
        S("IP_ADDRESS", ip),
        ":443: i/o timeout",
    )
    return "scheduler_event", F_REASON, t


def n_slurm_connect() -> Draft:
    ip = S("IP_ADDRESS", ip4_private())
    if chance(0.5):
        t = txt(
            "slurmd: error: _slurm_connect: connect to ", ip, ":6817 failed: Connection refused"
        )
    else:
        t = txt(
            "slurm_persist_conn_open_without_init: failed to open persistent connection to host:",
            ip,
            ":6819: Connection refused",
        )
    return "scheduler_event", F_REASON, t


def n_kafka() -> Draft:
    ip = ip4_private()
    t = txt(
        f"collector_error: kafka sink: %3|{1796200000 + R.randint(0, 99999)}.{R.randint(100, 999)}"
        "|FAIL|rdkafka#producer-1| [thrd:",
        S("IP_ADDRESS", ip),
        ":9092/bootstrap]: ",
        S("IP_ADDRESS", ip),
        ":9092/bootstrap: Connect to ipv4#",
        S("IP_ADDRESS", ip),
        ":9092 failed: Connection refused (after 0ms in state CONNECT)",
    )
    return "agent_event", F_MSG, t


def n_ping() -> Draft:
    if chance(0.6):
        t = txt(
            "From ",
            S("IP_ADDRESS", ip4_private()),
            f" icmp_seq={R.randint(1, 9)} Destination Host Unreachable",
        )
    else:
        t = txt(
            "fabric check: ping6 -I ib0 ",
            S(
                "IP_ADDRESS",
                "fe80::" + ":".join(f"{R.randint(1, 0xFFFF):x}" for _ in range(4)),
            ),
            "%ib0: 100% packet loss",
        )
    return "fabric_event", F_MSG, t


def n_master_env() -> Draft:
    t = txt(
        "MASTER_ADDR=",
        S("IP_ADDRESS", ip4_private() if chance(0.8) else ip6()),
        f" MASTER_PORT=29500 WORLD_SIZE={pick((64, 256, 1024))} RANK={R.randint(0, 63)} "
        "python -u train.py",
    )
    if chance(0.5):
        return "node_inventory", F_XCMD, t
    return "span", F_CMD, t


def n_nccl_ipv6_peer() -> Draft:
    t = txt(
        nccl_prefix(nccl_host()),
        "NCCL WARN Net : Connection closed by remote peer ",
        S("IP_ADDRESS", ip6()),
        f"<{R.randint(30000, 65000)}>",
    )
    return "comm_event", F_MSG, t


def n_dcgm() -> Draft:
    t = txt(
        "collector_error: dcgm: lost connection to nv-hostengine at ",
        S("IP_ADDRESS", ip4_private()),
        f":5555 (Host engine connection invalid/disconnected); retry {R.randint(1, 9)}",
    )
    return "agent_event", F_MSG, t


NET_IP_TEMPLATES = (
    n_ib_completion,
    n_ib_completion,
    n_bootstrap,
    n_socket_err,
    n_c10d_client,
    n_rendezvous,
    n_ssh,
    n_ufm,
    n_fabric_misc,
    n_lustre,
    n_k8s_probe,
    n_k8s_sandbox,
    n_slurm_connect,
    n_kafka,
    n_ping,
    n_master_env,
    n_nccl_ipv6_peer,
    n_dcgm,
)


def u_oom() -> Draft:
    g = R.randint(0, 7)
    total = pick(("79.11", "79.10", "139.72", "93.10"))
    in_use = float(total) - R.uniform(0.2, 2.0)
    t = txt(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {R.randint(2, 40) / 4:.2f} "
        f"GiB. GPU {g} has a total capacity of {total} GiB of which {R.randint(20, 900)}.00 MiB is "
        f"free. Including non-PyTorch memory, this process has {in_use:.2f} GiB "
        "memory in use. Of the allocated memory "
        f"{in_use - R.uniform(1, 4):.2f} GiB is allocated by PyTorch, and "
        f"{R.randint(100, 999)}.{R.randint(10, 99)} MiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (",
        S("URL", "https://pytorch.org/docs/stable/notes/cuda.html#environment-variables"),
        ")",
    )
    return "span", F_ERR, t


def u_wandb() -> Draft:
    ent = pick(("acme-ai", "llm-team", "research"))
    model = pick(MODELS)
    run = rs(string.ascii_lowercase + string.digits, 8)
    t = txt(
        f"wandb: View run {model}-{R.randint(1, 99)} at: ",
        S("URL", f"https://wandb.ai/{ent}/{model}/runs/{run}"),
        "\nwandb: View project at: ",
        S("URL", f"https://wandb.ai/{ent}/{model}"),
        "\nwandb: Synced 5 W&B file(s), 0 media file(s), 2 artifact file(s) and 0 other file(s)",
    )
    return "agent_event", F_MSG, t


def u_hub() -> Draft:
    name = f"resnet50-{hexid(8)}.pth"
    t = txt(
        'Downloading: "',
        S("URL", f"https://download.pytorch.org/models/{name}"),
        f'" to /root/.cache/torch/hub/checkpoints/{name}',
    )
    return "span", F_ERR, t


def u_pip_index() -> Draft:
    t = txt(
        "Looking in indexes: ",
        S("URL", "https://pypi.org/simple"),
        ", ",
        S("URL", f"https://download.pytorch.org/whl/{pick(('cu121', 'cu124', 'cu126'))}"),
        f"\nERROR: No matching distribution found for torch=={pick(('2.5.1', '2.6.0'))}+cu118",
    )
    return "scheduler_event", F_REASON, t


def u_trailing_dot() -> Draft:
    page = pick(
        (
            "https://pytorch.org/docs/stable/distributed.html",
            "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
            "https://pytorch.org/docs/stable/elastic/errors.html",
            "https://docs.nvidia.com/deploy/xid-errors/index.html",
        )
    )
    t = txt(
        pick(
            (
                "To enable traceback see: ",
                "For more information, see ",
                "NCCL WARN Please refer to ",
            )
        ),
        S("URL", page),
        pick((".", "", ".\n")),
    )
    if t.text.startswith("NCCL"):
        return "comm_event", F_MSG, t
    return "span", F_ERR, t


def u_k8s_watch() -> Draft:
    t = txt(
        "collector_error: kubernetes: watch ",
        S(
            "URL",
            "https://",
            S("IP_ADDRESS", "10.96.0.1"),
            ":443/api/v1/namespaces/ml-train/pods",
            f"?watch=1&resourceVersion={R.randint(10**6, 10**8)}",
        ),
        " ended: 410 Gone (resourceVersion too old); relisting",
    )
    return "agent_event", F_MSG, t


def u_slurmrestd() -> Draft:
    t = txt(
        "collector_error: slurm: GET ",
        S(
            "URL",
            "http://slurmrestd.cluster.internal:6820",
            f"/slurm/v0.0.{pick((40, 41, 42))}/job/{job_id()}",
        ),
        " -> 500 (slurm_get_job_info: ",
        pick(("Socket timed out on send/recv operation", "Unable to contact slurm controller")),
        ")",
    )
    return "agent_event", F_MSG, t


def u_hf_resolve() -> Draft:
    repo = pick(HF_REPOS)
    n = pick((4, 8, 30))
    t = txt(
        "WARNING: retrying download of ",
        S(
            "URL",
            f"https://huggingface.co/{repo}/resolve/main/",
            f"model-{R.randint(1, n):05d}-of-{n:05d}.safetensors",
        ),
        f" (Read timed out. (read timeout=10)). Retry {R.randint(1, 5)}/5",
    )
    return "span", F_ERR, t


def u_local_dash() -> Draft:
    if chance(0.5):
        t = txt(
            f"ray start --head --port={pick((6379, 6380))}: View the dashboard at ",
            S("URL", "http://", S("IP_ADDRESS", "127.0.0.1"), f":{pick((8265, 8266, 8275))}"),
        )
    else:
        t = txt(
            "TensorBoard 2.18.0 at ",
            S("URL", f"http://localhost:{pick((6006, 6007))}/"),
            " (Press CTRL+C to quit)",
        )
    return "agent_event", F_MSG, t


def u_attr_url() -> Draft:
    url = pick(
        (
            lambda: S(
                "URL",
                "https://huggingface.co/datasets/HuggingFaceFW/fineweb/resolve/main/data/",
                f"CC-MAIN-2024-10/000_{R.randint(0, 99999):05d}.parquet",
            ),
            lambda: S(
                "URL",
                f"http://pushgw.monitoring.svc:9091/metrics/job/rankscope/instance/{short_host()}",
            ),
            lambda: S("URL", "http://localhost:9400/metrics"),
            lambda: S(
                "URL",
                "http://",
                S("IP_ADDRESS", ip4_private()),
                f":{pick((8000, 8080))}/v1/completions",
            ),
        )
    )()
    return "span", pick(("payload.attributes.http.url", "payload.attributes.url.full")), txt(url)


NET_URL_TEMPLATES = (
    u_oom,
    u_wandb,
    u_hub,
    u_pip_index,
    u_trailing_dot,
    u_k8s_watch,
    u_slurmrestd,
    u_hf_resolve,
    u_local_dash,
    u_attr_url,
)


# ---------------------------------------------------------------------------------------------
# Contact / identity templates (prompts logged as span attributes, scheduler metadata, paths)
# ---------------------------------------------------------------------------------------------

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a customer support agent for Acme Cloud. Be concise.",
    "Answer as a friendly HR assistant.",
    "You are an evaluation judge. Score the answer from 1 to 10.",
)
PROMPT_FIELDS = (
    "payload.attributes.gen_ai.prompt",
    "payload.attributes.llm.input_messages",
    "payload.attributes.input.value",
    "payload.attributes.prompt",
)


def prompt(body: list[Piece]) -> Draft:
    field = pick(PROMPT_FIELDS)
    if field == "payload.attributes.llm.input_messages":
        return (
            "span",
            field,
            txt(
                '[{"role": "system", "content": "',
                pick(SYSTEM_PROMPTS),
                '"}, {"role": "user", "content": "',
                body,
                '"}]',
            ),
        )
    if field == "payload.attributes.input.value":
        return "span", field, txt("User: ", body, "\nAssistant:")
    return "span", field, txt(body)


def e_prompt() -> Draft:
    first, last = person()
    addr = S("EMAIL_ADDRESS", email(first, last))
    other = S("EMAIL_ADDRESS", email())
    body = pick(
        (
            ["Please draft a polite reply to ", other, " saying the Q3 offsite moves to Friday."],
            ["My email is ", addr, ", can you send me the summary of the meeting?"],
            ["Rewrite this signature: Best, ", S("PERSON", f"{first} {last}"), " | ", addr],
            ["Is ", other, " a valid address? The form keeps rejecting it."],
            ["Forward the invoice to ", addr, " and cc ", other, " please"],
        )
    )
    return prompt(body)


def e_slurm_mail() -> Draft:
    user = pick(USERS)
    t = txt(
        f"JobId={job_id()} JobName={pick(MODELS)} UserId={user}({R.randint(1000, 60000)}) "
        "JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 MailUser=",
        S("EMAIL_ADDRESS", email()),
        f" MailType=END,FAIL WorkDir=/scratch/job_{job_id()}",
    )
    return "scheduler_event", F_REASON, t


def e_git_author() -> Draft:
    first, last = person()
    t = txt(
        f"commit {hexid(40)}\nAuthor: ",
        S("PERSON", f"{first} {last}"),
        " <",
        S("EMAIL_ADDRESS", email(first, last)),
        f">\nDate:   Tue Dec 3 {R.randint(0, 23):02d}:{R.randint(10, 59)}:07 2026 +0000\n\n    "
        f"{pick(('Fix NCCL timeout handling', 'Bump flash-attn', 'Add fp8 recipe'))}",
    )
    return "node_inventory", "payload.extra.git_head", t


def e_k8s_owner() -> Draft:
    t = txt(
        f"Created pod: {pick(MODELS)}-worker-{R.randint(0, 127)} (annotations: owner=",
        S("EMAIL_ADDRESS", email()),
        f", team=pretraining, cost-center={R.randint(1000, 9999)})",
    )
    return "scheduler_event", F_REASON, t


def e_gcs_sa() -> Draft:
    project = pick(("ml-train-prod", "acme-research", "llm-eval-42"))
    sa = f"{pick(('ckpt-writer', 'trainer', 'data-loader'))}@{project}.iam.gserviceaccount.com"
    t = txt(
        "google.api_core.exceptions.Forbidden: 403 ",
        S("EMAIL_ADDRESS", sa),
        " does not have storage.objects.create access to the Google Cloud Storage object. "
        "Permission 'storage.objects.create' denied on resource (or it may not exist).",
    )
    return "span", F_ERR, t


def e_enduser() -> Draft:
    return (
        "span",
        pick(("payload.attributes.enduser.id", "payload.attributes.user.email")),
        txt(S("EMAIL_ADDRESS", email())),
    )


EMAIL_TEMPLATES = (e_prompt, e_prompt, e_slurm_mail, e_git_author, e_k8s_owner, e_gcs_sa, e_enduser)


def ph_prompt() -> Draft:
    ph = S("PHONE_NUMBER", pick(PHONES))
    body = pick(
        (
            ["Call me back at ", ph, " after 5pm, my order still has not arrived."],
            ["My number changed to ", ph, ". Please update my account."],
            ["Extract the phone number from: 'Reach the office on ", ph, " (reception)'"],
            ["Is ", ph, " a mobile or a landline?"],
            ["WhatsApp me on ", ph, " when the driver is close"],
        )
    )
    if chance(0.3):
        body = ["Hi, this is ", S("PERSON", full_name()), ". ", *body]
    return prompt(body)


def ph_oncall() -> Draft:
    t = txt(
        'Comment="oncall: ',
        S("PERSON", full_name()),
        " ",
        S("PHONE_NUMBER", pick(PHONES)),
        f'" JobId={job_id()} Partition=gpu-h100 QOS=high',
    )
    return "scheduler_event", F_REASON, t


def ph_escalation() -> Draft:
    t = txt(
        f"alert route {pick(('gpu-xid', 'fabric-down', 'job-hang'))}: paging NOC at ",
        S("PHONE_NUMBER", pick(PHONES)),
        f" (attempt {R.randint(1, 3)})",
    )
    return "agent_event", F_MSG, t


PHONE_TEMPLATES = (ph_prompt, ph_prompt, ph_prompt, ph_oncall, ph_escalation)


def pe_prompt() -> Draft:
    name = S("PERSON", full_name())
    body = pick(
        (
            ["Hi, my name is ", name, " and I need help writing a cover letter."],
            ["Summarize the attached letter from Dr. ", name, " in two sentences."],
            ["Write a short bio for ", name, ", a robotics researcher."],
            ["Translate to German: 'Dear ", name, ", thank you for your patience.'"],
            ["Who should I contact? ", name, " said the budget owner is on leave."],
        )
    )
    return prompt(body)


def pe_annotation() -> Draft:
    t = txt(
        f"Scheduled: {pick(MODELS)}-eval-{R.randint(1, 999)} (requested-by: ",
        S("PERSON", full_name()),
        f", priority {pick(('high', 'normal'))})",
    )
    return "scheduler_event", F_REASON, t


PERSON_TEMPLATES = (pe_prompt, pe_prompt, pe_prompt, pe_annotation)


def cc_prompt() -> Draft:
    card = S("CREDIT_CARD", card_number())
    body = pick(
        (
            ["My card ", card, " was charged twice for the same order, can you help?"],
            ["Why was my card number ", card, ", exp 12/27, declined?"],
            ["Extract payment info: card=", card, " cvv=", str(R.randint(100, 999))],
            ["I paid with ", card, " but the receipt shows a different amount"],
        )
    )
    if chance(0.35):
        body = ["I am ", S("PERSON", full_name()), ". ", *body]
    return prompt(body)


CARD_TEMPLATES = (cc_prompt,)


def h_traceback() -> Draft:
    user = pick(USERS)
    style = pick(("linux", "linux", "linux", "mac"))
    proj = pick(PROJECTS)
    t = txt(
        tb(
            frame(
                home(user, f"{proj}/train.py", style), R.randint(100, 900), "<module>", "main(cfg)"
            ),
            frame(
                home(user, f"{proj}/trainer.py", style),
                R.randint(100, 900),
                "fit",
                "loss = self.step(batch)",
            ),
            lib_frame(
                "torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"
            ),
            final=pick(
                (
                    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4096x8192 and "
                    "4096x4096)",
                    "KeyError: 'attention_mask'",
                    "AssertionError: sequence length 8193 exceeds max_position_embeddings 8192",
                )
            ),
        )
    )
    return "span", F_ERR, t


def h_fnf() -> Draft:
    user = pick(USERS)
    style = pick(("linux", "linux", "mac", "win"))
    rest = pick(
        (
            f"data/shard_{R.randint(0, 9999):04d}.jsonl",
            ".cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/config.json",
            f"{pick(PROJECTS)}/configs/{pick(MODELS)}.yaml",
            "miniconda3/envs/llm/lib/libnccl.so.2",
        )
    )
    t = txt(
        "FileNotFoundError: [Errno 2] No such file or directory: '", home(user, rest, style), "'"
    )
    return "span", F_ERR, t


def h_nvidia_smi() -> Draft:
    user = pick(USERS)
    t = txt(
        f"GPU {R.randint(0, 7)}: process {R.randint(1000, 400000)} (python ",
        home(user, f"{pick(PROJECTS)}/train.py"),
        f" --config {pick(MODELS)}.yaml) holds {R.randint(20000, 80000)}MiB after job end",
    )
    return "gpu_event", F_MSG, t


def h_python_exe() -> Draft:
    user = pick(USERS)
    t = txt(
        home(
            user,
            pick(
                (
                    "miniconda3/envs/llm/bin/python",
                    ".venv/bin/python3.11",
                    "micromamba/envs/train/bin/python",
                )
            ),
        )
    )
    return "node_inventory", pick(("payload.extra.python_executable", "payload.extra.venv")), t


def h_sys_path() -> Draft:
    user = pick(USERS)
    t = txt(
        "ModuleNotFoundError: No module named 'flash_attn_2_cuda'\nsys.path: ['",
        home(user, pick(PROJECTS)),
        "', '/usr/lib/python311.zip', '/usr/lib/python3.11', '",
        home(user, ".local/lib/python3.11/site-packages"),
        f"', '{site()}']",
    )
    return "span", F_ERR, t


def h_win() -> Draft:
    user = pick(USERS)
    t = txt(
        'OSError: [WinError 126] The specified module could not be found. Error loading "',
        home(
            user,
            "AppData/Local/Programs/Python/Python311/Lib/site-packages/torch/lib/cudnn_ops64_9.dll",
            "win",
        ),
        '" or one of its dependencies.',
    )
    return "span", F_ERR, t


def h_slurm_cmd() -> Draft:
    user = pick(USERS)
    t = txt(
        f"JobId={job_id()} JobState=FAILED Reason=NonZeroExitCode Command=",
        home(user, f"jobs/{pick(MODELS)}.sbatch"),
        " StdOut=",
        home(user, "logs/%x-%j.out"),
    )
    return "scheduler_event", F_REASON, t


HOME_TEMPLATES = (h_traceback, h_fnf, h_nvidia_smi, h_python_exe, h_sys_path, h_win, h_slurm_cmd)


# ---------------------------------------------------------------------------------------------
# Benign look-alikes
# ---------------------------------------------------------------------------------------------

XIDS = (
    (79, "GPU has fallen off the bus."),
    (48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer."),
    (94, "Contained ECC error."),
    (95, "Uncontained ECC error."),
    (13, "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address"),
    (
        31,
        "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        "0x7f2d_4e8a0000.",
    ),
    (
        119,
        "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 "
        "(GSP_RM_CONTROL).",
    ),
    (63, "Row Remapper: New row (0x00000000000a1b2c) marked for remapping, reset gpu to activate."),
    (74, "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"),
)


def pci_bus(upper: bool = False) -> str:
    b = f"{R.choice((0x18, 0x2A, 0x3B, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)):02x}"
    return f"00000000:{b.upper()}:00.0" if upper else f"0000:{b}:00.0"


def gpu_uuid() -> str:
    return "GPU-" + uuid4()


def b_xid() -> Draft:
    code, msg = pick(XIDS)
    bus = pci_bus()[:-2]
    t = txt(f"NVRM: Xid (PCI:{bus}): {code}, pid={R.randint(1000, 400000)}, name=python, {msg}")
    return "gpu_event", F_MSG, t


def b_gpu_uuid() -> Draft:
    form = R.randrange(3)
    g = R.randint(0, 7)
    if form == 0:
        s = (
            f"GPU {g} ({gpu_uuid()}) temperature {R.randint(86, 95)}C exceeds slowdown "
            "threshold 85C"
        )
    elif form == 1:
        s = (
            f"{gpu_uuid()}: clocks throttled (HW slowdown, HW power brake) sm "
            f"{R.randint(900, 1400)} MHz"
        )
    else:
        s = (
            f"remapped rows pending on {gpu_uuid()} (bus {pci_bus(True)}): correctable "
            f"{R.randint(0, 9)}, uncorrectable {R.randint(1, 4)}"
        )
    return "gpu_event", F_MSG, txt(s)


def b_mig() -> Draft:
    s = (
        f"CUDA_VISIBLE_DEVICES=MIG-{uuid4()} ; MIG 3g.40gb device {R.randint(0, 6)} on GPU "
        f"{R.randint(0, 7)} (instance {R.randint(1, 14)})"
    )
    return "gpu_event", F_MSG, txt(s)


def b_smi_row() -> Draft:
    s = (
        f"|   {R.randint(0, 7)}  {pick(GPU_MODELS)[:22]:<22} On  |   {pci_bus(True)} Off |"
        f"                    0 |\n| N/A   {R.randint(30, 80)}C    P0   {R.randint(90, 700)}W / "
        f"700W |  {R.randint(1000, 80000)}MiB / 81559MiB |    {R.randint(0, 100)}%      Default |"
    )
    return "gpu_event", F_MSG, txt(s)


def b_oom_short() -> Draft:
    s = (
        f"CUDA out of memory. Tried to allocate {R.randint(1, 40) / 4:.2f} GiB (GPU "
        f"{R.randint(0, 7)}; "
        f"79.11 GiB total capacity; {R.randint(60, 77)}.{R.randint(10, 99)} GiB already allocated; "
        f"{R.randint(10, 999)}.{R.randint(10, 99)} MiB free; "
        f"{R.randint(70, 78)}.{R.randint(10, 99)} "
        "GiB reserved in total by PyTorch)"
    )
    return "span", F_ERR, txt(s)


def b_aer() -> Draft:
    s = (
        f"pcieport 0000:{pick(('00', '17', '3a', '5c'))}:01.0: AER: Corrected error received: "
        f"{pci_bus()}\nnvidia {pci_bus()}: PCIe Bus Error: severity=Corrected, type=Physical Layer,"
        f" (Receiver ID)\nnvidia {pci_bus()}:   device [10de:2330] error "
        "status/mask=00000001/0000e000"
    )
    return "gpu_event", F_MSG, txt(s)


GPU_BENIGN = (b_xid, b_xid, b_gpu_uuid, b_mig, b_smi_row, b_oom_short, b_aer)


def b_comm_init() -> Draft:
    if chance(0.5):
        s = (
            f"{nccl_prefix(nccl_host())}NCCL INFO ncclCommInitRank comm 0x{hexid(12)} rank "
            f"{R.randint(0, 1023)} nranks {pick((64, 256, 1024))} cudaDev {R.randint(0, 7)} "
            "nvmlDev "
            f"{R.randint(0, 7)} busId {pick(('18000', '3b000', '5d000', '9a000'))} commId "
            f"0x{hexid(16)} - Init COMPLETE"
        )
    else:
        s = (
            f"{nccl_prefix()}NCCL INFO comm 0x{hexid(12)} rank {R.randint(0, 1023)} nRanks "
            f"{pick((256, 1024))} nNodes {pick((32, 128))} localRanks 8 localRank "
            f"{R.randint(0, 7)} "
            "MNNVL 0"
        )
    return "comm_event", F_MSG, txt(s)


def b_unique_id() -> Draft:
    raw = R.randbytes(32)
    dump = " ".join(f"{b:02x}" for b in raw)
    return "comm_event", F_MSG, txt(f"ncclUniqueId (rank 0 -> broadcast): {dump} ...")


def b_channels() -> Draft:
    form = R.randrange(3)
    p = nccl_prefix()
    if form == 0:
        c = R.randint(0, 31)
        s = f"{p}NCCL INFO Channel {c:02d}/32 : " + " ".join(str(i) for i in range(8))
    elif form == 1:
        r = R.randint(0, 7)
        tree = f"{r + 1}/-1/-1->{r}->{max(r - 1, -1)}"
        s = f"{p}NCCL INFO Trees [0] {tree} [1] {tree}"
    else:
        s = (
            f"{p}NCCL INFO Channel {R.randint(0, 31):02d}/0 : "
            f"{R.randint(0, 1023)}[{R.randint(0, 7)}] -> "
            f"{R.randint(0, 1023)}[{R.randint(0, 7)}] [send] via NET/IB/{R.randint(0, 7)}/GDRDMA"
        )
    return "comm_event", F_MSG, txt(s)


def b_watchdog() -> Draft:
    n = R.choice((262144000, 1048576, 524288000, 33554432))
    s = (
        f"[rank{R.randint(0, 1023)}]:[E{glog_ts()} {R.randint(1000, 99999)} "
        f"ProcessGroupNCCL.cpp:{pick((616, 1537, 632))}] [Rank {R.randint(0, 1023)}] Watchdog "
        "caught "
        f"collective operation timeout: WorkNCCL(SeqNum={R.randint(1, 999999)}, OpType="
        f"{pick(('ALLREDUCE', '_ALLGATHER_BASE', '_REDUCE_SCATTER_BASE', 'BROADCAST'))}, "
        f"NumelIn={n}, "
        f"NumelOut={n}, Timeout(ms)=600000) ran for {R.randint(600001, 600999)} milliseconds "
        "before "
        "timing out."
    )
    return "comm_event", F_MSG, txt(s)


def b_nccl_host_err() -> Draft:
    h = f"node{R.randint(1, 256):03d}.cluster.internal"
    s = pick(
        (
            f"{nccl_prefix()}NCCL WARN Net : Connection closed by remote peer "
            f"{h}<{R.randint(30000, 65000)}>",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            f"ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
            f"details), NCCL version {pick(NCCL_VERSIONS)}\nncclSystemError: System call (e.g. "
            "socket, malloc) or external library call failed or device error.\nLast error:\n"
            f"socketStartConnect: Connect to {h}<{R.randint(30000, 65000)}> failed : Software "
            "caused "
            "connection abort",
        )
    )
    return "comm_event", F_MSG, txt(s)


def b_nccl_misc() -> Draft:
    p = nccl_prefix()
    s = pick(
        (
            f"{p}NCCL INFO cudaDriverVersion {pick((12040, 12060, 12020))}",
            f"{p}NCCL INFO NCCL version {pick(NCCL_VERSIONS)}+cuda{pick(('12.4', '12.2', '12.6'))}",
            f"{p}NCCL INFO NET/IB: Dev {R.randint(0, 7)} Port 1 qpn {R.randint(100, 9000)} mtu 5 "
            f"LID 0x{R.randint(1, 0xFFF):x} GID 0",
            f"{p}NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0",
            f"{p}NCCL INFO Using network IB",
            f"{p}NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
            f"{p}NCCL WARN Call to ibv_modify_qp failed with error Connection timed out, retrying "
            f"{R.randint(1, 9)}/7",
        )
    )
    return "comm_event", F_MSG, txt(s)


NCCL_BENIGN = (b_comm_init, b_unique_id, b_channels, b_watchdog, b_nccl_host_err, b_nccl_misc)


def b_loss() -> Draft:
    s = (
        f"step {step_no()} | loss {R.uniform(1.5, 3.5):.4f} | lr {R.uniform(3e-5, 3e-4):.2e} | "
        f"grad_norm {R.uniform(0.2, 4.0):.3f} | tokens/s {R.randint(200000, 3000000)} | "
        f"mfu {R.uniform(0.3, 0.6):.3f}"
    )
    return "span", "payload.attributes.log", txt(s)


def b_trace_ids() -> Draft:
    tid, sid = hexid(32), hexid(16)
    s = pick(
        (
            f"trace_id={tid} span_id={sid} parent={hexid(16)} phase=backward step={step_no()}",
            f"traceparent: 00-{tid}-{sid}-01",
            f"span {sid} of trace {tid} ended after {R.randint(1, 9000)} ms (status=error)",
        )
    )
    return "span", pick(("payload.attributes.traceparent", F_ERR)), txt(s)


def b_shapes() -> Draft:
    a, b = pick((8192, 4096, 14336, 128256)), pick((4096, 8192, 1024))
    s = pick(
        (
            f"RuntimeError: shape '[{a}, {b}]' is invalid for input of size {a * b // 2}",
            f"rank {R.randint(0, 1023)} world_size {pick((256, 1024))} tensor torch.Size([{a}, "
            f"{b}]) dtype=torch.bfloat16",
            f"RuntimeError: The size of tensor a ({a}) must match the size of tensor b ({b}) at "
            "non-singleton dimension 1",
            f"[rank{R.randint(0, 1023)}]: grad bucket {R.randint(0, 99)} numel {a * b} sizes "
            f"[torch.Size([{a}, {b}]), torch.Size([{b}])]",
        )
    )
    return "span", F_ERR, txt(s)


def b_timestamps() -> Draft:
    ns = 1796200000 * 10**9 + R.randint(0, 10**14)
    s = pick(
        (
            f"clock skew detected: ts={ts_iso()} observed_ts_ns={ns} "
            f"offset_ns={R.randint(-9999999, 9999999)}",
            f"late event: event_ns={ns} watermark_ns={ns + R.randint(10**9, 10**11)} "
            f"window={R.randint(1, 9999)}",
            f"Tue Dec  3 {R.randint(0, 23):02d}:{R.randint(10, 59)}:{R.randint(10, 59)} 2026 step "
            f"{step_no()} took {R.uniform(0.5, 9):.3f}s",
        )
    )
    return "span", F_ERR, txt(s)


def b_token_words() -> Draft:
    s = pick(
        (
            f"token count {pick((2048, 4096, 8192))} exceeds context window for sample "
            f"{R.randint(0, 99999)}",
            f"generation config: max_tokens={pick((512, 1024, 2048))} temperature=0.7 top_p=0.95 "
            f"eos_token_id={pick((2, 128001, 151643))} pad_token_id=0",
            f"tokenizer: vocab_size={pick((32000, 128256, 151936))} pad_token='<|endoftext|>' "
            "add_bos_token=True",
            "attention: using key_padding_mask of shape torch.Size([8, 4096]); token_type_ids "
            "ignored",
            f"dataloader: packed {R.randint(100000, 9999999)} tokens into {R.randint(100, 999)} "
            "sequences; tokens_per_step=4194304",
            "tokens/s per GPU dropped below threshold (key: throughput.tokens_per_s)",
        )
    )
    return "span", pick(("payload.attributes.log", F_ERR)), txt(s)


TRAIN_BENIGN = (b_loss, b_trace_ids, b_shapes, b_timestamps, b_token_words)


def b_slurm() -> Draft:
    j = job_id()
    lo, hi = R.randint(1, 64), R.randint(65, 256)
    s = pick(
        (
            f"slurmstepd: error: *** JOB {j} ON node{lo:03d} CANCELLED AT 2026-12-03T"
            f"{R.randint(0, 23):02d}:{R.randint(10, 59)}:{R.randint(10, 59)} DUE TO TIME LIMIT ***",
            f"srun: error: node[{lo:03d},{hi:03d}]: tasks {lo * 8}-{lo * 8 + 7}: Killed",
            f"JobId={j} JobState=NODE_FAIL Reason=NodeDown NodeList=node[{lo:03d}-{hi:03d}] "
            f"NumNodes={hi - lo + 1} ExitCode=0:0",
            f"NodeName=node{lo:03d} State=DRAIN Reason=GPU fell off the bus [slurm@2026-12-03T"
            f"{R.randint(0, 23):02d}:{R.randint(10, 59)}:{R.randint(10, 59)}]",
            f"job {j} requeued: JobState=PENDING Reason=BeginTime Dependency=afterok:{job_id()}",
            f"slurmstepd: error: Detected 1 oom_kill event in StepId={j}.0. Some of the step "
            "tasks have been OOM Killed.",
        )
    )
    return "scheduler_event", F_REASON, txt(s)


def b_k8s() -> Draft:
    pod = f"{pick(MODELS)}-worker-{R.randint(0, 127)}"
    s = pick(
        (
            f"Successfully assigned ml-train/{pod} to "
            f"gke-a3-pool-{hexid(6)}-{rs(string.ascii_lowercase + string.digits, 4)}",
            f"Back-off restarting failed container trainer in pod {pod}_ml-train({uuid4()})",
            f'Container image "registry.corp.example/llm/train@sha256:{hexid(64)}" already present '
            "on machine",
            f'Successfully pulled image "nvcr.io/nvidia/pytorch:24.{R.randint(1, 12):02d}-py3" in '
            f"{R.randint(1, 5)}m{R.randint(1, 59)}.{R.randint(1, 9)}s. Image size: "
            f"{R.randint(10**9, 3 * 10**10)} bytes.",
            f"Evicted: The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, "
            f"available: {R.randint(1000000, 9999999)}Ki.",
            f"OOMKilled: container trainer in pod {pod} (uid {uuid4()}) exceeded limit 1600Gi",
            f"0/{pick((64, 128))} nodes are available: {R.randint(1, 64)} Insufficient "
            "nvidia.com/gpu, "
            f"{R.randint(1, 8)} node(s) had untolerated taint {{nvidia.com/gpu: NoSchedule}}.",
            f"Preempting {pod} (uid {uuid4()}) for higher priority workload",
        )
    )
    return "scheduler_event", F_REASON, txt(s)


SCHED_BENIGN = (b_slurm, b_slurm, b_k8s, b_k8s)


VERSION_BENIGN: tuple[Template, ...] = (
    lambda: (
        "node_inventory",
        "payload.kernel",
        txt(f"{pick(('5.15.0', '6.5.0', '6.8.0'))}-{R.randint(50, 130)}-generic"),
    ),
    lambda: ("node_inventory", "payload.driver_version", txt(pick(DRIVERS))),
    lambda: (
        "node_inventory",
        "payload.extra.ofed",
        txt(f"MLNX_OFED_LINUX-{pick(('23.10-1.1.9.0', '24.04-0.7.0.0', '23.07-0.5.1.2'))}"),
    ),
    lambda: (
        "node_inventory",
        "payload.extra.torch",
        txt(f"torch {pick(('2.5.1', '2.6.0', '2.4.1'))}+cu{pick((121, 124, 126))} git {hexid(40)}"),
    ),
    lambda: (
        "node_inventory",
        "payload.extra.vbios",
        txt(pick(("96.00.89.00.01", "96.00.74.00.1C", "92.00.45.00.03"))),
    ),
    lambda: (
        "node_inventory",
        "payload.extra.hca_fw",
        txt(f"{pick(HCAS)} fw {pick(('28.39.1002', '28.41.1000', '20.35.1012'))} (MT_0000000838)"),
    ),
    lambda: (
        "node_inventory",
        "payload.os",
        txt(pick(("Ubuntu 22.04.4 LTS", "Rocky Linux 9.3 (Blue Onyx)", "Ubuntu 24.04.1 LTS"))),
    ),
    # cuDNN / TensorRT versions are dotted quads that parse as IPv4 addresses
    lambda: (
        "node_inventory",
        "payload.extra.libs",
        txt(
            f"cudnn {pick(('9.1.0.70', '9.3.0.75', '8.9.7.29'))} tensorrt "
            f"{pick(('10.3.0.26', '10.0.1.6', '8.6.1.6'))} nccl {pick(NCCL_VERSIONS)}"
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"agent_started rankscope-agent 0.1.0 (driver {pick(DRIVERS)}, CUDA "
            f"{pick(('12.4', '12.6', '12.2'))}, NCCL {pick(NCCL_VERSIONS)}+cuda12.4, kernel "
            f"{pick(('5.15.0-105-generic', '6.8.0-45-generic'))})"
        ),
    ),
)


def b_fabric() -> Draft:
    hca = pick(HCAS)
    s = pick(
        (
            f"{hca}:1 state ACTIVE -> DOWN (phys state Polling) rate 400 Gb/sec (4X NDR)",
            f"symbol error counter increased by {R.randint(1, 900)} on {hca} port 1 "
            f"(guid 0x{hexid(16)}, LID 0x{R.randint(1, 0xFFF):x})",
            f"port_rcv_errors {R.randint(1, 999)} link_downed {R.randint(1, 9)} on {short_host()} "
            f"{hca}/1 in the last 60 s",
            f"SM: heavy sweep took {R.randint(100, 9000)} ms ({R.randint(1000, 9999)} ports, "
            f"{R.randint(10, 400)} switches)",
            f"mlx5_core {pci_bus()}: mlx5_fw_tracer_handle_traces:{R.randint(700, 800)}:(pid "
            f"{R.randint(1, 999)}): FW event: link down",
            f"leaf-{R.randint(1, 48):02d} port {R.randint(1, 64)} flapped {R.randint(2, 30)} times "
            "in "
            f"{R.randint(1, 60)} min (peer {short_host()} {hca})",
        )
    )
    return "fabric_event", F_MSG, txt(s)


FABRIC_BENIGN = (b_fabric,)


def b_agent() -> Draft:
    s = pick(
        (
            f"spool overflow: dropped {R.randint(1, 99999)} records (spool {R.randint(64, 2048)}.0 "
            "MiB full)",
            f"spool replayed {R.randint(100, 999999)} records in {R.uniform(0.1, 30):.1f} s",
            f"collector nvml recovered after {R.randint(1, 9)} attempts (last error: "
            "NVML_ERROR_GPU_IS_LOST)",
            f"agent_stopped: SIGTERM received, flushed {R.randint(0, 9999)} events, pid "
            f"{R.randint(1000, 99999)}",
            f"collector_error: nccl_log: cannot read /var/log/nccl/{job_id()}.log: permission "
            "denied",
            f"heartbeat: {R.randint(1, 9)} collectors healthy, spool {R.randint(0, 100)}% full, "
            f"lag {R.randint(0, 9000)} ms",
        )
    )
    return "agent_event", F_MSG, txt(s)


AGENT_BENIGN = (b_agent,)


def b_paths() -> Draft:
    s = pick(
        (
            f"saving checkpoint to {ckpt_path()}",
            f"Saving checkpoint to s3://{pick(BUCKETS)}/{pick(MODELS)}/step_{step_no()}/",
            f"gsutil -m cp -r /scratch/job_{job_id()}/ckpt gs://{pick(BUCKETS)}/{pick(MODELS)}/",
            f"loading tokenizer from /models/tok/{pick(MODELS)}/tokenizer.json (cache "
            "/root/.cache/huggingface/hub)",
            "writing model.safetensors index to "
            f"/checkpoints/{pick(MODELS)}/model.safetensors.index.json",
            f"dataset shards: /datasets/fineweb/train-{R.randint(0, 9999):05d}-of-10000.arrow ... "
            f"({R.randint(1, 999)} files)",
        )
    )
    return "span", pick(("payload.attributes.log", F_ERR)), txt(s)


def b_lib_traceback() -> Draft:
    t = txt(
        tb(
            frame(user_script(None), R.randint(100, 900), "main", "trainer.fit()"),
            lib_frame(
                "torch/distributed/distributed_c10d.py",
                "all_reduce",
                "work = group.allreduce([tensor], opts)",
            ),
            lib_frame("torch/nn/functional.py", "scaled_dot_product_attention", None),
            final=pick(
                (
                    "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 17.",
                    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA "
                    "kernel "
                    "errors might be asynchronously reported at some other API call, so the "
                    "stacktrace "
                    "below might be incorrect.\nFor debugging consider passing "
                    "CUDA_LAUNCH_BLOCKING=1",
                    "ImportError: cannot import name 'flash_attn_func' from 'flash_attn' (unknown "
                    "location)",
                )
            ),
        )
    )
    return "span", F_ERR, t


PATH_BENIGN = (b_paths, b_lib_traceback)


def cert_block(label: str, n_bytes: int) -> str:
    enc = base64.b64encode(bytes.fromhex("3082") + R.randbytes(n_bytes)).decode()
    lines = [enc[i : i + 64] for i in range(0, len(enc), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


def non_luhn(n: int) -> str:
    while True:
        num = digits(n)
        if not luhn_ok(num):
            return num


LOOKALIKES: tuple[Template, ...] = (
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            "collector_error: kafka sink: client certificate expires in 3 days:\n"
            + cert_block("CERTIFICATE", R.randint(300, 700))
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt("loaded signing public key:\n" + cert_block("PUBLIC KEY", 290)),
    ),
    lambda: (
        "node_inventory",
        "payload.extra.ssh_host_key",
        txt("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + b64(32)[:43]),
    ),
    lambda: (
        "span",
        F_CMD,
        txt(
            f"python eval.py --api-key $OPENAI_API_KEY --hf-token ${{HF_TOKEN}} --tokenizer-path "
            f"/models/tok/{pick(MODELS)} --max-tokens {pick((512, 2048))}"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"[rank{R.randint(0, 1023)}]: api_key not set; judge disabled for suite "
            f"{pick(('mt-bench', 'arena-hard', 'gsm8k', 'mmlu-pro'))} (set OPENAI_API_KEY to "
            "enable)"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(f"{pick(HF_REPOS)}: HF_TOKEN not set, falling back to anonymous access (public repo)"),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"wandb: WANDB_API_KEY is unset; run {pick(MODELS)}-{R.randint(1, 99)} logs offline to "
            f"/scratch/job_{job_id()}/wandb"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"[rank{R.randint(0, 1023)}]: botocore.exceptions.NoCredentialsError: Unable to locate "
            f"credentials (upload to s3://{pick(BUCKETS)}/{pick(MODELS)}/ skipped)"
        ),
    ),
    lambda: (
        "node_inventory",
        "payload.extra.aws",
        txt(
            f"AWS_REGION={pick(REGIONS)} AWS_DEFAULT_REGION={pick(REGIONS)} "
            "AWS_PROFILE=ckpt-writer "
            "AWS_SDK_LOAD_CONFIG=1"
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"pdsh -w {short_host()}: password prompt disabled (BatchMode=yes); key-based auth only"
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"results writer (job {job_id()}): PGPASSWORD not set, reading password from "
            "/run/secrets/db_password (mode 0400)"
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"redaction: replaced {R.randint(2, 40)} values in {R.randint(1, 9)} fields: "
            "password=[PASSWORD] token=[API_TOKEN] "
            "key=[CLOUD_ACCESS_KEY]"
        ),
    ),
    lambda: (
        "scheduler_event",
        F_REASON,
        txt(
            'CreateContainerConfigError: secret "hf-token" not found (env HF_TOKEN from '
            "secretKeyRef name=hf-token key=token) in pod "
            f"{pick(MODELS)}-worker-{R.randint(0, 127)}"
        ),
    ),
    lambda: (
        "span",
        F_CMD,
        txt(
            "python -m torch.distributed.run --nnodes 16 train.py --use_auth_token --token-budget "
            f"{pick((4096, 8192))} --key-cache-dtype fp8 --token-file /run/secrets/hf "
            "--api-key-file "
            "/etc/rankscope/judge.key"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"Authorization: Bearer [REDACTED] (header kept for request {uuid4()}); "
            "password=******** ; api_key=None ; token=<unset>"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            'WWW-Authenticate: Bearer error="invalid_token", error_description="The access token '
            f'expired" (request {uuid4()})'
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"x-amz-request-id: {rs(string.ascii_uppercase + string.digits, 16)} x-amz-id-2: "
            f"{b64(54)} (retrying PutObject part {R.randint(1, 9999)})"
        ),
    ),
    lambda: (
        "node_inventory",
        "payload.extra.image",
        txt(f"registry.corp.example/llm/train@sha256:{hexid(64)}"),
    ),
    lambda: (
        "span",
        "payload.attributes.log",
        txt(
            f"optimizer: Adam(lr={pick(('3e-4', '1.5e-4', '6e-5'))}, betas=(0.9, 0.95), eps=1e-8, "
            f"weight_decay={pick(('0.1', '0.01'))})"
        ),
    ),
    lambda: (
        "span",
        "payload.attributes.log",
        txt(
            f"platform: NVIDIA Grace Hopper (GH200) superchip on {short_host()}, 72 Arm Neoverse "
            "V2 cores"
        ),
    ),
    lambda: (
        "span",
        "payload.attributes.log",
        txt(
            f"init: xavier_uniform_ for q_proj/k_proj, normal_(std={pick(('0.02', '0.006'))}) "
            "for embeddings"
        ),
    ),
    lambda: (
        "gpu_event",
        F_MSG,
        txt(
            f"board serial {digits(13)} (part 699-2G530-0200-{R.randint(100, 999)}) GPU "
            f"{R.randint(0, 7)} inforom {pick(('G520.0200.00.05', 'G525.0220.00.02'))}"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"huggingface_hub: hf_hub_download({pick(HF_REPOS)!r}, 'config.json') with "
            "HF_HUB_ENABLE_HF_TRANSFER=1 HF_HOME=/data/hf: hf_transfer not installed"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='mlflow.corp.example', "
            "port=443): Max retries exceeded with url: /api/2.0/mlflow/runs/log-batch (Caused by "
            "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f"
            f"{hexid(10)}>: Failed to establish a new connection: [Errno 111] Connection refused'))"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"commit {hexid(40)} (HEAD -> main, tag: v{R.randint(0, 3)}.{R.randint(0, 20)}.0) "
            f"build id {hexid(12)} wheel sha256={hexid(64)}"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"spack: py-torch@{pick(('2.5.1', '2.6.0'))}+cuda+nccl cuda_arch=90 ^nccl@"
            f"{pick(NCCL_VERSIONS)} ^cuda@{pick(('12.4.1', '12.6.2'))}"
        ),
    ),
    lambda: (
        "span",
        "payload.attributes.log",
        txt(
            f"pulling {pick(HF_REPOS)} from huggingface.co (revision main) and "
            f"nvcr.io/nvidia/pytorch:24.{R.randint(1, 12):02d}-py3 from the registry mirror"
        ),
    ),
    lambda: (
        "span",
        "payload.attributes.log",
        txt(
            f"processed {R.choice(('6502530000', '4155550132', '2015550123'))} tokens in "
            f"{R.randint(1000, 99999)} steps (seed {non_luhn(16)})"
        ),
    ),
    lambda: (
        "span",
        "payload.attributes.baggage",
        txt(
            "ctx="
            + b64url(json.dumps({"run": pick(MODELS), "step": step_no()}).encode())
            + f";rank={R.randint(0, 1023)}"
        ),
    ),
    lambda: (
        "scheduler_event",
        F_REASON,
        txt(
            f"Taint node.kubernetes.io/disk-pressure:NoSchedule added to {hostname()}; "
            f"{R.randint(1, 40)} pods evicted"
        ),
    ),
    lambda: (
        "span",
        F_ERR,
        txt(
            f"secret_ref: vault://ml/hf-token#token (lease {uuid4()}, ttl 3600s); "
            f"password_min_length=12 max_token_len={pick((2048, 4096))}"
        ),
    ),
    lambda: (
        "comm_event",
        F_MSG,
        txt(
            f"[c10d] TCPStore server listening on {hostname()}:29500, "
            f"world size {pick((256, 1024))}, timeout 1800 s"
        ),
    ),
    lambda: (
        "agent_event",
        F_MSG,
        txt(
            f"ib: port GUID 0x{hexid(16)} node GUID 0x{hexid(16)} LID 0x{R.randint(1, 0xFFF):04x} "
            f"on {pick(HCAS)}:1 (no IPoIB address configured)"
        ),
    ),
)
LOOKALIKE_BENIGN = LOOKALIKES


# ---------------------------------------------------------------------------------------------
# Build, write, verify
# ---------------------------------------------------------------------------------------------

GROUPS: tuple[tuple[str, int, str, Sequence[Template]], ...] = (
    # (id prefix, items, expected category, templates cycled in order)
    ("cred-aws", 34, "credential", AWS_TEMPLATES),
    ("cred-gapi", 12, "credential", GAPI_TEMPLATES),
    ("cred-token", 70, "credential", API_TOKEN_TEMPLATES),
    ("cred-bearer", 30, "credential", BEARER_TEMPLATES),
    ("cred-jwt", 30, "credential", JWT_TEMPLATES),
    ("cred-pem", 30, "credential", PEM_TEMPLATES),
    ("cred-pass", 42, "credential", PASSWORD_TEMPLATES),
    ("cred-sig", 36, "credential", SIG_TEMPLATES),
    ("cred-mixed", 16, "credential", MIXED_TEMPLATES),
    ("net-ip", 52, "network", NET_IP_TEMPLATES),
    ("net-url", 22, "network", NET_URL_TEMPLATES),
    ("pii-email", 24, "contact", EMAIL_TEMPLATES),
    ("pii-phone", 24, "contact", PHONE_TEMPLATES),
    ("pii-person", 14, "identity", PERSON_TEMPLATES),
    ("pii-card", 18, "identity", CARD_TEMPLATES),
    ("pii-home", 22, "identity", HOME_TEMPLATES),
    ("benign-gpu", 30, "benign", GPU_BENIGN),
    ("benign-nccl", 32, "benign", NCCL_BENIGN),
    ("benign-train", 30, "benign", TRAIN_BENIGN),
    ("benign-sched", 32, "benign", SCHED_BENIGN),
    ("benign-version", 22, "benign", VERSION_BENIGN),
    ("benign-fabric", 15, "benign", FABRIC_BENIGN),
    ("benign-agent", 12, "benign", AGENT_BENIGN),
    ("benign-path", 13, "benign", PATH_BENIGN),
    ("benign-lookalike", 44, "benign", LOOKALIKE_BENIGN),
)


def category_of(entities: Sequence[str]) -> str:
    if any(e in CREDENTIAL for e in entities):
        return "credential"
    if any(e in CONTACT for e in entities):
        return "contact"
    if any(e in IDENTITY for e in entities):
        return "identity"
    if any(e in NETWORK for e in entities):
        return "network"
    return "benign"


def build() -> list[dict[str, object]]:
    R.seed(SEED)
    items: list[dict[str, object]] = []
    seen: set[str] = set()  # membership only: iteration order never reaches the output
    for prefix, n, expected, templates in GROUPS:
        for i in range(n):
            for _attempt in range(50):
                kind, field, t = templates[i % len(templates)]()
                text = t.text
                if text not in seen:
                    break
            assert text not in seen, (prefix, i, text)
            seen.add(text)
            spans = [{"entity": s.entity, "start": s.start, "end": s.end} for s in t.spans]
            for s in t.spans:
                value = text[s.start : s.end]
                assert value and value == value.strip(), (prefix, i, s, value)
            category = category_of([s.entity for s in t.spans])
            if expected in ("credential", "benign"):
                assert category == expected, (prefix, i, category, text)
            else:
                assert category not in ("credential", "benign"), (prefix, i, category, text)
            assert kind in KINDS and field.startswith("payload."), (kind, field)
            item_id = f"{prefix}-{i + 1:03d}"
            items.append(
                {
                    "id": item_id,
                    "kind": kind,
                    "field": field,
                    "text": text,
                    "spans": spans,
                    "category": category,
                }
            )
    return items


def write(items: list[dict[str, object]], path: Path = OUT) -> None:
    lines = [json.dumps(item, ensure_ascii=False) for item in items]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")


# ---- verification of the written file ----

EMAIL_RE = re.compile(
    r"(?<![\w.%+:/!*#^-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
COVERAGE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z2-7]{16}(?![A-Z0-9])"), "CLOUD_ACCESS_KEY"),
    (re.compile(r"AIza[0-9A-Za-z_-]{35}"), "CLOUD_ACCESS_KEY"),
    (re.compile(r"\bhf_[A-Za-z]{34}\b"), "API_TOKEN"),
    (re.compile(r"\bgh[pos]_[A-Za-z0-9]{36}\b"), "API_TOKEN"),
    (re.compile(r"github_pat_\w{82}"), "API_TOKEN"),
    (re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{40,}"), "API_TOKEN"),
    (re.compile(r"\bxox[bp]-[0-9]+-[0-9]+-[A-Za-z0-9]+"), "API_TOKEN"),
    (re.compile(r"glpat-[A-Za-z0-9_-]{20}"), "API_TOKEN"),
    (re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"), "JWT"),
    (EMAIL_RE, "EMAIL_ADDRESS"),
    (
        re.compile(
            r"(?<=[?&])(?:X-Amz-Signature|X-Amz-Security-Token|X-Goog-Signature|Signature|sig)="
            r"([^&\s'\")]+)"
        ),
        "URL_SIGNATURE",
    ),
)
VALUE_RE: dict[str, re.Pattern[str]] = {
    "CLOUD_ACCESS_KEY": re.compile(r"(?:AKIA|ASIA)[A-Z2-7]{16}|AIza[0-9A-Za-z_-]{35}"),
    "CLOUD_SECRET_KEY": re.compile(r"[A-Za-z0-9/+]{40}"),
    "API_TOKEN": re.compile(r"[A-Za-z0-9_.-]{16,}"),
    "BEARER_TOKEN": re.compile(r"(?!eyJ)[A-Za-z0-9._~+/-]{20,60}"),
    "PASSWORD": re.compile(r"[A-Za-z0-9!#%^*_+-]{8,32}"),
    "URL_SIGNATURE": re.compile(r"[A-Za-z0-9%~_.-]+"),
    "URL": re.compile(r"https?://[^\s'\")]+(?<![.,])"),
    "EMAIL_ADDRESS": re.compile(EMAIL_RE.pattern[len(r"(?<![\w.%+:/!*#^-])") :]),
    "HOME_DIR_USER": re.compile(r"[A-Za-z0-9._-]+"),
    "CREDIT_CARD": re.compile(r"\d{4}([ -]?)\d{4,6}\1\d{4,5}(?:\1\d{4})?"),
    "PRIVATE_KEY": re.compile(
        r"-----BEGIN ((?:RSA |EC |OPENSSH )?PRIVATE KEY)-----(?:\n|\\n)[A-Za-z0-9+/=\n\\]+?"
        r"(?:\n|\\n)-----END \1-----",
        re.DOTALL,
    ),
}
NAMES = {f"{first} {last}" for first, last in PEOPLE}
IPV4_RE = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
    r"(?!\w|\.\d)"
)
URL_AFTER = set(" \n\t'\")")


def check_value(entity: str, value: str, text: str, start: int, end: int) -> None:
    pattern = VALUE_RE.get(entity)
    if pattern is not None:
        assert pattern.fullmatch(value), (entity, value)
    if entity == "JWT":
        segs = value.split(".")
        assert len(segs) == 3 and len(segs[2]) == 43, value
        for seg in segs[:2]:
            json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))
    elif entity == "IP_ADDRESS":
        ipaddress.ip_address(value)
    elif entity == "PHONE_NUMBER":
        assert value in PHONES, value
    elif entity == "PERSON":
        assert value in NAMES, value
    elif entity == "CREDIT_CARD":
        assert luhn_ok(value), value
    elif entity == "HOME_DIR_USER":
        before = text[:start]
        assert before.endswith(("/home/", "/Users/", "C:\\Users\\")), before[-12:]
        assert end == len(text) or text[end] in "/\\'\"\n ", text[end : end + 3]
    elif entity == "URL":
        nxt = text[end : end + 1]
        assert (
            nxt == ""
            or nxt in URL_AFTER
            or (nxt in ".," and text[end + 1 : end + 2] in ("", " ", "\n"))
        ), (
            value,
            text[end : end + 5],
        )


def check_item(it: dict[str, object]) -> None:
    text = it["text"]
    spans = it["spans"]
    assert isinstance(text, str) and isinstance(spans, list)
    assert it["kind"] in KINDS
    assert it["category"] == category_of([s["entity"] for s in spans])
    assert 0 < len(text) <= MAX_CHARS, len(text)
    if it["kind"] == "node_inventory":
        assert len(text) <= SHORT_TEXT, len(text)
    for s in spans:
        ent, start, end = s["entity"], s["start"], s["end"]
        assert ent in ENTITIES, ent
        assert isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text)
        value = text[start:end]
        assert value == value.strip(), value
        check_value(ent, value, text, start, end)
    for m in re.finditer(r"https?://", text):
        assert any(s["entity"] == "URL" and s["start"] == m.start() for s in spans), (
            "unlabelled URL",
            text[m.start() : m.start() + 40],
        )
    for m in re.finditer(r"-----BEGIN (?:RSA |EC |OPENSSH )?PRIVATE KEY-----", text):
        assert any(s["entity"] == "PRIVATE_KEY" and s["start"] == m.start() for s in spans)
    if it["category"] != "benign":  # benign items keep IPv4-shaped versions (cuDNN 9.1.0.70)
        for m in IPV4_RE.finditer(text):
            assert any(
                s["entity"] == "IP_ADDRESS" and s["start"] <= m.start() and m.end() <= s["end"]
                for s in spans
            ), ("unlabelled IPv4", m.group())
    for pattern, entity in COVERAGE:
        g = 1 if pattern.groups else 0
        for m in pattern.finditer(text):
            hit = (entity, m.start(g), m.end(g))
            assert any((s["entity"], s["start"], s["end"]) == hit for s in spans), (
                "unlabelled",
                entity,
                m.group(g),
            )


def verify(path: Path = OUT) -> list[dict[str, object]]:
    """Read the written file back and check every item; raise with all failures at once."""
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    ids = [it["id"] for it in items]
    assert len(ids) == len(set(ids)), "duplicate ids"
    failures: list[str] = []
    for it in items:
        try:
            check_item(it)
        except (AssertionError, ValueError) as exc:
            failures.append(f"{it['id']}: {exc!r}")
    assert not failures, "\n".join(failures)
    return items


def report(items: list[dict[str, object]]) -> None:
    by_cat = Counter(str(it["category"]) for it in items)
    by_kind = Counter(str(it["kind"]) for it in items)
    spans_by_ent: Counter[str] = Counter()
    items_by_ent: Counter[str] = Counter()
    for it in items:
        ents = [str(s["entity"]) for s in it["spans"]]  # type: ignore[attr-defined]
        spans_by_ent.update(ents)
        items_by_ent.update(dict.fromkeys(ents, 1))
    print(f"{len(items)} items -> {OUT}")
    print("per category: " + ", ".join(f"{k} {v}" for k, v in sorted(by_cat.items())))
    print("per kind:     " + ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
    print(f"{'entity':<18}{'items':>7}{'spans':>7}")
    for ent in ENTITIES:
        print(f"{ent:<18}{items_by_ent[ent]:>7}{spans_by_ent[ent]:>7}")
    short = [e for e in CREDENTIAL if items_by_ent[e] < 25]
    assert not short, f"credential entities in fewer than 25 items: {short}"


def main() -> int:
    write(build())
    report(verify())
    return 0


if __name__ == "__main__":
    sys.exit(main())
