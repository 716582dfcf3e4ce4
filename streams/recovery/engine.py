"""The recovery decider: incidents, detections and step progress in, recovery events out.

Pure and driven by event time, so a replay of the same findings makes the same decisions (and
the same idempotency keys). The bounds, in the order they apply:

- **pause**: a paused pipeline decides nothing (each match is recorded as suppressed);
- **circuit breaker**: when the jobs acted on within ``breaker.window_s`` exceed
  ``max_job_share`` of the fleet's jobs (``fleet_jobs``; and at least ``min_jobs``), the
  cause is probably fleet-wide (storage, the scheduler): one escalation, then nothing until
  ``reset_s`` passed;
- **per job**: one decision per trigger (an incident's revisions act once), a cool-down after
  an action (the rest of a cascade is not a new failure), at most ``max_actions`` within
  ``window_s`` and then one escalation, and an exponential backoff between actions;
- **progress**: after an action the job's step counter must move within
  ``progress_deadline_s``; if it does not, the recovery failed: another attempt, or an
  escalation when the bound is reached.

Node rules (``when.node_repeats``) count findings per node across jobs and act on the node
(``drain_node``) once per repeat window, beside the job rule the same finding triggers; the
pause and the breaker (which also counts the share of nodes named by node actions) hold them
back too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rankscope.schemas.derived import (
    Detection,
    Incident,
    RecoveryAction,
    RecoveryEvent,
    RecoveryStage,
)
from rankscope.streams.recovery.policy import Match, Policy, Rule

NS = 1_000_000_000
_NO_WATCH: frozenset[str] = frozenset({"escalate", "drain_node"})
_RESTARTS: frozenset[str] = frozenset(
    {"restart_from_checkpoint", "exclude_node_and_restart", "drain_node"}
)
_ON_NODE: frozenset[str] = frozenset({"exclude_node_and_restart", "drain_node"})


@dataclass
class _Watch:
    key: str
    action: RecoveryAction
    rule: str
    trigger_id: str
    attempt: int
    node: str
    rank: int | None
    start_ts: int
    deadline_ts: int
    step_at_action: int


@dataclass
class _Job:
    cluster: str
    actions: deque[int] = field(default_factory=deque)  # event times of actions in the window
    last_action_ts: int = 0
    last_action: str = ""
    escalated_at: int = -1
    max_step: int = -1
    watch: _Watch | None = None
    #: newest event time of anything this job sent the engine (what ``prune`` ages it by)
    last_ts: int = 0


@dataclass(frozen=True)
class _Finding:
    """What a decision needs of its trigger: an incident, a detection or a failed recovery."""

    cluster: str
    job_id: str
    trigger_id: str
    ts: int
    node: str
    rank: int | None
    reason: str


class RecoveryEngine:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.paused = False
        self._jobs: dict[str, _Job] = {}
        # (trigger id, rule) -> event time of the finding: each finding counts once
        self._handled: dict[tuple[str, str], int] = {}
        # (ts, job, node) of actions in the breaker window; node set for actions on a node
        self._acted: deque[tuple[int, str, str]] = deque()
        self._breaker_open_until = 0
        # (rule, cluster, node) -> times of its findings / when the rule acted on the node
        self._node_hits: dict[tuple[str, str, str], deque[int]] = {}
        self._node_acted: dict[tuple[str, str, str], int] = {}

    # -- inputs ----------------------------------------------------------------------------
    def on_incident(self, inc: Incident) -> list[RecoveryEvent]:
        reason = f"incident {inc.cause_class} ({inc.confidence:.2f}): {inc.summary}"
        finding = _Finding(
            inc.cluster, inc.job_id, inc.incident_id, inc.attributed_ts, inc.node, inc.rank, reason
        )
        return self._on_finding(lambda m: m.matches_incident(inc), finding)

    def on_detection(self, det: Detection) -> list[RecoveryEvent]:
        reason = f"detection {det.detection_type}: {det.summary}"
        finding = _Finding(
            det.cluster, det.job_id, det.detection_id, det.detected_ts, det.node, det.rank, reason
        )
        return self._on_finding(
            lambda m: det.detection_type in m.detection and det.score >= m.min_score, finding
        )

    def _on_finding(self, matches: Callable[[Match], bool], f: _Finding) -> list[RecoveryEvent]:
        """The first matching job rule acts on the job; the first node rule whose repeat count
        is reached acts on the node."""
        out: list[RecoveryEvent] = []
        fits = [r for r in self.policy.rules if matches(r.when) and r.when.job_matches(f.job_id)]
        rule = next((r for r in fits if not r.per_node), None)
        if rule is not None:
            out += self._decide(rule.name, rule.action, f)
        for node_rule in (r for r in fits if r.per_node and f.node):
            node_events = self._decide_node(node_rule, f)
            if node_events:
                out += node_events
                break
        return out

    def on_progress(
        self, cluster: str, job_id: str, step: int, ts: int, nodes: Iterable[str] = ()
    ) -> list[RecoveryEvent]:
        """The job completed ``step`` at event time ``ts``; ``nodes`` reported since."""
        job = self._job(cluster, job_id)
        job.max_step = max(job.max_step, step)
        job.last_ts = max(job.last_ts, ts)
        w = job.watch
        if w is not None and step > w.step_at_action and ts >= w.start_ts:
            job.watch = None
            return [
                self._event(
                    w.key,
                    "progress_resumed",
                    w.action,
                    cluster,
                    job_id,
                    w.node,
                    w.rank,
                    w.rule,
                    f"step {step} completed {(ts - w.start_ts) / NS:.0f} s after the "
                    f"action (was {w.step_at_action})",
                    w.trigger_id,
                    w.attempt,
                    ts,
                )
            ]
        return []

    def tick(self, now_ts: int, only: str | None = None) -> list[RecoveryEvent]:
        """Event time advanced (of job ``only``, or of all): recoveries whose progress deadline
        passed have failed."""
        out: list[RecoveryEvent] = []
        jobs = self._jobs.items() if only is None else [(only, self._jobs.get(only))]
        for job_id, job in list(jobs):
            if job is None:
                continue
            w = job.watch
            if w is None or now_ts < w.deadline_ts:
                continue
            job.watch = None
            waited = (w.deadline_ts - w.start_ts) / NS
            out.append(
                self._event(
                    w.key,
                    "progress_not_resumed",
                    w.action,
                    job.cluster,
                    job_id,
                    w.node,
                    w.rank,
                    w.rule,
                    f"no step after {w.action} within {waited:.0f} s (last step {job.max_step})",
                    w.trigger_id,
                    w.attempt,
                    now_ts,
                )
            )
            why = f"progress did not resume after {w.action} (attempt {w.attempt})"
            out += self._decide(
                f"{w.rule}:no-progress",
                "restart_from_checkpoint",
                _Finding(job.cluster, job_id, f"{w.key}:no-progress", now_ts, w.node, w.rank, why),
            )
        return out

    # -- the decision --------------------------------------------------------------------------
    def _decide(self, rule_name: str, action: RecoveryAction, f: _Finding) -> list[RecoveryEvent]:
        cluster, job_id, trigger_id, ts = f.cluster, f.job_id, f.trigger_id, f.ts
        node, rank, reason = f.node, f.rank, f.reason
        if (trigger_id, rule_name) in self._handled:
            return []  # a later revision of the same incident
        self._handled[(trigger_id, rule_name)] = ts
        lim = self.policy.limits
        job = self._job(cluster, job_id)
        job.last_ts = max(job.last_ts, ts)
        while job.actions and job.actions[0] < ts - lim.window_s * NS:
            job.actions.popleft()
        attempt = len(job.actions) + 1
        key = RecoveryEvent.make_key(cluster, job_id, trigger_id, rule_name, str(attempt))

        def event(
            stage: RecoveryStage, action: RecoveryAction, why: str, **kw: int
        ) -> RecoveryEvent:
            return self._event(
                key,
                stage,
                action,
                cluster,
                job_id,
                node,
                rank,
                rule_name,
                why,
                trigger_id,
                attempt,
                ts,
                **kw,
            )

        held = self._held_back(job, rule_name, ts)
        if held is None and len(job.actions) >= lim.max_actions:
            if job.escalated_at < 0 or job.escalated_at < ts - lim.window_s * NS:
                job.escalated_at = ts
                why = (
                    f"{len(job.actions)} recoveries within {lim.window_s:g} s (the limit); "
                    f"a person must look: {reason}"
                )
                return [event("decided", "escalate", why)]
            held = "already escalated"
        if held is not None:
            return [event("suppressed", action, f"{held}; {reason}")]
        tripped = self._breaker(ts, job_id, node if action in _ON_NODE else "")
        if tripped is not None:
            return [event("suppressed", action, f"circuit breaker tripped; {reason}"), tripped]
        not_before = ts
        if action in _RESTARTS:  # the bound and the backoff count restarts, not stack dumps
            if job.actions:
                wait = lim.backoff_base_s * lim.backoff_factor ** (len(job.actions) - 1)
                not_before = max(ts, job.last_action_ts + int(wait * NS))
            job.actions.append(ts)
            job.last_action_ts, job.last_action = not_before, action
        self._acted.append((ts, job_id, node if action in _ON_NODE else ""))
        if action not in _NO_WATCH:
            job.watch = _Watch(
                key,
                action,
                rule_name,
                trigger_id,
                attempt,
                node,
                rank,
                not_before,
                not_before + int(lim.progress_deadline_s * NS),
                job.max_step,
            )
        return [event("decided", action, reason, not_before_ts=not_before)]

    def _decide_node(self, rule: Rule, f: _Finding) -> list[RecoveryEvent]:
        """Count this finding against its node; act on the node when the count is reached."""
        cluster, job_id, trigger_id, ts, node, why = (
            f.cluster,
            f.job_id,
            f.trigger_id,
            f.ts,
            f.node,
            f.reason,
        )
        if (trigger_id, rule.name) in self._handled:
            return []  # a later revision of the same finding counts once
        self._handled[(trigger_id, rule.name)] = ts
        window = int(rule.when.repeat_window_s * NS)
        hits = self._node_hits.setdefault((rule.name, cluster, node), deque())
        hits.append(ts)
        while hits and hits[0] <= ts - window:
            hits.popleft()
        if len(hits) < rule.when.node_repeats:
            return []
        key = RecoveryEvent.make_key(cluster, "node", node, trigger_id, rule.name)
        reason = (
            f"{node} was named by {len(hits)} findings within {rule.when.repeat_window_s:g} s "
            f"(the rule's limit is {rule.when.node_repeats}); the latest: {why}"
        )

        def event(stage: RecoveryStage, action: RecoveryAction, text: str) -> RecoveryEvent:
            return self._event(
                key, stage, action, cluster, job_id, node, None, rule.name, text, trigger_id, 1, ts,
                not_before_ts=ts,
            )  # fmt: skip

        acted = self._node_acted.get((rule.name, cluster, node))
        if acted is not None and acted > ts - window:
            return []  # acted on this node in this window already
        held = "recovery is paused" if self.paused else None
        if held is None and ts < self._breaker_open_until:
            held = "circuit breaker open"
        if held is not None:
            return [event("suppressed", rule.action, f"{held}; {reason}")]
        tripped = self._breaker(ts, "", node)
        if tripped is not None:
            return [event("suppressed", rule.action, f"circuit breaker tripped; {reason}"), tripped]
        self._node_acted[(rule.name, cluster, node)] = ts
        self._acted.append((ts, "", node))
        return [event("decided", rule.action, reason)]

    def _held_back(self, job: _Job, rule_name: str, ts: int) -> str | None:
        """Why a matching finding must not act now, or None."""
        if self.paused:
            return "recovery is paused"
        if ts < self._breaker_open_until:
            return "circuit breaker open"
        since = (ts - job.last_action_ts) / NS
        retry = rule_name.endswith(":no-progress")
        if job.last_action_ts and since < 0 and not retry:
            return f"{job.last_action} still waits for its backoff ({-since:.0f} s)"
        # only a restart starts a cool-down: capturing stacks of a hung rank must not hold back
        # the restart its root cause (found a few seconds later) calls for
        restarted = job.last_action in _RESTARTS
        if restarted and since < self.policy.limits.cooldown_s and not retry:
            return f"cool-down: {job.last_action} {since:.0f} s ago"
        return None

    def _breaker(self, ts: int, job_id: str, node: str) -> RecoveryEvent | None:
        """An escalation when acting on ``job_id`` / ``node`` too would exceed the fleet
        shares (jobs acted on of the fleet's jobs, nodes acted on of its nodes), else None.

        The denominators are the configured fleet sizes, never the ids seen in telemetry: a
        writer of telemetry could invent jobs and nodes to keep the breaker from tripping.
        Unknown sizes count as the ids acted on (share 1: it trips at ``min_jobs``)."""
        b = self.policy.breaker
        horizon = ts - int(b.window_s * NS)
        while self._acted and self._acted[0][0] < horizon:
            self._acted.popleft()

        def share(acted: set[str], fleet: int | None, least: int, most: float) -> str:
            acted.discard("")
            total = fleet if fleet is not None else len(acted)
            if len(acted) < least or len(acted) / max(total, 1) <= most:
                return ""
            return f"{len(acted)} of {total}"

        jobs = share({j for _, j, _ in self._acted} | {job_id}, b.fleet_jobs, b.min_jobs,
                     b.max_job_share)  # fmt: skip
        nodes = share({n for _, _, n in self._acted} | {node}, b.fleet_nodes, b.min_nodes,
                      b.max_node_share)  # fmt: skip
        if not jobs and not nodes:
            return None
        self._breaker_open_until = ts + int(b.reset_s * NS)
        key = RecoveryEvent.make_key("fleet", str(ts), "circuit-breaker")
        what = f"{jobs} jobs needed recovery" if jobs else f"{nodes} nodes were acted on"
        why = (
            f"{what} within {b.window_s:g} s: probably a fleet-wide cause; "
            f"automated actions stop for {b.reset_s:g} s"
        )
        return self._event(
            key, "decided", "escalate", "", "", "", None, "circuit-breaker", why, key, 1, ts
        )

    def prune(self, now_ts: int, horizon_ns: int) -> int:
        """Forget what no decision at or after ``now_ts`` can need: jobs quiet for
        ``horizon_ns`` of event time with no recovery being watched, findings already counted,
        and node tallies, older than that. ``horizon_ns`` must cover the policy's longest
        window (``decider.replay_horizon_s``). Returns the jobs forgotten.

        Bounded memory under ever-new job ids. A job forgotten this way starts afresh if it
        sends again, escalation and rate limits included: its last action is a horizon old."""
        cut = now_ts - horizon_ns
        gone = [
            job_id
            for job_id, job in self._jobs.items()
            if job.watch is None and max(job.last_ts, job.last_action_ts) < cut
        ]
        for job_id in gone:
            del self._jobs[job_id]
        for finding in [k for k, ts in self._handled.items() if ts < cut]:
            del self._handled[finding]
        for tally in [k for k, hits in self._node_hits.items() if not hits or hits[-1] < cut]:
            del self._node_hits[tally]
        for acted in [k for k, ts in self._node_acted.items() if ts < cut]:
            del self._node_acted[acted]
        return len(gone)

    def watching(self) -> set[str]:
        """Jobs with a recovery whose progress is being watched."""
        return {job_id for job_id, job in self._jobs.items() if job.watch is not None}

    def tracked(self) -> dict[str, int]:
        """How much the engine holds (for tests and the worker's log)."""
        return {
            "jobs": len(self._jobs),
            "handled": len(self._handled),
            "node_hits": len(self._node_hits),
            "node_acted": len(self._node_acted),
        }

    # -- helpers ---------------------------------------------------------------------------------
    def _job(self, cluster: str, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = _Job(cluster)
        return job

    @staticmethod
    def _event(
        key: str,
        stage: RecoveryStage,
        action: RecoveryAction,
        cluster: str,
        job_id: str,
        node: str,
        rank: int | None,
        rule: str,
        reason: str,
        trigger_id: str,
        attempt: int,
        ts: int,
        not_before_ts: int = 0,
    ) -> RecoveryEvent:
        return RecoveryEvent(
            key=key,
            stage=stage,
            action=action,
            cluster=cluster,
            job_id=job_id,
            node=node,
            rank=rank,
            rule=rule,
            reason=reason[:2048],
            trigger_id=trigger_id,
            attempt=attempt,
            ts=ts,
            not_before_ts=not_before_ts,
        )
