"""Slurm scheduler events from the ``squeue``/``sacct``/``scontrol`` JSON output.

Why the CLIs and not slurmrestd: every Slurm node has them, they need no token or daemon, and since
Slurm 23.02 ``--json`` prints the same data_parser documents slurmrestd serves
(``openapi_resp_job_info_msg`` for squeue, the slurmdbd job list for sacct,
``openapi_resp_node_info_msg`` for ``scontrol show node``). The models below read data_parser
v0.0.40 (23.11), v0.0.41 (24.05/24.11) and v0.0.42 (24.11/25.x): they ignore unknown fields, accept
numbers both plain and wrapped as ``{"set", "infinite", "number"}``, and states both as a list
(``["PENDING", "REQUEUED"]``, base state plus flags) and as the single string of older parsers.
The 21.08 (openapi v0.0.37) shapes read too: node ``state`` one lower-case word (``down``,
``mixed``, compound ``idle+drain``, ``down*`` = not responding) with the flags in
``state_flags``; sacct ``state.current`` a string, ``REQUEUED`` for a run that ended in a requeue
(-> ``job_requeued``). Each parser first checks which command printed the document (top-level
keys; for ``jobs[]`` slurmctld's ``job_state`` vs slurmdbd's ``state`` object) and raises a
one-line ``SlurmOutputError`` naming it when it is another command's (a wrong command line must
not read as "no jobs"). The node reader also takes ``sinfo --json`` (``sinfo[]`` groups):
``scontrol_cmd: [sinfo, --json, --nodes]`` watches the node through sinfo.

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

Layout: :mod:`.config` (what the agent's ``slurm:`` section says), :mod:`.errors` (what ``poll``
raises), :mod:`.parsing` (data_parser documents and hostlists), :mod:`.snapshots` (normalised
job and node snapshots, the state tables), :mod:`.state` (what the collector tracks and the
events it builds), :mod:`.client` (running the commands), :mod:`.collector` (the poll and the
factory the agent calls).
"""

from rankscope.collectors.slurm.client import CommandRunner, SubprocessRunner
from rankscope.collectors.slurm.collector import SlurmCollector, create_slurm_collector
from rankscope.collectors.slurm.config import SlurmCollectorConfig
from rankscope.collectors.slurm.errors import SlurmCommandError, SlurmError, SlurmOutputError
from rankscope.collectors.slurm.parsing import (
    SacctJob,
    SacctResponse,
    ScontrolNode,
    ScontrolNodeResponse,
    SlurmExitCode,
    SqueueJob,
    SqueueResponse,
    document_kind,
    exit_code_value,
    expand_hostlist,
    parse_sacct,
    parse_scontrol_nodes,
    parse_sinfo,
    parse_squeue,
)
from rankscope.collectors.slurm.snapshots import JobSnapshot, NodeSnapshot

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
    "document_kind",
    "exit_code_value",
    "expand_hostlist",
    "parse_sacct",
    "parse_scontrol_nodes",
    "parse_sinfo",
    "parse_squeue",
]
