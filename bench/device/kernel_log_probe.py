"""Probe the kernel-log collector on a real node (run as root on a machine with an NVIDIA driver).

    python bench/device/kernel_log_probe.py [--seconds 4] [--interval 0.25] [--json out.json]
        [--inject-marker] [--steady-seconds 5]

Tries each source in turn (``/dev/kmsg``, ``journalctl -k -o json``, ``/var/log/kern.log`` and
friends), runs ``rankscope.collectors.kernel_log`` on each that opens for ``--seconds`` (from the
start of what it holds, so the node's history is parsed), and prints one JSON document: per
source whether it worked (or its error), records read/lost/bounded, matches per pattern, the
events (brief), the NVRM lines seen even if unmatched (first 50), the CPU time of each poll
(``time.process_time`` delta) and of idle polls; the PCI -> GPU mapping NVML gives; the
collector as the agent runs it (``source: auto``, NVML on, one poll per second for
``--steady-seconds``: CPU per poll, share of one core); and a self test that feeds the
repository's recorded sample lines through the ``file`` reader.
``--inject-marker`` writes one harmless line (not an Xid look-alike) to /dev/kmsg to check that
a new record is seen live (it must come back as a non-kernel record: userspace writes are not
trusted as kernel lines). Exits 0 with an explanation when nothing is available. Needs only
pydantic, nvidia-ml-py and confluent-kafka (imported by the package) besides the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rankscope.collectors.base import EventFactory  # noqa: E402
from rankscope.collectors.kernel_log import (  # noqa: E402
    FileReader,
    JournalReader,
    KernelLogCollector,
    KernelLogCollectorConfig,
    KernelRecord,
    KmsgReader,
    nvml_pci_map,
)
from rankscope.collectors.kernel_log.readers import KernelLogReader, ReaderStats  # noqa: E402

_FILES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog", "/var/log/dmesg")


class _Spy:
    """Wraps a reader: keeps NVRM/nvswitch lines (first 50) and counts records."""

    def __init__(self, reader: KernelLogReader, keep: list[str]) -> None:
        self.inner = reader
        self.name = reader.name
        self.stats: ReaderStats = reader.stats
        self.keep = keep
        self.samples: list[str] = []

    def open(self) -> None:
        self.inner.open()

    def read(self, now_ns: int) -> list[KernelRecord]:
        recs = self.inner.read(now_ns)
        for r in recs:
            if len(self.samples) < 5:
                self.samples.append(r.text[:200])
            if len(self.keep) < 50 and ("NVRM" in r.text or "nvswitch" in r.text):
                self.keep.append(r.text[:500])
        return recs

    def state(self) -> dict[str, Any]:
        return self.inner.state()

    def close(self) -> None:
        self.inner.close()


def _brief(e: Any) -> dict[str, Any]:
    p = e.payload.model_dump(exclude_defaults=True)
    if "message" in p:
        p["message"] = p["message"][:200]
    return {"gpu": e.gpu, "ts": e.ts, **p}


def _run(
    name: str, config: KernelLogCollectorConfig, seconds: float, interval: float, marker: str
) -> dict[str, Any]:
    reader: KernelLogReader
    if name == "kmsg":
        reader = KmsgReader(config, None)
    elif name == "journal":
        reader = JournalReader(config, None)
    else:
        reader = FileReader(config)
    out: dict[str, Any] = {"source": name}
    t0 = time.process_time()
    try:
        reader.open()
    except OSError as e:
        out["ok"] = False
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    nvrm: list[str] = []
    spy = _Spy(reader, nvrm)
    collector = KernelLogCollector(config, EventFactory("probe", "probe-node"), reader=spy)
    events: list[Any] = []
    cpu: list[float] = []
    wall: list[float] = []
    records: list[int] = []
    injected = False
    end = time.monotonic() + seconds
    try:
        while True:
            before = collector.stats.records
            c0, w0 = time.process_time(), time.perf_counter()
            events.extend(collector.poll(time.time_ns()))
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            records.append(collector.stats.records - before)
            if marker and name == "kmsg" and not injected and len(cpu) >= 2:
                injected = True
                try:
                    with open(config.kmsg_path, "w") as f:
                        f.write(f"<6>rankscope kernel_log_probe marker {marker}\n")
                    out["marker_written"] = True
                except OSError as e:
                    out["marker_written"] = f"{type(e).__name__}: {e}"
            if time.monotonic() >= end:
                break
            time.sleep(interval)
    finally:
        if isinstance(reader, JournalReader):
            proc = reader._proc
            out["journalctl_running_at_end"] = proc is not None and proc.poll() is None
        collector.stop()
    idle = [c for c, n in zip(cpu[1:], records[1:], strict=False) if n == 0]
    st = collector.stats
    out.update(
        ok=True,
        polls=st.polls,
        reader=vars(st.reader),
        records=st.records,
        records_per_poll=records,
        lines_matched=st.lines_matched,
        by_pattern=st.by_pattern,
        events=len(events),
        unmapped=st.unmapped,
        events_brief=[_brief(e) for e in events[:40]],
        nvrm_lines_first_50=nvrm,
        first_records=spy.samples,
        poll_cpu_ms=[round(x * 1e3, 3) for x in cpu],
        poll_wall_ms=[round(x * 1e3, 3) for x in wall],
        idle_poll_cpu_ms_mean=round(sum(idle) / len(idle) * 1e3, 4) if idle else None,
        cpu_s_total=round(time.process_time() - t0, 4),
        resume_state=reader.state(),
    )
    if name == "journal":
        out["journalctl_argv"] = reader.argv() if isinstance(reader, JournalReader) else []
    if marker and name == "kmsg":
        out["marker_seen_as_non_kernel_record"] = reader.stats.records_not_kernel > 0
    return out


def _selftest(interval: float) -> dict[str, Any]:
    """The recorded public sample lines through the ``file`` reader (pipeline check)."""
    data = ROOT / "tests" / "data" / "kernel_log"
    files = sorted(data.glob("*.log"))
    if not files:
        return {"ok": False, "error": "no sample files"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kern.log"
        path.write_bytes(b"".join(f.read_bytes() for f in files))
        config = KernelLogCollectorConfig(source="file", paths=[str(path)], from_start=True)
        collector = KernelLogCollector(config, EventFactory("probe", "probe-node"), nvml=False)
        c0 = time.process_time()
        events = collector.poll(time.time_ns())
        cpu = time.process_time() - c0
        collector.stop()
    st = collector.stats
    return {
        "ok": True,
        "files": [f.name for f in files],
        "records": st.records,
        "events": len(events),
        "by_pattern": st.by_pattern,
        "cpu_ms": round(cpu * 1e3, 3),
        "us_per_line": round(cpu / max(st.records, 1) * 1e6, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="per source")
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    ap.add_argument("--inject-marker", action="store_true")
    ap.add_argument(
        "--steady-seconds", type=float, default=5.0, help="the agent-like run (1 poll/s)"
    )
    args = ap.parse_args()

    out: dict[str, Any] = {
        "uid": os.getuid(),
        "kernel": Path("/proc/sys/kernel/osrelease").read_text().strip()
        if Path("/proc/sys/kernel/osrelease").exists()
        else "",
        "boot_id_readable": bool(Path("/proc/sys/kernel/random/boot_id").exists()),
        "kmsg_exists": os.path.exists("/dev/kmsg"),
        "journalctl": shutil.which("journalctl"),
        "files_present": [f for f in _FILES if os.path.exists(f)],
    }
    try:
        import pynvml

        try:
            pynvml.nvmlInit()
            out["driver_version"] = str(pynvml.nvmlSystemGetDriverVersion())
            pynvml.nvmlShutdown()
        except Exception as e:
            out["driver_version"] = f"error: {type(e).__name__}: {e}"
        mapping = nvml_pci_map(pynvml)
        out["pci_map"] = {k: {"index": v.index, "uuid": v.uuid} for k, v in mapping.items()}
    except Exception as e:
        out["pci_map"] = {}
        out["nvml_error"] = f"{type(e).__name__}: {e}"

    marker = uuid.uuid4().hex[:12] if args.inject_marker else ""
    sources: list[dict[str, Any]] = []
    base = {"from_start": True, "max_records_per_poll": 2000, "use_nvml": False}
    sources.append(
        _run("kmsg", KernelLogCollectorConfig(**base), args.seconds, args.interval, marker)
    )
    if out["journalctl"]:
        sources.append(
            _run("journal", KernelLogCollectorConfig(**base), args.seconds, args.interval, "")
        )
    else:
        sources.append({"source": "journal", "ok": False, "error": "journalctl not found"})
    files = out["files_present"] or ["/var/log/kern.log"]
    sources.append(
        _run(
            "file",
            KernelLogCollectorConfig(**base, paths=files),
            min(args.seconds, 2.0),
            args.interval,
            "",
        )
    )
    # the collector's own PCI mapping is NVML's: put it on the events of the sources
    if out.get("pci_map"):
        for s in sources:
            for e in s.get("events_brief", []):
                ref = out["pci_map"].get(e.get("pci_bus_id", ""))
                if ref is not None:
                    e["gpu"], e["gpu_uuid"] = ref["index"], ref["uuid"]
    out["sources"] = sources
    out["working_sources"] = [s["source"] for s in sources if s.get("ok")]
    # the collector as the agent runs it: ``source: auto``, NVML mapping on, from the end, one
    # poll per second; CPU per poll and as a share of one core
    auto = KernelLogCollector(
        KernelLogCollectorConfig(source="auto", paths=files), EventFactory("probe", "probe-node")
    )
    steady_cpu: list[float] = []
    live: list[dict[str, Any]] = []  # what the agent would have shipped (an XID during the run)
    t_end = time.monotonic() + args.steady_seconds
    w0, c0 = time.monotonic(), time.process_time()
    while True:
        c = time.process_time()
        polled = auto.poll(time.time_ns())
        steady_cpu.append(time.process_time() - c)
        live.extend({"seen_ns": time.time_ns(), **_brief(e)} for e in polled[:40])
        if time.monotonic() >= t_end:
            break
        time.sleep(1.0)
    wall, cpu_total = time.monotonic() - w0, time.process_time() - c0
    out["auto_source"] = auto.stats.source
    out["auto_source_errors"] = auto.stats.source_errors
    out["auto_nvml_error"] = auto.nvml_error
    out["auto_pci_map_size"] = len(auto.pci_map)
    out["steady"] = {
        "polls": len(steady_cpu),
        "first_poll_cpu_ms (NVML mapping + open)": round(steady_cpu[0] * 1e3, 3),
        "poll_cpu_ms_after_first": [round(x * 1e3, 4) for x in steady_cpu[1:]],
        "pct_of_one_core_at_1s (after first)": round(
            sum(steady_cpu[1:]) / max(len(steady_cpu) - 1, 1) * 100, 5
        ),
        "pct_of_one_core_whole_run (sleep included)": round(cpu_total / wall * 100, 4),
        "records": auto.stats.records,
        "events": auto.stats.events,
        "events_brief": live[:40],
    }
    auto.stop()
    try:
        out["selftest_recorded_lines"] = _selftest(args.interval)
    except Exception as e:  # never let the self test hide the probe's result
        out["selftest_recorded_lines"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    if not out["working_sources"]:
        out["explanation"] = (
            "no kernel-log source could be read here (see each source's error); the collector "
            "would emit nothing on this node"
        )
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
