"""A fake ``/sys/class/infiniband`` tree for tests and benchmarks, in the real layout and formats.

Why: the fabric collector only reads files, so a directory tree with the kernel's file names and
value formats (``drivers/infiniband/core/sysfs.c``) exercises the same code that runs on a node:

    <base>/class/infiniband/mlx5_0 -> ../../devices/pci0000:00/0000:17:00.0/infiniband/mlx5_0
    .../mlx5_0/ports/1/state          "4: ACTIVE\\n"
    .../mlx5_0/ports/1/phys_state     "5: LinkUp\\n"
    .../mlx5_0/ports/1/rate           "400 Gb/sec (4X NDR)\\n"
    .../mlx5_0/ports/1/link_layer     "InfiniBand\\n"
    .../mlx5_0/ports/1/counters/*     "%u\\n" / "%llu\\n" (PMA PortCounters + Extended)
    .../mlx5_0/ports/1/hw_counters/*  "%llu\\n" (mlx5 names) and ``lifespan`` (ms, a setting)
    .../mlx4_0/ports/1/counters_ext/* "%llu\\n" 64-bit set of older kernels / MLNX_OFED (names
                                      as in Prometheus procfs ``sysfs/class_infiniband.go``)

Usage::

    fs = FakeIbSysfs(tmp_path, devices=4)         # mlx5_0..mlx5_3, port 1 each, ACTIVE
    cfg = FabricCollectorConfig(sysfs_root=fs.root)
    fs.traffic("mlx5_0", 1, xmit_bytes=4_000, rcv_bytes=8_000)
    fs.link_down("mlx5_0", 1)                     # DOWN + Polling + link_downed += 1
    fs.break_port("mlx5_1", 1)                    # state unreadable (works as root too)
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

__all__ = [
    "COUNTERS_EXT",
    "EXTENDED_COUNTERS",
    "HW_COUNTERS",
    "LEGACY_COUNTERS",
    "PHYS_STATES",
    "STATES",
    "FakeIbSysfs",
]

#: PMA PortCounters as the kernel lists them (``pma_attrs``) plus port_xmit_wait.
LEGACY_COUNTERS: tuple[str, ...] = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_wait",
)
#: Only in the extended set (``pma_attrs_ext``): their presence means 64-bit data counters.
EXTENDED_COUNTERS: tuple[str, ...] = (
    "unicast_rcv_packets",
    "unicast_xmit_packets",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
)
#: ``counters_ext/`` files (older kernels / MLNX_OFED, e.g. mlx4), 64-bit.
COUNTERS_EXT: tuple[str, ...] = (
    "port_xmit_data_64",
    "port_rcv_data_64",
    "port_xmit_packets_64",
    "port_rcv_packets_64",
    "port_unicast_xmit_packets",
    "port_unicast_rcv_packets",
    "port_multicast_xmit_packets",
    "port_multicast_rcv_packets",
)
#: A subset of mlx5's hw_counters names.
HW_COUNTERS: tuple[str, ...] = (
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "resp_cqe_error",
    "rnr_nak_retry_err",
    "rp_cnp_handled",
    "rx_write_requests",
)
STATES: dict[str, str] = {
    "NOP": "0: NOP",
    "DOWN": "1: DOWN",
    "INIT": "2: INIT",
    "ARMED": "3: ARMED",
    "ACTIVE": "4: ACTIVE",
    "ACTIVE_DEFER": "5: ACTIVE_DEFER",
}
PHYS_STATES: dict[str, str] = {
    "Sleep": "1: Sleep",
    "Polling": "2: Polling",
    "Disabled": "3: Disabled",
    "PortConfigurationTraining": "4: PortConfigurationTraining",
    "LinkUp": "5: LinkUp",
    "LinkErrorRecovery": "6: LinkErrorRecovery",
    "Phy Test": "7: Phy Test",
}


class FakeIbSysfs:
    """Builds and mutates an IB sysfs tree under ``base``; ``root`` is the class directory."""

    def __init__(
        self,
        base: Path,
        *,
        devices: int = 1,
        ports: int = 1,
        device_prefix: str = "mlx5_",
        extended: bool = True,
        counters_ext: bool = False,
        hw_counters: bool = True,
        link_layer: str = "InfiniBand",
        rate: str = "400 Gb/sec (4X NDR)",
    ) -> None:
        self.base = Path(base)
        self.root = self.base / "class" / "infiniband"
        self.root.mkdir(parents=True, exist_ok=True)
        self.extended = extended
        self.counters_ext = counters_ext
        self.hw_counters = hw_counters
        self.link_layer = link_layer
        self.rate = rate
        for i in range(devices):
            self.add_device(f"{device_prefix}{i}", ports=ports)

    # -- layout -------------------------------------------------------------------------------

    def _device_dir(self, device: str) -> Path:
        bus = zlib.crc32(device.encode()) % 0xFF
        return self.base / "devices" / "pci0000:00" / f"0000:{bus:02x}:00.0" / "infiniband" / device

    def port_dir(self, device: str, port: int) -> Path:
        return self.root / device / "ports" / str(port)

    @property
    def devices(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir())

    def add_device(self, name: str, ports: int = 1) -> None:
        """A device with ``ports`` ports (numbered from 1), all ACTIVE/LinkUp, counters at 0."""
        real = self._device_dir(name)
        for port in range(1, ports + 1):
            pdir = real / "ports" / str(port)
            (pdir / "counters").mkdir(parents=True, exist_ok=True)
            _write(pdir / "state", STATES["ACTIVE"])
            _write(pdir / "phys_state", PHYS_STATES["LinkUp"])
            _write(pdir / "rate", self.rate)
            _write(pdir / "link_layer", self.link_layer)
            _write(pdir / "lid", "0x1a")
            names = LEGACY_COUNTERS + (EXTENDED_COUNTERS if self.extended else ())
            for counter in names:
                _write(pdir / "counters" / counter, "0")
            if self.counters_ext:
                (pdir / "counters_ext").mkdir(exist_ok=True)
                for counter in COUNTERS_EXT:
                    _write(pdir / "counters_ext" / counter, "0")
            if self.hw_counters:
                (pdir / "hw_counters").mkdir(exist_ok=True)
                for counter in HW_COUNTERS:
                    _write(pdir / "hw_counters" / counter, "0")
                _write(pdir / "hw_counters" / "lifespan", "10")
        _write(real / "node_type", "1: CA")
        _write(real / "fw_ver", "28.39.1002")
        link = self.root / name
        if not link.is_symlink():
            link.symlink_to(real)

    def remove_device(self, name: str) -> None:
        """As after ``rmmod mlx5_ib``: the class link and the device directory disappear."""
        (self.root / name).unlink(missing_ok=True)
        shutil.rmtree(self._device_dir(name), ignore_errors=True)

    # -- counters -----------------------------------------------------------------------------

    def _counter_path(self, device: str, port: int, name: str) -> Path:
        pdir = self.port_dir(device, port)
        path = pdir / "counters" / name
        if path.exists():
            return path
        for group in ("hw_counters", "counters_ext"):
            other = pdir / group / name
            if other.exists():
                return other
        raise KeyError(f"{device}/{port} has no counter {name!r}")

    def counter(self, device: str, port: int, name: str) -> int:
        return int(self._counter_path(device, port, name).read_text())

    def set_counter(self, device: str, port: int, name: str, value: int) -> None:
        _write(self._counter_path(device, port, name), str(value))

    def bump(self, device: str, port: int, name: str, delta: int = 1) -> int:
        """Adds ``delta`` (no wrap: tests set wrapped values explicitly); returns the new total."""
        value = self.counter(device, port, name) + delta
        self.set_counter(device, port, name, value)
        return value

    def traffic(
        self,
        device: str,
        port: int,
        *,
        xmit_bytes: int = 0,
        rcv_bytes: int = 0,
        packet_size: int = 4096,
    ) -> None:
        """Moves data: the data counters count 4-byte words, packets count packets."""
        self.bump(device, port, "port_xmit_data", xmit_bytes // 4)
        self.bump(device, port, "port_rcv_data", rcv_bytes // 4)
        self.bump(device, port, "port_xmit_packets", -(-xmit_bytes // packet_size))
        self.bump(device, port, "port_rcv_packets", -(-rcv_bytes // packet_size))

    # -- state --------------------------------------------------------------------------------

    def set_state(self, device: str, port: int, state: str) -> None:
        """``state`` is a name ("DOWN") or the full file text ("1: DOWN")."""
        _write(self.port_dir(device, port) / "state", STATES.get(state, state))

    def set_phys_state(self, device: str, port: int, phys: str) -> None:
        _write(self.port_dir(device, port) / "phys_state", PHYS_STATES.get(phys, phys))

    def set_rate(self, device: str, port: int, rate: str) -> None:
        _write(self.port_dir(device, port) / "rate", rate)

    def link_down(self, device: str, port: int) -> None:
        """What a flap looks like from sysfs: DOWN/Polling and ``link_downed`` + 1."""
        self.set_state(device, port, "DOWN")
        self.set_phys_state(device, port, "Polling")
        self.bump(device, port, "link_downed")

    def link_up(self, device: str, port: int) -> None:
        self.set_state(device, port, "ACTIVE")
        self.set_phys_state(device, port, "LinkUp")

    def break_port(self, device: str, port: int) -> None:
        """Makes ``state`` unreadable (a directory in its place: EISDIR even for root)."""
        path = self.port_dir(device, port) / "state"
        path.unlink()
        path.mkdir()

    def repair_port(self, device: str, port: int, state: str = "ACTIVE") -> None:
        path = self.port_dir(device, port) / "state"
        if path.is_dir():
            path.rmdir()
        self.set_state(device, port, state)


def _write(path: Path, text: str) -> None:
    path.write_text(text + "\n")
