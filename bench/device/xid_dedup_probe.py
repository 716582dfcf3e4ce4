"""Check on a real GPU that one XID becomes one event when the agent runs both XID sources.

    python bench/device/xid_dedup_probe.py [--json out.json] [--settle 4] [--wait 15]

Runs the node agent in-process with its ``gpu`` collector (NVML's event thread on) and its
``kernel_log`` collector (``/dev/kmsg``), Kafka replaced by a transport that confirms every send
(nothing leaves the machine), then makes the driver log one real XID 31 with
``bench/device/xid_fault.py``. Prints one JSON document: every ``gpu_event`` the agent shipped
(source, code, GPU, PCI id, catalogue bucket, time), the XID filter's counters (held / dropped /
released) and the fault's own output. Expected: one XID 31 event, from the kernel log, and the
filter dropped NVML's copy (dropped = 1). Run as root (``/dev/kmsg``); needs pydantic,
pydantic-settings, pyyaml, nvidia-ml-py and confluent-kafka besides the repository and cupy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rankscope.collectors.agent import Agent  # noqa: E402
from rankscope.collectors.agent.config import AgentConfig  # noqa: E402
from rankscope.schemas.events import Event, GpuEventEvent  # noqa: E402


class ConfirmingTransport:
    """Kafka stand-in: every send is confirmed at the next poll."""

    def __init__(self) -> None:
        self.queued: list[tuple[int, Callable[[int, Any], None]]] = []
        self.lock = threading.Lock()

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: Callable[[int, Any], None]
    ) -> None:
        with self.lock:
            self.queued.append((seq, on_done))

    def poll(self, timeout_s: float) -> None:
        with self.lock:
            queued, self.queued = self.queued, []
        for seq, on_done in queued:
            on_done(seq, None)
        if not queued:
            time.sleep(min(timeout_s, 0.01))

    @property
    def broken(self) -> str | None:
        return None

    def close(self, timeout_s: float) -> None:
        self.poll(0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--settle", type=float, default=4.0, help="s before the fault")
    ap.add_argument("--wait", type=float, default=15.0, help="s to wait for the kernel event")
    args = ap.parse_args()

    shipped: list[Event] = []
    lock = threading.Lock()

    def tap(events: Sequence[Event]) -> None:
        with lock:
            shipped.extend(events)

    spool = tempfile.mkdtemp(prefix="xid-dedup-spool-")
    cfg = AgentConfig.model_validate(
        {
            "cluster": "device",
            "node": "h200",
            "kafka": {"bootstrap": "127.0.0.1:1"},
            "spool": {"dir": spool},
            "gpu": {"events": True, "map_processes": False, "interval_s": 1.0},
            "kernel_log": {"source": "kmsg", "interval_s": 1.0},
            # the device machine has no Presidio; XID events carry no free text it would change
            "redaction": {"enabled": False},
        }
    )
    agent = Agent(cfg, transport_factory=lambda c: ConfirmingTransport(), tap=tap)
    out: dict[str, Any] = {"collectors": [c.name for c in agent.collectors]}
    dedup = agent._ingest.xid_dedup  # the probe reports the filter's counters
    out["dedup_on"] = dedup is not None

    def xids() -> list[GpuEventEvent]:
        with lock:
            return [
                e for e in shipped if isinstance(e, GpuEventEvent) and e.payload.event_type == "xid"
            ]

    agent.start()
    try:
        time.sleep(args.settle)
        fault = subprocess.run(
            [sys.executable, str(ROOT / "bench/device/xid_fault.py")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        out["xid_fault_stdout"] = fault.stdout.strip().splitlines()[:3]
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline and not any(e.payload.source for e in xids()):
            time.sleep(0.05)
        time.sleep((dedup.hold_s if dedup else 2.0) + 1.0)  # a held NVML copy would be out
    finally:
        stats = agent.stop(timeout_s=3.0)
    out["gpu_events"] = [
        {
            "source": e.payload.source or "nvml",
            "event_type": e.payload.event_type,
            "xid": e.payload.xid,
            "gpu": e.gpu,
            "pci_bus_id": e.payload.pci_bus_id,
            "xid_bucket": e.payload.xid_bucket,
            "ts": e.ts,
            "message": e.payload.message[:200],
        }
        for e in shipped
        if isinstance(e, GpuEventEvent)
    ]
    out["xid_events"] = len(xids())
    if dedup is not None:
        s = dedup.stats
        out["dedup"] = {"held": s.held, "dropped": s.dropped, "released": s.released}
    out["agent_events_sampled"] = stats.sampled if hasattr(stats, "sampled") else None
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
