"""The incremental engine: one RootCauseAttributor per job tracks cascades and attributes them.

See the package docstring for the rules.

Why a module: this is the only stateful part, the orchestrator. It keeps the job's liveness and
progress, the bounded candidate history and the open cascade; events are read by
:mod:`.signals`, a due cascade is attributed by :mod:`.attribution` (scored by :mod:`.scoring`,
described by :mod:`.narrative`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rankscope.schemas.derived import Incident
from rankscope.schemas.events import Event, SpanEvent
from rankscope.schemas.payloads import Span
from rankscope.streams.analysis.rootcause.attribution import JobView, attribute
from rankscope.streams.analysis.rootcause.config import RootCauseConfig, Windows
from rankscope.streams.analysis.rootcause.records import Cascade, RankState, Rec, RootCauseStats
from rankscope.streams.analysis.rootcause.scoring import Scorer
from rankscope.streams.analysis.rootcause.signals import (
    QUIET_KINDS,
    SignalReader,
    hang_note,
    peer_host,
    unresponsive_note,
)

__all__ = ["RootCauseAttributor"]


class RootCauseAttributor:
    """Incremental root-cause attribution for one job (see the package docstring).

    ``observe`` every event with its corrected timestamp, ``advance`` with the job's event time;
    ``flush`` at the end of a stream attributes whatever is still settling.
    """

    def __init__(
        self,
        cluster: str,
        job_id: str,
        config: RootCauseConfig | None = None,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.cluster = cluster
        self.job_id = job_id
        self.config = config or RootCauseConfig()
        self.clock_ns = clock_ns
        self.stats = RootCauseStats()
        cfg = self.config
        self._windows = Windows.of(cfg)
        self._scorer = Scorer(cfg, self._windows)
        self._reader = SignalReader()
        self._history: deque[Rec] = deque(maxlen=cfg.max_history)
        self._pre: deque[Rec] = deque(maxlen=1024)  # symptoms seen while no cascade is open
        self._node_seen: dict[str, int] = {}
        self._ranks: dict[int, RankState] = {}
        self._offsets: dict[str, int] = {}
        self._addresses: dict[str, str] = dict(cfg.node_addresses)
        self._last_ok_step_start = -1
        self._restart_ts = -1
        self._floor = -1
        self._now = -1
        self._cascade: Cascade | None = None
        self._out: list[Incident] = []

    # ------------------------------------------------------------------------------ input

    def observe(self, event: Event, corrected_ts: int) -> None:
        """Take one event of the job; ``corrected_ts`` is its time on the reference clock.

        O(1) for the hot kinds: GPU samples, fabric counters, heartbeats and successful spans
        only update liveness/progress records.
        """
        if isinstance(event, SpanEvent):
            p = event.payload
            if p.status != "error":
                self._progress(event, p, corrected_ts)
                return
        node = event.node
        if corrected_ts > self._node_seen.get(node, -1):
            self._node_seen[node] = corrected_ts
        if isinstance(event, QUIET_KINDS):
            return
        self.stats.events += 1
        off = event.ts - corrected_ts
        if off:
            self._offsets[node] = off
        for sig in self._reader.read(event, corrected_ts):
            if sig.role == "candidate":
                self._candidate(sig.rec, trigger=sig.trigger)
            elif sig.role == "symptom":
                self._symptom(sig.rec, trigger=sig.trigger, peer=sig.peer, end=sig.end)
            else:  # the scheduler (re)started the job
                self._restart_ts = max(self._restart_ts, sig.rec.ts)

    def note_hang(self, rank: int | None, node: str, ts: int, seq: int | None) -> None:
        """The hang detector's finding: ``rank`` (None: the collective itself is stuck) stopped
        making progress at ``ts`` (corrected), never entering collective ``seq`` if known."""
        gpu = None
        if rank is not None:
            st = self._ranks.get(rank)
            if st is not None:
                node = node or st.node
                gpu = st.gpu
        rec = hang_note(rank, node, gpu, ts, seq)
        # the detector learned it now: the cascade's clock starts at detection, not at the onset
        self._candidate(rec, trigger=True, signal_ts=max(ts, self._now), note=True)

    def note_node_unresponsive(self, node: str, ts: int) -> None:
        """The liveness detector's finding: no telemetry from ``node`` since ``ts`` (corrected)."""
        rec = unresponsive_note(node, ts)
        self._candidate(rec, trigger=True, signal_ts=max(ts, self._now), note=True)

    def note_node_address(self, node: str, address: str) -> None:
        """Map a peer address as NCCL logs it (IPoIB address or host name) to its node."""
        self._addresses[peer_host(address)] = node

    # ------------------------------------------------------------------------------ output

    def advance(self, event_time_ns: int) -> list[Incident]:
        """Attribute what is due at the job's event time ``event_time_ns``; returns new incidents
        and revisions (same ``incident_id``) of already emitted ones."""
        now = self._now = max(self._now, event_time_ns)
        c = self._cascade
        if c is not None:
            if c.incident is None:
                if now >= self._deadline(c):
                    if self._contradicted(c):
                        self._cascade = None  # the job kept going: the note was wrong
                        self.stats.cascades_dropped += 1
                    elif not self._unconfirmed(c, now):
                        self._emit(c, now)
            elif c.dirty and self._revision_due(c, now):
                self._revise(c)
            if c.incident is not None and now > c.last_ts + self._windows.cascade_gap:
                self._close(c)
        self._prune(now)
        out, self._out = self._out, []
        return out

    def flush(self, event_time_ns: int | None = None) -> list[Incident]:
        """Attribute a cascade still settling and revise an emitted one now (end of stream)."""
        now = max(self._now, event_time_ns if event_time_ns is not None else self._now)
        self._now = now
        c = self._cascade
        if c is not None:
            if c.incident is None:
                self._emit(c, now)
            elif c.dirty:
                self._revise(c)
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------------------ hot path

    def _progress(self, event: SpanEvent, p: Span, ts: int) -> None:
        node = event.node
        if ts > self._node_seen.get(node, -1):
            self._node_seen[node] = ts
        rank = event.rank
        if rank is None:
            return
        st = self._ranks.get(rank)
        if st is None:
            st = self._ranks[rank] = RankState(node, event.gpu)
        elif st.node != node:
            st.node, st.gpu = node, event.gpu
        if ts > st.last_ts:
            st.last_ts = ts
        phase = p.phase
        if phase == "collective":
            seq = p.attributes.get("collective.seq")
            if isinstance(seq, int) and seq > st.seq:
                st.seq, st.seq_ts = seq, ts
        elif phase == "step":
            start = p.start_ns - (event.ts - ts)
            if start > self._last_ok_step_start:
                self._last_ok_step_start = start

    # ------------------------------------------------------------------------------ cascades

    def _candidate(
        self, rec: Rec, *, trigger: bool, signal_ts: int | None = None, note: bool = False
    ) -> None:
        self.stats.candidates += 1
        if len(self._history) == self._history.maxlen:
            self.stats.history_dropped += 1
        self._history.append(rec)
        if trigger and (note or self.config.trigger_on_fatal_precursors) and rec.ts > self._floor:
            c = self._signal(rec.ts if signal_ts is None else signal_ts, real=not note)
            if note:
                c.note_onset = rec.ts if c.note_onset is None else min(c.note_onset, rec.ts)
            if c.incident is not None:
                c.dirty = True

    def _symptom(
        self, rec: Rec, *, trigger: bool = False, peer: str = "", end: bool = False
    ) -> None:
        self.stats.symptoms += 1
        if rec.ts <= self._floor:
            return  # a late symptom of a cascade already closed
        c = self._cascade
        if trigger:
            c = self._signal(rec.ts)
        elif c is not None and self._starts_new(c, rec.ts):
            c = None
        if c is None:
            self._pre.append(rec)
            return
        self._absorb(c, rec, peer, end)

    def _absorb(self, c: Cascade, rec: Rec, peer: str = "", end: bool = False) -> None:
        c.symptom_events += 1
        c.last_ts = max(c.last_ts, rec.ts)
        if c.incident is not None:
            c.dirty = True
        if end:
            c.end_ts = rec.ts if c.end_ts is None else min(c.end_ts, rec.ts)
        if rec.rank is None:
            if len(c.job_level) < 32:
                c.job_level.append(rec)
        else:
            first = c.rank_first.get(rec.rank)
            if first is None or rec.ts < first.ts:
                c.rank_first[rec.rank] = rec
            if rec.timeout:
                c.timeout_ranks.add(rec.rank)
        if rec.timeout and rec.seq is not None:
            c.watchdog[(rec.op or "collective", rec.seq)] += 1
        if peer:
            named = self._resolve(peer)
            if named and named != rec.node:
                reporters = c.named.setdefault(named, set())
                if len(reporters) < 64:
                    reporters.add(rec.node)

    def _resolve(self, peer: str) -> str:
        """The node a peer address in an error names ('' if it is not one of the job's)."""
        host = peer_host(peer)
        if not host:
            return ""
        node = self._addresses.get(host)
        if node is not None:
            return node
        if host in self._node_seen:
            return host
        short = host.split(".", 1)[0]
        return short if short in self._node_seen and not short.isdigit() else ""

    def _starts_new(self, c: Cascade, ts: int) -> bool:
        """A failure at ``ts`` is a new cascade: the old one is attributed and the job was
        restarted, made progress, or stayed quiet for ``cascade_gap_s`` since."""
        if c.incident is None:
            return False
        if ts > c.last_ts + self._windows.cascade_gap:
            return True
        if self._restart_ts > c.last_ts and ts >= self._restart_ts:
            return True
        return self._last_ok_step_start > c.last_ts and ts >= self._last_ok_step_start

    def _signal(self, ts: int, *, real: bool = True) -> Cascade:
        c = self._cascade
        if c is not None and self._starts_new(c, ts):
            self._close(c)
            c = None
        if c is None:
            c = self._cascade = Cascade(first_ts=ts, floor=self._floor, last_ts=ts)
            self.stats.cascades += 1
            lower = max(ts - self._windows.lookback, self._floor + 1)
            for rec in self._pre:
                if rec.ts >= lower:
                    self._absorb(c, rec)
            self._pre.clear()
        elif c.incident is None:
            c.first_ts = min(c.first_ts, ts)
        c.last_ts = max(c.last_ts, ts)
        c.real = c.real or real
        return c

    def _close(self, c: Cascade) -> None:
        if c.incident is not None and c.dirty and self.config.emit_revisions:
            self._revise(c)
        self._floor = max(self._floor, c.last_ts)
        self._cascade = None

    def _contradicted(self, c: Cascade) -> bool:
        """Only detector notes opened ``c`` and the job completed a step that started after the
        onset they gave: a synchronous job cannot progress with a hung rank or a dead node (a
        note made, e.g., before the clock offsets converged)."""
        return not c.real and c.note_onset is not None and self._last_ok_step_start >= c.note_onset

    def _unconfirmed(self, c: Cascade, now: int) -> bool:
        """Only detector notes opened ``c`` and the job has not completed any step yet, so
        nothing can confirm or contradict them (a detector without a baseline, or event time
        pushed ahead by a skewed clock before offsets converge): wait, at most
        ``cascade_gap_s``."""
        gap = self._windows.cascade_gap
        return not c.real and self._last_ok_step_start < 0 and now < c.first_ts + gap

    def _deadline(self, c: Cascade) -> int:
        due = c.first_ts + self._windows.settle
        if c.end_ts is not None:
            due = min(due, max(c.end_ts, c.first_ts) + self._windows.end_grace)
        return due

    def _revision_due(self, c: Cascade, now: int) -> bool:
        if not self.config.emit_revisions or c.revisions >= self.config.max_revisions:
            return False
        if now >= c.last_ts + self._windows.settle:
            return True
        return c.end_ts is not None and now >= c.end_ts + self._windows.end_grace

    def _prune(self, now: int) -> None:
        c = self._cascade
        keep = now - self._windows.lookback - self._windows.settle - self._windows.after
        if c is not None and c.incident is None:
            keep = min(keep, c.first_ts - self._windows.lookback)
        h = self._history
        while h and h[0].ts < keep:
            h.popleft()

    # ------------------------------------------------------------------------------ attribution

    def _emit(self, c: Cascade, now: int) -> None:
        c.attributed_ts = now
        inc = self._build(c)
        c.incident, c.dirty = inc, False
        self.stats.incidents += 1
        self._out.append(inc)

    def _revise(self, c: Cascade) -> None:
        if c.revisions >= self.config.max_revisions:
            return
        inc = self._build(c)
        c.dirty = False
        if c.incident is not None and inc.model_dump(
            exclude={"emitted_ts", "revision"}
        ) == c.incident.model_dump(exclude={"emitted_ts", "revision"}):
            return
        c.revisions += 1
        inc = inc.model_copy(update={"revision": c.revisions})
        c.incident = inc
        self.stats.revisions += 1
        self._out.append(inc)

    def _window(self, c: Cascade) -> list[Rec]:
        """The candidates in ``c``'s look-back window (and up to ``after_tolerance_s`` after)."""
        lower = max(c.first_ts - self._windows.lookback, c.floor + 1)
        upper = c.first_ts + self._windows.after
        return [r for r in self._history if lower <= r.ts <= upper and r.cause is not None]

    def _build(self, c: Cascade) -> Incident:
        view = JobView(
            cluster=self.cluster,
            job_id=self.job_id,
            config=self.config,
            scorer=self._scorer,
            node_seen=self._node_seen,
            ranks=self._ranks,
            offsets=self._offsets,
            last_ok_step_start=self._last_ok_step_start,
            now=self._now,
            clock_ns=self.clock_ns,
        )
        inc, reattributed = attribute(c, self._window(c), view)
        if reattributed:
            self.stats.reattributed += 1
        return inc
