"""NCCL / PyTorch / nccl-tests failure lines from public bug reports, behind the prefixes that
real log shippers and launchers write (issue 17): every prefix x line combination must give the
line's event with its fields, the prefix's clock and, when the line names no rank, the launcher's
task number. Lines, prefixes and their sources: tests/data/nccl_log/real_lines.json."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path
from typing import Any

import pytest

from rankscope.collectors.base import EventFactory, JobRegistry
from rankscope.collectors.nccl_log import (
    LogTime,
    NcclLogCollectorConfig,
    create_nccl_log_collector,
    log_time_ns,
    parse_line,
)
from rankscope.schemas.events import CommEventEvent

DATA = json.loads((Path(__file__).parent / "data" / "nccl_log" / "real_lines.json").read_text())
BASES: list[dict[str, Any]] = DATA["bases"]
PREFIXES: list[dict[str, Any]] = DATA["prefixes"]


def _base(fragment: str) -> dict[str, Any]:
    (hit,) = [b for b in BASES if fragment in b["line"]]
    return hit


@pytest.mark.parametrize("prefix", PREFIXES, ids=lambda p: repr(p["prefix"]))
def test_every_real_line_survives_every_real_prefix(prefix: dict[str, Any]) -> None:
    lost = []
    for base in BASES:
        p = parse_line(prefix["prefix"] + base["line"])
        if p is None:
            lost.append(base["line"])
            continue
        expect = dict(base["expect"])
        rank = expect.pop("rank", None)
        for field, value in expect.items():
            assert getattr(p, field) == value, (field, base["line"])
        assert p.rank == (rank if rank is not None else prefix.get("task")), base["line"]
        if "log_time" in prefix:
            assert p.log_time == LogTime(*prefix["log_time"]), base["line"]
        bare = parse_line(base["line"])
        assert bare is not None and p.message == bare.message  # the prefix is not in the text
    assert lost == []  # main lost 67 of these 252 combinations (measured before this change)


def test_socket_errors_keep_the_peer_address() -> None:
    recv = parse_line(_base("Call to recv from 172.17.0.2")["line"])
    connect = parse_line(_base("Connect to fe80::")["line"])
    sent = parse_line(_base("Call to send to")["line"])
    assert recv is not None and connect is not None and sent is not None
    assert recv.peer == "172.17.0.2<40537>" and recv.event_type == "remote_process_exited"
    assert connect.peer == "fe80::966d:ae03:a2:8cf0%ib1<17943>"  # IPv6 with scope and port
    assert connect.event_type == "nccl_warn"  # "Software caused connection abort"
    assert sent.peer == "10.44.137.149<52905>"


def test_warn_line_without_pid_and_tid_is_parsed() -> None:
    p = parse_line(_base("gpu-server320 [5]")["line"])
    assert p is not None
    assert (p.host, p.cuda_dev, p.pid, p.tid, p.level) == ("gpu-server320", 5, None, None, "WARN")
    assert p.log_time == LogTime(2025, 11, 24, 11, 20, 21, 0)  # NCCL's own [%F %T]
    bare = parse_line("NCCL WARN Cuda failure 'an illegal memory access was encountered'")
    assert bare is not None and bare.event_type == "nccl_warn" and bare.host == ""
    # a mangled host:pid:tid stays malformed (not silently re-read as a bare WARN)
    assert parse_line("gpu-a03:73412:tid [2] init.cc:1 NCCL WARN NET/IB : Got completion") is None


def test_nccl_tests_failures_are_nccl_errors() -> None:
    old = parse_line(_base("NCCL failure common.cu:908")["line"])
    new = parse_line(_base("HCA-14: Test NCCL failure")["line"])
    assert old is not None and new is not None
    assert (old.source, old.event_type) == ("nccl", "nccl_error")
    assert (new.event_type, new.host) == ("nccl_error", "HCA-14")
    assert "unhandled cuda error" in new.message
    assert parse_line(" .. HCA-63 pid 1883216: Test failure common.cu:915") is None  # follow-up


def test_communicator_aborted_on_rank() -> None:
    bare = parse_line(_base("aborted on rank 1")["line"])
    with_reason = parse_line(_base("aborted on rank 2.")["line"])
    assert bare is not None and with_reason is not None
    assert (bare.event_type, bare.rank, bare.pg_rank) == ("process_group_abort", 1, 1)
    # the original reason is the more precise event: the timed-out collective
    assert (with_reason.event_type, with_reason.rank, with_reason.seq) == (
        "watchdog_timeout",
        2,
        10,
    )


def test_watchdog_failure_keeps_the_work_sequence_id() -> None:
    p = parse_line("(WorkerDict pid=3490362) " + _base("work sequence id")["line"])
    assert p is not None
    assert (p.event_type, p.seq, p.rank, p.process_group) == ("other", 2635, 1, "0(default_pg)")
    assert p.message.startswith("failure detected by watchdog")


def test_blocking_wait_timeout_is_a_timeout() -> None:
    p = parse_line(_base("timed out in blocking wait")["line"])
    assert p is not None
    assert (p.event_type, p.seq, p.op, p.timeout_ms, p.elapsed_ms) == (
        "watchdog_timeout",
        2521,
        "ALLREDUCE",
        600000,
        None,
    )


def test_srun_task_is_the_rank_only_when_the_line_names_none() -> None:
    nccl = parse_line("12: " + _base("Call to recv from 172.17.0.2")["line"])
    torch = parse_line("12: " + _base("timed out in blocking wait")["line"])
    assert nccl is not None and torch is not None
    assert nccl.rank == 12
    assert torch.rank == 3  # c10's [rank3]: wins over the launcher's task number


def test_zoned_clocks_convert_exactly_and_local_ones_by_local_time() -> None:
    now = calendar.timegm((2025, 11, 24, 3, 30, 0, 0, 0, 0)) * 10**9
    kubectl = LogTime(2025, 11, 24, 3, 20, 21, 1125857, 0)
    plus_one = LogTime(2025, 11, 24, 4, 20, 21, 1125857, 3600)
    minus_four = LogTime(2025, 11, 23, 23, 20, 21, 1125857, -14400)
    expected = calendar.timegm((2025, 11, 24, 3, 20, 21, 0, 0, 0)) * 10**9 + 1125857
    assert log_time_ns(kubectl, now) == log_time_ns(plus_one, now) == expected
    assert log_time_ns(minus_four, now) == expected
    local = LogTime(2025, 11, 24, 3, 20, 21, 0)
    assert log_time_ns(local, now) == int(time.mktime((2025, 11, 24, 3, 20, 21, 0, 0, -1))) * 10**9


def test_collector_takes_the_kubectl_clock_and_the_peer(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    factory = EventFactory("c1", "gpu-a03", jobs=JobRegistry(default_job_id="job-1"))
    config = NcclLogCollectorConfig(paths=[str(logs / "*.log")], cuda_dev_is_gpu_index=False)
    collector = create_nccl_log_collector(config, factory)
    now = 1_760_000_000 * 10**9
    collector.poll(now)
    stamp_s = now // 10**9 - 5
    clock = time.strftime("%Y-%m-%dT%H:%M:%S.000000123Z ", time.gmtime(stamp_s))
    line = clock + "7: " + _base("Call to recv from 172.17.0.2")["line"]
    (logs / "pod.log").write_text(line + "\n")

    events = collector.poll(now + 10**9)

    assert len(events) == 1 and isinstance(events[0], CommEventEvent)
    (ev,) = [e for e in events if isinstance(e, CommEventEvent)]
    assert ev.ts == stamp_s * 10**9 + 123
    assert (ev.rank, ev.payload.peer, ev.payload.event_type) == (
        7,
        "172.17.0.2<40537>",
        "remote_process_exited",
    )
