"""How much a msgspec decoder beside the pydantic models would save: the measurement behind the
next step of issue 21.

Validation is the largest piece of the stream path's floor (``bench/per_event_floor.py``:
~9.5 us per event in pydantic, twice per event when the worker is not the validator's
process). The issue suggests "orjson/msgspec fast paths beside the pydantic models, with the
existing round-trip tests". Before any code depends on it, this derives msgspec structs from the
event models themselves (field names, aliases, defaults, ``extra="forbid"``, the numeric bounds,
string lengths and patterns, literals, the ``schema`` tag: one place per fact, nothing written
twice by hand) and times both decoders on the same records, checking that every decoded event
has the pydantic model's field values.

The stages (redaction, serialisation, windows, analysis, the sink) take the pydantic models, so
it also times msgspec followed by building those models from the structs without validating
them again (``model_construct``, the cheapest public way): round eight of issue 21 measured that
this costs more than pydantic's own validation, so a fast path pays only where the stages take
the structs themselves.

What it does not settle, and a real fast path must: pydantic's lax mode takes a few inputs that
msgspec refuses (a numeric string for an int field, for one), so the two accept different sets;
the report counts the records each refuses, and a fast path would have to fall back to pydantic
for whatever msgspec refuses, so that no record is refused that is accepted today.

msgspec is not a project dependency: ``.venv/bin/pip install msgspec`` first.

    .venv/bin/python bench/msgspec_decode.py --ranks 512 --duration 30 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from bench.detect_throughput import records_for
from bench.per_event_floor import best_of
from rankscope.schemas.events import EVENT_LIST_ADAPTER, EVENT_MODELS
from rankscope.streams.app import tune_gc

try:
    import msgspec
except ImportError:  # pragma: no cover - a bench, not the product
    sys.exit("msgspec is not installed: .venv/bin/pip install msgspec")

_STRUCTS: dict[type[BaseModel], Any] = {}
#: struct -> the pydantic model it was derived from (to build the models the stages take)
_MODEL_OF: dict[Any, type[BaseModel]] = {}
#: bounds msgspec cannot express (beyond int64: the uint64 counters' ``le``), dropped and counted
DROPPED: list[str] = []
INT64_MAX = 2**63 - 1
#: whether string patterns are carried over (msgspec matches them with Python's ``re``, per value)
OPTIONS = {"patterns": True}


def _meta(metadata: list[Any]) -> dict[str, Any]:
    """msgspec.Meta arguments from pydantic's field metadata (annotated_types and patterns)."""
    out: dict[str, Any] = {}
    for m in metadata:
        for name in ("ge", "le", "gt", "lt"):
            if isinstance(m, getattr(at, name.capitalize())):
                bound = getattr(m, name)
                if isinstance(bound, int) and abs(bound) > INT64_MAX:
                    DROPPED.append(f"{name}={bound}")
                    continue
                out[name] = bound
        if isinstance(m, at.MinLen):
            out["min_length"] = m.min_length
        if isinstance(m, at.MaxLen):
            out["max_length"] = m.max_length
        for name in ("min_length", "max_length", "pattern"):
            if name == "pattern" and not OPTIONS["patterns"]:
                continue
            value = getattr(m, name, None)
            if value is not None and not isinstance(m, at.MinLen | at.MaxLen):
                out[name] = value.pattern if isinstance(value, re.Pattern) else value
    return out


def _type(annotation: Any, metadata: list[Any]) -> Any:
    """The msgspec type of a pydantic annotation (constraints carried as msgspec.Meta)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        inner = list(extra)
        for e in extra:
            if isinstance(e, FieldInfo):
                inner += e.metadata
        return _type(base, [*metadata, *inner])
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(annotation)
        # the field's own bounds belong to the non-null member
        return typing.Union[tuple(_type(a, metadata if a is not type(None) else []) for a in args)]  # noqa: UP007
    if origin is dict:
        key, value = typing.get_args(annotation)
        t: Any = dict[_type(key, []), _type(value, [])]
    elif origin is list:
        (item,) = typing.get_args(annotation)
        t = list[_type(item, [])]
    elif origin is Literal:
        t = annotation
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        t = struct_of(annotation)
    else:
        t = annotation
    meta = _meta(metadata)
    return typing.Annotated[t, msgspec.Meta(**meta)] if meta else t


def struct_of(model: type[BaseModel], tag: str | None = None) -> Any:
    """A msgspec struct with ``model``'s fields (``tag``: the ``schema`` value of an event)."""
    if model in _STRUCTS and tag is None:
        return _STRUCTS[model]
    fields: list[tuple[Any, ...]] = []
    for name, info in model.model_fields.items():
        if tag is not None and name == "schema_id":
            continue  # the union's tag
        t = _type(info.annotation, list(info.metadata))
        wire = info.alias or name
        if info.default_factory is not None:
            default: Any = msgspec.field(default_factory=info.default_factory, name=wire)  # type: ignore[arg-type]
        elif info.is_required():
            default = msgspec.field(name=wire) if wire != name else msgspec.NODEFAULT
        else:
            default = msgspec.field(default=info.default, name=wire)
        fields.append((name, t, default) if default is not msgspec.NODEFAULT else (name, t))
    # msgspec wants required fields first; pydantic's order does not matter on the wire
    fields.sort(key=lambda f: len(f) == 3)
    options: dict[str, Any] = {"forbid_unknown_fields": model.model_config.get("extra") == "forbid"}
    if tag is not None:
        options |= {"tag_field": "schema", "tag": tag}
    struct = msgspec.defstruct(model.__name__, fields, frozen=True, **options)
    _MODEL_OF[struct] = model
    if tag is None:
        _STRUCTS[model] = struct
    return struct


def event_decoder(patterns: bool = True) -> msgspec.json.Decoder[Any]:
    OPTIONS["patterns"] = patterns
    _STRUCTS.clear()
    DROPPED.clear()
    structs = []
    for model in EVENT_MODELS:
        tag = typing.get_args(model.model_fields["schema_id"].annotation)[0]
        structs.append(struct_of(model, tag))
    return msgspec.json.Decoder(list[typing.Union[tuple(structs)]])  # noqa: UP007


def _model_value(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return as_model(value)
    if isinstance(value, list):
        return [_model_value(v) for v in value]
    return value


def as_model(st: Any) -> BaseModel:
    """The pydantic model the stages take, built from a decoded struct without validating it
    again (``model_construct``): what a msgspec fast path must add to keep the stages' types."""
    model = _MODEL_OF[type(st)]
    values = {}
    for name in model.model_fields:
        if name == "schema_id":
            values[name] = type(st).__struct_config__.tag
        else:
            values[name] = _model_value(getattr(st, name))
    return model.model_construct(**values)


def same(ev: BaseModel, st: Any) -> bool:
    """Whether the struct holds the pydantic event's field values (nested payload included)."""
    for name in type(ev).model_fields:
        if name == "schema_id":
            continue
        a, b = getattr(ev, name), getattr(st, name)
        if isinstance(a, BaseModel):
            if not same(a, b):
                return False
        elif a != b:
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    tune_gc()  # as the worker does
    records, n = records_for(args.ranks, args.duration, seed=1)
    decoder = event_decoder()
    parsed = [EVENT_LIST_ADAPTER.validate_json(r) for r in records]
    decoded = [decoder.decode(r) for r in records]
    mismatches = sum(
        not same(a, b)
        for pa, da in zip(parsed, decoded, strict=True)
        for a, b in zip(pa, da, strict=True)
    )

    def with_pydantic() -> None:
        for r in records:  # each record's events dropped before the next, as a stage does
            EVENT_LIST_ADAPTER.validate_json(r)

    def with_msgspec() -> None:
        for r in records:
            decoder.decode(r)

    def with_msgspec_models() -> None:
        for r in records:
            [as_model(st) for st in decoder.decode(r)]

    models_differ = sum(
        a.model_dump() != as_model(b).model_dump()
        for pa, da in zip(parsed, decoded, strict=True)
        for a, b in zip(pa, da, strict=True)
    )
    del parsed, decoded
    pydantic_s = best_of(args.rounds, with_pydantic)
    msgspec_s = best_of(args.rounds, with_msgspec)
    models_s = best_of(args.rounds, with_msgspec_models)
    decoder = event_decoder(patterns=False)
    no_patterns_s = best_of(args.rounds, with_msgspec)
    result = {
        "ranks": args.ranks,
        "events": n,
        "records": len(records),
        "pydantic_us_per_event": round(pydantic_s / n * 1e6, 2),
        "msgspec_us_per_event": round(msgspec_s / n * 1e6, 2),
        "speedup": round(pydantic_s / msgspec_s, 1),
        "msgspec_without_patterns_us_per_event": round(no_patterns_s / n * 1e6, 2),
        "msgspec_then_pydantic_models_us_per_event": round(models_s / n * 1e6, 2),
        "events_with_other_values": mismatches,
        "models_with_other_values": models_differ,
        "bounds_msgspec_cannot_express": len(DROPPED),
        "msgspec_version": msgspec.__version__,
    }
    print(
        f"{n:,} events: pydantic {result['pydantic_us_per_event']} us/event, msgspec "
        f"{result['msgspec_us_per_event']} ({result['speedup']}x; "
        f"{result['msgspec_without_patterns_us_per_event']} without the string patterns, which "
        "msgspec matches with Python's re); msgspec then the stages' pydantic models "
        f"(model_construct) {result['msgspec_then_pydantic_models_us_per_event']} us/event; "
        "events decoded to other "
        f"values: {mismatches}; {len(DROPPED)} uint64 bounds not expressible in msgspec"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
