"""Secret files a local run creates once and every process of the deployment then shares.

Several processes often start together on one host (two workers, a worker and the sink, the
demo's whole stack) and each may find the file missing. A file created in place can be seen
by another process while it is still empty, and two creators race on ``O_EXCL``; so the secret
is written complete to a private temporary file and linked into place: ``os.link`` is atomic
and fails when the name exists, so exactly one process's secret appears, whole, and the others
read that one.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["create_secret_file"]


def create_secret_file(path: Path, secret: str) -> bool:
    """Put ``secret`` (one line, mode 0600) at ``path`` unless a file is already there.

    True when this call created it; False when another process got there first (its file is
    complete: read it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secret + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
