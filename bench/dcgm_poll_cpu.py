"""CPU per poll of the dcgm-exporter collector on the recorded pages (parse, map, stamp).

Why: the collector parses a whole Prometheus page each interval; this says what that costs.
Run: ``.venv/bin/python bench/dcgm_poll_cpu.py [--polls N]``. No network: the page is injected.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rankscope.collectors.base import EventFactory
from rankscope.collectors.dcgm import DcgmCollector, DcgmCollectorConfig

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "dcgm"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--polls", type=int, default=300)
    args = ap.parse_args()
    for path in sorted(DATA.glob("*.txt")):
        page = path.read_text()
        collector = DcgmCollector(
            DcgmCollectorConfig(), EventFactory("bench", "bench-node"), fetch=lambda p=page: p
        )
        started = time.process_time()
        events = 0
        for i in range(args.polls):
            events += len(collector.poll(i))
        per_poll = (time.process_time() - started) / args.polls
        print(
            f"{path.name}: {len(page)} bytes, {events // args.polls} events/poll, "
            f"{per_poll * 1e3:.2f} ms CPU per poll"
        )


if __name__ == "__main__":
    main()
