"""Secret files created by several processes at once (found by bench/scale_out.py: two workers
started together on one home, one read the redaction key while the other was still writing it
and exited with "the redaction key must be at least 16 bytes")."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from rankscope.redaction.keys import load_key
from rankscope.secret_files import create_secret_file
from rankscope.streams.recovery.signing import load_keyring

PROCESSES = 6
ROUNDS = 8
NO_ENV = "RANKSCOPE_TEST_NO_SUCH_VAR"


def _redaction_key(barrier: Barrier, path: str) -> str:
    barrier.wait()
    key = load_key(NO_ENV, Path(path), create=True)
    assert key is not None
    return key.decode()


def _recovery_key(barrier: Barrier, path: str) -> str:
    barrier.wait()
    ring = load_keyring(Path(path))
    return ring.keys[ring.current_id].hex()


@pytest.mark.parametrize("load", [_redaction_key, _recovery_key], ids=["redaction", "recovery"])
def test_processes_that_start_together_share_one_whole_key(
    tmp_path: Path, load: Callable[[Barrier, str], str]
) -> None:
    ctx = multiprocessing.get_context("fork")  # the race needs processes started together
    with ctx.Manager() as manager, ctx.Pool(PROCESSES) as pool:
        for round_no in range(ROUNDS):
            path = tmp_path / str(round_no) / "secret.key"
            barrier = manager.Barrier(PROCESSES)
            keys = pool.starmap(load, [(barrier, str(path))] * PROCESSES)
            assert len(set(keys)) == 1, keys
            assert sorted(p.name for p in path.parent.iterdir()) == ["secret.key"]  # no temp left
            assert path.stat().st_mode & 0o777 == 0o600


def test_the_second_creator_keeps_the_first_secret(tmp_path: Path) -> None:
    path = tmp_path / "a" / "secret"
    assert create_secret_file(path, "first") is True
    assert create_secret_file(path, "second") is False
    assert path.read_text() == "first\n"
    assert [p.name for p in path.parent.iterdir()] == ["secret"]
