"""What the InfiniBand sysfs counters are (names, widths, which are errors, mlx5 thresholds), the
fabric collector's config and its counter arithmetic; kept apart from the polling code in
``collectors/fabric.py`` (which documents the behaviour) so that each stays one job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import Field, field_validator

from rankscope.collectors.base import CollectorConfig

__all__ = [
    "ALWAYS_32",
    "BYTE_RATES",
    "COUNTERS_EXT",
    "DEFAULT_ERROR_COUNTERS",
    "DEFAULT_HW_ERROR_THRESHOLDS",
    "EXTENDED_MARKER",
    "MAX_32",
    "PMA_ERROR_COUNTER_BITS",
    "SATURATING_32",
    "FabricCollectorConfig",
    "FabricStats",
    "counter_delta",
]

#: Error counters watched by default (PMA PortCounters file names).
DEFAULT_ERROR_COUNTERS: Final[tuple[str, ...]] = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)

#: mlx5 hw_counters error names -> increase per poll that raises an event. Why these values: a
#: transport retry (``local_ack_timeout_err``) or an RNR retry exhausted is rare on a healthy
#: lossless fabric and each one stalls a collective, so 1 is the alarm; sequence errors and
#: duplicates also come with adaptive routing and single drops, so only bursts count; CQE errors
#: at the responder include flushes at application teardown; CNPs are congestion, not errors.
DEFAULT_HW_ERROR_THRESHOLDS: Final[dict[str, int]] = {
    "local_ack_timeout_err": 1,
    "rnr_nak_retry_err": 1,
    "req_transport_retries_exceeded": 1,
    "req_rnr_retries_exceeded": 1,
    "req_cqe_error": 1,
    "resp_cqe_error": 10,
    "packet_seq_err": 10,
    "implied_nak_seq_err": 10,
    "out_of_sequence": 100,
    "duplicate_request": 100,
    "np_cnp_sent": 100_000,
    "rp_cnp_handled": 100_000,
}

#: ``counters_ext/`` file -> the ``counters/`` name its 64-bit value is stored under.
COUNTERS_EXT: Final[dict[str, str]] = {
    "port_xmit_data_64": "port_xmit_data",
    "port_rcv_data_64": "port_rcv_data",
    "port_xmit_packets_64": "port_xmit_packets",
    "port_rcv_packets_64": "port_rcv_packets",
    "port_unicast_xmit_packets": "unicast_xmit_packets",
    "port_unicast_rcv_packets": "unicast_rcv_packets",
    "port_multicast_xmit_packets": "multicast_xmit_packets",
    "port_multicast_rcv_packets": "multicast_rcv_packets",
}
#: 32-bit legacy counters that saturate at 2**32-1 (warned about, see the module doc)
SATURATING_32: Final = frozenset(
    {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait"}
)
MAX_32: Final = (1 << 32) - 1
ALWAYS_32: Final = frozenset({"port_xmit_wait"})

#: Widths of the PMA PortCounters error counters (kernel ``PORT_PMA_ATTR`` table). They saturate.
PMA_ERROR_COUNTER_BITS: Final[dict[str, int]] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}

#: Data counters (4-byte words) -> name of their bytes/s rate.
BYTE_RATES: Final[dict[str, str]] = {"port_xmit_data": "xmit_bytes", "port_rcv_data": "rcv_bytes"}
#: Only present in the extended (64-bit) PortCountersExtended set.
EXTENDED_MARKER: Final = "unicast_xmit_packets"


class FabricCollectorConfig(CollectorConfig):
    """Which HCAs to watch and which counters count as errors."""

    interval_s: float = 1.0
    sysfs_root: Path = Path("/sys/class/infiniband")
    #: None = every device under ``sysfs_root``; a list also reports listed devices that are absent
    devices: list[str] | None = None
    error_counters: list[str] = Field(default_factory=lambda: list(DEFAULT_ERROR_COUNTERS))
    read_hw_counters: bool = True
    #: width override per counter name (e.g. {"port_xmit_data": 32} on a legacy-only HCA)
    counter_bits: dict[str, int] = Field(default_factory=dict)
    #: hw_counters name -> increase per poll that raises an ``error_counter_increase``
    hw_error_thresholds: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_HW_ERROR_THRESHOLDS),
        description="mlx5 hw_counters error -> increase per poll that raises an event (>= 1).",
    )

    @field_validator("hw_error_thresholds")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        bad = sorted(k for k, v in value.items() if v < 1)
        if bad:
            raise ValueError(f"hw_error_thresholds must be >= 1 (got {bad})")
        return value


@dataclass
class FabricStats:
    """Counts of what the collector saw and skipped (it never raises)."""

    polls: int = 0
    ports_polled: int = 0
    root_unreadable: int = 0
    counter_read_errors: int = 0
    unparsable_values: int = 0
    counter_wraps: int = 0
    counter_resets: int = 0
    saturated_counters: int = 0
    invalid_events: int = 0


def counter_delta(prev: int, cur: int, bits: int, *, saturating: bool = False) -> int | None:
    """Increase of a counter between two reads, or None when it was reset (see module doc)."""
    if cur >= prev:
        return cur - prev
    if saturating:
        return None
    modulus = 1 << bits
    half = modulus >> 1
    if half <= prev < modulus and cur < half:
        return cur + modulus - prev
    return None
