"""What the Slurm commands print, as typed records: the data_parser documents of ``squeue``,
``sacct`` and ``scontrol`` (v0.0.40 - v0.0.42), exit codes, and hostlist expressions."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any

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
