"""Pure readers of Kubernetes API objects (plain JSON dicts): times, nested fields, conditions,
integers written as text, and the stable event ids derived from an object's identity."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any


def parse_k8s_time(value: Any) -> int | None:
    """RFC 3339 (``2025-01-02T03:04:05Z``, MicroTime with fractions) -> ns since the epoch."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def _get(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in _dicts(_get(obj, "status", "conditions")):
        if c.get("type") == ctype:
            return c
    return None


def _stable_id(*parts: object) -> str:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return f"k8s-{digest[:40]}"


def _int_text(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _cond_text(cond: Mapping[str, Any]) -> str:
    return ": ".join(str(x) for x in (cond.get("reason"), cond.get("message")) if x)


def _pod_key(pod: Mapping[str, Any]) -> str:
    """The key a pod's state is kept under: its uid, else ``namespace/name`` (stable for the
    pod's life; some eviction paths and recorded documents carry no uid); "" when neither."""
    uid = _get(pod, "metadata", "uid")
    if uid:
        return str(uid)
    name = _get(pod, "metadata", "name")
    return f"{_get(pod, 'metadata', 'namespace') or ''}/{name}" if name else ""
