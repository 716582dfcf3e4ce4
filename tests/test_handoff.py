"""The validate agent's parsed events handed to the windows agent (``streams/stages/handoff.py``).

The handoff is only sound if what the windows agent takes is what parsing the record would have
given it: same bytes, same events. These tests hold it to that, and to taking nothing it was not
given exactly.
"""

from __future__ import annotations

import itertools

import pytest

from rankscope.observability.exporters import worker_samples
from rankscope.schemas.events import EVENT_LIST_ADAPTER, dump_events
from rankscope.simulation.fault_suite import scenario_suite
from rankscope.simulation.faults import simulate_with_faults
from rankscope.streams.config import ValidationLimits
from rankscope.streams.sources import source_headers, source_value
from rankscope.streams.stages.handoff import ParsedHandoff, RawFlow
from rankscope.streams.stages.shared import StageCounters
from rankscope.streams.validate import RecordRef, validate_message
from tests.factories import NOW_NS, gpu_sample, heartbeat, span


def _record(offset: int, ts: int = NOW_NS) -> tuple[bytes, bytes, list]:  # type: ignore[type-arg]
    events = [span(0, ts), gpu_sample(1, ts), heartbeat("node000", ts)]
    value = dump_events(events)
    source = source_headers("p.raw.events", 0, offset)[0][1]
    return source, value, events


def test_the_events_of_exactly_the_bytes_produced_are_taken_once() -> None:
    handoff = ParsedHandoff()
    source, value, events = _record(7)
    handoff.put(source, value, events)
    assert handoff.take(source, bytes(value)) is events  # equal bytes, another object
    assert handoff.take(source, value) is None  # taken at most once: a re-read parses
    assert (handoff.hits, handoff.misses) == (1, 1)


def test_other_bytes_under_the_same_source_are_not_taken() -> None:
    """Another validation of the same raw record (another worker, another clock) may differ."""
    handoff = ParsedHandoff()
    source, value, events = _record(7)
    _, other, _ = _record(7, ts=NOW_NS + 1)
    handoff.put(source, value, events)
    assert handoff.take(source, other) is None
    assert handoff.take(None, value) is None  # a record without a source header


def test_past_the_bound_new_records_are_not_held_and_the_oldest_stay() -> None:
    """The windows agent reads in production order: the oldest held record is the one it needs
    next, so a full handoff lets the new one go (an LRU would drop the oldest and miss every
    record while the validate agent leads by more than the bound)."""
    handoff = ParsedHandoff(capacity=6)  # events: two records of three
    records = [_record(i) for i in range(3)]
    for source, value, events in records:
        handoff.put(source, value, events)
    assert handoff.not_held == 1
    assert handoff.take(records[0][0], records[0][1]) is records[0][2]
    assert handoff.take(records[1][0], records[1][1]) is records[1][2]
    assert handoff.take(records[2][0], records[2][1]) is None  # parsed from the record
    handoff.put(*records[0])
    handoff.put(*records[0])  # the same record put twice is held once
    assert handoff.held_events == 3
    assert handoff.take(records[0][0], records[0][1]) is records[0][2]
    small = ParsedHandoff(capacity=2)
    small.put(*records[0])  # three events: over the bound, not held
    assert small.take(records[0][0], records[0][1]) is None


def test_the_metrics_show_records_not_held_and_events_held() -> None:
    """An operator sizing the handoff sees both from the worker's metrics."""
    handoff = ParsedHandoff(capacity=6)
    records = [_record(i) for i in range(3)]
    for source, value, events in records:
        handoff.put(source, value, events)
    counters = StageCounters()
    handoff.report(counters)
    samples = {name: value for name, _, value in worker_samples(counters)}
    assert samples["rankscope_worker_handoff_not_held"] == 1
    assert samples["rankscope_worker_handoff_held_events"] == 6
    handoff.take(records[0][0], records[0][1])
    handoff.report(counters)
    samples = {name: value for name, _, value in worker_samples(counters)}
    assert samples["rankscope_worker_handoff_held_events"] == 3


def test_a_backlog_longer_than_the_bound_still_hands_over_what_fits() -> None:
    """The validate agent 30 records ahead of a handoff that holds 10: the agent takes the 10
    held, and every record put after it took some is held again."""
    handoff = ParsedHandoff(capacity=30)  # ten records of three events
    records = [_record(i) for i in range(40)]
    for r in records[:30]:  # validated while the windows agent is busy
        handoff.put(*r)
        handoff.delivered(r[0], 0)
    hits = 0
    for i, (source, value, events) in enumerate(records):
        hits += handoff.take(source, value) is events
        if i + 30 < len(records):  # the validate agent goes on, one record per record read
            nxt = records[i + 30]
            handoff.put(*nxt)
            handoff.delivered(nxt[0], 0)
    assert hits >= 10 + 10  # the first ten, and ten held once the agent freed places
    assert handoff.held_events == 0  # nothing left behind


def test_records_the_agent_read_past_are_let_go() -> None:
    """Taking a record releases what was delivered before it to the same events partition (the
    agent skipped it or another consumer had it), and only that partition's."""
    handoff = ParsedHandoff()
    records = [_record(i) for i in range(4)]
    for r, partition in zip(records, [0, 1, 0, 0], strict=True):
        handoff.put(*r)
        handoff.delivered(r[0], partition)
    assert handoff.take(records[2][0], records[2][1]) is records[2][2]
    assert handoff.take(records[0][0], records[0][1]) is None  # passed, let go
    assert handoff.take(records[1][0], records[1][1]) is records[1][2]  # partition 1: kept
    assert handoff.take(records[3][0], records[3][1]) is records[3][2]
    assert handoff.held_events == 0


def test_a_full_handoff_lets_go_of_records_held_past_the_stale_age() -> None:
    """A record whose delivery never reported cannot hold its place for ever."""
    handoff = ParsedHandoff(capacity=6, stale_s=0.0)
    records = [_record(i) for i in range(3)]
    for r in records:
        handoff.put(*r)
    assert handoff.not_held == 0  # the oldest went as stale to make room
    assert handoff.take(records[0][0], records[0][1]) is None
    assert handoff.take(records[2][0], records[2][1]) is records[2][2]
    patient = ParsedHandoff(capacity=6)  # the default age: nothing is stale yet
    for r in records:
        patient.put(*r)
    assert patient.not_held == 1


def test_a_record_read_before_its_delivery_report_leaves_no_trace() -> None:
    """The consumer may hand the record out before the producer reports its delivery."""
    handoff = ParsedHandoff()
    source, value, events = _record(1)
    handoff.put(source, value, events)
    assert handoff.take(source, value) is events
    handoff.delivered(source, 0)  # the report comes late: nothing is held for it
    assert handoff.held_events == 0 and not handoff._delivered


def test_the_source_header_is_found_in_either_header_shape() -> None:
    headers = source_headers("p.raw.events", 3, 1234, split=2)
    assert source_value(headers) == b"p.raw.events:3/2:1234"
    assert source_value(dict(headers)) == b"p.raw.events:3/2:1234"
    assert source_value([("other", b"x")]) is None
    assert source_value(None) is None


def test_validated_events_equal_their_serialised_form_parsed_again() -> None:
    """What makes the handoff invisible: for every kind the simulator and its faults produce,
    the validate stage's events equal what the windows agent would parse from the record."""
    limits = ValidationLimits()
    kinds: set[str] = set()
    for case in scenario_suite(16, 1, duration_s=30.0):
        events, _ = simulate_with_faults(case.config, case.faults)
        while batch := list(itertools.islice(events, 200)):
            raw = dump_events(batch)
            result = validate_message(raw, RecordRef("t", 0, 0, 0), limits, now_ns=batch[0].ts)
            assert len(result.events) == len(batch) and not result.dead
            assert EVENT_LIST_ADAPTER.validate_json(dump_events(result.events)) == result.events
            kinds |= {ev.kind for ev in result.events}
    assert {"span", "gpu_sample", "heartbeat", "node_inventory", "fabric_counters"} <= kinds


def test_dump_events_writes_the_bytes_of_the_list_serializer() -> None:
    """The per-model fast path of ``dump_events`` is byte for byte the adapter's output (the
    events topic's wire format), for every kind, escapes and non-ASCII text included."""
    odd = span(3, NOW_NS, phase="step")
    odd = odd.model_copy(update={"job_id": 'job "ü" \\ \n\u2028 ✓'})
    batches: list[list] = [[], [odd]]  # type: ignore[type-arg]
    for case in scenario_suite(16, 1, duration_s=20.0):
        events, _ = simulate_with_faults(case.config, case.faults)
        batches.append(list(events))
    kinds = {ev.kind for batch in batches for ev in batch}
    assert len(kinds) >= 6, kinds
    for batch in batches:
        assert dump_events(batch) == EVENT_LIST_ADAPTER.dump_json(batch, by_alias=True)


class _Consumer:
    """Stands in for faust's consumer: records what the flow asked of it, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


def _flow(pause_at: int = 6, resume_at: int = 3) -> tuple[ParsedHandoff, RawFlow, _Consumer]:
    handoff = ParsedHandoff(capacity=100)
    consumer = _Consumer()
    return handoff, RawFlow(handoff, consumer.pause, consumer.resume, pause_at, resume_at), consumer


def test_the_raw_topics_pause_while_the_windows_agent_is_behind_and_resume_once_it_caught_up() -> (
    None
):
    handoff, flow, consumer = _flow()
    records = [_record(i) for i in range(4)]  # three events each
    handoff.put(*records[0])
    flow.after_put()
    assert consumer.calls == []  # 3 events held: under the pause mark
    handoff.put(*records[1])
    flow.after_put()
    handoff.put(*records[2])  # fetched before the pause took effect: still validated
    flow.after_put()
    assert consumer.calls == ["pause"] and flow.paused  # paused once, not once per record
    assert handoff.take(records[0][0], records[0][1]) is records[0][2]
    flow.after_take()
    assert consumer.calls == ["pause"]  # 6 events still held: above the resume mark
    assert handoff.take(records[1][0], records[1][1]) is records[1][2]
    flow.after_take()
    assert consumer.calls == ["pause", "resume"] and not flow.paused
    assert handoff.take(records[2][0], records[2][1]) is records[2][2]  # nothing was dropped


def test_records_the_windows_agent_skips_or_another_worker_reads_do_not_hold_the_pause() -> None:
    handoff, flow, consumer = _flow()
    records = [_record(i) for i in range(2)]
    for r in records:
        handoff.put(*r)
        flow.after_put()
    assert consumer.calls == ["pause"]
    handoff.discard(records[0][0])  # e.g. its events partition is another worker's
    flow.after_take()
    assert consumer.calls == ["pause", "resume"]
    assert handoff.held_events == 3


def test_a_pause_the_windows_agent_never_relieves_ends_and_the_held_records_are_let_go() -> None:
    handoff, flow, consumer = _flow()
    for i in range(2):
        handoff.put(*_record(i))
        flow.after_put()
    start = handoff.last_take
    flow.tick(start + flow.stall_s / 2)
    assert consumer.calls == ["pause"]  # the agent may just be slow
    flow.tick(start + flow.stall_s)
    assert consumer.calls == ["pause", "resume"] and flow.stalls == 1
    assert handoff.held_events == 0  # the agent parses them when it reads them


def test_a_rebalance_resumes_and_forgets_what_was_held() -> None:
    handoff, flow, consumer = _flow()
    flow.reset()
    assert consumer.calls == []  # not paused: nothing to resume
    for i in range(2):
        handoff.put(*_record(i))
        flow.after_put()
    flow.reset()
    assert consumer.calls == ["pause", "resume"] and handoff.held_events == 0
    with pytest.raises(ValueError):
        RawFlow(handoff, consumer.pause, consumer.resume, pause_at=3, resume_at=3)
