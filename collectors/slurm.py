"""Slurm scheduler events from the ``squeue``/``sacct``/``scontrol`` JSON output.

Why the CLIs and not slurmrestd: every Slurm node has them, they need no token or daemon, and since
Slurm 23.02 ``--json`` prints the same data_parser documents slurmrestd serves
(``openapi_resp_job_info_msg`` for squeue, the slurmdbd job list for sacct,
``openapi_resp_node_info_msg`` for ``scontrol show node``). The models below read data_parser
v0.0.40 (23.11), v0.0.41 (24.05/24.11) and v0.0.42 (24.11/25.x): they ignore unknown fields, accept
numbers both plain and wrapped as ``{"set", "infinite", "number"}``, and states both as a list
(``["PENDING", "REQUEUED"]``, base state plus flags) and as the single string of older parsers.

What a poll does:

1. ``squeue --json --states=all`` for the jobs to watch: the ids in the config, else
   ``SLURM_JOB_ID`` (the agent runs inside the job), else every job on this node
   (``--nodelist``). ``--states=all`` keeps finished jobs visible until ``MinJobAge`` purges them,
   so terminal states and exit codes come straight from slurmctld.
2. ``sacct --json --duplicates --jobs=...`` only when needed: for a job that left squeue before its
   end was seen, after a requeue (the previous run's accounting record says *why*: ``PREEMPTED``,
   ``NODE_FAIL``, ``REQUEUED``), and after a failure (a step in ``OUT_OF_MEMORY`` names the node
   whose OOM killer ended a rank).
3. ``scontrol --json show node <node>`` for this node's state (drain/down/up with the admin's
   reason).

Only changes are emitted: the previous state per job and per node is kept. The first sight of a
job that is already running or finished, or of a node that is already drained or down, counts as
a change (an agent that starts late must still report them). Events whose time comes from Slurm
(start/end/requeue/reason-change time) get an id derived from what happened, so the copies sent by
the agents of every node of a job, or by a restarted agent, are one row after ClickHouse
deduplicates on ``event_id``.

Errors: a command that fails (non-zero exit, timeout, missing binary) or prints something that is
not a data_parser document raises :class:`SlurmCommandError` / :class:`SlurmOutputError` from
``poll``; the agent reports it once per failed poll as a ``collector_error`` event. Commands are
never retried inside a poll (the next poll is the retry), the state is only advanced from outputs
that parsed, and events already derived in a failing poll are kept and returned by the next one,
so a failure never loses an event. ``squeue`` answering "Invalid job id specified" (error 2017,
the job was purged) is not a failure: the job is looked up in sacct instead.

Load: each poll is one filtered squeue RPC and one scontrol RPC per node agent. On very large
clusters run the collector on one node per job (e.g. the rank-0 node, with ``job_ids``) or raise
``interval_s``; slurmctld serves every squeue call under its job lock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rankscope.collectors.base import BaseCollector, CollectorConfig, EventFactory
from rankscope.schemas.events import Event, SchedulerEventEvent
from rankscope.schemas.payloads import SchedulerEvent, SchedulerEventType

__all__ = [
    "CommandRunner",
    "JobSnapshot",
    "NodeSnapshot",
    "SacctJob",
    "SacctResponse",
    "ScontrolNode",
    "ScontrolNodeResponse",
    "SlurmCollector",
    "SlurmCollectorConfig",
    "SlurmCommandError",
    "SlurmError",
    "SlurmExitCode",
    "SlurmOutputError",
    "SqueueJob",
    "SqueueResponse",
    "SubprocessRunner",
    "create_slurm_collector",
    "exit_code_value",
    "expand_hostlist",
    "parse_sacct",
    "parse_scontrol_nodes",
    "parse_squeue",
]

log = logging.getLogger(__name__)

#: slurm_errno ESLURM_INVALID_JOB_ID: squeue -j <purged job>
ESLURM_INVALID_JOB_ID = 2017
_INVALID_JOB_TEXT = "invalid job id specified"

# --------------------------------------------------------------------------------------------
# Running commands
# --------------------------------------------------------------------------------------------


class SlurmError(RuntimeError):
    """Base of the errors ``poll`` raises (the agent turns them into collector_error events)."""


class SlurmCommandError(SlurmError):
    """A Slurm command could not run or exited non-zero; ``stderr`` is what it said."""

    def __init__(self, argv: Sequence[str], message: str, stderr: str = "") -> None:
        self.argv = list(argv)
        self.stderr = stderr
        super().__init__(f"{' '.join(argv)}: {message}")


class SlurmOutputError(SlurmError):
    """A command printed something that is not the data_parser JSON expected."""


class CommandRunner(Protocol):
    """Runs argv and returns stdout; raises :class:`SlurmCommandError` on failure.

    Tests inject one that replays recorded outputs.
    """

    def __call__(self, argv: Sequence[str], timeout_s: float) -> str: ...


class SubprocessRunner:
    """The real runner: no shell, stdin closed, stderr kept for the error message."""

    def __call__(self, argv: Sequence[str], timeout_s: float) -> str:
        try:
            proc = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmCommandError(argv, f"not found ({exc.filename})") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmCommandError(argv, f"timed out after {timeout_s:g}s") from exc
        except OSError as exc:
            raise SlurmCommandError(argv, str(exc)) from exc
        if proc.returncode != 0:
            err = proc.stderr.strip()
            raise SlurmCommandError(argv, f"exit {proc.returncode}: {err[:500]}", stderr=err)
        return proc.stdout


# --------------------------------------------------------------------------------------------
# data_parser models (v0.0.40 - v0.0.42)
# --------------------------------------------------------------------------------------------


def _unwrap_number(value: Any) -> Any:
    """``{"set": true, "infinite": false, "number": 5}`` -> 5; unset or infinite -> None."""
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def _as_list(value: Any) -> Any:
    """States are lists since v0.0.39 and plain strings before; None means empty."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return value


def _unwrap_time(value: Any) -> Any:
    """Like :func:`_unwrap_number`, and 0 (Slurm's "no time") is None too."""
    value = _unwrap_number(value)
    return None if value == 0 else value


def _none_as_empty(value: Any) -> Any:
    return "" if value is None else value


OptNumber = Annotated[int | None, BeforeValidator(_unwrap_number)]
#: epoch seconds; unset, infinite and 0 are None
OptTime = Annotated[int | None, BeforeValidator(_unwrap_time)]
StrList = Annotated[list[str], BeforeValidator(_as_list)]
Text = Annotated[str, BeforeValidator(_none_as_empty)]


class _Lenient(BaseModel):
    """Unknown fields are ignored: each data_parser version adds some."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class SlurmSignal(_Lenient):
    id: OptNumber = None
    name: Text = ""


class SlurmExitCode(_Lenient):
    """``{"status": ["SIGNALED"], "return_code": {...}, "signal": {"id": {...}, "name": "KILL"}}``.

    Older parsers printed a bare integer; it is read as the return code.
    """

    status: StrList = Field(default_factory=list)
    return_code: OptNumber = None
    signal: SlurmSignal | None = None


def _exit_code_in(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"return_code": value}
    return value


ExitCodeField = Annotated[SlurmExitCode | None, BeforeValidator(_exit_code_in)]


def exit_code_value(code: SlurmExitCode | None) -> int | None:
    """One integer the way a shell reports it: the return code, or 128+signal when killed."""
    if code is None:
        return None
    if code.return_code:
        return code.return_code
    sig = code.signal.id if code.signal is not None else None
    if sig:
        return 128 + sig
    return code.return_code


class SqueueJob(_Lenient):
    """One entry of ``squeue --json`` ``jobs[]`` (slurmctld's view of a live job)."""

    job_id: int
    name: Text = ""
    job_state: StrList = Field(default_factory=list)
    state_reason: Text = ""
    state_description: Text = ""
    nodes: Text = ""
    batch_host: Text = ""
    failed_node: Text = ""
    exit_code: ExitCodeField = None
    start_time: OptTime = None
    end_time: OptTime = None
    restart_cnt: int = 0


class SlurmErrorEntry(_Lenient):
    error: Text = ""
    error_number: int = 0
    description: Text = ""
    source: Text = ""


class _Envelope(_Lenient):
    errors: list[SlurmErrorEntry] = Field(default_factory=list)
    warnings: list[dict[str, Any]] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def data_parser(self) -> str:
        plugin = self.meta.get("plugin")
        return str(plugin.get("data_parser", "")) if isinstance(plugin, Mapping) else ""


class SqueueResponse(_Envelope):
    jobs: list[SqueueJob] = Field(default_factory=list)


class SacctState(_Lenient):
    current: StrList = Field(default_factory=list)
    reason: Text = ""


class SacctTime(_Lenient):
    """Job-level times are plain integers in sacct, step-level ones are wrapped."""

    start: OptTime = None
    end: OptTime = None
    submission: OptTime = None


class SacctStepId(_Lenient):
    id: Text = ""
    name: Text = ""


class SacctStepNodes(_Lenient):
    count: int = 0
    range: Text = ""
    names: list[str] = Field(default_factory=list, alias="list")


class SacctStep(_Lenient):
    step: SacctStepId = Field(default_factory=SacctStepId)
    state: StrList = Field(default_factory=list)
    exit_code: ExitCodeField = None
    nodes: SacctStepNodes = Field(default_factory=SacctStepNodes)
    time: SacctTime = Field(default_factory=SacctTime)


class SacctJob(_Lenient):
    """One entry of ``sacct --json`` ``jobs[]`` (slurmdbd's record of one run of a job)."""

    job_id: int
    name: Text = ""
    state: SacctState = Field(default_factory=SacctState)
    exit_code: ExitCodeField = None
    nodes: Text = ""
    failed_node: Text = ""
    time: SacctTime = Field(default_factory=SacctTime)
    steps: list[SacctStep] = Field(default_factory=list)


class SacctResponse(_Envelope):
    jobs: list[SacctJob] = Field(default_factory=list)


class ScontrolNode(_Lenient):
    """One entry of ``scontrol --json show node`` ``nodes[]``."""

    name: str
    state: StrList = Field(default_factory=list)
    reason: Text = ""
    reason_changed_at: OptTime = None
    reason_set_by_user: Text = ""
    comment: Text = ""


class ScontrolNodeResponse(_Envelope):
    nodes: list[ScontrolNode] = Field(default_factory=list)


def _load(text: str, model: type[_Envelope], what: str) -> Any:
    """Parse one data_parser document or raise a :class:`SlurmOutputError` that says why."""
    stripped = text.strip()
    if not stripped:
        raise SlurmOutputError(f"{what}: empty output (is this Slurm >= 23.02 with --json?)")
    try:
        raw = json.loads(stripped)
    except json.JSONDecodeError as exc:
        head = stripped[:80].replace("\n", " ")
        raise SlurmOutputError(f"{what}: not JSON ({exc.msg} at {exc.pos}): {head!r}") from exc
    if not isinstance(raw, dict):
        raise SlurmOutputError(f"{what}: expected a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise SlurmOutputError(
            f"{what}: unexpected data_parser shape at {loc}: {first['msg']}"
        ) from exc


def parse_squeue(text: str) -> SqueueResponse:
    return _load(text, SqueueResponse, "squeue --json")  # type: ignore[no-any-return]


def parse_sacct(text: str) -> SacctResponse:
    return _load(text, SacctResponse, "sacct --json")  # type: ignore[no-any-return]


def parse_scontrol_nodes(text: str) -> ScontrolNodeResponse:
    return _load(text, ScontrolNodeResponse, "scontrol --json show node")  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
# Hostlists
# --------------------------------------------------------------------------------------------

_BRACKET = re.compile(r"\[([^\]]*)\]")


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets: ``a[1,2],b`` -> ``a[1,2]``, ``b``."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str) -> list[str]:
    out: list[str] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        if "-" in item:
            lo, hi = item.split("-", 1)
            width = len(lo)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad hostlist range {item!r}")
            out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
        else:
            out.append(item)
    return out


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist -> host names: ``gpu[001-003,007],login1`` -> gpu001 gpu002 gpu003 ...

    Needed to tell whether a job runs on a node; several bracket groups multiply
    (``r[1-2]n[1-2]``). A malformed expression yields its raw parts instead of raising.
    """
    hosts: list[str] = []
    for part in _split_top(expr or ""):
        try:
            names = [""]
            pos = 0
            for m in _BRACKET.finditer(part):
                prefix = part[pos : m.start()]
                names = [n + prefix + r for n in names for r in _expand_range(m.group(1))]
                pos = m.end()
            names = [n + part[pos:] for n in names]
        except ValueError:
            names = [part]
        hosts.extend(names)
    return hosts


# --------------------------------------------------------------------------------------------
# Normalised snapshots and the state machine
# --------------------------------------------------------------------------------------------

#: base job states (job_state_codes.shtml "Job states"); everything else in the list is a flag
BASE_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "RUNNING",
        "SUSPENDED",
        "TIMEOUT",
    }
)
TERMINAL_JOB_STATES = frozenset(BASE_JOB_STATES - {"PENDING", "RUNNING", "SUSPENDED"})
REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})

#: base state -> event type for a change into it (None: not an event)
JOB_EVENT_BY_STATE: dict[str, SchedulerEventType | None] = {
    "RUNNING": "job_started",
    "COMPLETED": "job_completed",
    "FAILED": "job_failed",
    "NODE_FAIL": "job_failed",
    "BOOT_FAIL": "job_failed",
    "CANCELLED": "job_cancelled",
    "TIMEOUT": "job_timeout",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "oom_killed",
    "DEADLINE": "other",
    "SUSPENDED": "other",
    "PENDING": None,
}

#: terminal states after which sacct is asked for the steps (an OOM-killed step hides there)
STEP_CHECK_STATES = frozenset({"FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "PREEMPTED"})

NodeClass = Literal["up", "drain", "down"]


@dataclass(frozen=True)
class JobSnapshot:
    """What a poll knows about one job, from squeue or sacct, version differences removed."""

    job_id: str
    states: tuple[str, ...]
    reason: str = ""
    nodes: str = ""
    exit_code: int | None = None
    start_s: int | None = None
    end_s: int | None = None
    restart_cnt: int = 0
    failed_node: str = ""
    source: Literal["squeue", "sacct"] = "squeue"

    @property
    def base(self) -> str:
        for s in self.states:
            if s in BASE_JOB_STATES:
                return s
        return self.states[0] if self.states else "UNKNOWN"

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(s for s in self.states if s != self.base)

    @property
    def terminal(self) -> bool:
        return self.base in TERMINAL_JOB_STATES

    @property
    def state_text(self) -> str:
        return "+".join(self.states) or "UNKNOWN"

    @classmethod
    def from_squeue(cls, job: SqueueJob) -> JobSnapshot:
        return cls(
            job_id=str(job.job_id),
            states=tuple(job.job_state),
            reason=_reason_text(job.state_reason, job.state_description, job.failed_node),
            nodes=job.nodes,
            exit_code=exit_code_value(job.exit_code),
            start_s=job.start_time or None,
            end_s=job.end_time or None,
            restart_cnt=job.restart_cnt,
            failed_node=job.failed_node,
            source="squeue",
        )

    @classmethod
    def from_sacct(cls, job: SacctJob, restart_cnt: int = 0) -> JobSnapshot:
        return cls(
            job_id=str(job.job_id),
            states=tuple(job.state.current),
            reason=_reason_text(job.state.reason, "", job.failed_node),
            nodes=job.nodes,
            exit_code=exit_code_value(job.exit_code),
            start_s=job.time.start or None,
            end_s=job.time.end or None,
            restart_cnt=restart_cnt,
            failed_node=job.failed_node,
            source="sacct",
        )


def _reason_text(reason: str, description: str, failed_node: str) -> str:
    parts = [p for p in (reason if reason != "None" else "", description) if p]
    if failed_node:
        parts.append(f"failed_node={failed_node}")
    return "; ".join(parts)


@dataclass(frozen=True)
class NodeSnapshot:
    name: str
    states: tuple[str, ...]
    reason: str = ""
    reason_changed_s: int | None = None

    @property
    def node_class(self) -> NodeClass:
        """DOWN / NOT_RESPONDING -> down; DRAIN (drained or draining) / FAIL -> drain."""
        s = set(self.states)
        if s & {"DOWN", "NOT_RESPONDING"}:
            return "down"
        if s & {"DRAIN", "FAIL"}:
            return "drain"
        return "up"

    @property
    def state_text(self) -> str:
        return "+".join(self.states) or "UNKNOWN"

    @classmethod
    def from_scontrol(cls, node: ScontrolNode) -> NodeSnapshot:
        reason = node.reason
        if reason and node.reason_set_by_user:
            reason = f"{reason} (set by {node.reason_set_by_user})"
        return cls(
            name=node.name,
            states=tuple(node.state),
            reason=reason,
            reason_changed_s=node.reason_changed_at or None,
        )


@dataclass
class _JobTrack:
    last: JobSnapshot
    #: the restart count whose requeue was reported
    requeues_reported: int = 0
    #: sacct was asked for the steps of the run that ended (or there is nothing to ask)
    steps_checked: bool = False


@dataclass
class _Plan:
    """Jobs that need sacct this poll, and why."""

    missing: set[str] = field(default_factory=set)
    requeued: set[str] = field(default_factory=set)
    steps: set[str] = field(default_factory=set)

    @property
    def ids(self) -> set[str]:
        return self.missing | self.requeued | self.steps


class _PartialPoll(Exception):
    """A command failed after some events were derived: carry both out of the job poll."""

    def __init__(self, events: list[Event], error: SlurmError) -> None:
        super().__init__(str(error))
        self.events = events
        self.error = error


# --------------------------------------------------------------------------------------------
# The collector
# --------------------------------------------------------------------------------------------


class SlurmCollectorConfig(CollectorConfig):
    """Which jobs and node to watch, and how to call the Slurm commands."""

    interval_s: float = Field(default=10.0, gt=0)
    #: jobs to watch; None = SLURM_JOB_ID if set, else every job squeue shows on ``node``
    job_ids: list[str] | None = None
    #: the Slurm node name of this host; None = SLURMD_NODENAME, else the agent's node name
    node: str | None = None
    squeue_cmd: list[str] = Field(default_factory=lambda: ["squeue", "--json"], min_length=1)
    sacct_cmd: list[str] = Field(default_factory=lambda: ["sacct", "--json"], min_length=1)
    scontrol_cmd: list[str] = Field(
        default_factory=lambda: ["scontrol", "--json", "show", "node"], min_length=1
    )
    command_timeout_s: float = Field(default=20.0, gt=0)
    #: watch this node's state with scontrol
    watch_node: bool = True
    #: ask sacct (slurmdbd) for requeue causes, purged jobs and OOM-killed steps; turn off on
    #: clusters without accounting, where every sacct call fails
    use_sacct: bool = True
    #: polls a vanished job (or a finished job's steps) is looked up in sacct before giving up
    max_missing_polls: int = Field(default=30, ge=1)
    #: finished job ids remembered so that none is reported twice
    max_finished_jobs: int = Field(default=4096, ge=16)


def _stable_id(*parts: object) -> str:
    """An event id derived from what happened, so that copies of one occurrence share it."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return f"sch-{digest[:40]}"


class SlurmCollector(BaseCollector):
    """Polls squeue/sacct/scontrol and emits SchedulerEventEvents for job and node changes."""

    name = "slurm"

    def __init__(
        self,
        config: SlurmCollectorConfig,
        factory: EventFactory,
        runner: CommandRunner | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.runner: CommandRunner = runner or SubprocessRunner()
        env = os.environ if environ is None else environ
        self.interval_s = config.interval_s
        self.node = config.node or env.get("SLURMD_NODENAME") or factory.node
        if config.job_ids is not None:
            self.job_ids: list[str] | None = [str(j) for j in config.job_ids]
        elif env.get("SLURM_JOB_ID"):
            self.job_ids = [env["SLURM_JOB_ID"]]
        else:
            self.job_ids = None
        self._jobs: dict[str, _JobTrack] = {}
        self._missing: dict[str, int] = {}
        self._finished: dict[str, None] = {}  # insertion-ordered set
        self._nodes: dict[str, NodeSnapshot] = {}
        self._pending: list[Event] = []
        #: the data_parser version of the last squeue output (diagnostics)
        self.data_parser = ""

    # -- commands ----------------------------------------------------------------------------

    def _run(self, argv: Sequence[str]) -> str:
        return self.runner(list(argv), self.config.command_timeout_s)

    def _squeue(self, extra: Sequence[str]) -> list[SqueueJob]:
        argv = [*self.config.squeue_cmd, "--states=all", *extra]
        try:
            text = self._run(argv)
        except SlurmCommandError as exc:
            if _INVALID_JOB_TEXT in (exc.stderr or str(exc)).lower():
                return []  # the one job asked for was purged: sacct knows the rest
            raise
        resp = parse_squeue(text)
        self.data_parser = resp.data_parser or self.data_parser
        bad = [e for e in resp.errors if e.error_number != ESLURM_INVALID_JOB_ID]
        if bad:
            raise SlurmOutputError(f"squeue --json reported: {_errors_text(bad)}")
        return resp.jobs

    def _sacct(self, job_ids: Iterable[str]) -> list[SacctJob]:
        ids = ",".join(sorted(job_ids, key=_job_sort_key))
        argv = [*self.config.sacct_cmd, "--duplicates", f"--jobs={ids}"]
        resp = parse_sacct(self._run(argv))
        if resp.errors:
            raise SlurmOutputError(f"sacct --json reported: {_errors_text(resp.errors)}")
        return resp.jobs

    def _scontrol_node(self, node: str) -> list[ScontrolNode]:
        resp = parse_scontrol_nodes(self._run([*self.config.scontrol_cmd, node]))
        if resp.errors:
            raise SlurmOutputError(f"scontrol show node {node}: {_errors_text(resp.errors)}")
        return resp.nodes

    # -- poll --------------------------------------------------------------------------------

    def poll(self, now_ns: int) -> list[Event]:
        """One cycle: the events of every change seen since the previous poll.

        Raises one :class:`SlurmError` naming every command that failed; what the other
        commands showed is applied, and its events come out of the next poll.
        """
        events: list[Event] = self._pending
        self._pending = []
        errors: list[SlurmError] = []
        try:
            try:
                events.extend(self._poll_jobs(now_ns))
            except _PartialPoll as partial:
                events.extend(partial.events)
                errors.append(partial.error)
            except SlurmError as exc:
                errors.append(exc)
            if self.config.watch_node:
                try:
                    events.extend(self._poll_node(now_ns))
                except SlurmError as exc:
                    errors.append(exc)
        except BaseException:
            self._pending = events  # an unexpected failure must not drop carried-over events
            raise
        events.sort(key=lambda e: e.ts)  # stable: same-time events keep their causal order
        if errors:
            self._pending = events
            if len(errors) == 1:
                raise errors[0]
            raise SlurmError("; ".join(str(e) for e in errors)) from errors[0]
        return events

    def _query_jobs(self) -> tuple[dict[str, JobSnapshot], set[str]]:
        """squeue: the snapshots seen now, and the ids that should have been seen."""
        if self.job_ids is not None:
            wanted = [j for j in self.job_ids if j not in self._finished]
            rows = self._squeue([f"--jobs={','.join(wanted)}"]) if wanted else []
            seen = {str(r.job_id): JobSnapshot.from_squeue(r) for r in rows}
            seen = {j: s for j, s in seen.items() if j in wanted}
            return seen, set(wanted)
        rows = self._squeue([f"--nodelist={self.node}"])
        seen = {
            str(r.job_id): JobSnapshot.from_squeue(r)
            for r in rows
            if str(r.job_id) not in self._finished
            and (not r.nodes or self.node in expand_hostlist(r.nodes))
        }
        # a requeued job loses its nodes and leaves this node's list: follow it by id
        gone = sorted(
            (j for j, t in self._jobs.items() if j not in seen and not t.last.terminal),
            key=_job_sort_key,
        )
        if gone:
            for r in self._squeue([f"--jobs={','.join(gone)}"]):
                snap = JobSnapshot.from_squeue(r)
                if snap.job_id not in gone:
                    continue
                if snap.base == "RUNNING" and self.node not in expand_hostlist(snap.nodes):
                    # restarted elsewhere: the agents of those nodes report it from now on
                    self._jobs.pop(snap.job_id, None)
                    continue
                seen[snap.job_id] = snap
        return seen, set(self._jobs) | set(seen)

    def _poll_jobs(self, now_ns: int) -> list[Event]:
        seen, expected = self._query_jobs()
        events: list[Event] = []
        plan = _Plan()
        for job_id in sorted(seen, key=_job_sort_key):
            self._missing.pop(job_id, None)
            events.extend(self._apply_job(seen[job_id], now_ns, plan))
        gone = expected - set(seen)
        for job_id in gone:
            track = self._jobs.get(job_id)
            if track is None or not track.last.terminal:
                plan.missing.add(job_id)
            elif not track.steps_checked:
                plan.steps.add(job_id)
            else:
                self._mark_finished(job_id)
        if not plan.ids:
            return events
        if not self.config.use_sacct:
            for job_id in plan.missing:
                self._count_missing(job_id)
            return events
        try:
            records = self._sacct(plan.ids)
        except SlurmError as exc:
            # the requeue itself is known; only its cause is not: report it without one
            for job_id in sorted(plan.requeued, key=_job_sort_key):
                track = self._jobs[job_id]
                events.append(self._job_requeued(track.last, track.requeues_reported, now_ns))
            raise _PartialPoll(events, exc) from exc
        events.extend(self._apply_sacct(plan, records, gone, now_ns))
        return events

    def _apply_job(self, cur: JobSnapshot, now_ns: int, plan: _Plan) -> list[Event]:
        """Diff one job against its previous snapshot; the requeue cause is left to sacct."""
        track = self._jobs.get(cur.job_id)
        prev = track.last if track else None
        if track is None:
            track = _JobTrack(last=cur)
            self._jobs[cur.job_id] = track
        events: list[Event] = []
        if cur.restart_cnt > track.requeues_reported:
            track.requeues_reported = cur.restart_cnt
            track.steps_checked = False
            if self.config.use_sacct:
                plan.requeued.add(cur.job_id)
            else:
                events.append(self._job_requeued(cur, cur.restart_cnt, now_ns))
        if prev is None or prev.base != cur.base or prev.restart_cnt != cur.restart_cnt:
            ev = self._job_state_event(cur, now_ns, first_sight=prev is None)
            if ev is not None:
                events.append(ev)
        if cur.terminal and not track.steps_checked:
            if self.config.use_sacct and cur.base in STEP_CHECK_STATES:
                plan.steps.add(cur.job_id)
            else:
                track.steps_checked = True
        track.last = cur
        return events

    def _apply_sacct(
        self, plan: _Plan, records: list[SacctJob], gone: set[str], now_ns: int
    ) -> list[Event]:
        """Requeue causes, the end of purged jobs and OOM-killed steps, from one sacct call."""
        by_job: dict[str, list[SacctJob]] = {}
        for rec in records:
            by_job.setdefault(str(rec.job_id), []).append(rec)
        for recs in by_job.values():
            recs.sort(key=lambda r: (r.time.submission or 0, r.time.start or 0, r.time.end or 0))
        events: list[Event] = []

        for job_id in sorted(plan.requeued, key=_job_sort_key):
            track = self._jobs[job_id]
            cause = _previous_run(by_job.get(job_id, []), track.last)
            cause_snap = JobSnapshot.from_sacct(cause) if cause is not None else None
            events.append(
                self._job_requeued(track.last, track.requeues_reported, now_ns, cause_snap)
            )
            if cause is None or cause_snap is None:
                continue
            if cause_snap.base in {"PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}:
                # the run that ended is the news: preempted / node failure / OOM, then requeued
                ev = self._job_state_event(cause_snap, now_ns, first_sight=False)
                if ev is not None:
                    events.append(ev)
            events.extend(self._oom_steps(job_id, cause, now_ns))

        for job_id in sorted(plan.missing, key=_job_sort_key):
            runs = by_job.get(job_id)
            if not runs:
                self._count_missing(job_id)
                continue
            known = self._jobs.get(job_id)
            restart = known.last.restart_cnt if known else 0
            snap = JobSnapshot.from_sacct(runs[-1], restart_cnt=restart)
            events.extend(self._apply_job(snap, now_ns, _Plan()))
            if not snap.terminal:
                self._count_missing(job_id)  # accounting lags behind: ask again next poll
                continue
            if snap.base in STEP_CHECK_STATES:
                events.extend(self._oom_steps(job_id, runs[-1], now_ns))
            self._mark_finished(job_id)

        for job_id in sorted(plan.steps - plan.missing, key=_job_sort_key):
            ended = self._jobs.get(job_id)
            if ended is None:
                continue
            found = by_job.get(job_id)
            if found:
                events.extend(self._oom_steps(job_id, found[-1], now_ns))
                ended.steps_checked = True
            elif self._count_missing(job_id, forget=False):
                ended.steps_checked = True
            if ended.steps_checked and job_id in gone:
                self._mark_finished(job_id)
        return events

    def _oom_steps(self, job_id: str, rec: SacctJob, now_ns: int) -> list[Event]:
        """An OUT_OF_MEMORY step inside a run that ended otherwise names the node it hit."""
        if "OUT_OF_MEMORY" in rec.state.current:
            return []  # the run's own event is already oom_killed
        events: list[Event] = []
        for step in rec.steps:
            if "OUT_OF_MEMORY" not in step.state:
                continue
            end_s = step.time.end or rec.time.end
            nodes = step.nodes.names or expand_hostlist(step.nodes.range)
            step_id = step.step.id or step.step.name
            events.append(
                self._event(
                    "oom_killed",
                    job_id=job_id,
                    state="+".join(step.state),
                    reason=f"step {step_id} ran out of memory on {','.join(nodes) or '?'}",
                    exit_code=exit_code_value(step.exit_code),
                    ts_s=end_s,
                    now_ns=now_ns,
                    key=(job_id, "oom_killed", step_id, end_s) if end_s else None,
                    node=nodes[0] if len(nodes) == 1 else None,
                )
            )
        return events

    def _count_missing(self, job_id: str, forget: bool = True) -> bool:
        """One more poll without an answer; True (and forgotten if asked) when out of tries."""
        n = self._missing.get(job_id, 0) + 1
        self._missing[job_id] = n
        if n < self.config.max_missing_polls:
            return False
        log.warning("slurm job %s: no answer from squeue or sacct after %d polls", job_id, n)
        if forget:
            self._mark_finished(job_id)
        else:
            self._missing.pop(job_id, None)
        return True

    def _mark_finished(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._missing.pop(job_id, None)
        self._finished[job_id] = None
        while len(self._finished) > self.config.max_finished_jobs:
            self._finished.pop(next(iter(self._finished)))

    # -- events ------------------------------------------------------------------------------

    def _job_state_event(
        self, cur: JobSnapshot, now_ns: int, first_sight: bool
    ) -> SchedulerEventEvent | None:
        etype = JOB_EVENT_BY_STATE.get(cur.base, "other")
        if etype is None or (first_sight and cur.base == "SUSPENDED"):
            return None
        if cur.base == "RUNNING":
            ts_s = cur.start_s
        elif cur.terminal:
            ts_s = cur.end_s
        else:
            ts_s = None
        return self._event(
            etype,
            job_id=cur.job_id,
            state=cur.state_text,
            reason=cur.reason,
            exit_code=cur.exit_code if cur.terminal else None,
            ts_s=ts_s,
            now_ns=now_ns,
            key=(cur.job_id, etype, cur.base, ts_s) if ts_s else None,
            node=cur.failed_node or None,
        )

    def _job_requeued(
        self, cur: JobSnapshot, count: int, now_ns: int, cause: JobSnapshot | None = None
    ) -> SchedulerEventEvent:
        parts = [f"restart {count}"]
        if cause is not None:
            parts.append(f"previous run {cause.state_text}")
            if cause.reason:
                parts.append(cause.reason)
        elif cur.reason:
            parts.append(cur.reason)
        return self._event(
            "job_requeued",
            job_id=cur.job_id,
            state=cur.state_text,
            reason="; ".join(parts),
            exit_code=cause.exit_code if cause is not None else None,
            ts_s=cause.end_s if cause is not None else None,
            now_ns=now_ns,
            key=(cur.job_id, "job_requeued", count),
        )

    def _poll_node(self, now_ns: int) -> list[Event]:
        events: list[Event] = []
        for raw in self._scontrol_node(self.node):
            cur = NodeSnapshot.from_scontrol(raw)
            prev = self._nodes.get(cur.name)
            self._nodes[cur.name] = cur
            new_class = cur.node_class
            old_class = prev.node_class if prev else None
            if new_class == old_class or (old_class is None and new_class == "up"):
                continue
            etype = _NODE_EVENT[new_class]
            ts_s = cur.reason_changed_s if new_class != "up" else None
            events.append(
                self._event(
                    etype,
                    job_id=self._job_on_node(cur.name, ts_s),
                    state=cur.state_text,
                    reason=cur.reason,
                    exit_code=None,
                    ts_s=ts_s,
                    now_ns=now_ns,
                    key=(cur.name, etype, ts_s) if ts_s else None,
                    node=cur.name,
                )
            )
        return events

    def _job_on_node(self, node: str, ts_s: int | None) -> str | None:
        """The watched job the node event concerns: one whose run on ``node`` covers the
        event time (a drain for "Kill task failed" comes as that job ends), else a running
        one; the lowest job id when several do."""
        on_node = [
            t.last
            for t in self._jobs.values()
            if t.last.nodes and node in expand_hostlist(t.last.nodes)
        ]
        covering = [
            s
            for s in on_node
            if ts_s is not None
            and (s.start_s or 0) <= ts_s
            and (not s.terminal or ts_s <= (s.end_s or 0))
        ]
        pick = covering or [s for s in on_node if not s.terminal]
        if not pick:
            return None
        return min(pick, key=lambda s: _job_sort_key(s.job_id)).job_id

    def _event(
        self,
        event_type: SchedulerEventType,
        *,
        job_id: str | None,
        state: str,
        reason: str,
        exit_code: int | None,
        ts_s: int | None,
        now_ns: int,
        key: tuple[object, ...] | None,
        node: str | None = None,
    ) -> SchedulerEventEvent:
        """Stamp one event; ``key`` (when the occurrence is identifiable) fixes its id."""
        payload = SchedulerEvent(
            source="slurm",
            event_type=event_type,
            state=state[:256],
            reason=reason[:16_384],
            exit_code=exit_code,
        )
        ts_ns = ts_s * 1_000_000_000 if ts_s else now_ns
        ev = self.factory.make(SchedulerEventEvent, payload, ts_ns=ts_ns, job_id=job_id)
        update: dict[str, Any] = {}
        if node and node != ev.node:
            update["node"] = node
        if key is not None:
            update["event_id"] = _stable_id(self.factory.cluster, "slurm", *key)
        return ev.model_copy(update=update) if update else ev


_NODE_EVENT: dict[NodeClass, SchedulerEventType] = {
    "down": "node_down",
    "drain": "node_drain",
    "up": "node_up",
}


def _previous_run(records: list[SacctJob], current: JobSnapshot) -> SacctJob | None:
    """The accounting record of the run that ended in the requeue (the latest finished one)."""
    done = [r for r in records if any(s in TERMINAL_JOB_STATES for s in r.state.current)]
    if current.start_s:
        done = [r for r in done if (r.time.end or 0) <= current.start_s] or done
    if not done:
        return None
    return max(done, key=lambda r: (r.time.end or 0, r.time.start or 0))


def _errors_text(errors: Iterable[SlurmErrorEntry]) -> str:
    return "; ".join(f"{e.error or 'error'} ({e.error_number}) {e.description}" for e in errors)


def _job_sort_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)


def create_slurm_collector(
    config: SlurmCollectorConfig,
    factory: EventFactory,
    runner: CommandRunner | None = None,
    environ: Mapping[str, str] | None = None,
) -> SlurmCollector:
    """The component factory the agent calls (tests pass a ``runner`` of recorded outputs)."""
    return SlurmCollector(config, factory, runner=runner, environ=environ)
