"""What the Slurm commands print, as typed records: the data_parser documents of ``squeue``,
``sacct``, ``scontrol`` and ``sinfo`` (v0.0.40 - v0.0.42, and the openapi v0.0.37 shapes of
21.08: lower-case node states, ``state_flags``, states as strings), which document a text is,
exit codes, and hostlist expressions."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rankscope.collectors.slurm.errors import SlurmOutputError

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
    """States are lists since v0.0.39 and plain strings before (21.08 node states lower case,
    "idle+drain" compound, "down*" for not responding); None means empty. -> upper-case words."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        return value
    out: list[Any] = []
    for item in items:
        if not isinstance(item, str):
            out.append(item)
            continue
        for part in item.split("+"):
            word = part.strip().upper()
            if word.endswith("*"):  # sinfo/scontrol text: "*" = not responding
                out.extend([word.rstrip("*"), "NOT_RESPONDING"])
            elif word:
                out.append(word)
    return out


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
    # run linking (issue 19): squeue --json v0.0.40-42 job fields (slurm.schedmd.com/rest_api)
    comment: Text = ""
    dependency: Text = ""
    array_job_id: OptNumber = None
    array_task_id: OptNumber = None


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


class SacctComment(_Lenient):
    """sacct's ``comment`` object (v0.0.40-42): the user's ``--comment`` is ``job``."""

    administrator: Text = ""
    job: Text = ""
    system: Text = ""


def _comment_in(value: Any) -> Any:
    return {"job": value} if isinstance(value, str) or value is None else value


class SacctArray(_Lenient):
    """sacct's ``array`` object: ``job_id`` 0 = not an array job."""

    job_id: int = 0
    task_id: OptNumber = None


class SacctJob(_Lenient):
    """One entry of ``sacct --json`` ``jobs[]`` (slurmdbd's record of one run of a job)."""

    job_id: int
    name: Text = ""
    comment: Annotated[SacctComment, BeforeValidator(_comment_in)] = Field(
        default_factory=SacctComment
    )
    array: SacctArray = Field(default_factory=SacctArray)
    state: SacctState = Field(default_factory=SacctState)
    exit_code: ExitCodeField = None
    nodes: Text = ""
    failed_node: Text = ""
    time: SacctTime = Field(default_factory=SacctTime)
    steps: list[SacctStep] = Field(default_factory=list)


class SacctResponse(_Envelope):
    jobs: list[SacctJob] = Field(default_factory=list)


class ScontrolNode(_Lenient):
    """One entry of ``scontrol --json show node`` ``nodes[]`` (21.08: ``state`` a lower-case
    word and the flags apart in ``state_flags``)."""

    name: str
    state: StrList = Field(default_factory=list)
    state_flags: StrList = Field(default_factory=list)
    reason: Text = ""
    reason_changed_at: OptTime = None
    reason_set_by_user: Text = ""
    comment: Text = ""


class ScontrolNodeResponse(_Envelope):
    nodes: list[ScontrolNode] = Field(default_factory=list)


class SinfoReason(_Lenient):
    description: Text = ""
    time: OptTime = None
    user: Text = ""


def _reason_in(value: Any) -> Any:
    return {"description": value} if isinstance(value, str) or value is None else value


class SinfoNodeState(_Lenient):
    state: StrList = Field(default_factory=list)


class SinfoNodeNames(_Lenient):
    nodes: list[str] = Field(default_factory=list)


class SinfoEntry(_Lenient):
    """One entry of ``sinfo --json`` ``sinfo[]``: a group of nodes of one partition that share
    a state (and reason)."""

    node: SinfoNodeState = Field(default_factory=SinfoNodeState)
    nodes: SinfoNodeNames = Field(default_factory=SinfoNodeNames)
    reason: Annotated[SinfoReason, BeforeValidator(_reason_in)] = Field(default_factory=SinfoReason)


class SinfoResponse(_Envelope):
    sinfo: list[SinfoEntry] = Field(default_factory=list)

    def as_nodes(self) -> ScontrolNodeResponse:
        """One node record per node name (a node in several partitions appears once)."""
        nodes: dict[str, ScontrolNode] = {}
        for entry in self.sinfo:
            for expr in entry.nodes.nodes:
                for name in expand_hostlist(expr):
                    nodes.setdefault(
                        name,
                        ScontrolNode(
                            name=name,
                            state=entry.node.state,
                            reason=entry.reason.description,
                            reason_changed_at=entry.reason.time,
                            reason_set_by_user=entry.reason.user,
                        ),
                    )
        return ScontrolNodeResponse(
            errors=self.errors, warnings=self.warnings, meta=self.meta, nodes=list(nodes.values())
        )


# --------------------------------------------------------------------------------------------
# Which document is this
# --------------------------------------------------------------------------------------------

DocKind = Literal["squeue", "sacct", "nodes", "sinfo", "envelope", "unknown"]
_KIND_TEXT: dict[DocKind, str] = {
    "squeue": "a squeue / scontrol show job document (jobs[] with job_state)",
    "sacct": "a sacct document (jobs[] with state.current)",
    "nodes": "a scontrol show node document (nodes[])",
    "sinfo": "a sinfo document (sinfo[])",
    "envelope": "a document with no records (only errors/meta)",
    "unknown": "not a Slurm --json document",
}


def document_kind(raw: Mapping[str, Any]) -> DocKind:
    """Which command printed ``raw``, from its top-level keys (and, for ``jobs``, the shape of a
    job: slurmctld's ``job_state`` or slurmdbd's ``state`` object). A job list that is empty
    cannot tell squeue from sacct: "envelope"."""
    for key in ("sinfo", "nodes"):
        if key in raw:
            return "sinfo" if key == "sinfo" else "nodes"
    if "jobs" not in raw:
        return "envelope" if {"errors", "meta", "warnings"} & set(raw) else "unknown"
    jobs = raw["jobs"]
    first = jobs[0] if isinstance(jobs, list) and jobs else None
    if not isinstance(first, Mapping):
        return "envelope"
    if "job_state" not in first and isinstance(first.get("state"), Mapping):
        return "sacct"
    return "squeue" if "job_state" in first or "job_id" in first else "unknown"


def _decode(text: str, what: str) -> dict[str, Any]:
    """The JSON object a command printed, or a :class:`SlurmOutputError` that says why not."""
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
    return raw


def _validate(
    raw: dict[str, Any], model: type[_Envelope], what: str, accepts: frozenset[DocKind]
) -> Any:
    """The document as ``model``; another command's document is an error that names it (a
    wrong command line must not read as "no jobs")."""
    kind = document_kind(raw)
    if kind not in accepts | {"envelope"}:
        keys = ", ".join(sorted(raw)[:6]) or "none"
        raise SlurmOutputError(f"{what}: got {_KIND_TEXT[kind]} (top-level keys: {keys})")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise SlurmOutputError(
            f"{what}: unexpected data_parser shape at {loc}: {first['msg']}"
        ) from exc


def parse_squeue(text: str) -> SqueueResponse:
    """``squeue --json`` (or ``scontrol --json show job``: the same job records)."""
    what = "squeue --json"
    return _validate(_decode(text, what), SqueueResponse, what, frozenset({"squeue"}))  # type: ignore[no-any-return]


def parse_sacct(text: str) -> SacctResponse:
    what = "sacct --json"
    return _validate(_decode(text, what), SacctResponse, what, frozenset({"sacct"}))  # type: ignore[no-any-return]


def parse_scontrol_nodes(text: str) -> ScontrolNodeResponse:
    """``scontrol --json show node``, or ``sinfo --json`` (its ``sinfo[]`` groups, or the
    ``nodes[]`` of older releases), as node records."""
    raw = _decode(text, "scontrol --json show node")
    if document_kind(raw) == "sinfo":
        sinfo: SinfoResponse = _validate(raw, SinfoResponse, "sinfo --json", frozenset({"sinfo"}))
        return sinfo.as_nodes()
    what = "scontrol --json show node"
    return _validate(raw, ScontrolNodeResponse, what, frozenset({"nodes"}))  # type: ignore[no-any-return]


def parse_sinfo(text: str) -> ScontrolNodeResponse:
    """``sinfo --json`` -> node records (the same reader as :func:`parse_scontrol_nodes`)."""
    return parse_scontrol_nodes(text)


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
