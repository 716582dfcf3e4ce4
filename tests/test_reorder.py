"""Event-time alignment of a job's inputs, and replay batching by event-time span."""

from __future__ import annotations

from rankscope.collectors.publisher import batch_events
from rankscope.streams.analysis.reorder import EventTimeBuffer
from tests.factories import NOW_NS, gpu_sample, heartbeat, span

S = 10**9


def test_events_from_a_lagging_kind_are_released_in_event_time_order() -> None:
    buf = EventTimeBuffer(idle_lag_s=3.0)
    out = buf.push(span(0, NOW_NS), NOW_NS)  # both channels are known
    # GPU samples of seconds 0..2 arrive before the spans of the same seconds
    for k in range(3):
        out += buf.push(gpu_sample(0, NOW_NS + k * S), NOW_NS + k * S)
    out += buf.release()
    assert [ts for _, ts in out] == [NOW_NS, NOW_NS]  # held at the span channel's time
    for k in range(3):
        out += buf.push(span(0, NOW_NS + k * S + S // 2), NOW_NS + k * S + S // 2)
    out += buf.release()
    out += buf.drain()
    times = [ts for _, ts in out]
    assert times == sorted(times)
    assert buf.stats.out_of_order == 0


def test_a_channel_lagging_beyond_idle_lag_does_not_hold_the_job_back() -> None:
    buf = EventTimeBuffer(idle_lag_s=3.0)
    buf.push(heartbeat("node001", NOW_NS), NOW_NS)  # node001 then goes silent
    released = []
    for k in range(1, 10):
        buf.push(span(0, NOW_NS + k * S), NOW_NS + k * S)
        released += buf.release()
    assert buf.watermark >= NOW_NS + 6 * S
    assert len(released) >= 6
    late = buf.push(heartbeat("node001", NOW_NS + S), NOW_NS + S)
    assert len(late) == 1 and buf.stats.out_of_order == 1  # released at once, not dropped


def test_replay_batches_never_span_more_than_the_limit_of_event_time() -> None:
    now = [0.0]
    events = [heartbeat("node000", NOW_NS + k * S, seq=k) for k in range(30)]

    def tracked():  # type: ignore[no-untyped-def]
        for ev in events:
            now[0] = ev.ts / 1e9
            yield ev

    batches = list(batch_events(tracked(), 200, max_delay_s=1.0, clock=lambda: now[0]))
    assert len(batches) >= 15
    for _, batch in batches:
        assert batch[-1].ts - batch[0].ts <= 1 * S
