"""The failure cascade: every rank's fate in the step a terminal fault breaks, then its events.

Why a module of its own: the hard part of a real incident is the order of what follows the
fault (the dead rank's error, NCCL errors on its node or ring neighbours, every other rank's
watchdog timeout ``nccl_timeout_s`` after it entered the collective, ``job_failed``); this layer
plans those fates with the message texts PyTorch and NCCL log, and renders the failing step.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from rankscope.schemas import Event
from rankscope.schemas.payloads import CommEvent, SpanPhase
from rankscope.simulation.fault_injection import (
    _IB_PORT,
    _OP,
    FaultInjectorBase,
    _Failure,
    _Resolved,
)
from rankscope.simulation.fault_specs import (
    EccDbe,
    GpuFellOffBus,
    Hang,
    HostOom,
    IbLinkFlap,
    NodeUnresponsive,
    NvlinkError,
    Preemption,
)
from rankscope.simulation.timing import COMPUTE_PHASES, RankState, StepPlan, phase_at

__all__ = ["FailureCascade"]

_MS = 1_000_000

_NCCL_VERSION = "2.21.5"
#: elements of one DDP gradient bucket (25 MiB of fp32): what WorkNCCL's NumelIn shows
_NUMEL = 6_553_600
_PG_DESC = "0(default_pg)"
_CUDA_HINT = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
_NVLINK_CUDA = "Cuda failure 'uncorrectable NVLink error detected during the execution'"
_REMOTE = (
    "NCCL error: remote process exited or there was a network error, NCCL version "
    f"{_NCCL_VERSION}\nncclRemoteError: A call failed possibly due to a network error or a "
    "remote process exiting prematurely."
)


def _pg(rank: int) -> str:
    """PyTorch >= 2.5's ProcessGroupNCCL log prefix for the default process group."""
    return f"[PG ID 0 PG GUID {_PG_DESC} Rank {rank}]"


class FailureCascade(FaultInjectorBase):
    """Plans and renders the failure of a terminal fault (a layer of the fault injector)."""

    # ----------------------------------------------------------------- the failure

    def _plan_failure(self, res: _Resolved) -> _Failure:
        """Fix every rank's fate in the step in flight at the onset (true times)."""
        spec, rng = res.spec, res.rng
        onset = res.onset_ns
        plan = self.plan_until(onset)
        if isinstance(spec, Hang):
            assert res.rank is not None
            if onset >= plan.arrival_ns(res.rank.rank):
                # The rank is already waiting in this collective; a hang "in" a collective that
                # the rank entered is not this scenario: it hangs in its next step's compute.
                plan = self.plan_step(plan.step + 1, plan.end_ns)
                onset = plan.start_ns + round(
                    rng.uniform(0.1, 0.9) * plan.phases[res.rank.rank].compute_ns
                )
        f = _Failure(spec.scenario, onset, plan, self.collective_seq(plan.step))
        arrival = [plan.arrival_ns(r.rank) for r in self.ranks]
        rank = res.rank
        if isinstance(spec, GpuFellOffBus):
            assert rank is not None
            f.stop[rank.rank] = f.gone[rank.rank] = onset
        elif isinstance(spec, EccDbe):
            assert rank is not None
            t = onset + rng.randint(20 * _MS, 300 * _MS)
            msg = "CUDA error: uncorrectable ECC error encountered" + _CUDA_HINT
            f.errors[rank.rank] = (t, "RuntimeError", msg)
            f.idle[rank.rank] = t
        elif isinstance(spec, NvlinkError):
            assert rank is not None
            t = onset + rng.randint(5 * _MS, 50 * _MS)
            self._log(f, rank, t, "nccl", "nccl_warn", _NVLINK_CUDA)
            err = (
                "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
                "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version "
                f"{_NCCL_VERSION}\nncclUnhandledCudaError: Call to CUDA function failed.\n"
                f"Last error:\n{_NVLINK_CUDA}"
            )
            e = t + rng.randint(5 * _MS, 50 * _MS)
            f.errors[rank.rank] = (e, "DistBackendError", f"{_pg(rank.rank)} {err}")
            f.idle[rank.rank] = e
            for local in self._node_ranks(rank.node):
                if local.rank == rank.rank:
                    continue
                t = max(onset, arrival[local.rank]) + rng.randint(100 * _MS, 800 * _MS)
                text = f"Process group watchdog thread terminated with exception: {_REMOTE}"
                self._log(f, local, t, "pytorch", "remote_process_exited", text, pg=True)
                e = t + rng.randint(1 * _MS, 20 * _MS)
                f.errors[local.rank] = (e, "DistBackendError", f"{_pg(local.rank)} {_REMOTE}")
                f.idle[local.rank] = e
        elif isinstance(spec, IbLinkFlap):
            self._plan_ib_flap(f, res, arrival)
        elif isinstance(spec, Hang):
            assert rank is not None
            f.stop[rank.rank] = f.idle[rank.rank] = onset
            f.watchdog = spec.hang_abort
            if not spec.hang_abort:
                f.job_failed = None
        elif isinstance(spec, NodeUnresponsive):
            assert res.node is not None
            for r in self._node_ranks(res.node):
                f.stop[r.rank] = f.gone[r.rank] = onset
        elif isinstance(spec, Preemption):
            assert res.node is not None
            kill = onset + rng.randint(200 * _MS, 1000 * _MS)
            for r in self._node_ranks(res.node):
                f.stop[r.rank] = f.gone[r.rank] = kill
            f.job_failed = ("PREEMPTED", "PREEMPTED", None)
        elif isinstance(spec, HostOom):
            assert rank is not None
            f.stop[rank.rank] = f.idle[rank.rank] = onset
            f.job_failed = ("OUT_OF_MEMORY", "OutOfMemory", 137)
        if f.watchdog:
            for r in self.ranks:
                if r.rank not in f.stop and r.rank not in f.errors:
                    self._watchdog(f, r, arrival[r.rank], rng)
        times = [t for t, _, _ in f.errors.values()] + list(f.stop.values())
        times += [t for _, t, _ in f.comm]
        if f.job_failed is None:
            f.end_ns = max(self.end_limit_ns, onset + self.timeout_ns)
        else:
            f.end_ns = max(times) + rng.randint(500 * _MS, 2000 * _MS)
        return f

    def _plan_ib_flap(self, f: _Failure, res: _Resolved, arrival: list[int]) -> None:
        """The flapping node's rail rank sees the port error; the ring neighbours' rail ranks get
        IB completion errors naming the node's address and abort; everyone else times out."""
        assert res.node is not None and res.hca is not None
        rng, node, hca, onset = res.rng, res.node, res.hca, f.onset_ns
        hcas = self.config.hcas_per_node
        device = f"mlx5_{hca}"
        rail = [r for r in self._node_ranks(node) if r.local_rank % hcas == hca]
        for r in rail:
            t = onset + rng.randint(5 * _MS, 100 * _MS)
            text = f"NET/IB : {device}:{_IB_PORT} Got non-fatal async event: port error(10)"
            self._log(f, r, t, "nccl", "net_ib_error", text)
        i, n = self.node_index[node], self.config.nodes
        neighbours = {self.node_names[(i - 1) % n], self.node_names[(i + 1) % n]} - {node}
        port = 43000 + rng.randrange(1000)
        peer = f"{self.node_address(node)}<{port}>"
        completion = (
            f"NET/IB : Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR(12) "
            f"opcode=RDMA_WRITE len=0 vendor_err=129 hca {device}"
        )
        for other in sorted(neighbours):
            local = self._node_ranks(other)
            peers = [r for r in local if r.local_rank % hcas == hca] or local[-1:]
            for r in peers:
                t = onset + rng.randint(300 * _MS, 1500 * _MS)
                self._log(f, r, t, "nccl", "net_ib_error", completion, peer=peer)
                e = max(t + rng.randint(20 * _MS, 200 * _MS), arrival[r.rank] + 5 * _MS)
                msg = f"{_pg(r.rank)} {_REMOTE}\nLast error:\n{completion}"
                f.errors[r.rank] = (e, "DistBackendError", msg)
                f.idle[r.rank] = e

    def _log(
        self,
        f: _Failure,
        rank: RankState,
        t_ns: int,
        source: Literal["nccl", "pytorch"],
        event_type: Literal["nccl_warn", "net_ib_error", "remote_process_exited"],
        text: str,
        *,
        peer: str = "",
        pg: bool = False,
    ) -> None:
        payload = CommEvent(
            source=source,
            event_type=event_type,
            peer=peer,
            process_group=_PG_DESC if pg else "",
            pid=self._pids[rank.rank],
            message=text,
        )
        f.comm.append((rank.rank, t_ns, payload))

    def _watchdog(self, f: _Failure, rank: RankState, arrival_ns: int, rng: random.Random) -> None:
        """PyTorch's watchdog fires ``timeout`` (+ its polling slack) after the rank entered the
        collective; the main thread then raises DistBackendError and the process exits."""
        t = arrival_ns + self.timeout_ns + rng.randint(5 * _MS, 150 * _MS)
        timeout_ms = self.timeout_ns // _MS
        elapsed_ms = (t - arrival_ns) // _MS
        text = (
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={f.seq}, "
            f"OpType={_OP}, NumelIn={_NUMEL}, NumelOut={_NUMEL}, Timeout(ms)={timeout_ms}) ran "
            f"for {elapsed_ms} milliseconds before timing out."
        )
        payload = CommEvent(
            source="pytorch",
            event_type="watchdog_timeout",
            op=_OP,
            seq=f.seq,
            timeout_ms=timeout_ms,
            elapsed_ms=elapsed_ms,
            process_group=_PG_DESC,
            pid=self._pids[rank.rank],
            message=text,
        )
        f.comm.append((rank.rank, t, payload))
        e = t + rng.randint(1 * _MS, 20 * _MS)
        f.errors[rank.rank] = (e, "DistBackendError", f"{_pg(rank.rank)} {text}")
        f.idle[rank.rank] = e

    def failing_step(self, plan: StepPlan) -> list[Event]:
        """Render the planned failure: the failing step's spans, the log lines, telemetry until
        the end (per-rank: frozen, idle, gone), the scheduled events, then ``job_failed``."""
        f = self.failure
        assert f is not None and plan.step == f.plan.step
        out: list[Event] = []
        trace_id = self.trace_id()
        attrs = self.collective_attributes(plan.step)
        for rank in self.ranks:
            self._failing_spans(f, rank, trace_id, attrs, out)
        for r, t, payload in f.comm:
            if t < f.end_ns:
                out.append(self.comm_event(self.ranks[r], t, payload))

        def phase_of(rank: RankState, t_ns: int) -> SpanPhase | None:
            gone = f.gone.get(rank.rank)
            if gone is not None and t_ns >= gone:
                return None
            idle = f.idle.get(rank.rank)
            if idle is not None and t_ns >= idle:
                return "other"
            return phase_at(plan, rank.rank, t_ns)

        self.periodic(f.end_ns, out, phase_of)
        out.extend(self.extra_events(plan.step, plan.start_ns, f.end_ns))
        if f.job_failed is not None:
            state, reason, code = f.job_failed
            # the job's batch host, unless that node is the one gone (the scheduler reports
            # the job, not a node it lost)
            gone = self._silent.keys() | self._left.keys()
            host = next((n for n in self.node_names if n not in gone), self.node_names[0])
            out.append(
                self.scheduler_event(
                    host, f.end_ns, "job_failed", state, exit_code=code, reason=reason
                )
            )
        return out

    def _failing_spans(
        self,
        f: _Failure,
        rank: RankState,
        trace_id: str,
        attrs: dict[str, str | int | float | bool],
        out: list[Event],
    ) -> None:
        """The spans of the failing step: phases done before the rank stops or fails; on an
        error, the phase it is in and its step span end in error at the error time."""
        plan, r = f.plan, rank.rank
        stop = f.stop.get(r)
        err = f.errors.get(r)
        step_id = self.span_id()
        t = plan.start_ns

        def failed(phase: SpanPhase, start: int, e: tuple[int, str, str], **kw: Any) -> None:
            out.append(
                self.span_event(
                    rank,
                    plan.step,
                    phase,
                    trace_id,
                    step_id,
                    start,
                    e[0],
                    status="error",
                    error_type=e[1],
                    error_message=e[2],
                    **kw,
                )
            )
            out.append(
                self.span_event(
                    rank,
                    plan.step,
                    "step",
                    trace_id,
                    None,
                    plan.start_ns,
                    e[0],
                    span_id=step_id,
                    status="error",
                    error_type=e[1],
                    error_message=e[2],
                )
            )

        for phase, dur in zip(COMPUTE_PHASES, plan.phases[r], strict=True):
            end = t + dur
            if stop is not None and end > stop:
                return
            if err is not None and err[0] < end:
                failed(phase, t, err)
                return
            out.append(self.span_event(rank, plan.step, phase, trace_id, step_id, t, end))
            t = end
        if err is not None:
            failed("collective", t, err, attrs=attrs)
