"""NCCL and PyTorch ProcessGroupNCCL log lines -> ``comm_event``: a pure parser and a file tailer.

Why: when one IB link flaps, a minute later hundreds of ranks die with NCCL timeouts; the log
lines say *which* collective (op, sequence number) timed out on *which* rank and which peer a
network error came from. The attribution stage orders these against the fabric and GPU events.

Line formats (quoted from the sources; tests use these exact shapes):

- NCCL ``src/debug.cc`` (``ncclDebugLogV``)::

      [<NCCL_DEBUG_TIMESTAMP_FORMAT, default "[%F %T] ", on WARN by default since 2.26>]
      <host>:<pid>:<tid> [<cudaDev>] <file>:<line> [(<func>) ]NCCL WARN <message>
      <host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>

  (a WARN is preceded by an empty line; ``host`` is cut at the first ``.``).
- NCCL ``net_ib`` completion errors, by version::

      NET/IB : Got completion from peer <peer> with error 12, opcode 0, len 0, vendor err 129
      NET/IB : Got completion from peer <peer> with status=12 opcode=0 len=0 vendor err 129 (Recv)
      NET/IB: Got completion from peer <peer> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=...
          vendor_err=129 hca mlx5_0
      NET/IB : mlx5_1:1 Got non-fatal async event: port error(10)

  peers are ``ncclSocketToString``: ``<ip or host><<port>>``.
- PyTorch ``ProcessGroupNCCL.cpp``: ``logPrefix()`` is ``[Rank N] `` (old), ``[PG <uid> Rank N] ``
  (2.3), ``[PG <name> (<desc>) Rank N] `` (2.4), ``[PG ID <id> PG GUID <uid>(<desc>) Rank N] ``
  (2.5+); c10 logging prepends ``[rank<global>]:[E<MMDD> <hh:mm:ss.ns> <file>:<line>] ``::

      [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=ALLREDUCE,
          NumelIn=..., NumelOut=..., Timeout(ms)=600000) ran for 600012 milliseconds before timing
          out.
      [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with
          exception: NCCL error: remote process exited or there was a network error, NCCL version ..
      ncclRemoteError: A call failed possibly due to a network error or a remote process ...
      Last error:
      NET/IB : Got completion from peer ...          (NCCL's last error, printed bare by PyTorch)

Rank (envelope ``rank``), in this order: the c10 ``[rank<N>]:`` prefix (the global rank); the PG
prefix's rank when the PG is the default group (PG ID 0 / uid 0 / ``default_pg``), or the old
``[Rank N]`` prefix (which is the rank in *its* PG: global only for the default PG, the usual case
for old releases); otherwise ``pg_rank`` only. NCCL's own lines carry just ``[cudaDev]``: with
``cuda_dev_is_gpu_index`` (default) the collector passes it as the envelope ``gpu``, so the
``JobRegistry`` binding of that GPU supplies job, rank and local rank. Turn it off when each rank's
process sees only its own GPU (``CUDA_VISIBLE_DEVICES`` per rank): every process then logs ``[0]``.

Prefixes (``prefixes.py``) are stripped first, in any order and combination: ISO 8601/RFC 3339
clocks (kubectl ``--timestamps`` RFC3339Nano, rsyslog, ``dmesg --time-format iso``, zone-less),
journald ``short``/``short-precise``/``short-iso`` with ``host ident[pid]: ``, c10 ``[rankN]:``,
torchrun ``[default3]:``, ``srun --label`` ``N: ``, mpirun ``--tag-output`` ``[1,N]<stdout>:``
and Ray ``(Actor pid=N) ``. The srun/mpirun task number is the rank only when the line names
none (one task per GPU, the usual srun launch; under torchrun-per-node it is the node's index, and
the line's own ``[rankN]:`` wins). Also read: WARN lines whose prefix is cut short (``host [dev]``
or nothing), socket errors' peer (``Call to recv from``/``send to``/``Connect to <peer> failed``),
nccl-tests' ``NCCL failure <file>:<line> '<error>'``, ``NCCL communicator was aborted on rank N``
(``process_group_abort`` unless its original reason is a timeout), ``failure detected by watchdog
at work sequence id: N`` and ``Work WorkNCCL(...) timed out in blocking wait`` (a timeout).

Time: the outermost prefix clock when there is one (zoned and with a year, it converts exactly),
else the line's own timestamp (NCCL's ``[%F %T]``, glog's ``MMDD hh:mm:ss.ns``, both local time)
is the event time when it lies within ``max_log_time_lag_s`` before the read (else the read time):
a whole-hour disagreement means the writer's timezone differs and the stamp is not trusted.

Tailing: per file the (device, inode) and offset; rotation (the path now names another inode:
the old file is drained to its end first, and a rotated name that the globs also match keeps its
offset), truncation (size < offset, or the byte before the offset is no longer the newline we
consumed: read again from 0), partial last lines kept until completed,
lines longer than ``max_line_bytes`` truncated (the first bytes are parsed) and counted,
undecodable bytes replaced. Files present at the first poll start at their end unless
``from_start``; files that appear later are read from their start. Idle files' descriptors are
closed after ``idle_close_s`` (their offsets are kept); at most ``max_read_bytes`` per file per
poll (the rest comes next poll). Nothing raises out of ``poll``. Cost measured here: ~0.03 ms CPU
for an idle poll over 8 files, ~225k lines/s when parsing (lines without an NCCL/watchdog
marker are dropped by a substring test before any regex runs; NCCL INFO by the prefix regex).
"""

from rankscope.collectors.nccl_log.collector import NcclLogCollector, create_nccl_log_collector
from rankscope.collectors.nccl_log.config import NcclLogCollectorConfig
from rankscope.collectors.nccl_log.tailer import NcclLogStats, expand_nccl_debug_file
from rankscope.schemas.comm_lines.parsing import ParsedCommLine, log_time_ns, parse_line
from rankscope.schemas.comm_lines.prefixes import LinePrefix, LogTime, strip_prefixes

__all__ = [
    "LinePrefix",
    "LogTime",
    "NcclLogCollector",
    "NcclLogCollectorConfig",
    "NcclLogStats",
    "ParsedCommLine",
    "create_nccl_log_collector",
    "expand_nccl_debug_file",
    "log_time_ns",
    "parse_line",
    "strip_prefixes",
]
