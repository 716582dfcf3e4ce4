"""The key of the ``hash`` action: from the environment, or a key file the worker may create.

All workers of one deployment must share the key, or the same value hashes differently on each
(joins break, nothing leaks). Operators set the environment variable from their secret store;
a local run creates a private key file once and reuses it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from rankscope.secret_files import create_secret_file

log = logging.getLogger("rankscope.redaction")

_MIN_KEY_BYTES = 16


def load_key(env_var: str, key_file: Path | None, *, create: bool = False) -> bytes | None:
    """The key as bytes, or None when neither the variable nor the file gives one."""
    value = os.environ.get(env_var, "").strip()
    if value:
        key = value.encode()
    elif key_file is not None and key_file.exists():
        key = key_file.read_bytes().strip()
    elif key_file is not None and create:
        if create_secret_file(key_file, secrets.token_hex(32)):
            log.warning(
                "created a new redaction key in %s; give every worker the same key (%s) so "
                "that hashed values join across workers",
                key_file,
                env_var,
            )
        key = key_file.read_bytes().strip()  # ours, or the one a racing process created
    else:
        return None
    if len(key) < _MIN_KEY_BYTES:
        raise ValueError(f"the redaction key must be at least {_MIN_KEY_BYTES} bytes")
    return key


def hash_token(key: bytes, entity: str, value: str, hex_chars: int) -> str:
    """What the ``hash`` action writes for ``value``: stable for one key, unreadable without."""
    digest = hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
    return f"[{entity}:{digest[:hex_chars]}]"
