"""The redaction rules file: a typed, versioned, reviewable contract.

Security reviewers read and sign off ``redaction/rules.yaml``; this module is its schema. Loading
fails with a readable message on anything a reviewer could misread: an unknown entity, a regex
that does not compile, a duplicate rule name, a field policy for a kind that does not exist.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from regex._main import Pattern

DEFAULT_RULES_PATH = Path(__file__).with_name("rules.yaml")

EntityAction = Literal["mask", "hash", "drop"]
FieldAction = Literal["scan", "pass", "drop"]
EntityGroup = Literal["credential", "contact", "network", "identity", "financial"]
Validator = Literal[
    "none",
    "mixed_charset",
    "luhn",
    "placeholder",
    "secret_value",
    "password_value",
    "generated_value",
    "phone_national",
    "ip_address",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PatternSpec(_Strict):
    """One regex. A named group ``value`` narrows the finding to the secret itself, so that
    ``--api-key sk-...`` loses the key and keeps the flag (a reader still sees what leaked)."""

    name: str
    regex: str
    score: float = Field(ge=0, le=1)
    ignore_case: bool = False
    dotall: bool = False

    def compiled(self) -> Pattern[str]:
        flags = regex.V0
        if self.ignore_case:
            flags |= regex.IGNORECASE
        if self.dotall:
            flags |= regex.DOTALL
        return regex.compile(self.regex, flags)


class RecognizerSpec(_Strict):
    """A recognizer: either our own patterns, or one of Presidio's predefined recognizers."""

    name: str
    entity: str
    description: str
    patterns: list[PatternSpec] = Field(default_factory=list)
    presidio: str | None = Field(
        default=None, description="Class name of a Presidio predefined recognizer."
    )
    presidio_patterns: list[str] | None = Field(
        default=None, description="Keep only these of the Presidio recognizer's own patterns."
    )
    presidio_args: dict[str, str | int | float | bool | list[str]] = Field(default_factory=dict)
    context: list[str] = Field(
        default_factory=list, description="Words before a match that raise its score."
    )
    context_boost: float = Field(default=0.35, ge=0, le=1)
    context_chars: int = Field(default=48, ge=1, description="How far back context is looked for.")
    validator: Validator = "none"
    keywords: list[str] = Field(
        default_factory=list,
        description="Lower-case substrings, one of which occurs (in any case) in every text "
        "this recognizer can match: the pre-filter. Texts with no keyword or trigger of any "
        "recognizer skip Presidio.",
    )
    triggers: list[str] = Field(
        default_factory=list,
        description="Cheap regexes with the same role as keywords. With neither, the patterns "
        "themselves are the triggers.",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> RecognizerSpec:
        if bool(self.patterns) == bool(self.presidio):
            raise ValueError(f"recognizer {self.name}: give either patterns or presidio, not both")
        if self.presidio and not (self.triggers or self.keywords):
            raise ValueError(
                f"recognizer {self.name}: a Presidio recognizer needs keywords or triggers (the "
                "pre-filter cannot read its code)"
            )
        if any(k != k.lower() or not k for k in self.keywords):
            raise ValueError(f"recognizer {self.name}: keywords are non-empty and lower-case")
        return self

    @property
    def trigger_regexes(self) -> list[str]:
        if self.keywords:
            return self.triggers
        return self.triggers or [
            f"(?{'i' if p.ignore_case else ''}{'s' if p.dotall else ''}:{p.regex})"
            if (p.ignore_case or p.dotall)
            else p.regex
            for p in self.patterns
        ]


class EntitySpec(_Strict):
    group: EntityGroup
    action: EntityAction
    min_score: float = Field(default=0.5, ge=0, le=1)
    description: str


class AllowSpec(_Strict):
    """Text that must survive: a finding lying wholly inside a match is dropped."""

    name: str
    regex: str
    description: str
    ignore_case: bool = False
    applies_to: list[str] | Literal["all"] = "all"

    def compiled(self) -> Pattern[str]:
        return regex.compile(self.regex, regex.IGNORECASE if self.ignore_case else 0)

    def covers(self, entity: str) -> bool:
        return self.applies_to == "all" or entity in self.applies_to


class FieldPolicy(_Strict):
    """Per field of each event kind: ``scan`` (free text), ``pass`` or ``drop``.

    Dict fields (span attributes, inventory extras) name the whole dict (its values) or one key
    as ``attributes.<key>``; the most specific entry wins. Keys themselves always pass.
    """

    default: FieldAction = "scan"
    envelope: dict[str, FieldAction] = Field(default_factory=dict)
    kinds: dict[str, dict[str, FieldAction]] = Field(default_factory=dict)


class NlpSettings(_Strict):
    engine: Literal["none", "spacy"] = "none"
    model: str = "en_core_web_lg"
    entities: list[str] = Field(default_factory=lambda: ["PERSON"])


class Settings(_Strict):
    language: str = "en"
    nlp: NlpSettings = NlpSettings()
    key_env: str = Field(
        default="RANKSCOPE_REDACTION_KEY", description="Environment variable holding the hash key."
    )
    hash_hex_chars: int = Field(default=12, ge=8, le=64)
    regex_timeout_ms: float = Field(
        default=200, gt=0, description="Our recognizers raise (and the event is quarantined)."
    )
    field_budget_ms: float = Field(
        default=1000,
        gt=0,
        description="Analysis of one value slower than this is treated as a failure: Presidio's "
        "own recognizers skip a timed-out pattern silently, which would fail open.",
    )
    cache_entries_per_field: int = Field(default=20_000, ge=0)
    phone_regions: list[str] = Field(
        default_factory=lambda: ["US", "GB", "IN"],
        description="ISO 3166 regions whose national phone formats (no +CC) are recognised: a "
        "national number only parses with a region. Order is the order tried.",
    )
    audit_window_s: int = Field(default=60, gt=0)

    @field_validator("phone_regions")
    @classmethod
    def _known_regions(cls, regions: list[str]) -> list[str]:
        import phonenumbers

        out = ["GB" if r.upper() == "UK" else r.upper() for r in regions]  # people say UK
        unknown = [r for r in out if r not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"settings.phone_regions: unknown regions {unknown}")
        return out


class Thresholds(_Strict):
    """What ``rankscope redaction review`` gates on (non-zero exit when not met)."""

    recall: dict[str, float] = Field(
        default_factory=dict, description="Entity or group name -> minimum recall."
    )
    max_benign_false_positive_rate: float = Field(default=0.01, ge=0, le=1)


class RuleSet(_Strict):
    version: str
    description: str = ""
    settings: Settings = Settings()
    entities: dict[str, EntitySpec]
    recognizers: list[RecognizerSpec]
    allow: list[AllowSpec] = Field(default_factory=list)
    fields: FieldPolicy = FieldPolicy()
    thresholds: Thresholds = Thresholds()

    @model_validator(mode="after")
    def _consistent(self) -> RuleSet:
        names = [r.name for r in self.recognizers] + [a.name for a in self.allow]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate rule names: {', '.join(dupes)}")
        for r in self.recognizers:
            if r.entity not in self.entities:
                raise ValueError(f"recognizer {r.name}: entity {r.entity} is not in entities")
            for p in r.patterns:
                _check_regex(f"recognizer {r.name} pattern {p.name}", p.regex)
            for t in r.triggers:
                _check_regex(f"recognizer {r.name} trigger", t)
        for a in self.allow:
            _check_regex(f"allow {a.name}", a.regex)
            if a.applies_to != "all":
                unknown = [e for e in a.applies_to if e not in self.entities]
                if unknown:
                    raise ValueError(f"allow {a.name}: unknown entities {unknown}")
        groups = {e.group for e in self.entities.values()}
        for name in self.thresholds.recall:
            if name not in self.entities and name not in groups:
                raise ValueError(f"thresholds.recall: {name} is neither an entity nor a group")
        return self

    def recognizers_for(self, entity: str) -> list[RecognizerSpec]:
        return [r for r in self.recognizers if r.entity == entity]


def _check_regex(what: str, pattern: str) -> None:
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"{what}: regex does not compile: {exc}") from exc


def load_rules(path: Path | None = None) -> RuleSet:
    """Read and check a rules file (the packaged default when ``path`` is None)."""
    path = path or DEFAULT_RULES_PATH
    return parse_rules(path.read_text(encoding="utf-8"))


def parse_rules(text: str) -> RuleSet:
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise ValueError("a rules file is a YAML mapping")
    return RuleSet.model_validate(doc)


def load_rules_at(spec: str) -> RuleSet:
    """An earlier rules version: a file path, or ``git:REV[:PATH]`` read from the repository."""
    if not spec.startswith("git:"):
        return load_rules(Path(spec))
    rev, _, path = spec[4:].partition(":")
    rel = path or "redaction/rules.yaml"
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        ["git", "show", f"{rev}:{rel}"], cwd=root, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise ValueError(f"cannot read {rel} at {rev}: {out.stderr.strip()}")
    return parse_rules(out.stdout)
