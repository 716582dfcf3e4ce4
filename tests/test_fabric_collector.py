"""FabricCollector against a sysfs tree in the kernel's real layout and value formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.collectors.fabric import (
    FabricCollector,
    FabricCollectorConfig,
    counter_delta,
    create_fabric_collector,
)
from rankscope.schemas.events import (
    EVENT_LIST_ADAPTER,
    Event,
    FabricCountersEvent,
    FabricEventEvent,
    dump_events,
)
from tests.fakes.sysfs import FakeIbSysfs

T0 = 1_760_000_000 * 10**9
SEC = 10**9


def make(fs: FakeIbSysfs, jobs: JobRegistry | None = None, **cfg: object) -> FabricCollector:
    factory = EventFactory("c1", "gpu-a03", jobs=jobs or JobRegistry(default_job_id="job-7"))
    return create_fabric_collector(FabricCollectorConfig(sysfs_root=fs.root, **cfg), factory)


def counters_of(events: list[Event]) -> dict[tuple[str, int], FabricCountersEvent]:
    return {
        (e.payload.device, e.payload.port): e for e in events if isinstance(e, FabricCountersEvent)
    }


def fabric_events(events: list[Event]) -> list[FabricEventEvent]:
    return [e for e in events if isinstance(e, FabricEventEvent)]


def test_real_sysfs_value_formats_in_the_fake(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    port = fs.port_dir("mlx5_0", 1)
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "phys_state").read_text() == "5: LinkUp\n"
    assert (port / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (port / "link_layer").read_text() == "InfiniBand\n"
    assert (fs.root / "mlx5_0").is_symlink()  # /sys/class/infiniband/<dev> is a link


def test_first_poll_has_totals_no_rates_and_no_events(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2)
    fs.set_counter("mlx5_0", 1, "port_xmit_data", 123_456)
    fs.set_counter("mlx5_0", 1, "symbol_error", 3)
    collector = make(fs)

    events = collector.poll(T0)

    assert len(events) == 2 and not fabric_events(events)
    ev = counters_of(events)[("mlx5_0", 1)]
    assert ev.kind == "fabric_counters" and ev.ts == T0
    assert ev.job_id == "job-7" and ev.gpu is None and ev.rank is None and ev.node == "gpu-a03"
    p = ev.payload
    assert (p.state, p.phys_state, p.rate, p.link_layer) == (
        "4: ACTIVE",
        "5: LinkUp",
        "400 Gb/sec (4X NDR)",
        "InfiniBand",
    )
    assert p.counters["port_xmit_data"] == 123_456  # raw, in 4-byte words
    assert p.counters["symbol_error"] == 3
    assert p.counters["out_of_buffer"] == 0  # hw_counters are read too
    assert "lifespan" not in p.counters  # a setting, not a counter
    assert p.rates_per_s == {} and p.interval_s is None


def test_node_level_events_take_the_nodes_job(tmp_path: Path) -> None:
    jobs = JobRegistry(default_job_id="idle")
    jobs.bind_gpu(0, JobBinding("job-42", rank=8, local_rank=0))
    jobs.bind_gpu(1, JobBinding("job-42", rank=9, local_rank=1))
    events = make(FakeIbSysfs(tmp_path), jobs=jobs).poll(T0)
    assert [e.job_id for e in events] == ["job-42"]
    assert events[0].rank is None


def test_rates_are_per_second_and_data_rates_are_bytes(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs)
    collector.poll(T0)
    fs.traffic("mlx5_0", 1, xmit_bytes=4_000_000, rcv_bytes=8_000_000, packet_size=4000)

    ev = counters_of(collector.poll(T0 + 2 * SEC))[("mlx5_0", 1)]

    p = ev.payload
    assert p.interval_s == 2.0
    assert p.counters["port_xmit_data"] == 1_000_000  # words
    assert p.rates_per_s["xmit_bytes"] == 2_000_000.0  # bytes/s = words * 4 / 2 s
    assert p.rates_per_s["rcv_bytes"] == 4_000_000.0
    assert p.rates_per_s["port_xmit_packets"] == 500.0
    assert p.rates_per_s["port_rcv_packets"] == 1000.0
    assert p.rates_per_s["symbol_error"] == 0.0
    assert "port_xmit_data" not in p.rates_per_s  # no words/s rate to mistake for bytes


def test_32bit_legacy_counter_wraps_at_2_pow_32(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, extended=False)  # PortCounters only: 32-bit data counters
    collector = make(fs)
    fs.set_counter("mlx5_0", 1, "port_xmit_data", 2**32 - 1_000)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "port_xmit_data", 3_000)

    p = counters_of(collector.poll(T0 + SEC))[("mlx5_0", 1)].payload

    assert p.rates_per_s["xmit_bytes"] == 4_000 * 4
    assert collector.stats.counter_wraps == 1 and collector.stats.counter_resets == 0


def test_a_decrease_that_is_no_wrap_is_a_reset_without_a_bogus_rate(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)  # extended: 64-bit data counters
    collector = make(fs)
    fs.set_counter("mlx5_0", 1, "port_xmit_data", 5 * 10**12)
    fs.set_counter("mlx5_0", 1, "port_rcv_data", 10**9)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "port_xmit_data", 100)  # driver reload / perfquery -R
    fs.set_counter("mlx5_0", 1, "port_rcv_data", 10**9 + 250)

    p = counters_of(collector.poll(T0 + SEC))[("mlx5_0", 1)].payload

    assert "xmit_bytes" not in p.rates_per_s  # omitted, never ~2**64 words/s
    assert p.rates_per_s["rcv_bytes"] == 1000.0
    assert p.counters["port_xmit_data"] == 100
    assert collector.stats.counter_resets == 1
    fs.bump("mlx5_0", 1, "port_xmit_data", 1_000)  # the reset value is the new baseline
    p = counters_of(collector.poll(T0 + 2 * SEC))[("mlx5_0", 1)].payload
    assert p.rates_per_s["xmit_bytes"] == 4_000.0


def test_a_32bit_counter_reset_from_the_lower_half_is_not_a_wrap(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, extended=False)
    collector = make(fs)
    fs.set_counter("mlx5_0", 1, "port_xmit_packets", 1_000_000)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "port_xmit_packets", 10)
    p = counters_of(collector.poll(T0 + SEC))[("mlx5_0", 1)].payload
    assert "port_xmit_packets" not in p.rates_per_s
    assert collector.stats.counter_resets == 1


def test_error_counter_increases_have_exact_deltas(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2)
    collector = make(fs)
    collector.poll(T0)
    fs.bump("mlx5_1", 1, "symbol_error", 7)
    fs.bump("mlx5_1", 1, "port_rcv_errors", 3)
    fs.bump("mlx5_1", 1, "link_error_recovery", 1)
    fs.bump("mlx5_1", 1, "out_of_buffer", 50)  # not an error counter by default

    events = fabric_events(collector.poll(T0 + SEC))

    got = {(e.payload.device, e.payload.counter): e.payload.delta for e in events}
    assert got == {
        ("mlx5_1", "symbol_error"): 7,
        ("mlx5_1", "port_rcv_errors"): 3,
        ("mlx5_1", "link_error_recovery"): 1,
    }
    assert {e.payload.event_type for e in events} == {"error_counter_increase"}
    assert all(e.payload.port == 1 and e.ts == T0 + SEC for e in events)
    assert fabric_events(collector.poll(T0 + 2 * SEC)) == []  # no change, no event


def test_error_counters_are_configurable_hw_counters_included(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs, error_counters=["out_of_buffer", "local_ack_timeout_err"])
    collector.poll(T0)
    fs.bump("mlx5_0", 1, "local_ack_timeout_err", 2)
    fs.bump("mlx5_0", 1, "symbol_error", 9)
    events = fabric_events(collector.poll(T0 + SEC))
    assert [(e.payload.counter, e.payload.delta) for e in events] == [("local_ack_timeout_err", 2)]


def test_error_counter_after_a_reset_reports_errors_since_the_reset(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs)
    fs.set_counter("mlx5_0", 1, "symbol_error", 500)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "symbol_error", 4)

    (ev,) = fabric_events(collector.poll(T0 + SEC))

    assert (ev.payload.counter, ev.payload.delta) == ("symbol_error", 4)
    assert "reset" in ev.payload.message
    fs.set_counter("mlx5_0", 1, "symbol_error", 0)  # cleared to zero: nothing to report
    assert fabric_events(collector.poll(T0 + 2 * SEC)) == []


def test_saturated_pma_error_counter_says_so(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs)
    fs.set_counter("mlx5_0", 1, "symbol_error", 65_530)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "symbol_error", 65_535)  # 16-bit PMA counter, saturating
    (ev,) = fabric_events(collector.poll(T0 + SEC))
    assert ev.payload.delta == 5 and "saturated" in ev.payload.message


def test_link_flap_gives_link_down_then_state_changes_then_link_up(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2)
    collector = make(fs)
    collector.poll(T0)

    fs.link_down("mlx5_1", 1)
    down = collector.poll(T0 + SEC)
    fs.set_state("mlx5_1", 1, "INIT")
    fs.set_phys_state("mlx5_1", 1, "LinkUp")
    init = collector.poll(T0 + 2 * SEC)
    fs.set_state("mlx5_1", 1, "ARMED")
    armed = collector.poll(T0 + 3 * SEC)
    fs.set_state("mlx5_1", 1, "ACTIVE")
    up = collector.poll(T0 + 4 * SEC)

    d = fabric_events(down)
    assert [(e.payload.event_type, e.payload.old_state, e.payload.new_state) for e in d] == [
        ("link_down", "4: ACTIVE", "1: DOWN"),
        ("error_counter_increase", "", ""),
    ]
    assert d[0].payload.device == "mlx5_1" and "2: Polling" in d[0].payload.message
    assert (d[1].payload.counter, d[1].payload.delta) == ("link_downed", 1)
    assert counters_of(down)[("mlx5_1", 1)].payload.state == "1: DOWN"
    assert [(e.payload.event_type, e.payload.new_state) for e in fabric_events(init)] == [
        ("state_change", "2: INIT")
    ]
    assert [(e.payload.event_type, e.payload.new_state) for e in fabric_events(armed)] == [
        ("state_change", "3: ARMED")
    ]
    assert [
        (e.payload.event_type, e.payload.old_state, e.payload.new_state) for e in fabric_events(up)
    ] == [("link_up", "3: ARMED", "4: ACTIVE")]


def test_phys_state_and_rate_changes_on_an_active_port(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs)
    collector.poll(T0)
    fs.set_phys_state("mlx5_0", 1, "LinkErrorRecovery")
    (ev,) = fabric_events(collector.poll(T0 + SEC))
    assert ev.payload.event_type == "state_change"
    assert (ev.payload.old_state, ev.payload.new_state) == ("5: LinkUp", "6: LinkErrorRecovery")
    fs.set_phys_state("mlx5_0", 1, "LinkUp")
    collector.poll(T0 + 2 * SEC)
    fs.set_rate("mlx5_0", 1, "200 Gb/sec (2X NDR)")  # retrained to half width
    (ev,) = fabric_events(collector.poll(T0 + 3 * SEC))
    assert ev.payload.event_type == "state_change"
    assert ev.payload.new_state == "200 Gb/sec (2X NDR)" and "rate" in ev.payload.message


def test_a_down_port_at_start_is_a_baseline_not_an_event(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, ports=2)
    fs.set_state("mlx5_0", 2, "DOWN")
    fs.set_phys_state("mlx5_0", 2, "Disabled")
    collector = make(fs)
    assert fabric_events(collector.poll(T0)) == []
    assert fabric_events(collector.poll(T0 + SEC)) == []
    assert set(counters_of(collector.poll(T0 + 2 * SEC))) == {("mlx5_0", 1), ("mlx5_0", 2)}


def test_unreadable_port_gives_one_port_unreadable_event(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2)
    collector = make(fs)
    collector.poll(T0)
    fs.break_port("mlx5_0", 1)

    polls = [collector.poll(T0 + i * SEC) for i in range(1, 4)]

    unreadable = [e for evs in polls for e in fabric_events(evs)]
    assert len(unreadable) == 1
    assert unreadable[0].payload.event_type == "port_unreadable"
    assert (unreadable[0].payload.device, unreadable[0].payload.port) == ("mlx5_0", 1)
    assert "IsADirectoryError" in unreadable[0].payload.message
    for evs in polls:  # the other port keeps reporting, the broken one does not
        assert set(counters_of(evs)) == {("mlx5_1", 1)}

    fs.repair_port("mlx5_0", 1)
    back = collector.poll(T0 + 5 * SEC)
    (ev,) = fabric_events(back)
    assert ev.payload.event_type == "other" and "readable again" in ev.payload.message
    assert counters_of(back)[("mlx5_0", 1)].payload.rates_per_s == {}  # baseline restarts


def test_device_that_vanishes_and_returns(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2, ports=2)
    collector = make(fs)
    collector.poll(T0)
    fs.remove_device("mlx5_1")  # rmmod / hot unplug

    gone = collector.poll(T0 + SEC)
    again = collector.poll(T0 + 2 * SEC)

    assert sorted(
        (e.payload.event_type, e.payload.device, e.payload.port) for e in fabric_events(gone)
    ) == [("port_unreadable", "mlx5_1", 1), ("port_unreadable", "mlx5_1", 2)]
    assert fabric_events(again) == []
    assert set(counters_of(again)) == {("mlx5_0", 1), ("mlx5_0", 2)}

    fs.add_device("mlx5_1", ports=2)
    fs.link_down("mlx5_1", 2)  # came back with port 2 down
    back = collector.poll(T0 + 3 * SEC)
    kinds = sorted((e.payload.event_type, e.payload.port) for e in fabric_events(back))
    assert kinds == [("link_down", 2), ("other", 1), ("other", 2)]
    assert ("mlx5_1", 1) in counters_of(back)


def test_device_appearing_later_is_picked_up(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=1)
    collector = make(fs)
    assert set(counters_of(collector.poll(T0))) == {("mlx5_0", 1)}
    fs.add_device("mlx5_1")

    events = collector.poll(T0 + SEC)

    assert set(counters_of(events)) == {("mlx5_0", 1), ("mlx5_1", 1)}
    assert counters_of(events)[("mlx5_1", 1)].payload.rates_per_s == {}
    assert fabric_events(events) == []
    fs.traffic("mlx5_1", 1, xmit_bytes=400)
    later = counters_of(collector.poll(T0 + 2 * SEC))
    assert later[("mlx5_1", 1)].payload.rates_per_s["xmit_bytes"] == 400.0


def test_configured_devices_filter_and_absent_device_reported_once(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2)
    collector = make(fs, devices=["mlx5_0", "mlx5_7"])
    first = collector.poll(T0)
    second = collector.poll(T0 + SEC)
    assert set(counters_of(first)) == {("mlx5_0", 1)}
    (absent,) = fabric_events(first)
    assert absent.payload.event_type == "port_unreadable"
    assert (absent.payload.device, absent.payload.port) == ("mlx5_7", None)
    assert fabric_events(second) == []


def test_unparsable_and_missing_counter_files_are_skipped(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    (fs.port_dir("mlx5_0", 1) / "counters" / "VL15_dropped").write_text("N/A (no PMA)\n")
    collector = make(fs)
    p = counters_of(collector.poll(T0))[("mlx5_0", 1)].payload
    assert "VL15_dropped" not in p.counters and "symbol_error" in p.counters
    assert collector.stats.unparsable_values == 1
    (fs.port_dir("mlx5_0", 1) / "counters" / "port_xmit_wait").unlink()
    p = counters_of(collector.poll(T0 + SEC))[("mlx5_0", 1)].payload
    assert "port_xmit_wait" not in p.counters and p.state == "4: ACTIVE"
    assert fabric_events(collector.poll(T0 + 2 * SEC)) == []


def test_no_infiniband_on_this_node_is_quiet(tmp_path: Path) -> None:
    factory = EventFactory("c1", "cpu-01")
    collector = FabricCollector(FabricCollectorConfig(sysfs_root=tmp_path / "nope"), factory)
    assert collector.poll(T0) == [] and collector.stats.root_unreadable == 1


def test_events_are_wire_valid(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2)
    collector = make(fs)
    collector.poll(T0)
    fs.traffic("mlx5_0", 1, xmit_bytes=10**9)
    fs.link_down("mlx5_1", 1)
    events = collector.poll(T0 + SEC)
    assert EVENT_LIST_ADAPTER.validate_json(dump_events(events)) == events


@pytest.mark.parametrize(
    ("prev", "cur", "bits", "saturating", "expected"),
    [
        (10, 15, 32, False, 5),
        (2**32 - 1, 0, 32, False, 1),  # wrapped
        (2**32 - 10, 5, 32, False, 15),
        (2**31 - 1, 5, 32, False, None),  # from the lower half: a reset
        (2**64 - 2, 3, 64, False, 5),
        (10**12, 7, 64, False, None),
        (65_535, 3, 16, True, None),  # saturating counters never wrap
    ],
)
def test_counter_delta(
    prev: int, cur: int, bits: int, saturating: bool, expected: int | None
) -> None:
    assert counter_delta(prev, cur, bits, saturating=saturating) == expected


# -- issue 17: counters_ext, 32-bit saturation, mlx5 hw_counters thresholds -------------------
# counters_ext names: Linux Documentation/ABI and Prometheus procfs sysfs/class_infiniband.go
# (counters_ext/port_xmit_data_64, ...); hw_counters names: drivers/infiniband/hw/mlx5/counters.c.


def test_counters_ext_64bit_values_are_preferred_under_the_counters_names(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path, devices=1, extended=False, counters_ext=True, device_prefix="mlx4_")
    collector = make(fs)
    fs.set_counter("mlx4_0", 1, "port_xmit_data", 2**32 - 1)  # the legacy file, saturated
    fs.set_counter("mlx4_0", 1, "port_xmit_data_64", 6 * 10**12)
    fs.set_counter("mlx4_0", 1, "port_unicast_xmit_packets", 77)
    collector.poll(T0)
    fs.set_counter("mlx4_0", 1, "port_xmit_data_64", 6 * 10**12 + 250_000)  # words
    fs.set_counter("mlx4_0", 1, "port_xmit_packets_64", 2**33)  # beyond 32 bits: no wrap logic

    events = collector.poll(T0 + SEC)

    p = counters_of(events)[("mlx4_0", 1)].payload
    assert p.counters["port_xmit_data"] == 6 * 10**12 + 250_000  # the 64-bit value, not 2**32-1
    assert p.counters["unicast_xmit_packets"] == 77
    assert not {"port_xmit_data_64", "port_unicast_xmit_packets"} & set(p.counters)
    assert p.rates_per_s["xmit_bytes"] == 1_000_000.0
    assert p.rates_per_s["port_xmit_packets"] == 2**33
    assert fabric_events(events) == []  # the saturated 32-bit file is not read at all


def test_saturated_32bit_counter_warns_once_per_port_and_reports_no_frozen_rate(
    tmp_path: Path,
) -> None:
    fs = FakeIbSysfs(tmp_path, devices=2, extended=False)  # legacy PortCounters only
    collector = make(fs)
    fs.set_counter("mlx5_0", 1, "port_xmit_wait", 2**32 - 100)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "port_xmit_wait", 2**32 - 1)
    fs.set_counter("mlx5_0", 1, "port_rcv_data", 2**32 - 1)

    first = collector.poll(T0 + SEC)
    second = collector.poll(T0 + 2 * SEC)

    warned = fabric_events(first)
    assert [(e.payload.event_type, e.payload.device, e.payload.counter) for e in warned] == [
        ("other", "mlx5_0", "port_rcv_data"),
        ("other", "mlx5_0", "port_xmit_wait"),
    ]
    assert {e.payload.new_state for e in warned} == {"saturated"}
    assert "2**32-1" in warned[0].payload.message
    for events in (first, second):
        rates = counters_of(events)[("mlx5_0", 1)].payload.rates_per_s
        assert "port_xmit_wait" not in rates and "rcv_bytes" not in rates  # unknown, not 0/s
        assert counters_of(events)[("mlx5_1", 1)].payload.rates_per_s["port_xmit_wait"] == 0.0
    assert fabric_events(second) == []  # once, not every poll
    assert collector.stats.saturated_counters == 2

    fs.set_counter("mlx5_0", 1, "port_xmit_wait", 0)  # perfquery -R: re-armed
    collector.poll(T0 + 3 * SEC)
    fs.set_counter("mlx5_0", 1, "port_xmit_wait", 2**32 - 1)
    again = fabric_events(collector.poll(T0 + 4 * SEC))
    assert [e.payload.counter for e in again] == ["port_xmit_wait"]


def test_port_xmit_wait_is_32bit_even_in_the_extended_set(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)  # extended: data counters are 64-bit, PortXmitWait is not
    collector = make(fs)
    collector.poll(T0)
    fs.set_counter("mlx5_0", 1, "port_xmit_wait", 2**32 - 1)
    fs.set_counter("mlx5_0", 1, "port_xmit_data", 2**32 - 1)  # 64-bit here: just a value
    events = collector.poll(T0 + SEC)
    assert [e.payload.counter for e in fabric_events(events)] == ["port_xmit_wait"]
    assert counters_of(events)[("mlx5_0", 1)].payload.rates_per_s["xmit_bytes"] > 0


def test_mlx5_hw_error_counters_raise_events_above_their_threshold(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs, hw_error_thresholds={"out_of_sequence": 100, "local_ack_timeout_err": 1})
    collector.poll(T0)
    fs.bump("mlx5_0", 1, "out_of_sequence", 99)  # below its threshold: adaptive routing noise
    fs.bump("mlx5_0", 1, "local_ack_timeout_err", 3)
    fs.bump("mlx5_0", 1, "rnr_nak_retry_err", 5)  # not configured in this collector

    first = fabric_events(collector.poll(T0 + SEC))
    fs.bump("mlx5_0", 1, "out_of_sequence", 100)
    second = fabric_events(collector.poll(T0 + 2 * SEC))

    assert [(e.payload.counter, e.payload.delta) for e in first] == [("local_ack_timeout_err", 3)]
    assert first[0].payload.event_type == "error_counter_increase"
    assert "threshold 1 per poll" in first[0].payload.message
    assert [(e.payload.counter, e.payload.delta) for e in second] == [("out_of_sequence", 100)]


def test_default_hw_thresholds_cover_the_documented_mlx5_errors(tmp_path: Path) -> None:
    fs = FakeIbSysfs(tmp_path)
    collector = make(fs)
    collector.poll(T0)
    fs.bump("mlx5_0", 1, "rnr_nak_retry_err", 1)
    fs.bump("mlx5_0", 1, "req_cqe_error", 1)
    fs.bump("mlx5_0", 1, "np_cnp_sent", 5_000)  # congestion notifications: below the default
    got = {(e.payload.counter, e.payload.delta) for e in fabric_events(collector.poll(T0 + SEC))}
    assert got == {("rnr_nak_retry_err", 1), ("req_cqe_error", 1)}


def test_hw_error_thresholds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="hw_error_thresholds must be >= 1"):
        FabricCollectorConfig(hw_error_thresholds={"local_ack_timeout_err": 0})
