"""Build a pydantic model from values this package computed itself, without validating them.

Why a module of its own: it is the generator's speed trick, used by both the default hooks (GPU
samples) and the event builders (spans, heartbeats, fabric counters), and it is the one place
that reaches into pydantic's internals.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["fast_model"]


M = TypeVar("M", bound=BaseModel)
_setattr = object.__setattr__
_new = object.__new__
_FIELDS_SET: dict[type[BaseModel], set[str]] = {}
_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}


def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The defaults of ``cls``'s optional fields (computed once per class)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = _DEFAULTS[cls] = {
            name: info.get_default(call_default_factory=True)
            for name, info in cls.model_fields.items()
            if not info.is_required()
        }
    return found


def fast_model(cls: type[M], values: dict[str, Any]) -> M:
    """Build a pydantic model from *every* field's value without validating it.

    Why not ``model_construct``: in pydantic 2.11+ it is pure Python and measured slower than
    validation here (123k vs 156k spans/s); filling ``__dict__`` directly runs at ~900k/s. Only
    for values this module computed itself; ``values`` must name every required field, and an
    optional field it leaves out gets its default (a field added to a schema later, such as the
    profiling fields of ``gpu_sample``, must not make the simulator build broken models; the
    tests check that each event kind round-trips through ``EVENT_ADAPTER`` unchanged). The
    fields-set is one set per class: it always holds every field, the event models are frozen
    (pydantic never adds to it) and ``model_copy`` copies it before an update.
    """
    obj = _new(cls)
    fields = _FIELDS_SET.get(cls)
    if fields is None:
        fields = _FIELDS_SET[cls] = set(cls.model_fields)
    if len(values) != len(fields):
        values = {**_defaults(cls), **values}
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", fields)
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj
