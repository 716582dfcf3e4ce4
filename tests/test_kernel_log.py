"""Kernel-log collector (issue 17): the parser on real line shapes (``tests/data/kernel_log``,
sources in its README), the kmsg, journal and file readers, the PCI -> GPU mapping and the
events."""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rankscope.collectors.agent.registry import load_collector
from rankscope.collectors.base import EventFactory
from rankscope.collectors.kernel_log import (
    FallenOffBusJoiner,
    JournalReader,
    KernelLogCollector,
    KernelLogCollectorConfig,
    KernelLogGpu,
    KmsgReader,
    create_kernel_log_collector,
    normalize_pci,
    parse_message,
)
from rankscope.schemas.events import EVENT_LIST_ADAPTER, GpuEventEvent, dump_events

DATA = Path(__file__).parent / "data" / "kernel_log"

Expect = tuple[str, int | None, str] | None  # (pattern, xid or sxid, pci) or no event

# one entry per line of the file, in order (joined as the file reader joins them)
TUNE: list[Expect] = [
    ("xid", 48, "0000:17:00.0"),
    ("xid", 64, "0000:17:00.0"),
    None,  # RmInitAdapter failed
    ("gpu_uuid", None, "0000:02:00.0"),
    None,  # board serial
    ("xid", 79, "0000:02:00.0"),
    ("aer", None, "0000:00:02.0"),  # corrected, id=0010 is a requester id: the port
    None,  # PCIe Bus Error detail line
    ("aer", None, "0000:00:02.0"),
    None,
    None,  # [ 5] Surprise Down Error
    None,  # "The NVIDIA GPU 0000:b3:00.0" (head of the 570+ form)
    None,  # "(PCI ID: 10de:26b5) installed in this system has"
    ("fallen_off_bus", None, "0000:b3:00.0"),  # the tail, joined with the head's PCI id
    None,  # probe routine failed
    ("xid", 45, "0000:dc:00.0"),
    ("xid", 144, "0000:01:00.0"),
    ("xid", 149, "0000:00:00.0"),
    ("xid", 145, "0018:01:00.0"),
    ("xid", 94, "0000:9b:00.0"),
    ("sxid", 22013, "0000:04:00.0"),
    ("sxid", 22013, "0000:04:00.0"),
    ("sxid", 22013, "0000:04:00.0"),
    None,  # RPC event history header
    None,  # RPC history row
    ("aer", None, "0000:03:00.0"),  # nvidia ...: AER: can't recover
    ("aer", None, "0000:00:03.0"),
]
HELDOUT: list[Expect] = [
    ("xid", 63, "0000:10:1c.0"),
    ("xid", 63, "0000:10:1c.0"),
    ("xid", 63, "0000:55:00.0"),
    ("xid", 154, "0000:55:00.0"),
    ("xid", 48, "0000:55:00.0"),
    ("xid", 63, "0000:3b:00.0"),  # MIG: (PCI:... GPU-I:00 GPU-CI:00)
    ("xid", 119, "0000:61:00.0"),
    ("xid", 119, "0002:00:00.0"),
    ("xid", 119, "0004:01:00.0"),
    ("xid", 95, "0000:01:00.0"),
    ("xid", 94, "0000:1b:00.0"),
    ("xid", 79, "0000:3b:00.0"),
    ("xid", 79, "0000:01:00.0"),
    ("gpu_uuid", None, "0000:01:00.0"),
    ("xid", 32, "0000:01:00.0"),
    ("xid", 13, "0000:cb:00.0"),
    ("xid", 109, "0000:cb:00.0"),
    ("xid", 149, "0019:01:00.0"),
    ("xid", 31, "0000:63:00.0"),
    ("sxid", 12028, "0000:84:00.0"),
    ("sxid", 11001, "0000:00:00.0"),
    ("gsp_timeout", None, ""),  # heartbeat timed out
    None,  # kbusSendSysmembarSingle timeout: not a GSP line
    ("gsp_timeout", None, ""),  # GSP Timeout banner
    None,  # banner's "Note:" line
    ("aer", None, "0000:00:00.0"),  # 6.x "Correctable error message received from"
    None,
    None,
    ("aer", None, "0000:63:00.0"),
    ("aer", None, "0000:80:1b.4"),
    ("aer", None, "0000:00:1d.0"),
    None,
    None,
    None,
]

# gathered after commit 145e3d5, parsed as they are without a pattern change: 12 of 12
HELDOUT2: list[Expect] = [
    ("xid", 74, "0003:00:00.0"),
    ("xid", 74, "0000:65:00.0"),  # pid=<n/a>
    None,  # NVLink link 2 disabled due to error
    ("xid", 74, "0000:b9:00.0"),
    ("xid", 74, "0000:04:00.0"),
    ("xid", 119, "000f:01:00.0"),  # name with a space
    ("xid", 120, "000f:01:00.0"),
    ("xid", 119, "000f:01:00.0"),  # no pid, no name
    ("xid", 120, "0001:00:00.0"),
    ("sxid", 20009, "0000:06:00.0"),
    ("sxid", 24007, "0000:c3:00.0"),
    ("sxid", 20034, "0000:00:00.0"),
    ("sxid", 12020, "0000:c1:00.0"),
]


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def _got(text: str, joiner: FallenOffBusJoiner) -> Expect:
    p = joiner.feed(text)
    if p is None:
        return None
    return (p.pattern, p.xid if p.xid is not None else p.sxid, p.pci_bus_id)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("tune.log", TUNE), ("heldout.log", HELDOUT), ("heldout2.log", HELDOUT2)],
)
def test_every_recorded_line_parses_as_expected(name: str, expected: list[Expect]) -> None:
    lines = _lines(name)
    assert len(lines) == len(expected)
    joiner = FallenOffBusJoiner()
    got = [_got(t, joiner) for t in lines]
    for line, want, have in zip(lines, expected, got, strict=True):
        assert have == want, line


def _line_with(name: str, needle: str) -> str:
    return next(t for t in _lines(name) if needle in t)


@pytest.mark.parametrize(
    ("name", "needle", "xid", "pci", "pid", "process"),
    [
        ("tune.log", "): 79, GPU has fallen", 79, "0000:02:00.0", None, ""),
        ("heldout.log", "pid=1, name=python3, GPU has fallen", 79, "0000:3b:00.0", 1, "python3"),
        ("tune.log", "): 48, pid='<unknown>'", 48, "0000:17:00.0", None, ""),
        ("heldout.log", "name=python, Row Remapper", 63, "0000:55:00.0", 2187734, "python"),
        ("tune.log", "): 94, pid=1234", 94, "0000:9b:00.0", 1234, "python3"),
        ("heldout.log", "name=nvc:[driver]", 119, "0002:00:00.0", 1582259, "nvc:[driver]"),
        ("tune.log", "): 149, NETIR_LINK_EVT", 149, "0000:00:00.0", None, ""),
    ],
)
def test_xid_fields(
    name: str, needle: str, xid: int, pci: str, pid: int | None, process: str
) -> None:
    p = parse_message(_line_with(name, needle))
    assert p is not None
    assert (p.pattern, p.event_type, p.xid, p.pci_bus_id, p.pid, p.process) == (
        "xid",
        "xid",
        xid,
        pci,
        pid,
        process,
    )


def test_sxid_fallen_gsp_and_aer_shapes() -> None:
    sxid = parse_message(_line_with("heldout.log", "11001, Fatal"))
    assert sxid is not None and (sxid.pattern, sxid.sxid, sxid.xid) == ("sxid", 11001, None)
    one_record = (
        "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system "
        "has\nNVRM: fallen off the bus and is not responding to commands."
    )
    fallen = parse_message(one_record)  # kmsg keeps the 570+ form in one record
    assert fallen is not None
    assert (fallen.pattern, fallen.event_type, fallen.pci_bus_id) == (
        "fallen_off_bus",
        "gpu_unresponsive",
        "0000:b3:00.0",
    )
    old = parse_message("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    assert old is not None and (old.pattern, old.pci_bus_id) == ("fallen_off_bus", "0000:3b:00.0")
    gsp = parse_message(_line_with("heldout.log", "GSP Timeout"))
    assert gsp is not None and gsp.pattern == "gsp_timeout"
    fatal = parse_message(_line_with("tune.log", "Uncorrected (Fatal) error received: id"))
    assert fatal is not None and fatal.severity == "uncorrected_fatal"
    nonfatal = parse_message(_line_with("heldout.log", "(Non-Fatal) error received from"))
    assert nonfatal is not None and nonfatal.severity == "uncorrected_nonfatal"
    assert nonfatal.pci_bus_id == "0000:63:00.0"  # the reporting device, not the port


def test_normalize_pci() -> None:
    assert normalize_pci("00000000:3B:00.0") == "0000:3b:00.0"  # NVML's busId
    assert normalize_pci("0000:3b:00") == "0000:3b:00.0"  # Xid lines omit the function
    assert normalize_pci("3b:00.0") == "0000:3b:00.0"
    assert normalize_pci("0018:01:00") == "0018:01:00.0"
    assert normalize_pci("garbage") == ""


def test_uninteresting_lines_cost_no_regex() -> None:
    assert parse_message("EXT4-fs (md127p3): re-mounted. Quota mode: none.") is None
    assert parse_message("") is None


# -- the collector: events, mapping ---------------------------------------------------------


class FakeNvml:
    """The four NVML calls the PCI mapping makes (``busId`` comes back as bytes, as in
    older pynvml)."""

    class _Pci:
        def __init__(self, bus: str) -> None:
            self.busId = bus.encode()

    def __init__(self, gpus: dict[str, str]) -> None:
        self.gpus = list(gpus.items())  # NVML busId -> uuid, by index
        self.shutdown = 0

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return self._Pci(self.gpus[h][0])

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h][1]


def _factory() -> EventFactory:
    return EventFactory("c1", "n1", clock_ns=lambda: 1_700_000_000_000_000_000)


def _file_collector(
    tmp_path: Path, lines: list[str], nvml: Any = False, **kw: Any
) -> tuple[KernelLogCollector, Path]:
    log = tmp_path / "kern.log"
    log.write_text("".join(t + "\n" for t in lines))
    config = KernelLogCollectorConfig(source="file", paths=[str(log)], from_start=True, **kw)
    return KernelLogCollector(config, _factory(), nvml=nvml), log


def test_acceptance_codes_become_one_event_each_with_pci_and_gpu(tmp_path: Path) -> None:
    """XID 79, 48, 63, 94, 119 and 149 lines -> one event each: code, PCI id, GPU index and the
    XID catalogue's resolution bucket."""
    needles = {
        79: ("heldout.log", "pid=1, name=python3, GPU has fallen"),
        48: ("tune.log", "): 48, pid='<unknown>'"),
        63: ("heldout.log", "name=python, Row Remapper"),
        94: ("tune.log", "): 94, pid=1234"),
        119: ("heldout.log", "name=nv-hostengine"),
        149: ("heldout.log", "NETIR Fatal XC0"),
    }
    lines = [_line_with(*v) for v in needles.values()]
    busids = {
        "0000:3b:00.0": "00000000:3B:00.0",
        "0000:17:00.0": "00000000:17:00.0",
        "0000:55:00.0": "00000000:55:00.0",
        "0000:9b:00.0": "00000000:9B:00.0",
        "0000:61:00.0": "00000000:61:00.0",
        "0019:01:00.0": "00000019:01:00.0",
    }
    nvml = FakeNvml(
        {bus: f"GPU-{i:08d}-0000-0000-0000-000000000000" for i, bus in enumerate(busids.values())}
    )
    collector, _ = _file_collector(tmp_path, lines, nvml=nvml)
    events = collector.poll(1_700_000_000_000_000_000)
    assert [type(e) for e in events] == [GpuEventEvent] * 6
    by_xid = {e.payload.xid: e for e in events if isinstance(e, GpuEventEvent)}
    assert sorted(by_xid) == sorted(needles)
    index = {pci: i for i, pci in enumerate(busids)}
    for xid, e in by_xid.items():
        assert e.payload.event_type == "xid" and e.payload.count == 1
        assert e.payload.source == "file" and e.payload.pattern == "xid"
        assert e.gpu == index[e.payload.pci_bus_id]
        assert e.payload.gpu_uuid == f"GPU-{e.gpu:08d}-0000-0000-0000-000000000000"
        assert f"): {xid}," in e.payload.message
    assert {x: e.payload.xid_bucket for x, e in by_xid.items()} == {
        79: "RESTART_BM",
        48: "WORKFLOW_XID_48",
        63: "IGNORE",
        94: "RESTART_APP",
        119: "RESET_GPU",
        149: "WORKFLOW_NVLINK5_ERR",
    }
    assert collector.stats.unmapped == 0 and nvml.shutdown == 1
    # and they survive the wire format
    assert EVENT_LIST_ADAPTER.validate_json(dump_events(events)) == events


def test_inventory_and_uuid_lines_map_without_nvml(tmp_path: Path) -> None:
    lines = [
        "NVRM: GPU at PCI:0000:02:00: GPU-660d987e-5b28-3bf6-2a2d-1d5ecae7f6d0",
        "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=x, Graphics Exception",
        "NVRM: Xid (PCI:0000:99:00): 13, pid=7, name=x, Graphics Exception",
    ]
    collector, _ = _file_collector(
        tmp_path,
        lines,
        inventory=[
            KernelLogGpu(pci_bus_id="0000:3B:00.0", index=5, uuid="GPU-x"),
            KernelLogGpu(pci_bus_id="0000:02:00.0", index=1),
        ],
    )
    events = collector.poll(1)
    assert [(e.gpu, e.payload.gpu_uuid) for e in events if isinstance(e, GpuEventEvent)] == [
        (1, "GPU-660d987e-5b28-3bf6-2a2d-1d5ecae7f6d0"),  # index from inventory, UUID from log
        (5, "GPU-x"),
        (None, ""),
    ]
    assert collector.stats.unmapped == 1
    assert collector.stats.by_pattern == {"gpu_uuid": 1, "xid": 3}


def test_corrected_aer_is_dropped_unless_asked(tmp_path: Path) -> None:
    lines = [_line_with("tune.log", "Corrected error received: id=0010")]
    quiet, _ = _file_collector(tmp_path, lines)
    assert quiet.poll(1) == [] and quiet.stats.aer_corrected_dropped == 1
    loud, _ = _file_collector(tmp_path, lines, aer_corrected=True)
    (event,) = loud.poll(1)
    assert isinstance(event, GpuEventEvent) and event.payload.pattern == "aer"


def test_message_is_bounded(tmp_path: Path) -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=x, " + "é" * 3000
    collector, _ = _file_collector(tmp_path, [line], max_message_bytes=256)
    (event,) = collector.poll(1)
    assert isinstance(event, GpuEventEvent)
    assert len(event.payload.message.encode()) <= 256 and event.payload.xid == 13
    assert collector.stats.messages_truncated == 1


# -- /dev/kmsg ------------------------------------------------------------------------------


def _kmsg(seq: int, text: str, prio: int = 4, usec: int = 1_000_000) -> str:
    return f"{prio},{seq},{usec},-;{text}\n"


def _kmsg_config(tmp_path: Path, **kw: Any) -> KernelLogCollectorConfig:
    boot = tmp_path / "boot_id"
    if not boot.exists():
        boot.write_text("b00t\n")
    return KernelLogCollectorConfig(
        source="kmsg",
        kmsg_path=tmp_path / "kmsg",
        boot_id_path=boot,
        use_nvml=False,
        **kw,
    )


XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def test_kmsg_records_gaps_escapes_and_userspace_lines(tmp_path: Path) -> None:
    (tmp_path / "kmsg").write_text(
        _kmsg(0, "Linux version 6.8.0")
        + " SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"  # continuation lines
        + _kmsg(1, XID79)
        # seq 2..4 overwritten before we read them
        + _kmsg(
            5,
            "NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed "
            "in this system has\\x0aNVRM: fallen off the bus and is not responding to "
            "commands.",
        )
        + _kmsg(6, XID79.replace("3b", "4c"), prio=14)  # facility 1: written by userspace
    )
    collector = KernelLogCollector(_kmsg_config(tmp_path, from_start=True), _factory())
    events = collector.poll(1_700_000_000_000_000_000)
    got = [
        (e.payload.pattern, e.payload.pci_bus_id) for e in events if isinstance(e, GpuEventEvent)
    ]
    assert got == [("xid", "0000:3b:00.0"), ("fallen_off_bus", "0000:b3:00.0")]
    st = collector.stats.reader
    assert (st.records, st.records_lost, st.records_not_kernel) == (4, 3, 1)
    assert events[0].payload.source == "kmsg"


def test_kmsg_starts_at_end_and_resumes_after_restart(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("".join(_kmsg(i, XID79) for i in range(3)))
    state = tmp_path / "state" / "kernel_log.json"
    first = KernelLogCollector(_kmsg_config(tmp_path, state_path=state), _factory())
    assert first.poll(1) == []  # what the buffer held before the start is history
    with kmsg.open("a") as f:
        f.write(_kmsg(3, XID79) + _kmsg(4, XID79))
    assert len(first.poll(2)) == 2
    first.stop()
    assert json.loads(state.read_text())["kmsg"] == {"boot_id": "b00t", "seq": 4}
    with kmsg.open("a") as f:  # written while the agent was down
        f.write(_kmsg(5, XID79) + _kmsg(6, XID79))
    second = KernelLogCollector(_kmsg_config(tmp_path, state_path=state), _factory())
    assert len(second.poll(3)) == 2  # 5 and 6, nothing re-emitted
    assert second.stats.reader.records_skipped == 5
    second.stop()
    # another boot: the saved position means nothing, start at the end again
    (tmp_path / "boot_id").write_text("other\n")
    third = KernelLogCollector(_kmsg_config(tmp_path, state_path=state), _factory())
    assert third.poll(4) == []


def test_kmsg_epipe_is_counted_through_the_sequence_gap(tmp_path: Path) -> None:
    class Overrun(KmsgReader):
        calls = 0

        def _read(self, fd: int, size: int) -> bytes:
            self.calls += 1
            if self.calls == 2:
                raise OSError(errno.EPIPE, "Broken pipe")
            return os.read(fd, 64)  # one record per read, as the device gives

    (tmp_path / "kmsg").write_text(_kmsg(0, "a") + _kmsg(9, XID79))
    config = _kmsg_config(tmp_path, from_start=True)
    reader = Overrun(config, None)
    reader.open()
    collector = KernelLogCollector(config, _factory(), reader=reader)
    assert len(collector.poll(1)) == 1
    assert reader.stats.records_lost == 8 and reader.stats.read_errors == 0


def test_kmsg_poll_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "kmsg").write_text("".join(_kmsg(i, XID79) for i in range(2500)))
    collector = KernelLogCollector(
        _kmsg_config(tmp_path, from_start=True, max_records_per_poll=1000), _factory()
    )
    sizes = [len(collector.poll(i)) for i in range(4)]
    assert sizes == [1000, 1000, 500, 0]
    assert collector.stats.reader.bounded == 2


def test_kmsg_unreadable_is_reported_not_raised(tmp_path: Path) -> None:
    config = _kmsg_config(tmp_path)  # no kmsg file at all
    collector = KernelLogCollector(config, _factory())
    assert collector.poll(1) == []
    assert collector.stats.source == ""
    assert "FileNotFoundError" in collector.stats.source_errors["kmsg"]


# -- journalctl -k -o json ------------------------------------------------------------------


def _entry(
    cursor: str, message: Any, usec: int = 1_700_000_000_000_000, facility: str = "0"
) -> str:
    return json.dumps(
        {
            "__CURSOR": cursor,
            "__REALTIME_TIMESTAMP": str(usec),
            "__MONOTONIC_TIMESTAMP": "1843308145",
            "_BOOT_ID": "6c82c7e222d34eb9873e7bb24b2832b8",
            "_TRANSPORT": "kernel",
            "PRIORITY": "3",
            "SYSLOG_FACILITY": facility,
            "SYSLOG_IDENTIFIER": "kernel",
            "MESSAGE": message,
        }
    )


FALLEN_3 = (
    "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "NVRM: fallen off the bus and is not responding to commands."
)


def _journal(
    tmp_path: Path, lines: list[str], **kw: Any
) -> tuple[KernelLogCollector, JournalReader]:
    recorded = tmp_path / "journal.json"
    recorded.write_text("".join(t + "\n" for t in lines))
    config = KernelLogCollectorConfig(
        source="journal", use_nvml=False, restart_backoff_s=3600, **kw
    )
    reader = JournalReader(config, None, argv=["cat", str(recorded)])
    reader.open()
    return KernelLogCollector(config, _factory(), reader=reader), reader


def _drain(collector: KernelLogCollector, polls: int = 200) -> list[Any]:
    out: list[Any] = []
    for i in range(polls):  # until the child has ended and been reaped (about 2 s at most)
        out.extend(collector.poll(1_700_000_000_000_000_000 + i))
        if collector._reader is not None and getattr(collector._reader, "_proc", 1) is None:
            break
        time.sleep(0.01)
    return out


def test_journal_message_as_string_and_as_byte_array(tmp_path: Path) -> None:
    collector, reader = _journal(
        tmp_path,
        [
            _entry("s=1;i=1", "NVRM: Xid (PCI:0000:3b:00): 94, pid=12, name=py, Contained"),
            _entry("s=1;i=2", list(FALLEN_3.encode())),  # control characters: a byte array
            _entry("s=1;i=3", "usb 1-1: new high-speed USB device"),
            _entry("s=1;i=4", "NVRM: Xid (PCI:0000:3b:00): 79, fake", facility="1"),
            "not json",
        ],
    )
    events = _drain(collector)
    got = [(e.payload.pattern, e.payload.pci_bus_id, e.ts) for e in events]
    assert got == [
        ("xid", "0000:3b:00.0", 1_700_000_000_000_000_000),
        ("fallen_off_bus", "0000:b3:00.0", 1_700_000_000_000_000_000),
    ]
    assert events[0].payload.source == "journal"
    assert reader.state() == {"cursor": "s=1;i=4", "boot_id": "6c82c7e222d34eb9873e7bb24b2832b8"}
    assert reader.stats.records == 4 and reader.stats.records_malformed == 1
    assert reader.stats.records_not_kernel == 1
    assert reader.stats.read_errors == 0  # cat ended with 0: no error, restarted later


def test_journal_poll_is_bounded(tmp_path: Path) -> None:
    lines = [_entry(f"s=1;i={i}", "NVRM: Xid (PCI:0000:3b:00): 13, x") for i in range(300)]
    collector, _ = _journal(tmp_path, lines, max_records_per_poll=100)
    sizes = []
    for i in range(200):
        sizes.append(len(collector.poll(1_700_000_000_000_000_000 + i)))
        if sum(sizes) == 300:
            break
        time.sleep(0.01)
    assert sum(sizes) == 300 and max(sizes) <= 100


def test_journal_argv_and_failure(tmp_path: Path) -> None:
    base = {"use_nvml": False, "restart_backoff_s": 3600}
    config = KernelLogCollectorConfig(**base)
    assert JournalReader(config, None).argv()[-1] == "--lines=0"
    assert JournalReader(KernelLogCollectorConfig(**base, from_start=True), None).argv()[-1] == (
        "--no-tail"
    )
    resumed = JournalReader(config, {"cursor": "s=abc;i=9"})
    assert resumed.argv()[:6] == ["journalctl", "-k", "-o", "json", "--follow", "--no-pager"]
    assert resumed.argv()[-1] == "--after-cursor=s=abc;i=9"
    failing = JournalReader(
        config, None, argv=[sys.executable, "-c", "import sys; sys.stderr.write('no'); sys.exit(1)"]
    )
    failing.open()
    collector = KernelLogCollector(config, _factory(), reader=failing)
    _drain(collector)
    assert failing.stats.read_errors == 1 and "exited 1" in failing.stats.last_error


# -- source choice, agent wiring ------------------------------------------------------------


def test_auto_falls_back_to_file_and_reports_why(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    config = KernelLogCollectorConfig(
        source="auto",
        kmsg_path=tmp_path / "absent",
        journalctl=[str(tmp_path / "no-journalctl")],
        paths=[str(log)],
        use_nvml=False,
    )
    collector = create_kernel_log_collector(config, _factory())
    assert collector.poll(1) == []
    with log.open("a") as f:
        f.write(f"Dec  2 11:38:47 node kernel: [  219.47] {XID79}\n")
    (event,) = collector.poll(2)
    assert collector.stats.source == "file"
    assert set(collector.stats.source_errors) == {"kmsg", "journal"}
    assert isinstance(event, GpuEventEvent) and event.payload.xid == 79


def test_agent_registry_builds_the_section() -> None:
    config_cls, factory = load_collector("kernel_log")
    config = config_cls.model_validate({"source": "file", "paths": [], "use_nvml": False})
    collector = factory(config, _factory())
    assert collector.name == "kernel_log" and collector.interval_s == 1.0


def test_agent_config_section_and_the_documented_example() -> None:
    import yaml

    from rankscope.collectors.agent.config import AgentConfig

    agent = AgentConfig.model_validate(
        {"cluster": "c", "kafka": {"bootstrap": "k:9092"}, "kernel_log": {"source": "kmsg"}}
    )
    (config,) = agent.collector_configs().values()
    assert isinstance(config, KernelLogCollectorConfig) and config.source == "kmsg"
    # the commented example in the shipped agent.yaml is a valid section with every option
    example = (Path(__file__).parents[1] / "rankscope" / "examples" / "agent.yaml").read_text()
    block = example.split("# kernel_log:", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    section = yaml.safe_load("\n".join(line.removeprefix("#") for line in block))
    documented = KernelLogCollectorConfig.model_validate(section)
    assert set(section) == set(KernelLogCollectorConfig.model_fields) - {"enabled"}
    assert documented.inventory == []


def test_sink_rows_carry_the_new_fields_and_old_documents_still_map(tmp_path: Path) -> None:
    from rankscope.schemas.events import dump_event
    from rankscope.sinks.event_tables import event_spec, fast_row

    collector, _ = _file_collector(tmp_path, [_line_with("tune.log", "22013, Non-fatal")])
    (ev,) = collector.poll(1)
    spec = event_spec(ev)
    doc = json.loads(dump_event(ev))
    row = dict(zip(spec.columns, spec.to_row(ev), strict=True))
    assert (row["pci_bus_id"], row["source"], row["pattern"], row["sxid"]) == (
        "0000:04:00.0",
        "file",
        "sxid",
        22013,
    )
    assert fast_row(doc) == (spec, spec.to_row(ev))
    for key in ("pci_bus_id", "source", "pattern", "sxid"):  # written before migration 0010
        del doc["payload"][key]
    old = dict(zip(spec.columns, fast_row(doc)[1], strict=True))
    assert (old["pci_bus_id"], old["source"], old["pattern"], old["sxid"]) == ("", "", "", None)
    # migration 0011: the XID catalogue bucket; a document written before it maps to ''
    (xid_ev,) = collector_xid(tmp_path)
    xid_doc = json.loads(dump_event(xid_ev))
    xid_row = dict(zip(spec.columns, fast_row(xid_doc)[1], strict=True))
    assert xid_row["xid_bucket"] == "RESTART_BM"
    del xid_doc["payload"]["xid_bucket"]
    assert dict(zip(spec.columns, fast_row(xid_doc)[1], strict=True))["xid_bucket"] == ""


def collector_xid(tmp_path: Path) -> list[Any]:
    sub = tmp_path / "xid"
    sub.mkdir()
    collector, _ = _file_collector(
        sub, ["NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."]
    )
    return collector.poll(1)


def test_the_agent_runs_the_section_and_ships_gpu_events(tmp_path: Path) -> None:
    """An agent configured with ``kernel_log:`` (file source) ships a new Xid line as a
    ``gpu_event`` stamped with the GPU from the inventory and the job bound to that GPU."""
    from rankscope.collectors.agent import Agent
    from rankscope.collectors.base import JobBinding, JobRegistry
    from tests.test_agent import MemoryTransport, StaticInventory, Tap, agent_config, wait_for

    log = tmp_path / "kern.log"
    log.write_text(f"{XID79}\n")  # history: not shipped
    jobs = JobRegistry()
    jobs.bind_gpu(3, JobBinding(job_id="job-7", rank=11))
    cfg = agent_config(
        tmp_path,
        kernel_log={
            "source": "file",
            "paths": [str(log)],
            "interval_s": 0.02,
            "use_nvml": False,
            "inventory": [{"pci_bus_id": "0000:3b:00.0", "index": 3}],
        },
    )
    tap = Tap()
    agent = Agent(
        cfg,
        inventory=StaticInventory(),
        transport_factory=lambda c: MemoryTransport(),
        event_factory=EventFactory("c1", "node001", jobs),
        tap=tap,
    )
    try:
        assert [c.name for c in agent.collectors] == ["kernel_log"]
        agent.start()
        time.sleep(0.1)  # a few polls: the file's existing content is history
        with log.open("a") as f:
            f.write(f"Dec  4 15:00:00 node001 kernel: [ 812.5] {XID79}\n")
        wait_for(lambda: bool(tap.of("gpu_event")), what="the kernel-log gpu_event")
    finally:
        agent.stop(timeout_s=1.0)
    (event,) = tap.of("gpu_event")
    assert isinstance(event, GpuEventEvent)
    assert (event.gpu, event.job_id, event.rank, event.payload.xid) == (3, "job-7", 11, 79)
    assert event.payload.pci_bus_id == "0000:3b:00.0" and event.payload.source == "file"
    assert not tap.agent("collector_error")


def test_kmsg_record_time_is_boot_time_on_the_wall_clock(tmp_path: Path) -> None:
    boot_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    usec = boot_ns // 1000 - 5_000_000  # printed 5 s ago
    (tmp_path / "kmsg").write_text(_kmsg(0, XID79, usec=usec))
    collector = KernelLogCollector(_kmsg_config(tmp_path, from_start=True), _factory())
    now = time.time_ns()
    (event,) = collector.poll(now)
    assert abs((now - event.ts) - 5_000_000_000) < 500_000_000
    # a record stamped outside max_log_time_lag_s takes the read time
    (tmp_path / "kmsg").write_text(_kmsg(0, XID79, usec=1))
    late = KernelLogCollector(
        _kmsg_config(tmp_path, from_start=True, max_log_time_lag_s=0), _factory()
    )
    (event,) = late.poll(now)
    assert event.ts == now


def test_a_real_xid_from_an_h200_becomes_one_event_with_its_gpu(tmp_path: Path) -> None:
    """Held out: the kernel's own records from the device check (bench/device/run_probes.sh on
    an H200, driver 580.159.04), where xid_fault.py made the driver log a real XID 31. Written
    after the patterns, never used to tune them. The GPU's UUID comes from the driver's own
    ``NVRM: GPU at PCI:...`` line, NVML off."""
    run = Path(__file__).parents[1] / "bench/results/device/h200_2026-12-04_run1/kmsg_after.json"
    records = json.loads(run.read_text())["matched"]
    (tmp_path / "kmsg").write_text("".join(r + "\n" for r in records))
    collector = KernelLogCollector(_kmsg_config(tmp_path, from_start=True), _factory())
    events = [e for e in collector.poll(1_700_000_000_000_000_000) if isinstance(e, GpuEventEvent)]
    assert len(events) == 1
    p = events[0].payload
    assert (p.event_type, p.xid, p.pattern, p.source) == ("xid", 31, "xid", "kmsg")
    assert p.pci_bus_id == "0000:00:06.0"
    assert p.gpu_uuid == "GPU-cf11596a-c660-02de-1f9b-53a2a374c313"
    assert "MMU Fault" in p.message
