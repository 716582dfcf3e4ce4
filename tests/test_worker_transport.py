"""The worker's consumer fetches with the configured wait, not faust's hard-coded 1,500 ms.

Why it matters is in ``streams/transport.py``: a worker reading its own events topic back
stalled for up to the whole wait each time those partitions were caught up. The setting reaches
aiokafka through a private attribute, so this starts a real consumer on the test broker and
reads the value its fetcher uses (in a child process, as a worker would): an aiokafka that
moved the attribute fails here, not in a deployment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rankscope.extras import MissingExtraError
from rankscope.settings import Settings
from rankscope.streams.app import install_event_loop
from rankscope.streams.config import StreamsConfig
from tests.conftest import Services

#: run in a child process: the app's probe clients live as long as the app, which faust keeps
#: for the process, so they go with the child while the broker still answers
_CHILD = """
import asyncio, json, sys
from pathlib import Path
from rankscope.settings import Settings
from rankscope.streams.app import create_app, install_event_loop
from rankscope.streams.transport import transport_class

bootstrap, home, wait_ms, compression, event_loop = sys.argv[1:6]
settings = Settings(home=Path(home), topic_prefix="fw" + wait_ms)
if wait_ms != "default":
    settings = settings.model_copy(update={"worker_fetch_max_wait_ms": int(wait_ms)})
if compression != "default":
    settings = settings.model_copy(update={"worker_output_compression": compression})
if event_loop != "default":
    settings = settings.model_copy(update={"worker_event_loop": event_loop})
config = settings.streams(bootstrap)
install_event_loop(config.event_loop)  # as run_worker does, before the app
app, _ = create_app(config)


async def started() -> tuple[int, str]:
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    await consumer.start()
    try:
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        return int(consumer._fetcher._fetch_max_wait_ms), loop
    finally:
        await consumer.stop()


wait, loop = asyncio.run(started())
print(json.dumps({
    "ours": app.transport.Consumer.__module__ == transport_class.__module__,
    "fetch_wait_ms": wait,
    "compression": app.conf.producer_compression_type,
    "event_loop": loop,
}))
"""


def _worker_app(
    services: Services,
    home: Path,
    wait_ms: str = "default",
    compression: str = "default",
    event_loop: str = "default",
) -> dict[str, Any]:
    args = [services.bootstrap, str(home), wait_ms, compression, event_loop]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("wait_ms", [0, 100, 750])
def test_the_worker_consumer_fetches_with_the_configured_wait(
    services: Services, tmp_path: Path, wait_ms: int
) -> None:
    app = _worker_app(services, tmp_path, wait_ms=str(wait_ms))
    assert app["ours"]
    assert app["fetch_wait_ms"] == wait_ms


def test_the_worker_compresses_its_outputs_by_default(services: Services, tmp_path: Path) -> None:
    """zstd by default: ~4x fewer events-topic bytes and less worker CPU per event, affordable
    since the fetch wait stopped delaying rows (docs/decisions.md)."""
    default = _worker_app(services, tmp_path)
    assert default["compression"] == "zstd"
    assert default["fetch_wait_ms"] == 100  # faust's own is 1,500
    assert _worker_app(services, tmp_path, compression="none")["compression"] is None


def test_the_worker_runs_its_consumer_on_uvloop_by_default(
    services: Services, tmp_path: Path
) -> None:
    """uvloop by default (~0.95x worker CPU per event, docs/decisions.md); asyncio on request.
    The loop checked is the one a started aiokafka consumer of the worker's transport runs on."""
    assert _worker_app(services, tmp_path)["event_loop"] == "uvloop"
    assert _worker_app(services, tmp_path, event_loop="asyncio")["event_loop"] == "asyncio"


def test_without_uvloop_the_worker_says_which_extra_or_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an install without it raises
    with pytest.raises(MissingExtraError) as refused:
        install_event_loop("uvloop")
    assert "pip install 'rankscope[worker]'" in str(refused.value)
    assert "RANKSCOPE_WORKER_EVENT_LOOP=asyncio" in str(refused.value)
    install_event_loop("asyncio")  # needs nothing: the standard library's loop


def test_the_fetch_wait_is_a_worker_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS", "250")
    assert Settings().streams("k:9092").fetch_max_wait_ms == 250
    monkeypatch.delenv("RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS")
    assert Settings().streams("k:9092").fetch_max_wait_ms == 100  # faust's own is 1,500


def test_a_wait_beyond_fausts_own_is_refused() -> None:
    with pytest.raises(ValueError, match="fetch_max_wait_ms"):
        StreamsConfig(bootstrap="k:9092", fetch_max_wait_ms=1501)
