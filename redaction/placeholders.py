"""What a secret is not: placeholders, documentation examples and low-entropy values (issue 16).

A rule finds a value by its shape (a vendor prefix, a key word before it); these checks then
reject values that have the shape but cannot be a live secret: ``ghp_xxxx...``, ``<token>``,
``${TOKEN}``, ``changeme``, ``your-api-key-here``, the example keys vendors print in their
documentation, runs of one character, and (for values found only through a key word) strings
with too little entropy to be generated. A rejected value is a *near-miss*: it is left in the
text and counted in the audit, so a reviewer sees how often the rules declined.
"""

from __future__ import annotations

import math
import re
from collections import Counter

#: words that mark a value as written by a person for a person (case-insensitive)
_PLACEHOLDER_WORDS = re.compile(
    "|".join(
        (
            r"x{4,}|X{4,}|\*{3,}|\.{3}|…|example|sample|dummy|placeholder|your[-_ ]?",
            r"my[-_]?(?:api|secret|token|key|pass)|changeme|change[-_]me|replace[-_]?me",
            r"insert[-_]|redacted|masked|notreal|not[-_]a[-_]real|fake[-_]?",
            r"secret[-_]?here|token[-_]?here|key[-_]?here|password[-_]?here",
            r"^(?:none|null|nil|true|false|undefined|unset|empty|todo|tbd|n/?a|test|testing",
            r"secret|password|passwd|token|apikey|api[-_]key|string|value|default)$",
        )
    ),
    re.IGNORECASE,
)
#: template and variable syntax: ${X}, $X, {{x}}, <x>, %(x)s, %X%, [X]
_TEMPLATE = re.compile(
    "|".join(
        (
            r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$|\$\{[^}]*\}|\{\{[^}]*\}\}|^<[^<>]*>$",
            r"<[A-Za-z_ -]+>|%\([A-Za-z_]+\)s|^%[A-Za-z_]+%$|^\[[A-Za-z_ -]+\]$",
            r"^\{[A-Za-z_]+\}$|^@[A-Za-z_]+@$|^\$\(.*\)$|^`.*`$",
        )
    )
)
#: example credentials vendors publish in their documentation (AWS, Stripe's docs key, ...)
_DOC_EXAMPLES = frozenset(
    {
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
        "AKIAI44QH8DHBEXAMPLE",
        "ASIAIOSFODNN7EXAMPLE",
        "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        "sk_test_BQokikJOvBiI2HlWgH4olfQ2",
        "pk_test_TYooMQauvdEDq54NiTphI7jx",
        "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe",
    }
)
_SEQUENCES = re.compile(
    r"0123456|123456789|abcdefgh|ABCDEFGH|qwertyui|([A-Za-z0-9])\1{5,}|([A-Za-z0-9]{2})\2{4,}"
)


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value``'s own character distribution."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def is_placeholder(value: str) -> bool:
    """A value that has a secret's place or shape but is written for a reader, not a machine."""
    v = value.strip("\"'` ")
    if not v:
        return True
    if v in _DOC_EXAMPLES or v.endswith("EXAMPLE") or v.endswith("EXAMPLEKEY"):
        return True
    if _TEMPLATE.search(v) or _PLACEHOLDER_WORDS.search(v) or _SEQUENCES.search(v):
        return True
    return len(set(v)) <= 2  # "aaaa...", "abab..."


def is_secret_value(value: str, min_entropy: float = 3.0) -> bool:
    """A value found only by the key word before it: not a placeholder, not a plain number,
    not a word, and random enough (Shannon entropy per character) to have been generated."""
    v = value.strip("\"'` ")
    if len(v) < 8 or is_placeholder(v):
        return False
    words = re.split(r"[._\-/:]+", v)
    not_generated = (
        # counters, ports, versions, timestamps
        v.replace(".", "").replace("-", "").replace("_", "").isdigit()
        # a word or an enum value (INFO; bfloat16 has digits)
        or (v.isalpha() and (v.islower() or v.isupper()))
        # a path, a URL (the URL rules see it), a phrase
        or v.startswith(("/", "~/", "./", "../"))
        or "://" in v
        or " " in v
        # snake_case or dotted names (throughput.tokens_per_s)
        or (len(words) > 1 and all(w.isalpha() and w.islower() for w in words if w))
        # readable compound names (model-7b-v2-shard-00003-of-00008): every part a word, a
        # number or a short tag
        or (len(words) >= 3 and all(_readable_part(w) for w in words))
        # short values must mix letters and digits to be taken on a key word alone
        or (len(v) < 20 and not (any(c.isdigit() for c in v) and any(c.isalpha() for c in v)))
    )
    if not_generated:
        return False
    threshold = min_entropy if len(v) >= 16 else min_entropy - 0.5
    return shannon_entropy(v) >= threshold


def _readable_part(part: str) -> bool:
    return len(part) <= 3 or part.isdigit() or (part.isalpha() and part.islower())


def is_password_value(value: str) -> bool:
    """Passwords are chosen by people: only placeholders and one-character runs are rejected."""
    v = value.strip("\"'` ")
    if len(v) < 4 or is_placeholder(v):
        return False
    return shannon_entropy(v) >= 1.5


_HEX = frozenset("0123456789abcdefABCDEF")


def is_generated_value(value: str) -> bool:
    """Stricter than ``is_secret_value``, for values found by a key word *after* them: mixed
    case and digits (base62/base64), or a long hex string with letters and digits."""
    v = value.strip("\"'` ")
    if not is_secret_value(v):
        return False
    digits = any(c.isdigit() for c in v)
    if len(v) >= 32 and set(v) <= _HEX:
        return digits and any(c.isalpha() for c in v)
    return digits and any(c.islower() for c in v) and any(c.isupper() for c in v)
