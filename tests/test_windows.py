"""Event-time windows: emit once on close, grace, late routing, idle and terminal close."""

from __future__ import annotations

from rankscope.streams.config import WindowConfig
from rankscope.streams.windows import WindowAggregator
from tests.factories import gpu_sample, scheduler, span

S = 10**9
T0 = 1_800_000_000 * S  # a window boundary for 5 s windows


def agg(
    size: float = 5, grace: float = 2, idle: float = 30, discovery: float = 0
) -> WindowAggregator:
    return WindowAggregator(
        WindowConfig(size_s=size, grace_s=grace, idle_close_s=idle, channel_discovery_s=discovery)
    )


def test_window_emitted_once_after_end_plus_grace() -> None:
    a = agg()
    for r in range(2):
        for k in range(1, 5):
            assert a.add(span(r, T0 + k * S, dur_s=1.0 + r * 0.5), wall_s=0) is None
        a.add(gpu_sample(r, T0 + 2 * S, util=90 + r), wall_s=0)
    assert a.close_ready(0) == []
    # stream time reaches end (T0+5s) but not end + grace
    a.add(span(0, T0 + 6 * S), 0)
    a.add(gpu_sample(0, T0 + 6 * S), 0)
    assert a.close_ready(0) == []
    a.add(span(0, T0 + 7 * S), 0)
    a.add(gpu_sample(0, T0 + 7 * S), 0)
    out = a.close_ready(0)
    assert [(w.rank, w.window_start_ns) for w in out] == [(0, T0), (1, T0)]
    w1 = out[1]
    assert w1.step_count == 4 and w1.step_time_mean_s == 1.5 and w1.step_time_max_s == 1.5
    assert w1.gpu_util_mean_pct == 91 and w1.gpu_sample_count == 1 and w1.event_count == 5
    assert out[0].event_count == 5
    assert w1.window_id == f"job-1/1/{T0}"
    assert a.close_ready(0) == []  # never twice


def test_event_for_a_closed_window_is_late_and_does_not_reopen_it() -> None:
    a = agg()
    a.add(span(0, T0 + 1 * S), 0)
    a.add(span(0, T0 + 8 * S), 0)
    assert len(a.close_ready(0)) == 1
    late = a.add(span(1, T0 + 2 * S), 0)
    assert late is not None
    assert late.window_start_ns == T0 and late.lateness_ns == 3 * S
    assert a.stats.late_events == 1
    assert [w.window_start_ns for w in a.close_ready(0)] == []


def test_out_of_order_within_grace_is_not_late() -> None:
    a = agg()
    a.add(span(0, T0 + 6 * S), 0)  # stream time 6 s: window [0,5) not closed (needs 7 s)
    assert a.add(span(1, T0 + 4 * S), 0) is None
    a.add(span(0, T0 + 7 * S), 0)
    out = a.close_ready(0)
    assert [(w.rank, w.window_start_ns) for w in out] == [(1, T0)]


def test_idle_job_is_closed_by_processing_time() -> None:
    a = agg(idle=10)
    a.add(span(0, T0 + 1 * S), wall_s=100)
    assert a.close_ready(105) == []
    assert len(a.close_ready(111)) == 1
    assert a.open_windows() == 0
    assert a.add(span(0, T0 + 2 * S), wall_s=112) is not None  # now late


def test_a_channel_that_runs_ahead_does_not_make_the_others_late() -> None:
    """Collectors batch per kind and node: GPU samples may arrive 60 s ahead of spans."""
    a = agg()
    a.add(span(0, T0 + 1 * S), 0)
    for k in range(60):
        a.add(gpu_sample(0, T0 + k * S), 0)
    assert a.close_ready(0) == []  # the span channel still sits at 1 s
    for k in range(2, 60):
        assert a.add(span(0, T0 + k * S), 0) is None  # none of them is late
    out = a.close_ready(0)
    assert [w.window_start_ns for w in out] == [T0 + i * 5 * S for i in range(11)]
    assert all(w.step_count == 5 and w.gpu_sample_count == 5 for w in out[1:])


def test_a_silent_channel_stops_holding_the_watermark_back() -> None:
    a = agg(idle=100)  # job-level idle close far away; only the channel rule applies
    a.add(span(0, T0 + 1 * S), wall_s=0)  # node000
    a.add(span(8, T0 + 1 * S), wall_s=0)  # node001, which then goes silent
    for k in range(2, 20):
        a.add(span(0, T0 + k * S), wall_s=k * 0.1)
    assert a.close_ready(2.0) == []  # node001 still counts as active
    out = a.close_ready(6.0)  # 6 s of silence > channel_idle_s (5 s)
    assert {(w.rank, w.window_start_ns) for w in out} >= {(0, T0), (8, T0)}


def test_scheduler_and_heartbeat_events_are_not_windowed() -> None:
    a = agg()
    assert a.add(scheduler("job_completed", T0 + 100 * S), 0) is None
    a.add(span(0, T0 + 1 * S), 0)
    assert a.close_ready(0) == []  # the scheduler event did not advance stream time


def test_jobs_have_independent_stream_time() -> None:
    a = agg()
    a.add(span(0, T0 + 1 * S, job="a"), 0)
    a.add(span(0, T0 + 60 * S, job="b"), 0)
    out = a.close_ready(0)
    assert [w.job_id for w in out] == []  # b's window still open (no grace passed), a untouched
    a.add(span(0, T0 + 70 * S, job="b"), 0)
    assert [w.job_id for w in a.close_ready(0)] == ["b"]


def test_clock_offset_moves_event_into_the_right_window() -> None:
    a = agg()
    # The node's clock runs 3 s ahead: its 6.5 s is really 3.5 s -> first window.
    a.add(span(0, T0 + int(6.5 * S), clock_offset_ns=3 * S), 0)
    a.add(span(1, T0 + 8 * S), 0)
    out = a.close_ready(0)
    assert [(w.rank, w.window_start_ns) for w in out] == [(0, T0)]


def test_windows_wait_for_inputs_to_be_discovered() -> None:
    """The GPU-sample topic is read first; spans of the same seconds come a moment later."""
    a = agg(discovery=3)
    for k in range(30):
        a.add(gpu_sample(0, T0 + k * S), wall_s=100.0)
    assert a.close_ready(101.0) == []  # still discovering the job's inputs
    for k in range(30):
        assert a.add(span(0, T0 + k * S + S // 2), wall_s=101.5) is None
    out = a.close_ready(103.5)
    assert len(out) == 5 and all(w.step_count == 5 for w in out)


# -- bounded state (issue 15) ------------------------------------------------------------------
def test_a_record_checks_only_its_own_jobs_and_the_sweep_checks_the_rest() -> None:
    a = agg(idle=10)
    for j in range(1_000):
        a.add(span(0, T0 + S, job=f"quiet-{j}"), wall_s=0)
    a.add(span(0, T0 + S, job="busy"), wall_s=20)
    # every quiet job is idle-closeable at 20 s, but a record of "busy" closes nothing of theirs
    assert a.close_ready(20, ["busy"]) == []
    assert a.open_windows() == 1_001
    swept = a.close_ready(20)
    assert sorted(w.job_id for w in swept) == sorted(f"quiet-{j}" for j in range(1_000))
    assert a.open_windows() == 1


def test_quiet_jobs_with_nothing_open_are_forgotten_after_the_retention() -> None:
    a = agg(idle=10)
    a.add(span(0, T0 + S, job="done"), wall_s=0)
    a.add(span(0, T0 + S, job="open"), wall_s=0)
    assert len(a.close_ready(15, ["done"])) == 1  # "done" idle-closed; "open" not swept yet
    assert a.evict_idle(100, retention_s=3600) == []
    assert a.evict_idle(3_700, retention_s=3600) == ["done"]
    assert a.jobs() == 1  # "open" still has an open window: kept until it closes
    assert a.closed_until("done") == -1 and a.settled_until("done") == float("inf")
    assert len(a.close_ready(3_700)) == 1
    assert a.evict_idle(7_400, retention_s=3600) == ["open"] and a.jobs() == 0


def test_a_job_cannot_bring_more_ranks_or_nodes_than_its_caps() -> None:
    from rankscope.streams.windows import JobShapeGuard

    guard = JobShapeGuard(max_ranks=4, max_nodes=2)
    admitted = [guard.admit(span(r, T0, job="huge")) for r in range(8)]
    # span() puts ranks 0-7 on node000: the rank cap is what refuses
    assert admitted == [True] * 4 + [False] * 4
    assert guard.admit(span(2, T0 + S, job="huge"))  # a known rank goes on
    assert guard.over == {"huge": 4}
    nodes = [guard.admit(span(r * 8, T0, job="wide")) for r in range(3)]  # node000..node002
    assert nodes == [True, True, False]
    assert guard.admit(span(0, T0, job="other"))  # caps are per job
    guard.forget("huge")
    assert guard.admit(span(7, T0, job="huge")) and "huge" not in guard.over
