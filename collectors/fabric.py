"""InfiniBand/RoCE port collector: sysfs counters, per-second rates and link events.

Why: a flapping HCA link (``link_downed`` +1, symbol errors, state leaving ACTIVE) is the usual
first precursor of "a minute later every rank died with an NCCL timeout"; this collector turns the
kernel's per-port files into events the attribution stage can order against the NCCL errors.

Source: the RDMA core's sysfs (Linux ``drivers/infiniband/core/sysfs.c``,
``Documentation/ABI/stable/sysfs-class-infiniband``)::

    /sys/class/infiniband/<dev>/ports/<n>/state         "4: ACTIVE"  (1: DOWN, 2: INIT, 3: ARMED,
                                                          4: ACTIVE, 5: ACTIVE_DEFER)
    /sys/class/infiniband/<dev>/ports/<n>/phys_state    "5: LinkUp"  (2: Polling, 3: Disabled,
                                                          6: LinkErrorRecovery, ...)
    /sys/class/infiniband/<dev>/ports/<n>/rate          "400 Gb/sec (4X NDR)"
    /sys/class/infiniband/<dev>/ports/<n>/link_layer    "InfiniBand" | "Ethernet"
    /sys/class/infiniband/<dev>/ports/<n>/counters/*    PMA PortCounters(+Extended), one decimal
    /sys/class/infiniband/<dev>/ports/<n>/counters_ext/* 64-bit PortCountersExtended on older
                                                          kernels/OFED (mlx4: port_xmit_data_64,
                                                          port_unicast_xmit_packets, ...)
    /sys/class/infiniband/<dev>/ports/<n>/hw_counters/* driver counters (u64; ``lifespan`` is a
                                                          setting, not a counter, and is skipped)

Decisions (so that queries read the numbers right):

- ``counters`` holds the raw totals under the sysfs file names (``port_xmit_data`` stays in the
  kernel's unit, 4-byte words). A hw_counters name that collides with a counters name is stored
  as ``hw.<name>``.
- ``counters_ext/`` (older kernels and MLNX_OFED drivers; names as listed by the kernel ABI and
  Prometheus' procfs reader ``sysfs/class_infiniband.go``) is preferred over ``counters/``: its
  64-bit totals are stored under the ``counters/`` name (``port_xmit_data_64`` ->
  ``port_xmit_data``, ``port_unicast_xmit_packets`` -> ``unicast_xmit_packets``), so a query
  does not depend on the driver, and the 32-bit file is not read.
- Saturation (legacy 32-bit PMA PortCounters stop at 2**32-1; IBA counters do not wrap): when a
  port has only 32-bit data/packet counters (no ``counters_ext``, not the extended set, never
  seen >= 2**32) and one of them, or ``port_xmit_wait`` (32 bits in every set), reads 2**32-1,
  its rate is omitted (a frozen total would read as 0/s) and one event per port and counter
  says so (``other`` with ``counter`` set and ``new_state`` "saturated": no new event type, which
  workers validating the old literal would reject); a later reset below the maximum re-arms it.
- mlx5 ``hw_counters`` errors (``local_ack_timeout_err``, ``rnr_nak_retry_err``, ...; names from
  the kernel's ``drivers/infiniband/hw/mlx5/counters.c``): ``hw_error_thresholds`` maps a name to
  the increase *per poll* that raises an ``error_counter_increase`` (defaults in
  ``DEFAULT_HW_ERROR_THRESHOLDS``); names in ``error_counters`` raise one on any increase.
- ``rates_per_s`` are per-second increases since this port's previous successful poll. The two
  data counters are given as **bytes**/s under ``xmit_bytes`` and ``rcv_bytes`` (words x 4);
  there is no words/s rate, so nobody mistakes one for the other. Every other counter's rate is
  under its own name (packets/s, errors/s).
- Wrap: the PMA traffic counters are 32 bits in the legacy PortCounters set and 64 bits in the
  extended set (``unicast_xmit_packets`` exists only in the extended set, so its presence marks
  64 bits; a value ever seen >= 2**32 marks 64 bits too; ``counter_bits`` overrides). A counter
  that decreases while it was in the upper half of its range and is now in the lower half
  wrapped: delta = cur + 2**bits - prev.
- Reset: any other decrease (driver reload, ``perfquery -R``, a fabric manager clearing
  counters) is a reset. Its rate is *omitted* for that poll (no guess, never a huge bogus rate)
  and the value becomes the new baseline; an error counter that reads N > 0 after a reset gets an
  ``error_counter_increase`` with delta N (errors since the reset) and a message saying so.
- The PMA error counters are 4 to 16 bits wide and saturate (IBA PortCounters never wrap): a
  decrease is always a reset, and an increase that reaches the maximum says "saturated" in its
  message, because further errors are invisible until someone clears the counter.
- Events: ``link_down``/``link_up`` when ``state`` leaves/enters ACTIVE (or ACTIVE_DEFER),
  ``state_change`` for other state transitions, for ``phys_state`` changes while ``state`` stays
  (e.g. LinkUp -> LinkErrorRecovery) and for a ``rate`` change on a port that stays ACTIVE
  (a link retrained to a lower width/speed). The first observation of a port is a baseline (an
  unused DOWN port emits nothing, ever).
- ``port_unreadable`` once when a port's ``state`` cannot be read (device vanished, permission,
  ENODEV): baselines are dropped (the gap has unknown length), the last known state is kept, and
  when the port is readable again one ``other`` event says so; state events then compare with the
  last state seen before the gap. A configured device that does not exist gets one
  ``port_unreadable`` (port None). A single counter file that cannot be read or parsed
  ("N/A (no PMA)") is skipped and counted, it does not make the port unreadable.

Cost: the file list of a port is built once (and again only after a read error); each poll does
one open/read/close per file (sysfs values are produced on open/read, so an fd cannot be kept and
re-read without a seek per read anyway). Note for operators: each ``counters/*`` read is a PMA MAD
to the HCA firmware; ``hw_counters`` are cached by the kernel for ``lifespan`` ms. Measured on
a fake tree (regular files, so without the MAD cost): 4 ports x 36 files, ~0.4 ms CPU per poll,
about 3/4 of it the open/read/close syscalls.

Node-level events: no GPU, so the envelope job is ``factory.jobs.node_job()``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from pydantic import ValidationError

from rankscope.collectors.base import BaseCollector, EventFactory
from rankscope.collectors.fabric_counters import (
    ALWAYS_32,
    BYTE_RATES,
    COUNTERS_EXT,
    DEFAULT_ERROR_COUNTERS,
    DEFAULT_HW_ERROR_THRESHOLDS,
    EXTENDED_MARKER,
    MAX_32,
    PMA_ERROR_COUNTER_BITS,
    SATURATING_32,
    FabricCollectorConfig,
    FabricStats,
    counter_delta,
)
from rankscope.schemas.events import Event, FabricCountersEvent, FabricEventEvent
from rankscope.schemas.payloads import FabricCounters, FabricEvent, FabricEventType

__all__ = [
    "COUNTERS_EXT",
    "DEFAULT_ERROR_COUNTERS",
    "DEFAULT_HW_ERROR_THRESHOLDS",
    "PMA_ERROR_COUNTER_BITS",
    "FabricCollector",
    "FabricCollectorConfig",
    "FabricStats",
    "counter_delta",
    "create_fabric_collector",
]

_ACTIVE_STATES: Final = frozenset({4, 5})
_STATE_RE: Final = re.compile(r"\s*(\d+)\s*:\s*(\S+)")
_READ_SIZE: Final = 4096


def _read(path: str) -> str:
    """One open/read/close; sysfs returns the whole value in one read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, _READ_SIZE).decode("latin-1").strip()
    finally:
        os.close(fd)


def _state_num(state: str) -> int | None:
    m = _STATE_RE.match(state)
    return int(m.group(1)) if m else None


def _is_active(state: str | None) -> bool:
    if state is None:
        return False
    num = _state_num(state)
    if num is not None:
        return num in _ACTIVE_STATES
    return state.upper().startswith("ACTIVE")


class _Counter(NamedTuple):
    """One counter file, classified once when the port's file list is built."""

    name: str  # key in ``counters``
    path: str
    rate_key: str  # key in ``rates_per_s``
    scale: float  # 4.0 for the data counters (words -> bytes)
    pma_bits: int | None  # width of a saturating PMA error counter
    fixed_bits: int | None  # configured width, or 64 for hw_counters; None = infer
    is_error: bool
    threshold: int | None = None  # hw_counters: increase per poll that raises an event


@dataclass
class _Port:
    device: str
    port: int
    directory: str
    #: None until built (and after a file vanished or the port became unreadable)
    files: list[_Counter] | None = None
    files_dirty: bool = False
    link_layer: str = ""
    extended: bool = False
    prev_ns: int | None = None
    prev: dict[str, int] = field(default_factory=dict)
    bits64: set[str] = field(default_factory=set)
    state: str | None = None
    phys_state: str = ""
    rate: str = ""
    unreadable: bool = False
    unreadable_since_ns: int = 0
    #: counters already reported as saturated (re-armed when they read below the maximum)
    saturated: set[str] = field(default_factory=set)


class FabricCollector(BaseCollector):
    """Polls every HCA port's sysfs files; one counters event per port plus change events."""

    name = "fabric"

    def __init__(self, config: FabricCollectorConfig, factory: EventFactory) -> None:
        self.config = config
        self.factory = factory
        self.interval_s = config.interval_s
        self.stats = FabricStats()
        self._root = str(config.sysfs_root)
        self._wanted = set(config.devices) if config.devices is not None else None
        self._errors = tuple(dict.fromkeys(config.error_counters))
        self._ports: dict[tuple[str, int], _Port] = {}
        #: ports discovered per present device (cache; dropped when the device vanishes)
        self._device_ports: dict[str, list[int]] = {}
        self._absent_reported: set[str] = set()

    # -- discovery ---------------------------------------------------------------------------

    def _list_devices(self) -> set[str]:
        try:
            names = set(os.listdir(self._root))
        except OSError:
            self.stats.root_unreadable += 1
            return set()
        if self._wanted is not None:
            names &= self._wanted
        return names

    def _discover_ports(self, device: str) -> list[int] | None:
        try:
            entries = os.listdir(os.path.join(self._root, device, "ports"))
        except OSError:
            return None
        return sorted(int(e) for e in entries if e.isdigit())

    def _build_files(self, st: _Port) -> None:
        """List the port's counter files once; raises OSError when the port is gone."""
        files: list[_Counter] = []
        overrides = self.config.counter_bits
        edir = os.path.join(st.directory, "counters_ext")
        ext = sorted(os.listdir(edir)) if os.path.isdir(edir) else []
        for n in ext:
            key = COUNTERS_EXT.get(n, n)
            files.append(
                _Counter(
                    key,
                    os.path.join(edir, n),
                    BYTE_RATES.get(key, key),
                    4.0 if key in BYTE_RATES else 1.0,
                    None,
                    overrides.get(key, 64),
                    key in self._errors,
                )
            )
        superseded = {f.name for f in files}
        cdir = os.path.join(st.directory, "counters")
        names = sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []
        for n in names:
            if n in superseded:
                continue  # the 64-bit counters_ext value is read instead
            rate_key = BYTE_RATES.get(n, n)
            files.append(
                _Counter(
                    n,
                    os.path.join(cdir, n),
                    rate_key,
                    4.0 if n in BYTE_RATES else 1.0,
                    PMA_ERROR_COUNTER_BITS.get(n),
                    overrides.get(n),
                    n in self._errors,
                )
            )
        taken = set(names) | superseded
        thresholds = self.config.hw_error_thresholds
        if self.config.read_hw_counters:
            hdir = os.path.join(st.directory, "hw_counters")
            if os.path.isdir(hdir):
                for n in sorted(os.listdir(hdir)):
                    if n == "lifespan":
                        continue
                    key = f"hw.{n}" if n in taken else n
                    files.append(
                        _Counter(
                            key,
                            os.path.join(hdir, n),
                            key,
                            1.0,
                            None,
                            overrides.get(key, 64),
                            key in self._errors,
                            thresholds.get(n),
                        )
                    )
        st.extended = EXTENDED_MARKER in taken or bool(ext)
        try:
            st.link_layer = _read(os.path.join(st.directory, "link_layer"))[:256]
        except OSError:
            st.link_layer = ""
        # a port whose counter groups are not there yet (device being created) is listed again
        st.files, st.files_dirty = files, not files

    # -- polling -----------------------------------------------------------------------------

    def poll(self, now_ns: int) -> list[Event]:
        """One cycle over all ports; never raises for sysfs trouble."""
        self.stats.polls += 1
        out: list[Event] = []
        present = self._list_devices()
        for device in sorted(set(self._device_ports) - present):
            for port in self._device_ports.pop(device):
                st = self._ports[(device, port)]
                out.extend(self._mark_unreadable(st, now_ns, "device no longer in sysfs"))
        if self._wanted is not None:
            for device in sorted(self._wanted - present - self._absent_reported):
                self._absent_reported.add(device)
                out.extend(self._fabric(now_ns, "port_unreadable", device, None, "device absent"))
        for device in sorted(present):
            self._absent_reported.discard(device)
            ports = self._device_ports.get(device)
            if ports is None:
                ports = self._discover_ports(device)
                if not ports:
                    continue  # being created or torn down: look again next cycle
                self._device_ports[device] = ports
            for port in ports:
                known = self._ports.get((device, port))
                if known is None:
                    directory = os.path.join(self._root, device, "ports", str(port))
                    known = self._ports[(device, port)] = _Port(device, port, directory)
                out.extend(self._poll_port(known, now_ns))
        return out

    def _poll_port(self, st: _Port, now_ns: int) -> list[Event]:
        self.stats.ports_polled += 1
        try:
            if st.files is None:
                self._build_files(st)
            state = _read(os.path.join(st.directory, "state"))
        except OSError as exc:
            return self._mark_unreadable(st, now_ns, f"{type(exc).__name__}: {exc}")
        phys = self._read_opt(os.path.join(st.directory, "phys_state"))
        rate = self._read_opt(os.path.join(st.directory, "rate"))
        counters = self._read_counters(st)

        out: list[Event] = []
        if st.unreadable:
            gap_s = max(0, now_ns - st.unreadable_since_ns) / 1e9
            st.unreadable = False
            out.extend(
                self._fabric(
                    now_ns, "other", st.device, st.port, f"port readable again after {gap_s:.1f} s"
                )
            )
        out.extend(self._state_events(st, now_ns, state, phys, rate))
        rates, error_events = self._deltas(st, now_ns, counters)
        interval = (now_ns - st.prev_ns) / 1e9 if st.prev_ns is not None else None
        if interval is not None and interval <= 0:
            interval = None
        payload_fields = {
            "device": st.device[:256],
            "port": st.port,
            "link_layer": st.link_layer,
            "state": state[:256],
            "phys_state": phys[:256],
            "rate": rate[:256],
            "counters": counters,
            "rates_per_s": rates,
            "interval_s": interval,
        }
        try:
            counters_event = self.factory.make(
                FabricCountersEvent, FabricCounters(**payload_fields), now_ns
            )
        except ValidationError:
            self.stats.invalid_events += 1
        else:
            out.insert(0, counters_event)
        out.extend(error_events)
        st.state, st.phys_state, st.rate = state, phys, rate
        st.prev, st.prev_ns = counters, now_ns
        return out

    def _read_opt(self, path: str) -> str:
        try:
            return _read(path)
        except OSError:
            return ""

    def _read_counters(self, st: _Port) -> dict[str, int]:
        counters: dict[str, int] = {}
        assert st.files is not None
        for spec in st.files:
            try:
                raw = _read(spec.path)
            except FileNotFoundError:
                self.stats.counter_read_errors += 1
                st.files_dirty = True
                continue
            except OSError:
                self.stats.counter_read_errors += 1
                continue
            try:
                counters[spec.name] = int(raw)
            except ValueError:  # "N/A (no PMA)"
                self.stats.unparsable_values += 1
        if st.files_dirty:
            st.files = None  # a file vanished: rebuild the list next cycle
        return counters

    def _state_events(
        self, st: _Port, now_ns: int, state: str, phys: str, rate: str
    ) -> list[Event]:
        if st.state is None:  # first observation: baseline
            return []
        if state != st.state:
            was, now = _is_active(st.state), _is_active(state)
            kind: FabricEventType = (
                "link_down" if was and not now else "link_up" if now and not was else "state_change"
            )
            msg = f"state {st.state} -> {state}"
            if phys != st.phys_state:
                msg += f"; phys_state {st.phys_state} -> {phys}"
            return self._fabric(now_ns, kind, st.device, st.port, msg, old=st.state, new=state)
        if phys != st.phys_state and st.phys_state and phys:
            msg = f"phys_state {st.phys_state} -> {phys} (state {state})"
            return self._fabric(
                now_ns, "state_change", st.device, st.port, msg, old=st.phys_state, new=phys
            )
        if rate != st.rate and st.rate and rate and _is_active(state):
            msg = f"rate {st.rate} -> {rate} (link retrained while ACTIVE)"
            return self._fabric(
                now_ns, "state_change", st.device, st.port, msg, old=st.rate, new=rate
            )
        return []

    @staticmethod
    def _bits(st: _Port, spec: _Counter, value: int) -> int:
        if spec.fixed_bits is not None:
            return spec.fixed_bits
        if value >= 1 << 32:
            st.bits64.add(spec.name)
        if spec.name in st.bits64:
            return 64
        # PortXmitWait is a 32-bit PortCounters field even where the data counters are extended
        return 64 if st.extended and spec.name not in ALWAYS_32 else 32

    def _deltas(
        self, st: _Port, now_ns: int, counters: dict[str, int]
    ) -> tuple[dict[str, float], list[Event]]:
        rates: dict[str, float] = {}
        events: list[Event] = []
        if st.prev_ns is None or now_ns <= st.prev_ns:
            return rates, events
        interval = (now_ns - st.prev_ns) / 1e9
        prev_values = st.prev
        for spec in st.files or ():
            name = spec.name
            cur = counters.get(name)
            prev = prev_values.get(name)
            if cur is None or prev is None:
                continue
            if name in SATURATING_32 and self._saturated(st, spec, cur, now_ns, events):
                continue  # a frozen total: no rate rather than a false 0/s
            if cur == prev:  # the common case: nothing moved
                rates[spec.rate_key] = 0.0
                continue
            pma_bits = spec.pma_bits
            bits = self._bits(st, spec, max(cur, prev))
            delta = counter_delta(prev, cur, bits, saturating=pma_bits is not None)
            reset = delta is None
            if reset:
                self.stats.counter_resets += 1
            elif cur < prev:
                self.stats.counter_wraps += 1
            if delta is not None:
                rates[spec.rate_key] = delta * spec.scale / interval
            increase = cur if delta is None else delta  # after a reset: errors since it
            over = spec.threshold is not None and increase >= spec.threshold
            if increase and (spec.is_error or over):
                msg = f"{name} +{increase} (now {cur})"
                if reset:
                    msg += f"; counter was reset (was {prev}), delta counts since the reset"
                if pma_bits is not None and cur >= (1 << pma_bits) - 1:
                    msg += f"; saturated at {cur}: further errors are invisible until cleared"
                if not spec.is_error:
                    msg += f"; threshold {spec.threshold} per poll"
                events.extend(
                    self._fabric(
                        now_ns,
                        "error_counter_increase",
                        st.device,
                        st.port,
                        msg,
                        counter=name,
                        delta=increase,
                    )
                )
        return rates, events

    def _saturated(
        self, st: _Port, spec: _Counter, cur: int, now_ns: int, events: list[Event]
    ) -> bool:
        """True when a 32-bit legacy counter sits at its maximum (warned once, see module doc)."""
        name = spec.name
        if cur != MAX_32 or self._bits(st, spec, cur) != 32:
            st.saturated.discard(name)  # cleared or reset: a new saturation warns again
            return False
        if name not in st.saturated:
            st.saturated.add(name)
            self.stats.saturated_counters += 1
            msg = (
                f"{name} saturated at 2**32-1 (32-bit PortCounters, no counters_ext): its rate "
                "is unknown until the counter is cleared (perfquery -R)"
            )
            events.extend(
                self._fabric(
                    now_ns, "other", st.device, st.port, msg, counter=name, new="saturated"
                )
            )
        return True

    def _mark_unreadable(self, st: _Port, now_ns: int, why: str) -> list[Event]:
        st.files = None
        st.prev, st.prev_ns = {}, None
        if st.unreadable:
            return []
        st.unreadable = True
        st.unreadable_since_ns = now_ns
        return self._fabric(now_ns, "port_unreadable", st.device, st.port, why)

    def _fabric(
        self,
        now_ns: int,
        kind: FabricEventType,
        device: str,
        port: int | None,
        message: str,
        *,
        counter: str = "",
        delta: int | None = None,
        old: str = "",
        new: str = "",
    ) -> list[Event]:
        try:
            payload = FabricEvent(
                event_type=kind,
                device=device[:256],
                port=port,
                counter=counter[:256],
                delta=delta,
                old_state=old[:256],
                new_state=new[:256],
                message=message[:16_384],
            )
            return [self.factory.make(FabricEventEvent, payload, now_ns)]
        except ValidationError:
            self.stats.invalid_events += 1
            return []


def create_fabric_collector(
    config: FabricCollectorConfig, factory: EventFactory
) -> FabricCollector:
    """Factory used by the agent's component wiring."""
    return FabricCollector(config, factory)
