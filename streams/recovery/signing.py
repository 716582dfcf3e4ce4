"""Signed recovery decisions and operator commands (issue 14).

Anyone who can write to the broker could otherwise put a ``decided`` record on
``<p>.recovery`` and have the runner drain nodes, or pause recovery. The decider signs each
record it emits, and ``rankscope recovery pause/resume`` sign their commands, with
HMAC-SHA256 over a canonical serialization (sorted-key compact JSON of every field but the
signature, behind a domain tag per record type). A signature is ``v1:<key id>:<hex mac>``;
the key id names the key that signed, so keys can rotate: signing uses the current (first)
key, verifying accepts any configured one.

Keys come from ``RANKSCOPE_RECOVERY_KEY`` (comma-separated ``id:secret`` or bare secrets) or
a key file (one key per line, same forms); a local run creates ``<home>/recovery.key`` (0600).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from rankscope.secret_files import create_secret_file

log = logging.getLogger("rankscope.recovery")

KEY_ENV = "RANKSCOPE_RECOVERY_KEY"
KEY_FILE_ENV = "RANKSCOPE_RECOVERY_KEY_FILE"
_MIN_SECRET = 16
_VERSION = "v1"

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Keyring:
    """The current signing key and every key accepted for verification, by key id."""

    current_id: str
    keys: dict[str, bytes]

    def mac(self, key_id: str, record: BaseModel) -> str:
        return hmac.new(self.keys[key_id], canonical(record), hashlib.sha256).hexdigest()

    def sign(self, record: M) -> M:
        """``record`` with its signature field set (any earlier signature replaced)."""
        mac = self.mac(self.current_id, record)
        return record.model_copy(update={"signature": f"{_VERSION}:{self.current_id}:{mac}"})

    def check(self, record: BaseModel) -> str | None:
        """None when ``record`` carries a valid signature by an accepted key, else why not."""
        sig = str(getattr(record, "signature", "") or "")
        if not sig:
            return "unsigned"
        parts = sig.split(":")
        if len(parts) != 3 or parts[0] != _VERSION:
            return "malformed signature"
        key_id, mac = parts[1], parts[2]
        if key_id not in self.keys:
            return "signed with an unknown key id"
        if not hmac.compare_digest(self.mac(key_id, record), mac):
            return "forged: the signature does not match the record"
        return None


def canonical(record: BaseModel) -> bytes:
    """What is signed: a domain tag (the record type) and the record's fields but the signature
    as compact JSON with sorted keys, so any change to any field breaks the MAC."""
    fields = record.model_dump(mode="json", exclude={"signature"})
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"rankscope-{type(record).__name__}-{_VERSION}\n{body}".encode()


def key_id_of(secret: bytes) -> str:
    """A key's default id: a short fingerprint (not the key)."""
    return hashlib.sha256(b"rankscope-recovery-key-id\n" + secret).hexdigest()[:12]


def parse_keys(text: str) -> Keyring:
    """``id:secret`` or bare secret entries, separated by commas or newlines; the first one
    signs. Raises ValueError (without echoing a secret) when there is none or one is short."""
    entries = [e.strip() for e in text.replace(",", "\n").splitlines()]
    keys: dict[str, bytes] = {}
    current = ""
    for entry in (e for e in entries if e and not e.startswith("#")):
        key_id, sep, secret = entry.partition(":")
        if not sep:
            key_id, secret = key_id_of(entry.encode()), entry
        if len(secret) < _MIN_SECRET:
            raise ValueError(f"a recovery key must be at least {_MIN_SECRET} characters")
        keys[key_id] = secret.encode()
        current = current or key_id
    if not keys:
        raise ValueError("no recovery key given")
    return Keyring(current, keys)


def load_keyring(key_file: Path | None, create: bool = True) -> Keyring:
    """From ``RANKSCOPE_RECOVERY_KEY``, else ``RANKSCOPE_RECOVERY_KEY_FILE`` or ``key_file``;
    a missing file is created (0600) with a new key when ``create``."""
    value = os.environ.get(KEY_ENV, "").strip()
    if value:
        return parse_keys(value)
    path = Path(os.environ[KEY_FILE_ENV]) if os.environ.get(KEY_FILE_ENV) else key_file
    if path is None:
        raise ValueError(f"set {KEY_ENV} or {KEY_FILE_ENV}: recovery decisions must be signed")
    if not path.exists() and create and create_secret_file(path, secrets.token_hex(32)):
        log.warning("created a new recovery signing key in %s (0600)", path)
    return parse_keys(path.read_text(encoding="utf-8"))
