"""The kernel-log collector itself: picks a reader, parses each record, maps the PCI address to
the GPU (NVML, the config's inventory, ``NVRM: GPU at PCI:...: GPU-<uuid>`` lines), makes one
``GpuEventEvent`` per matched line, counts everything in :class:`KernelLogStats`, keeps the resume
position; and the factory the agent calls."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rankscope.collectors.base import BaseCollector, EventFactory
from rankscope.collectors.kernel_log.config import KernelLogCollectorConfig
from rankscope.collectors.kernel_log.parsing import (
    FallenOffBusJoiner,
    ParsedKernelLine,
    normalize_pci,
)
from rankscope.collectors.kernel_log.readers import (
    FileReader,
    JournalReader,
    KernelLogReader,
    KernelRecord,
    KmsgReader,
    ReaderStats,
)
from rankscope.schemas.events import Event, GpuEventEvent
from rankscope.schemas.payloads import GpuEvent
from rankscope.schemas.xid_catalogue import xid_bucket


@dataclass(frozen=True)
class GpuRef:
    """A GPU as the rest of rankscope names it."""

    index: int | None
    uuid: str = ""


@dataclass
class KernelLogStats:
    """What the collector read, matched and emitted (it never raises)."""

    polls: int = 0
    #: the reader in use ("" while none could be opened) and why the others were not used
    source: str = ""
    source_errors: dict[str, str] = field(default_factory=dict)
    records: int = 0
    lines_matched: int = 0
    events: int = 0
    #: matched lines whose PCI address no mapping knows (the event has no ``gpu``)
    unmapped: int = 0
    messages_truncated: int = 0
    invalid_events: int = 0
    #: corrected AER reports not emitted (``aer_corrected`` off)
    aer_corrected_dropped: int = 0
    state_writes: int = 0
    state_errors: int = 0
    by_pattern: dict[str, int] = field(default_factory=dict)
    reader: ReaderStats = field(default_factory=ReaderStats)


def nvml_pci_map(nvml: Any) -> dict[str, GpuRef]:
    """PCI address (normalised) -> NVML index and UUID, through ``nvmlDeviceGetPciInfo``.
    Raises what NVML raises (the caller decides); strings may come back as bytes."""

    def text(v: Any) -> str:
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    out: dict[str, GpuRef] = {}
    nvml.nvmlInit()
    try:
        for i in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            info = nvml.nvmlDeviceGetPciInfo(h)
            pci = normalize_pci(text(info.busId))
            if pci:
                out[pci] = GpuRef(i, text(nvml.nvmlDeviceGetUUID(h)))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return out


class KernelLogCollector(BaseCollector):
    """Follows the kernel log and turns NVIDIA/PCIe error lines into ``GpuEventEvent``s."""

    name = "kernel_log"

    def __init__(
        self,
        config: KernelLogCollectorConfig,
        factory: EventFactory,
        *,
        nvml: Any = None,
        reader: KernelLogReader | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.interval_s = config.interval_s
        self.stats = KernelLogStats()
        self._nvml = nvml
        self._reader = reader
        self._opened = reader is not None
        if reader is not None:
            self.stats.source = reader.name
            self.stats.reader = reader.stats
        self._joiner = FallenOffBusJoiner()
        self.pci_map: dict[str, GpuRef] = {}
        self.nvml_error = ""
        self._mapped = False
        self._state_written = 0.0
        self._state_dirty = False

    # -- set-up ------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        path = self.config.state_path
        if path is None:
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _candidates(self) -> list[str]:
        if self.config.source != "auto":
            return [self.config.source]
        return ["kmsg", "journal", "file"]

    def _open_reader(self) -> None:
        """The first source of the configured order that opens; the others' errors are kept."""
        self._opened = True
        state = self._load_state()
        for name in self._candidates():
            reader: KernelLogReader
            if name == "kmsg":
                reader = KmsgReader(self.config, state.get("kmsg"))
            elif name == "journal":
                if shutil.which(self.config.journalctl[0]) is None:
                    self.stats.source_errors[name] = f"{self.config.journalctl[0]} not found"
                    continue
                reader = JournalReader(self.config, state.get("journal"))
            else:
                reader = FileReader(self.config)
            try:
                reader.open()
            except OSError as e:
                self.stats.source_errors[name] = f"{type(e).__name__}: {e}"
                continue
            self._reader = reader
            self.stats.source = name
            self.stats.reader = reader.stats
            return

    def _build_map(self) -> None:
        self._mapped = True
        for g in self.config.inventory:
            pci = normalize_pci(g.pci_bus_id)
            if pci:
                self.pci_map[pci] = GpuRef(g.index, g.uuid)
        if not self.config.use_nvml or self._nvml is False:
            return
        nvml = self._nvml
        try:
            if nvml is None:
                import pynvml

                nvml = pynvml
            self.pci_map.update(nvml_pci_map(nvml))  # NVML wins over a stale inventory
        except Exception as e:  # no driver, no library, no permission: the inventory remains
            self.nvml_error = f"{type(e).__name__}: {e}"

    # -- the cycle ---------------------------------------------------------------------------

    def poll(self, now_ns: int) -> list[Event]:
        self.stats.polls += 1
        if not self._mapped:
            self._build_map()
        if not self._opened:
            self._open_reader()
        if self._reader is None:
            return []
        records = self._reader.read(now_ns)
        out: list[Event] = []
        for rec in records:
            self.stats.records += 1
            event = self._record(rec, now_ns)
            if event is not None:
                out.append(event)
        if records:
            self._state_dirty = True
        self._maybe_write_state(force=False)
        return out

    def _record(self, rec: KernelRecord, now_ns: int) -> Event | None:
        parsed = self._joiner.feed(rec.text)
        if parsed is None:
            return None
        self.stats.lines_matched += 1
        self.stats.by_pattern[parsed.pattern] = self.stats.by_pattern.get(parsed.pattern, 0) + 1
        if parsed.severity == "corrected" and not self.config.aer_corrected:
            self.stats.aer_corrected_dropped += 1
            return None
        if parsed.pattern == "gpu_uuid":
            self._learn_uuid(parsed)
            return None
        return self._event(parsed, rec, now_ns)

    def _learn_uuid(self, p: ParsedKernelLine) -> None:
        known = self.pci_map.get(p.pci_bus_id)
        if known is None:
            index = next((g.index for g in self.pci_map.values() if g.uuid == p.gpu_uuid), None)
            self.pci_map[p.pci_bus_id] = GpuRef(index, p.gpu_uuid)
        elif not known.uuid:
            self.pci_map[p.pci_bus_id] = GpuRef(known.index, p.gpu_uuid)

    def _event(self, p: ParsedKernelLine, rec: KernelRecord, now_ns: int) -> Event | None:
        ts = now_ns
        if rec.ts_ns is not None:
            lag = self.config.max_log_time_lag_s * 1e9
            if now_ns - lag <= rec.ts_ns <= now_ns + 2_000_000_000:
                ts = rec.ts_ns
        ref = self.pci_map.get(p.pci_bus_id) if p.pci_bus_id else None
        if ref is None and p.pci_bus_id and p.pattern != "aer":
            self.stats.unmapped += 1
        message = p.message
        limit = self.config.max_message_bytes
        if len(message.encode("utf-8", errors="replace")) > limit:
            message = message.encode("utf-8", errors="replace")[:limit].decode(
                "utf-8", errors="ignore"
            )
            self.stats.messages_truncated += 1
        try:
            payload = GpuEvent(
                event_type=p.event_type,
                gpu_uuid=(ref.uuid if ref else "")[:256],
                xid=p.xid,
                count=1,
                message=message,
                pci_bus_id=p.pci_bus_id,
                source=rec.source,
                pattern=p.pattern,
                sxid=p.sxid,
                xid_bucket=xid_bucket(p.xid),
            )
            event = self.factory.make(GpuEventEvent, payload, ts, gpu=ref.index if ref else None)
        except ValidationError:
            self.stats.invalid_events += 1
            return None
        self.stats.events += 1
        return event

    # -- resume position ---------------------------------------------------------------------

    def _maybe_write_state(self, *, force: bool) -> None:
        path = self.config.state_path
        if path is None or self._reader is None or not self._state_dirty:
            return
        now = time.monotonic()
        if not force and now - self._state_written < self.config.state_every_s:
            return
        state = self._load_state()
        state[self._reader.name] = self._reader.state()
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
        except OSError:
            self.stats.state_errors += 1
            return
        self.stats.state_writes += 1
        self._state_written = now
        self._state_dirty = False

    def stop(self) -> None:
        self._maybe_write_state(force=True)
        if self._reader is not None:
            self._reader.close()


def create_kernel_log_collector(
    config: KernelLogCollectorConfig, factory: EventFactory
) -> KernelLogCollector:
    """Factory used by the agent's component wiring."""
    return KernelLogCollector(config, factory)
