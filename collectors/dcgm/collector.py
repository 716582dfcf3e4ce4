"""The dcgm-exporter collector: scrape the page, parse, map, stamp, and keep the GPU -> job map.

Errors are one line and never stop the agent: a page that cannot be fetched or is not a
dcgm-exporter page raises :class:`DcgmScrapeError`/``DcgmPageError`` from ``poll``, which the
agent reports as one ``collector_error`` per streak (and ``collector_recovered`` after), then
polls again on its grid.
"""

from __future__ import annotations

import logging
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rankscope.collectors.base import BaseCollector, EventFactory, JobBinding
from rankscope.collectors.dcgm.config import DcgmCollectorConfig
from rankscope.collectors.dcgm.identity import pod_bindings
from rankscope.collectors.dcgm.mapping import XID_FIELD, sample_fields
from rankscope.collectors.dcgm.parsing import GpuReading, parse_page
from rankscope.schemas.events import Event, GpuEventEvent, GpuSampleEvent
from rankscope.schemas.payloads import GpuEvent, GpuSample
from rankscope.schemas.xid_catalogue import xid_bucket

__all__ = ["SOURCE", "DcgmCollector", "DcgmScrapeError", "DcgmStats", "create_dcgm_collector"]

log = logging.getLogger("rankscope.collectors.dcgm")

#: ``gpu_sample.source`` / ``gpu_event.source`` of what this collector emits
SOURCE = "dcgm-exporter"

Fetch = Callable[[], str]


class DcgmScrapeError(RuntimeError):
    """The endpoint could not be read; the message is one line."""


@dataclass
class DcgmStats:
    scrapes: int = 0
    scrape_errors: int = 0
    page_errors: int = 0
    samples: int = 0
    #: GPUs on the page without DCGM_FI_DEV_GPU_UTIL (gpu_sample/1 requires it): no sample
    no_utilization: int = 0
    invalid_samples: int = 0
    xid_events: int = 0
    blank_values: int = 0
    mig_series: int = 0


class DcgmCollector(BaseCollector):
    """Polls dcgm-exporter; one ``gpu_sample`` per GPU, ``gpu_event`` xid on a new XID value."""

    name = "dcgm"

    def __init__(
        self, config: DcgmCollectorConfig, factory: EventFactory, fetch: Fetch | None = None
    ) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.factory = factory
        self.stats = DcgmStats()
        self._fetch = fetch or self._http_get
        self._patterns = [re.compile(p) for p in config.pod_patterns]
        #: bindings this collector put into the registry (others' bindings are left alone)
        self._bound: dict[int, JobBinding] = {}
        self._xid: dict[int, int] = {}
        self._hostname_warned = False

    def _http_get(self) -> str:
        url, limit = self.config.url, self.config.max_bytes
        try:
            with urllib.request.urlopen(url, timeout=self.config.timeout_s) as resp:
                body: bytes = resp.read(limit + 1)
        except urllib.error.HTTPError as exc:
            raise DcgmScrapeError(f"dcgm-exporter {url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DcgmScrapeError(f"dcgm-exporter {url} unreachable: {reason}") from None
        if len(body) > limit:
            raise DcgmScrapeError(f"dcgm-exporter {url}: page larger than {limit} bytes")
        return body.decode("utf-8", "replace")

    def poll(self, now_ns: int) -> list[Event]:
        self.stats.scrapes += 1
        try:
            text = self._fetch()
        except DcgmScrapeError:
            self.stats.scrape_errors += 1
            raise
        try:
            page = parse_page(text)
        except ValueError:
            self.stats.page_errors += 1
            raise
        self.stats.blank_values += page.blank_values
        self.stats.mig_series += page.mig_series
        bindings = pod_bindings(page.gpus.values(), self._patterns)
        out: list[Event] = []
        for gpu, reading in sorted(page.gpus.items()):
            self._check_host(reading)
            self._bind(gpu, bindings.get(gpu))
            self._sample(reading, now_ns, out)
            self._xid_event(reading, now_ns, out)
        for gpu in sorted(set(self._bound) - set(page.gpus)):
            self._bind(gpu, None)  # the GPU left the page: forget what we said about it
        return out

    def _check_host(self, reading: GpuReading) -> None:
        host = reading.hostname
        if host and host != self.factory.node and not self._hostname_warned:
            self._hostname_warned = True
            log.warning(
                "dcgm-exporter reports Hostname %r, the agent is node %r: the page may be "
                "another node's (events are stamped with the agent's node)",
                host,
                self.factory.node,
            )

    def _bind(self, gpu: int, binding: JobBinding | None) -> None:
        jobs = self.factory.jobs
        current = jobs.for_gpu(gpu)
        ours = self._bound.get(gpu)
        if current is not None and current != ours:
            return  # bound from process environments (NVML collector): that one knows better
        if binding is None:
            if ours is not None:
                jobs.bind_gpu(gpu, None)
                del self._bound[gpu]
            return
        if binding != ours:
            jobs.bind_gpu(gpu, binding)
            self._bound[gpu] = binding

    def _sample(self, reading: GpuReading, now_ns: int, out: list[Event]) -> None:
        fields: dict[str, Any] = sample_fields(reading)
        if "sm_util_pct" not in fields:
            self.stats.no_utilization += 1
            return
        try:
            payload = GpuSample(gpu_uuid=reading.uuid, source=SOURCE, **fields)
            out.append(self.factory.make(GpuSampleEvent, payload, now_ns, gpu=reading.gpu))
        except ValidationError as exc:
            self.stats.invalid_samples += 1
            log.warning("GPU %d: sample refused: %s", reading.gpu, exc.errors()[0].get("msg"))
            return
        self.stats.samples += 1

    def _xid_event(self, reading: GpuReading, now_ns: int, out: list[Event]) -> None:
        """DCGM_FI_DEV_XID_ERRORS is the *last* XID: an event when it changes to a new code.

        The first value seen is a baseline (it may be days old); the same code twice in a row
        does not change the gauge and is not seen (the NVML and kernel-log paths see it)."""
        value = reading.values.get(XID_FIELD)
        if value is None:
            return
        code, prev = int(value), self._xid.get(reading.gpu)
        self._xid[reading.gpu] = code
        if prev is None or code == prev or code <= 0:
            return
        text = f"dcgm-exporter {XID_FIELD} {prev} -> {code}"
        if reading.xid_text:
            text += f": {reading.xid_text}"
        try:
            payload = GpuEvent(
                event_type="xid",
                gpu_uuid=reading.uuid,
                xid=code,
                message=text,
                pci_bus_id=reading.pci_bus_id,
                source=SOURCE,
                xid_bucket=xid_bucket(code),
            )
            out.append(self.factory.make(GpuEventEvent, payload, now_ns, gpu=reading.gpu))
        except ValidationError:
            self.stats.invalid_samples += 1
            return
        self.stats.xid_events += 1


def create_dcgm_collector(config: DcgmCollectorConfig, factory: EventFactory) -> DcgmCollector:
    """Factory used by the agent's component wiring."""
    return DcgmCollector(config, factory)
