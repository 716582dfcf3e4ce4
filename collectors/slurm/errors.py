"""The errors ``poll`` raises, shared by the command runner (:mod:`.client`) and the output
parsers (:mod:`.parsing`), which so need not import each other."""

from __future__ import annotations

from collections.abc import Sequence


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
