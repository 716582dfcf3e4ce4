"""Cross-rank root cause of a failure cascade: one incident per cascade, with its evidence chain.

Why: on a large job one GPU falls off the bus (or an HCA port flaps, or the scheduler takes a
node away) and seconds to minutes later every other rank dies with an NCCL watchdog timeout. The
last exception, and most of the log volume, points at the wrong place. This package looks back
across all ranks and nodes of one job when a failure signal appears, orders the precursors by
*corrected* time, weighs them by how diagnostic their kind is and by topology, and emits ONE
:class:`~rankscope.schemas.derived.Incident` naming the primary cause, its evidence chain, the
symptom ranks and a confidence (design: Processing semantics -> Root cause; the fault catalogue
gives the expected attribution per scenario).

It is pure and incremental: no Kafka, no faust, no wall clock except ``emitted_ts``. The caller
(one :class:`RootCauseAttributor` per job) feeds every event of the job with its corrected
timestamp through :meth:`RootCauseAttributor.observe`, tells it about hangs and silent nodes that
other detectors found (:meth:`~RootCauseAttributor.note_hang`,
:meth:`~RootCauseAttributor.note_node_unresponsive`), and calls
:meth:`~RootCauseAttributor.advance` with the job's event time; ``advance`` returns the incidents
that became due.

**What is kept.** Only candidate precursors (XIDs, ECC, GPU not answering, fabric link/counter
events, NVLink, scheduler preemption/OOM/node down/drain, notes from detectors) in a bounded
deque, and, while a cascade is open, the first symptom of each rank. The hot kinds (GPU samples,
fabric counters, heartbeats, successful spans) only update a per-node "last seen" time and a
per-rank progress record, O(1) each, so memory is O(ranks + nodes + max_history).

**Failure signals** open a cascade: error spans, NCCL/PyTorch communication errors (watchdog
timeout, nccl_error, remote process exited, process-group abort, IB completion errors), the
scheduler failing the job, and (``trigger_on_fatal_precursors``) precursors that always kill the
process: fatal XIDs (48, 62, 74, 79, 94, 95, 119, 120), an uncorrectable ECC event, a GPU not
answering, a preemption, an OOM kill, a node down, and the detectors' notes. Triggering on the
precursor itself matters in production: with PyTorch's 600 s watchdog the surviving ranks'
timeouts come ten minutes after the XID, far beyond any sensible look-back.

**When an incident is emitted.** When the job's event time passes ``first signal + settle_s``
(late evidence within ``settle_s`` still counts), or as soon as the scheduler reports the job
ended (no more events of this job will come to advance its event time). Later failure signals of
the same cascade do not create a second incident: they are absorbed, and the incident is
re-emitted with the **same** ``incident_id`` and the same primary cause once they settle (a
revision with more symptom ranks and evidence; the ``incidents`` table is a ReplacingMergeTree on
``incident_id``). A cascade ends when the job is restarted (scheduler ``job_started``), when it
makes progress again (a step that started after the cascade's last signal completes), or after
``cascade_gap_s`` without a new signal; the next failure signal then opens a new cascade, and
precursors from before the old cascade's end can no longer be chosen.

**Choosing the primary cause** (score = class weight x strength x time factor x survived factor
x (1 + topology bonus)) and the **confidence** are explained in :mod:`.scoring`; the candidates
inferred at attribution time (silent node, hung rank, peer-named node) and the fallbacks in
:mod:`.attribution`.

**Modules.** :mod:`.xid` (the XID table), :mod:`.records` (the shapes kept), :mod:`.config` (the
knobs), :mod:`.signals` (events -> candidate/symptom records), :mod:`.scoring` (weights, factors,
confidence), :mod:`.attribution` (one cascade -> one Incident), :mod:`.narrative` (evidence chain
and summary), :mod:`.inference` (:class:`RootCauseAttributor`, the incremental engine).
"""

from rankscope.streams.analysis.rootcause.config import RootCauseConfig
from rankscope.streams.analysis.rootcause.inference import RootCauseAttributor
from rankscope.streams.analysis.rootcause.records import RootCauseStats
from rankscope.streams.analysis.rootcause.scoring import DEFAULT_CLASS_WEIGHTS
from rankscope.streams.analysis.rootcause.xid import XID_INFO, XidInfo, xid_description

__all__ = [
    "DEFAULT_CLASS_WEIGHTS",
    "XID_INFO",
    "RootCauseAttributor",
    "RootCauseConfig",
    "RootCauseStats",
    "XidInfo",
    "xid_description",
]
