"""The worker's consumer fetches with the configured wait, not faust's hard-coded 1,500 ms.

Why it matters is in ``streams/transport.py``: a worker reading its own events topic back
stalled for up to the whole wait each time those partitions were caught up. The setting reaches
aiokafka through a private attribute, so this starts a real consumer on the test broker and
reads the value its fetcher uses: an aiokafka that moved the attribute fails here, not in a
deployment.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rankscope.settings import Settings
from rankscope.streams.app import create_app
from rankscope.streams.config import StreamsConfig
from rankscope.streams.transport import transport_class
from tests.conftest import Services


def _fetch_wait_of_started_consumer(app: Any) -> int:
    async def run() -> int:
        consumer = app.consumer._thread._create_worker_consumer(app.transport)
        await consumer.start()
        try:
            return int(consumer._fetcher._fetch_max_wait_ms)
        finally:
            await consumer.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("wait_ms", [0, 100, 750])
def test_the_worker_consumer_fetches_with_the_configured_wait(
    services: Services, tmp_path: Path, wait_ms: int
) -> None:
    settings = Settings(
        home=tmp_path, topic_prefix=f"fw{wait_ms}", worker_fetch_max_wait_ms=wait_ms
    )
    app, _ = create_app(settings.streams(services.bootstrap))
    assert app.transport.Consumer.__module__ == transport_class.__module__
    assert _fetch_wait_of_started_consumer(app) == wait_ms


def test_the_fetch_wait_is_a_worker_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS", "250")
    assert Settings().streams("k:9092").fetch_max_wait_ms == 250
    monkeypatch.delenv("RANKSCOPE_WORKER_FETCH_MAX_WAIT_MS")
    assert Settings().streams("k:9092").fetch_max_wait_ms == 100  # faust's own is 1,500


def test_the_worker_compresses_its_outputs_by_default(services: Services, tmp_path: Path) -> None:
    """zstd by default: ~4x fewer events-topic bytes and less worker CPU per event, affordable
    since the fetch wait stopped delaying rows (docs/decisions.md)."""
    kafka = services.bootstrap  # the app's probes connect when built
    app, _ = create_app(Settings(home=tmp_path).streams(kafka))
    assert app.conf.producer_compression_type == "zstd"
    plain = Settings(home=tmp_path, worker_output_compression="none").streams(kafka)
    assert create_app(plain)[0].conf.producer_compression_type is None


def test_a_wait_beyond_fausts_own_is_refused() -> None:
    with pytest.raises(ValueError, match="fetch_max_wait_ms"):
        StreamsConfig(bootstrap="k:9092", fetch_max_wait_ms=1501)
