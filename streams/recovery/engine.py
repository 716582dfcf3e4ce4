"""The recovery decider: incidents, detections and step progress in, recovery events out.

Pure and driven by event time, so a replay of the same findings makes the same decisions (and
the same idempotency keys). The bounds, in the order they apply:

- **pause**: a paused pipeline decides nothing (each match is recorded as suppressed);
- **circuit breaker**: when the jobs acted on within ``breaker.window_s`` exceed
  ``max_job_share`` of the jobs seen (and at least ``min_jobs``), the cause is probably
  fleet-wide (storage, the scheduler): one escalation, then nothing until ``reset_s`` passed;
- **per job**: one decision per trigger (an incident's revisions act once), a cool-down after
  an action (the rest of a cascade is not a new failure), at most ``max_actions`` within
  ``window_s`` and then one escalation, and an exponential backoff between actions;
- **progress**: after an action the job's step counter must move within
  ``progress_deadline_s``; if it does not, the recovery failed: another attempt, or an
  escalation when the bound is reached.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.derived import Detection, Incident, RecoveryAction, RecoveryEvent, RecoveryStage
from streams.recovery.policy import Match, Policy, Rule

NS = 1_000_000_000
_NO_WATCH: frozenset[str] = frozenset({"escalate", "drain_node"})
_RESTARTS: frozenset[str] = frozenset(
    {"restart_from_checkpoint", "exclude_node_and_restart", "drain_node"}
)


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


class RecoveryEngine:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.paused = False
        self._jobs: dict[str, _Job] = {}
        self._handled: set[tuple[str, str]] = set()  # (trigger id, rule)
        self._seen: dict[str, int] = {}  # job -> last event time it was seen
        self._acted: deque[tuple[int, str]] = deque()  # (ts, job) of actions, breaker window
        self._breaker_open_until = 0

    # -- inputs ----------------------------------------------------------------------------
    def on_incident(self, inc: Incident) -> list[RecoveryEvent]:
        self._see(inc.job_id, inc.attributed_ts)
        rule = self._rule(
            lambda m: inc.cause_class in m.incident_cause and inc.confidence >= m.min_confidence,
            inc.job_id,
        )
        if rule is None:
            return []
        reason = f"incident {inc.cause_class} ({inc.confidence:.2f}): {inc.summary}"
        return self._decide(
            rule.name, rule.action, inc.cluster, inc.job_id, inc.incident_id,
            inc.attributed_ts, inc.node, inc.rank, reason,
        )  # fmt: skip

    def on_detection(self, det: Detection) -> list[RecoveryEvent]:
        self._see(det.job_id, det.detected_ts)
        rule = self._rule(
            lambda m: det.detection_type in m.detection and det.score >= m.min_score, det.job_id
        )
        if rule is None:
            return []
        reason = f"detection {det.detection_type}: {det.summary}"
        return self._decide(
            rule.name, rule.action, det.cluster, det.job_id, det.detection_id,
            det.detected_ts, det.node, det.rank, reason,
        )  # fmt: skip

    def _rule(self, matches: Callable[[Match], bool], job_id: str) -> Rule | None:
        """The first rule whose match holds for this finding and job."""
        return next(
            (r for r in self.policy.rules if matches(r.when) and r.when.job_matches(job_id)), None
        )

    def on_progress(self, cluster: str, job_id: str, step: int, ts: int) -> list[RecoveryEvent]:
        """A rank of the job completed ``step`` at event time ``ts``."""
        self._see(job_id, ts)
        job = self._job(cluster, job_id)
        job.max_step = max(job.max_step, step)
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

    def tick(self, now_ts: int) -> list[RecoveryEvent]:
        """Event time advanced: recoveries whose progress deadline passed have failed."""
        out: list[RecoveryEvent] = []
        for job_id, job in self._jobs.items():
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
            out += self._decide(
                f"{w.rule}:no-progress",
                "restart_from_checkpoint",
                job.cluster,
                job_id,
                f"{w.key}:no-progress",
                now_ts,
                w.node,
                w.rank,
                f"progress did not resume after {w.action} (attempt {w.attempt})",
            )
        return out

    # -- the decision --------------------------------------------------------------------------
    def _decide(
        self,
        rule_name: str,
        action: RecoveryAction,
        cluster: str,
        job_id: str,
        trigger_id: str,
        ts: int,
        node: str,
        rank: int | None,
        reason: str,
    ) -> list[RecoveryEvent]:
        if (trigger_id, rule_name) in self._handled:
            return []  # a later revision of the same incident
        self._handled.add((trigger_id, rule_name))
        lim = self.policy.limits
        job = self._job(cluster, job_id)
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
        tripped = self._breaker(ts, job_id)
        if tripped is not None:
            return [event("suppressed", action, f"circuit breaker tripped; {reason}"), tripped]
        not_before = ts
        if action in _RESTARTS:  # the bound and the backoff count restarts, not stack dumps
            if job.actions:
                wait = lim.backoff_base_s * lim.backoff_factor ** (len(job.actions) - 1)
                not_before = max(ts, job.last_action_ts + int(wait * NS))
            job.actions.append(ts)
            job.last_action_ts, job.last_action = not_before, action
        self._acted.append((ts, job_id))
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

    def _breaker(self, ts: int, job_id: str) -> RecoveryEvent | None:
        b = self.policy.breaker
        horizon = ts - int(b.window_s * NS)
        while self._acted and self._acted[0][0] < horizon:
            self._acted.popleft()
        acted = {j for _, j in self._acted} | {job_id}
        seen = {j for j, t in self._seen.items() if t >= horizon} | {job_id}
        if len(acted) < b.min_jobs or len(acted) / len(seen) <= b.max_job_share:
            return None
        self._breaker_open_until = ts + int(b.reset_s * NS)
        key = RecoveryEvent.make_key("fleet", str(ts), "circuit-breaker")
        why = (
            f"{len(acted)} of {len(seen)} jobs needed recovery within {b.window_s:g} s: "
            f"probably a fleet-wide cause; automated actions stop for {b.reset_s:g} s"
        )
        return self._event(
            key, "decided", "escalate", "", "", "", None, "circuit-breaker", why, key, 1, ts
        )

    # -- helpers ---------------------------------------------------------------------------------
    def _see(self, job_id: str, ts: int) -> None:
        if job_id:
            self._seen[job_id] = max(self._seen.get(job_id, 0), ts)

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
