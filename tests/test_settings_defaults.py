"""The stream worker's settings keep one default each, StreamsConfig's, and the README states it.

``Settings`` leaves every worker setting unset (None) unless the operator sets it, so
``StreamsConfig`` alone holds the default and its bounds; the README's configuration table is
what operators read, so each of its rows is compared with the config the worker builds.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from rankscope.settings import WORKER_SETTINGS, Settings
from rankscope.streams.config import StreamsConfig
from tests.test_wheel import ROOT

README = (ROOT / "README.md").read_text()


def _field(config: StreamsConfig, target: str) -> Any:
    value: Any = config
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _as_written(value: Any) -> str:
    """How the README writes a default: ``true``, ``60`` for 60.0, ``zstd``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _readme_default(env: str) -> str:
    row = re.search(rf"^\|[^|]*\| `{env}` \| `([^`]*)` \|", README, re.MULTILINE)
    assert row, f"{env} has no row in the README's configuration table"
    return row.group(1)


@pytest.mark.parametrize("name", sorted(WORKER_SETTINGS))
def test_the_readme_states_the_workers_own_default(name: str) -> None:
    default = _field(StreamsConfig(bootstrap="k:9092"), WORKER_SETTINGS[name])
    assert _readme_default(f"RANKSCOPE_{name.upper()}") == _as_written(default)


@pytest.mark.parametrize("name", sorted(WORKER_SETTINGS))
def test_an_unset_worker_setting_leaves_the_workers_default(name: str) -> None:
    built = Settings().streams("k:9092")
    assert getattr(Settings(), name) is None
    target = WORKER_SETTINGS[name]
    assert _field(built, target) == _field(StreamsConfig(bootstrap="k:9092"), target)


@pytest.mark.parametrize(
    ("env", "raw", "target", "expected"),
    [
        ("RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS", "250", "fetch_max_wait_ms", 250),
        ("RANKSCOPE_WORKER_EVENT_LOOP", "asyncio", "event_loop", "asyncio"),
        ("RANKSCOPE_WORKER_VALIDATE", "false", "validate_in_worker", False),
        ("RANKSCOPE_WORKER_SNAPSHOT_INTERVAL_S", "30", "state.snapshot_interval_s", 30.0),
        ("RANKSCOPE_WORKER_FLUSH_IDLE_S", "0.5", "analysis_flush_idle_s", 0.5),
    ],
)
def test_a_set_worker_setting_reaches_the_worker(
    monkeypatch: pytest.MonkeyPatch, env: str, raw: str, target: str, expected: Any
) -> None:
    monkeypatch.setenv(env, raw)
    assert _field(Settings().streams("k:9092"), target) == expected


def test_a_value_out_of_the_workers_bounds_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS", "1501")
    with pytest.raises(ValueError, match="fetch_max_wait_ms"):
        Settings().streams("k:9092")
