"""NCCL / PyTorch ProcessGroupNCCL log lines: the parser on real line shapes, and the tailer.

The line shapes are those printed by NCCL ``src/debug.cc`` (``host:pid:tid [cudaDev] file:line
NCCL WARN ...``, optional ``[%F %T] `` timestamp), NCCL's net_ib/socket WARN formats, and PyTorch
``ProcessGroupNCCL.cpp`` (``logPrefix()`` variants, ``WorkNCCL(...)`` printing, c10's
``[rankN]:[E<M><DD> hh:mm:ss.ns file:line]`` prefix); hostnames and addresses are ours.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.collectors.nccl_log import (
    LogTime,
    NcclLogCollector,
    NcclLogCollectorConfig,
    ParsedCommLine,
    create_nccl_log_collector,
    expand_nccl_debug_file,
    log_time_ns,
    parse_line,
)
from rankscope.schemas.events import EVENT_LIST_ADAPTER, CommEventEvent, Event, dump_events

# -- real-format lines ------------------------------------------------------------------------

WATCHDOG_OLD = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=118352, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
    "Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)
WATCHDOG_C10 = (
    "[rank2]:[E1109 16:13:20.222288244 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=500045, OpType=_REDUCE_SCATTER_BASE, "
    "NumelIn=67108864, NumelOut=8388608, Timeout(ms)=600000) ran for 600038 milliseconds before "
    "timing out."
)
WATCHDOG_PG = (
    "[rank13]:[E409 05:10:01.930967482 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 13] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2201, "
    "OpType=_ALLGATHER_BASE, NumelIn=4194304, NumelOut=67108864, Timeout(ms)=600000) ran for "
    "600047 milliseconds before timing out."
)
WATCHDOG_SUB_PG = (
    "[PG ID 12 PG GUID 35(EXPERT_MODEL_PARALLEL_GROUP) Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=68585472, "
    "NumelOut=68585472, Timeout(ms)=1800000) ran for 1800074 milliseconds before timing out."
)
REMOTE_EXITED = (
    "[rank9]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 9] Process group watchdog thread terminated "
    "with exception: NCCL error: remote process exited or there was a network error, "
    "NCCL version 2.20.5"
)
NCCL_REMOTE_ERROR = (
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely."
)
NET_IB_OLD = (
    "gpu-a03:73412:73590 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
    "peer 10.40.2.17<53818> with error 12, opcode 0, len 0, vendor err 129"
)
NET_IB_NEW = (
    "[2026-03-02 14:05:11] gpu-a03:73412:73590 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
    "Got completion from peer 10.40.2.17<53818> with status=12 opcode=0 len=0 vendor err 129 "
    "(Recv) localGid ::ffff:10.40.1.3 remoteGids::ffff:10.40.2.17 hca mlx5_2"
)
NET_IB_LAST_ERROR = (
    "NET/IB : Got completion from peer 10.40.2.17<33956> with error 5, opcode 0, len 1, vendor "
    "err 244 (Recv) localGid ::ffff:10.40.1.3 remoteGid ::ffff:10.40.2.17"
)
NET_IB_ASYNC = (
    "[2026-02-11 16:02:37] gpu-a03:73412:73415 [0] transport/net_ib.cc:253 NCCL WARN NET/IB : "
    "mlx5_1:1 Got non-fatal async event: port error(10)"
)
SOCKET_CLOSED = (
    "gpu-a03:73412:73630 [2] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by "
    "remote peer gpu-a07<41022>"
)
CUDA_FAILURE = (
    "gpu-a03:73412:73412 [2] enqueue.cc:1556 NCCL WARN Cuda failure 'an illegal memory access was "
    "encountered'"
)
PROXY_FAILED = (
    "gpu-a03:73412:73630 [2] proxy.cc:1478 NCCL WARN [Proxy Service 2] Failed to execute "
    "operation Connect from rank 10, retcode 6"
)
INTERNAL_ERROR = "ncclInternalError: Internal check failed."
SYSTEM_ERROR = (
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error. It can be also caused by unexpected exit of a remote peer, you can check NCCL "
    "warnings for failure reason and see if there is connection closure by a peer."
)
DIST_BACKEND_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, internal error - please report this issue "
    "to the NCCL developers, NCCL version 2.19.3"
)
SOME_FAILED = (
    "[E ProcessGroupNCCL.cpp:414] Some NCCL operations have failed or timed out. Due to the "
    "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
    "corrupted/incomplete data. To avoid this inconsistency, we are taking the entire process down."
)
INFO_LINE = (
    "gpu-a03:73412:73412 [2] NCCL INFO Channel 00/0 : 2[2] -> 10[2] [send] via NET/IB/2/GDRDMA"
)
MALFORMED = "gpu-a03:73412:tid [2] init.cc:1 NCCL WARN NET/IB : Got completion from peer"


def parsed(line: str) -> ParsedCommLine:
    p = parse_line(line)
    assert p is not None, line
    return p


def test_watchdog_timeout_old_rank_prefix() -> None:
    p = parsed(WATCHDOG_OLD)
    assert (p.source, p.event_type) == ("pytorch", "watchdog_timeout")
    assert (p.rank, p.pg_rank, p.process_group) == (3, 3, "")
    assert (p.op, p.seq, p.timeout_ms, p.elapsed_ms) == ("ALLREDUCE", 118352, 600000, 600012)
    assert p.message.startswith("Watchdog caught collective operation timeout: WorkNCCL(")
    assert p.level == "E" and p.log_time is None


def test_watchdog_timeout_with_c10_rank_prefix_and_glog_time() -> None:
    p = parsed(WATCHDOG_C10)
    assert (p.event_type, p.rank, p.op, p.seq) == (
        "watchdog_timeout",
        2,
        "_REDUCE_SCATTER_BASE",
        500045,
    )
    assert (p.timeout_ms, p.elapsed_ms) == (600000, 600038)
    assert p.log_time == LogTime(None, 11, 9, 16, 13, 20, 222288244)


def test_watchdog_timeout_pg_prefixed_newer_format() -> None:
    p = parsed(WATCHDOG_PG)
    assert (p.source, p.event_type) == ("pytorch", "watchdog_timeout")
    assert (p.rank, p.pg_rank, p.process_group) == (13, 13, "0(default_pg)")
    assert (p.op, p.seq, p.timeout_ms, p.elapsed_ms) == ("_ALLGATHER_BASE", 2201, 600000, 600047)
    assert p.log_time == LogTime(None, 4, 9, 5, 10, 1, 930967482)  # month printed unpadded
    assert p.message.startswith("Watchdog caught")  # prefixes stripped


def test_sub_process_group_rank_is_not_taken_as_the_global_rank() -> None:
    p = parsed(WATCHDOG_SUB_PG)
    assert (p.rank, p.pg_rank) == (None, 1)
    assert p.process_group == "35(EXPERT_MODEL_PARALLEL_GROUP)"
    assert (p.op, p.seq, p.timeout_ms, p.elapsed_ms) == ("BROADCAST", 4, 1800000, 1800074)


def test_remote_process_exited_or_network_error() -> None:
    p = parsed(REMOTE_EXITED)
    assert (p.source, p.event_type) == ("pytorch", "remote_process_exited")
    assert (p.rank, p.process_group) == (9, "0")
    assert p.message == (
        "Process group watchdog thread terminated with exception: NCCL error: remote process "
        "exited or there was a network error, NCCL version 2.20.5"
    )
    p = parsed(NCCL_REMOTE_ERROR)
    assert (p.source, p.event_type, p.rank) == ("pytorch", "remote_process_exited", None)


def test_net_ib_completion_error_old_format() -> None:
    p = parsed(NET_IB_OLD)
    assert (p.source, p.event_type) == ("nccl", "net_ib_error")
    assert (p.host, p.pid, p.tid, p.cuda_dev, p.level) == ("gpu-a03", 73412, 73590, 2, "WARN")
    assert (p.peer, p.ib_status, p.vendor_err) == ("10.40.2.17<53818>", 12, 129)
    assert p.rank is None and p.log_time is None
    assert p.message == (
        "NET/IB : Got completion from peer 10.40.2.17<53818> with error 12, opcode 0, len 0, "
        "vendor err 129"
    )


def test_net_ib_completion_error_newer_format_with_timestamp_and_hca() -> None:
    p = parsed(NET_IB_NEW)
    assert (p.event_type, p.peer, p.ib_status, p.vendor_err, p.hca) == (
        "net_ib_error",
        "10.40.2.17<53818>",
        12,
        129,
        "mlx5_2",
    )
    assert p.log_time == LogTime(2026, 3, 2, 14, 5, 11, 0)


def test_net_ib_last_error_printed_bare_by_pytorch() -> None:
    p = parsed(NET_IB_LAST_ERROR)
    assert (p.source, p.event_type, p.peer, p.ib_status, p.vendor_err) == (
        "nccl",
        "net_ib_error",
        "10.40.2.17<33956>",
        5,
        244,
    )


def test_net_ib_async_port_error_names_the_hca_port() -> None:
    p = parsed("348: " + NET_IB_ASYNC)  # srun --label prefix
    assert (p.event_type, p.hca, p.cuda_dev) == ("net_ib_error", "mlx5_1:1", 0)
    assert p.message == "NET/IB : mlx5_1:1 Got non-fatal async event: port error(10)"


def test_socket_closed_by_remote_peer() -> None:
    p = parsed(SOCKET_CLOSED)
    assert (p.source, p.event_type, p.peer) == ("nccl", "remote_process_exited", "gpu-a07<41022>")


def test_generic_nccl_warn() -> None:
    p = parsed(CUDA_FAILURE)
    assert (p.source, p.event_type) == ("nccl", "nccl_warn")
    assert p.message == "Cuda failure 'an illegal memory access was encountered'"
    p = parsed(PROXY_FAILED)
    assert (p.event_type, p.peer_rank) == ("nccl_warn", 10)


def test_nccl_error_code_lines() -> None:
    assert (parsed(INTERNAL_ERROR).event_type, parsed(INTERNAL_ERROR).source) == (
        "nccl_error",
        "pytorch",
    )
    assert parsed(SYSTEM_ERROR).event_type == "nccl_error"
    p = parsed(DIST_BACKEND_ERROR)
    assert p.event_type == "nccl_error" and p.message == DIST_BACKEND_ERROR


def test_process_group_abort() -> None:
    p = parsed(SOME_FAILED)
    assert (p.source, p.event_type, p.rank) == ("pytorch", "process_group_abort", None)


def test_info_chatter_malformed_and_unrelated_lines_are_none() -> None:
    assert parse_line(INFO_LINE) is None
    assert parse_line(MALFORMED) is None
    assert parse_line("") is None
    assert parse_line("epoch 3 step 1200 loss 2.113") is None
    assert parse_line("NCCL version 2.21.5+cuda12.4") is None
    assert parse_line("Last error:") is None


def test_log_time_ns_and_year_inference() -> None:
    now = time.mktime((2026, 1, 2, 10, 0, 0, 0, 0, -1))
    now_ns = int(now) * 10**9
    assert log_time_ns(LogTime(2026, 1, 2, 9, 59, 58, 5), now_ns) == now_ns - 2 * 10**9 + 5
    # "Dec 31" read on Jan 2 without a year is last year's
    dec31 = log_time_ns(LogTime(None, 12, 31, 23, 0, 0, 0), now_ns)
    assert dec31 is not None and now_ns - dec31 < 2 * 86_400 * 10**9
    assert log_time_ns(LogTime(None, 13, 1, 0, 0, 0, 0), now_ns) is None


def test_expand_nccl_debug_file() -> None:
    assert expand_nccl_debug_file("/tmp/nccl.%h.%p", "gpu-a03.cluster.local") == (
        "/tmp/nccl.gpu-a03.*"
    )
    assert expand_nccl_debug_file("/l/100%%_%x.log", "h") == "/l/100%_%x.log"


# -- the tailer -------------------------------------------------------------------------------

NOW = 1_760_000_000 * 10**9


class Env:
    def __init__(self, tmp: Path, **cfg: object) -> None:
        self.dir = tmp / "logs"
        self.dir.mkdir()
        self.jobs = JobRegistry(default_job_id="job-1")
        self.factory = EventFactory("c1", "gpu-a03", jobs=self.jobs)
        config = NcclLogCollectorConfig(paths=[str(self.dir / "*.log")], **cfg)
        self.collector: NcclLogCollector = create_nccl_log_collector(config, self.factory)
        self.t = NOW

    def poll(self) -> list[CommEventEvent]:
        self.t += 500_000_000
        events: list[Event] = self.collector.poll(self.t)
        assert all(isinstance(e, CommEventEvent) for e in events)
        return [e for e in events if isinstance(e, CommEventEvent)]

    def append(self, name: str, data: str | bytes) -> Path:
        path = self.dir / name
        with path.open("ab") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return path


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_existing_content_is_skipped_and_appends_are_read(env: Env) -> None:
    env.append("rank0.log", NET_IB_OLD + "\n" + WATCHDOG_OLD + "\n")
    assert env.poll() == []  # present at the first poll: start at the end
    env.jobs.bind_gpu(2, JobBinding("job-42", rank=10, local_rank=2))
    path = env.append("rank0.log", "\n" + NET_IB_OLD + "\n" + INFO_LINE + "\n" + WATCHDOG_PG + "\n")

    events = env.poll()

    assert [e.payload.event_type for e in events] == ["net_ib_error", "watchdog_timeout"]
    ib, wd = events
    assert (ib.job_id, ib.rank, ib.local_rank, ib.gpu) == ("job-42", 10, 2, 2)  # via [cudaDev]
    assert ib.payload.peer == "10.40.2.17<53818>" and ib.payload.pid == 73412
    assert ib.payload.log_file == str(path) and ib.payload.source == "nccl"
    assert (ib.payload.host, ib.payload.cuda_dev, ib.payload.ib_status) == ("gpu-a03", 2, 12)
    assert ib.payload.vendor_err == 129
    assert ib.ts == env.t and ib.observed_ts >= ib.ts - 10**9
    assert (wd.rank, wd.gpu, wd.job_id) == (13, None, "job-42")  # node's job; rank from the line
    assert (wd.payload.op, wd.payload.seq, wd.payload.timeout_ms) == (
        "_ALLGATHER_BASE",
        2201,
        600000,
    )
    assert wd.payload.process_group == "0(default_pg)"
    stats = env.collector.stats
    assert (stats.lines_read, stats.events, stats.lines_ignored) == (4, 2, 2)
    assert EVENT_LIST_ADAPTER.validate_json(dump_events(list(events))) == events


def test_partial_lines_wait_for_their_newline(env: Env) -> None:
    env.append("a.log", "")
    env.poll()
    env.append("a.log", CUDA_FAILURE[:40])
    assert env.poll() == []
    env.append("a.log", CUDA_FAILURE[40:])
    assert env.poll() == []
    env.append("a.log", "\n")
    (ev,) = env.poll()
    assert ev.payload.message == "Cuda failure 'an illegal memory access was encountered'"


def test_rotation_drains_the_old_file_then_reads_the_new_one_from_start(env: Env) -> None:
    path = env.append("train.log", "")
    env.poll()
    env.append("train.log", SOCKET_CLOSED + "\n")
    os.rename(path, env.dir / "train.log.1")  # logrotate: not matched by *.log
    env.append("train.log", PROXY_FAILED + "\n")

    events = env.poll()

    assert [e.payload.event_type for e in events] == ["remote_process_exited", "nccl_warn"]
    assert env.collector.stats.rotations == 1
    env.append("train.log", CUDA_FAILURE + "\n")
    assert [e.payload.message[:12] for e in env.poll()] == ["Cuda failure"]


def test_rotation_to_a_matched_name_keeps_the_offset(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.collector = create_nccl_log_collector(
        NcclLogCollectorConfig(paths=[str(env.dir / "*.log*")]), env.factory
    )
    path = env.append("train.log", CUDA_FAILURE + "\n")
    env.poll()
    env.append("train.log", SOCKET_CLOSED + "\n")
    os.rename(path, env.dir / "train.log.1")
    env.append("train.log", PROXY_FAILED + "\n")
    events = env.poll()
    assert sorted(e.payload.event_type for e in events) == ["nccl_warn", "remote_process_exited"]
    assert env.collector.stats.renames_followed == 1
    # a rotation chain in one go: .log.1 -> .log.2, .log -> .log.1, new .log
    env.append("train.log", CUDA_FAILURE + "\n")
    os.rename(env.dir / "train.log.1", env.dir / "train.log.2")
    os.rename(env.dir / "train.log", env.dir / "train.log.1")
    env.append("train.log", SOCKET_CLOSED + "\n")
    events = env.poll()
    assert sorted(e.payload.event_type for e in events) == ["nccl_warn", "remote_process_exited"]
    assert env.collector.stats.renames_followed == 3
    assert env.collector.stats.rotations == 0


def test_truncation_reads_again_from_the_start(env: Env) -> None:
    path = env.append("a.log", "x" * 300 + "\n")
    env.poll()
    path.write_text(PROXY_FAILED + "\n")  # truncated, rewritten shorter than our offset
    (ev,) = env.poll()
    assert ev.payload.peer_rank == 10
    # truncated and rewritten *past* our offset before we looked: the byte before the offset
    # is no longer the newline we consumed
    path.write_text(SOCKET_CLOSED + "\n" + CUDA_FAILURE + "\n")
    assert [e.payload.event_type for e in env.poll()] == ["remote_process_exited", "nccl_warn"]
    assert env.collector.stats.truncations == 2


def test_a_file_appearing_later_is_read_from_its_start(env: Env) -> None:
    env.append("rank0.log", "")
    env.poll()
    env.append("rank1.log", WATCHDOG_OLD + "\n" + REMOTE_EXITED + "\n")
    events = env.poll()
    assert [(e.payload.event_type, e.rank) for e in events] == [
        ("watchdog_timeout", 3),
        ("remote_process_exited", 9),
    ]


def test_over_long_lines_are_truncated_and_counted(tmp_path: Path) -> None:
    env = Env(tmp_path, max_line_bytes=256)
    env.append("a.log", "")
    env.poll()
    env.append("a.log", CUDA_FAILURE + " " + "z" * 1000 + "\n" + PROXY_FAILED + "\n")
    long_ev, proxy = env.poll()
    assert long_ev.payload.message.startswith("Cuda failure") and len(long_ev.payload.message) < 256
    assert proxy.payload.peer_rank == 10
    # an over-long line with no newline yet: its start is emitted once, the rest dropped
    env.append("a.log", NET_IB_OLD + " " + "y" * 600)
    (ib,) = env.poll()
    env.append("a.log", "y" * 600 + "\n" + SOCKET_CLOSED + "\n")
    (closed,) = env.poll()
    assert ib.payload.event_type == "net_ib_error"
    assert closed.payload.event_type == "remote_process_exited"
    assert env.collector.stats.lines_truncated == 2


def test_undecodable_bytes_are_replaced(env: Env) -> None:
    env.append("a.log", "")
    env.poll()
    env.append("a.log", CUDA_FAILURE.encode() + b" \xff\xfe\n")
    (ev,) = env.poll()
    assert ev.payload.message.endswith("\ufffd\ufffd")


def test_malformed_and_ignored_lines_are_counted_never_raised(env: Env) -> None:
    env.append("a.log", "")
    env.poll()
    env.append("a.log", MALFORMED + "\n" + INFO_LINE + "\n\x00\x01\x02\n")
    assert env.poll() == []
    assert env.collector.stats.lines_malformed == 1
    assert env.collector.stats.lines_ignored == 2


def test_deleted_file_is_drained_before_it_is_dropped(env: Env) -> None:
    path = env.append("a.log", "")
    env.poll()
    env.append("a.log", SOCKET_CLOSED)  # no final newline: the last line counts when drained
    path.unlink()
    (ev,) = env.poll()
    assert ev.payload.peer == "gpu-a07<41022>"
    assert env.poll() == []


def test_nccl_debug_file_pattern(tmp_path: Path) -> None:
    factory = EventFactory("c1", "gpu-a03")
    config = NcclLogCollectorConfig(
        paths=[str(tmp_path / "nccl.%h.%p")], hostname="gpu-a03.cluster.local"
    )
    collector = create_nccl_log_collector(config, factory)
    collector.poll(NOW)
    (tmp_path / "nccl.gpu-a03.73412").write_text("\n" + NET_IB_OLD + "\n")
    (tmp_path / "nccl.gpu-a09.1").write_text("\n" + NET_IB_OLD + "\n")  # another host's file
    events = collector.poll(NOW + 10**9)
    assert len(events) == 1
    assert isinstance(events[0], CommEventEvent)
    assert events[0].payload.log_file.endswith("nccl.gpu-a03.73412")


def test_log_timestamp_is_the_event_time_when_plausible(env: Env) -> None:
    env.append("a.log", "")
    env.poll()
    stamp_s = (env.t + 500_000_000) // 10**9 - 3
    recent = time.strftime("[%Y-%m-%d %H:%M:%S] ", time.localtime(stamp_s))
    stale = time.strftime("[%Y-%m-%d %H:%M:%S] ", time.localtime(stamp_s - 86_400))
    env.append("a.log", recent + NET_IB_OLD + "\n" + stale + NET_IB_OLD + "\n")
    fresh, old = env.poll()
    assert fresh.ts == stamp_s * 10**9
    assert old.ts == env.t  # a day-old stamp is not trusted: read time


def test_cuda_dev_mapping_can_be_turned_off(tmp_path: Path) -> None:
    env = Env(tmp_path, cuda_dev_is_gpu_index=False)
    env.jobs.bind_gpu(2, JobBinding("job-42", rank=10, local_rank=2))
    env.append("a.log", "")
    env.poll()
    env.append("a.log", NET_IB_OLD + "\n")
    (ev,) = env.poll()
    assert (ev.gpu, ev.rank, ev.job_id) == (None, None, "job-42")


def test_unreadable_paths_do_not_raise(tmp_path: Path) -> None:
    env = Env(tmp_path)
    (env.dir / "dir.log").mkdir()  # matches the glob, is not a file
    env.append("a.log", "")
    assert env.poll() == []
    env.collector.stop()
