"""Which fields of which event kinds are scanned, dropped or passed: compiled from the rules.

The event models are the single definition of what a field is, so the policy is checked against
them: every string-bearing field gets an action, either explicit in the rules file or the
file's default. ``coverage`` lists them all for the review report; a new schema field that
nobody classified shows up there (and fails a test) instead of passing silently.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

from pydantic import BaseModel

from rankscope.redaction.rules import FieldAction, RuleSet
from rankscope.schemas.envelope import Envelope
from rankscope.schemas.events import EVENT_MODELS

FieldShape = Literal["text", "dict"]

_ENVELOPE_TEXT = ("event_id", "schema", "kind", "cluster", "job_id", "node")


@dataclass(frozen=True)
class FieldRule:
    """One field of one kind: where it is, what it holds, what happens to it."""

    kind: str
    path: str  # "message", "attributes", "attributes.prompt", envelope fields by name
    attr: str  # model attribute on the payload (or the envelope for envelope fields)
    key: str | None  # one dict key, for per-key rules
    shape: FieldShape
    action: FieldAction
    explicit: bool
    on_envelope: bool
    max_length: int | None


def _max_length(info: Any) -> int | None:
    for meta in getattr(info, "metadata", []) or []:
        limit = getattr(meta, "max_length", None)
        if isinstance(limit, int):
            return limit
    return None


def _shape(annotation: Any) -> FieldShape | None:
    """ "text" for str-bearing scalars, "dict" for dicts with str values, None otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _shape(typing.get_args(annotation)[0])
    if annotation is str:
        return "text"
    if origin is Literal:
        return None  # an enum cannot carry free text
    if origin in (Union, types.UnionType):
        shapes = {_shape(a) for a in typing.get_args(annotation)} - {None}
        return "text" if "text" in shapes else None
    if origin is dict:
        return "dict" if _shape(typing.get_args(annotation)[1]) == "text" else None
    return None


def _payload_model(model: type[Envelope]) -> type[BaseModel]:
    payload = model.model_fields["payload"].annotation
    assert isinstance(payload, type) and issubclass(payload, BaseModel)
    return payload


def _kind(model: type[Envelope]) -> str:
    return str(typing.get_args(model.model_fields["kind"].annotation)[0])


class FieldPolicy:
    """The compiled per-kind field rules."""

    def __init__(self, rules: RuleSet) -> None:
        spec = rules.fields
        known = {_kind(m): m for m in EVENT_MODELS}
        unknown = set(spec.kinds) - set(known)
        if unknown:
            raise ValueError(f"fields: unknown event kinds {sorted(unknown)}")
        for name in spec.envelope:
            if name not in _ENVELOPE_TEXT:
                raise ValueError(f"fields.envelope: {name} is not a text field of the envelope")
        self.by_kind: dict[str, list[FieldRule]] = {}
        for kind, model in known.items():
            explicit = spec.kinds.get(kind, {})
            rules_for_kind: list[FieldRule] = []
            for name in _ENVELOPE_TEXT:
                action = spec.envelope.get(name)
                attr = "schema_id" if name == "schema" else name
                rules_for_kind.append(
                    FieldRule(
                        kind,
                        name,
                        attr,
                        None,
                        "text",
                        action or spec.default,
                        action is not None,
                        True,
                        _max_length(Envelope.model_fields[attr]),
                    )
                )
            payload = _payload_model(model)
            seen: set[str] = set()
            for attr, info in payload.model_fields.items():
                shape = _shape(info.annotation)
                if shape is None:
                    continue
                action = explicit.get(attr)
                seen.add(attr)
                rules_for_kind.append(
                    FieldRule(
                        kind,
                        attr,
                        attr,
                        None,
                        shape,
                        action or spec.default,
                        action is not None,
                        False,
                        _max_length(info),
                    )
                )
                if shape == "dict":
                    prefix = f"{attr}."
                    for path, key_action in explicit.items():
                        if path.startswith(prefix):
                            seen.add(path)
                            rules_for_kind.append(
                                FieldRule(
                                    kind,
                                    path,
                                    attr,
                                    path[len(prefix) :],
                                    "text",
                                    key_action,
                                    True,
                                    False,
                                    None,
                                )
                            )
            stray = set(explicit) - seen
            if stray:
                raise ValueError(
                    f"fields.kinds.{kind}: {sorted(stray)} are not text fields of {kind} "
                    f"(text fields: {sorted(r.path for r in rules_for_kind if not r.on_envelope)})"
                )
            self.by_kind[kind] = rules_for_kind

    def active(self, kind: str) -> list[FieldRule]:
        """The rules that change something (scan or drop) for one kind."""
        return [r for r in self.by_kind.get(kind, []) if r.action != "pass"]

    def coverage(self) -> list[FieldRule]:
        return [r for rules in self.by_kind.values() for r in rules]
