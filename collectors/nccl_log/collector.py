"""The NCCL log collector itself: a parsed line becomes a ``CommEventEvent`` (time from the
line's stamp when trusted, payload fields bounded), counted in :class:`NcclLogStats`; and the
factory the agent calls."""

from __future__ import annotations

import socket

from pydantic import ValidationError

from rankscope.collectors.base import EventFactory
from rankscope.collectors.nccl_log.config import NcclLogCollectorConfig
from rankscope.collectors.nccl_log.tailer import (
    NcclLogStats,
    _Tail,
    _Tailer,
    expand_nccl_debug_file,
)
from rankscope.schemas.comm_lines import comm_payload
from rankscope.schemas.comm_lines.parsing import ParsedCommLine, _parse, log_time_ns
from rankscope.schemas.events import CommEventEvent, Event


class NcclLogCollector(_Tailer):
    """Follows log files and turns interesting lines into ``CommEventEvent``s."""

    name = "nccl_log"

    def __init__(self, config: NcclLogCollectorConfig, factory: EventFactory) -> None:
        self.config = config
        self.factory = factory
        self.interval_s = config.interval_s
        self.stats = NcclLogStats()
        host = config.hostname or socket.gethostname()
        self._patterns = [expand_nccl_debug_file(p, host) for p in config.paths]
        self._tails: dict[str, _Tail] = {}
        self._first_poll = True

    def stop(self) -> None:
        for tail in self._tails.values():
            self._close(tail)

    def _line(self, tail: _Tail, raw: bytes, now_ns: int) -> list[Event]:
        limit = self.config.max_line_bytes
        if len(raw) > limit:
            raw = raw[:limit]
            self.stats.lines_truncated += 1
        self.stats.lines_read += 1
        text = raw.decode("utf-8", errors="replace")
        parsed = _parse(text)
        if parsed == "ignored":
            self.stats.lines_ignored += 1
            return []
        if parsed == "malformed":
            self.stats.lines_malformed += 1
            return []
        assert isinstance(parsed, ParsedCommLine)
        event = self._event(parsed, tail.path, now_ns)
        if event is None:
            return []
        self.stats.events += 1
        self.stats.by_type[parsed.event_type] = self.stats.by_type.get(parsed.event_type, 0) + 1
        return [event]

    def _event(self, p: ParsedCommLine, path: str, now_ns: int) -> Event | None:
        ts = now_ns
        if p.log_time is not None:
            stamped = log_time_ns(p.log_time, now_ns)
            lag = self.config.max_log_time_lag_s * 1e9
            if stamped is not None and now_ns - lag <= stamped <= now_ns + 2_000_000_000:
                ts = stamped
        gpu = p.cuda_dev if self.config.cuda_dev_is_gpu_index else None
        try:
            payload = comm_payload(p, path)
            return self.factory.make(
                CommEventEvent, payload, ts, gpu=gpu, rank=p.rank, local_rank=p.local_rank
            )
        except ValidationError:
            self.stats.invalid_events += 1
            return None


def create_nccl_log_collector(
    config: NcclLogCollectorConfig, factory: EventFactory
) -> NcclLogCollector:
    """Factory used by the agent's component wiring."""
    return NcclLogCollector(config, factory)
