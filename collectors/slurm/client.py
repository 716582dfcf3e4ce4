"""Running the Slurm commands: the runner (a subprocess, or recorded outputs in tests) and the
collector's calls of ``squeue``, ``sacct`` and ``scontrol``, with the errors each may report.

Commands are never retried inside a poll: the next poll is the retry (package docstring).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from typing import Protocol

from rankscope.collectors.slurm.errors import SlurmCommandError, SlurmOutputError
from rankscope.collectors.slurm.parsing import (
    SacctJob,
    ScontrolNode,
    SlurmErrorEntry,
    SqueueJob,
    parse_sacct,
    parse_scontrol_nodes,
    parse_squeue,
)
from rankscope.collectors.slurm.snapshots import _job_sort_key
from rankscope.collectors.slurm.state import _SlurmCollectorBase

#: slurm_errno ESLURM_INVALID_JOB_ID: squeue -j <purged job>
ESLURM_INVALID_JOB_ID = 2017
_INVALID_JOB_TEXT = "invalid job id specified"


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


class _SlurmCommands(_SlurmCollectorBase):
    """The collector's command calls; each returns parsed rows or raises a SlurmError."""

    runner: CommandRunner

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


def _errors_text(errors: Iterable[SlurmErrorEntry]) -> str:
    return "; ".join(f"{e.error or 'error'} ({e.error_number}) {e.description}" for e in errors)
