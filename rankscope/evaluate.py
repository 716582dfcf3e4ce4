"""``rankscope eval``: the labelled fault suite through the real pipeline, scored against truth.

Every catalogue scenario (plus clock-skew variants and noise) is simulated for each seed and
size, published through the collectors' publisher to the real broker, processed by the real
stream worker, stored by the sink, and the detections and incidents are read back from
ClickHouse with SQL and compared with the run's ground-truth label.

Scoring, per run:
- ``root_cause``: one incident whose cause class and node match the label (and the GPU, rank or
  HCA port where both name one); time to detect = attribution time minus the first symptom.
- ``straggler``: a straggler detection on the labelled rank (or, for config drift, on the
  labelled node) with the labelled class; time to detect from the fault's onset.
- ``hang``: a hang detection naming the labelled rank.
- ``unresponsive_node``: a node_unresponsive detection (or incident) on the labelled node.
- ``none``: nothing at all.
Anything reported about another node or rank is a false positive.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from clickhouse_connect.driver.client import Client

from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.simulation.faults import FaultLabel, SuiteCase, scenario_suite, simulate_with_faults
from rankscope.simulation.simulator import pace
from rankscope.sinks.named_queries import run_query
from rankscope.streams.recovery.policy import Policy, load_policy

if TYPE_CHECKING:
    from rich.console import Console

    from rankscope.settings import Settings

S = 1_000_000_000
_STRAGGLER_CLASS = {
    "thermal": "thermal",
    "input_pipeline": "input_pipeline",
    "config_drift": "config_drift",
    "compute": "compute",
}


@dataclass
class RunResult:
    name: str
    scenario: str
    ranks: int
    seed: int
    job_id: str
    outcome: str
    correct: bool
    false_positives: int
    detect_s: float | None
    found: str
    expected: str
    events: int = 0
    action: str = ""  # the recovery actions decided for the job, in order (dry run)
    expected_action: str = ""  # what the policy prescribes for the true fault ("" none)
    action_ok: bool = True  # the expected action was decided (or none, when none is expected)
    action_s: float | None = None  # from the fault's onset to the expected action's decision


@dataclass
class EvalReport:
    runs: list[RunResult] = field(default_factory=list)
    wall_s: float = 0.0

    def totals(self) -> dict[str, Any]:
        faulted = [r for r in self.runs if r.outcome != "none"]
        noise = [r for r in self.runs if r.outcome == "none"]
        correct = sum(r.correct for r in faulted)
        return {
            "runs": len(self.runs),
            "faulted_runs": len(faulted),
            "correct": correct,
            "accuracy": round(correct / len(faulted), 4) if faulted else None,
            "noise_runs": len(noise),
            "noise_detections": sum(r.false_positives for r in noise),
            "runs_with_action": sum(bool(r.action) for r in faulted),
            "right_action": sum(r.action_ok for r in self.runs),
            "noise_actions": sum(bool(r.action) for r in noise),
            "max_action_s": max(
                (r.action_s for r in self.runs if r.action_s is not None), default=None
            ),
            "false_positives": sum(r.false_positives for r in self.runs),
            "wall_s": round(self.wall_s, 1),
        }

    def to_json(self) -> str:
        return json.dumps(
            {"totals": self.totals(), "runs": [asdict(r) for r in self.runs]}, indent=2
        )


def rebase(cases: Iterable[SuiteCase], now_ns: int) -> list[SuiteCase]:
    """Move each run's start close to now: the validate stage refuses events more than a week
    older than their Kafka record time, and the suite's fixed epoch is older than that."""
    out = []
    cases = list(cases)
    for i, c in enumerate(cases):
        start = now_ns - (len(cases) - i) * 5 * 60 * S
        out.append(c._replace(config=c.config.model_copy(update={"start_ns": start})))
    return out


def publish_suite(
    bootstrap: str, topic_prefix: str, cases: list[SuiteCase], speed: float = 0.0
) -> dict[str, tuple[SuiteCase, list[FaultLabel], int]]:
    """Publish every run; ``speed`` > 0 plays each run at that multiple of real time, as live
    collectors would deliver it (compressed), instead of as fast as possible."""
    runs: dict[str, tuple[SuiteCase, list[FaultLabel], int]] = {}
    config = PublisherConfig(
        bootstrap=bootstrap, topic_prefix=topic_prefix, max_batch_event_span_s=1.0
    )
    with Publisher(config) as pub:
        pub.check_connection()
        for case in cases:
            events, labels = simulate_with_faults(case.config, case.faults)
            n = 0
            chunk = []
            flushed = time.monotonic()
            for ev in pace(events, speed):
                chunk.append(ev)
                if len(chunk) >= 5000 or (speed and time.monotonic() - flushed >= 0.05):
                    pub.publish(chunk)
                    n += len(chunk)
                    chunk = []
                    flushed = time.monotonic()
            pub.publish(chunk)
            n += len(chunk)
            runs[case.config.job_id] = (case, list(labels), n)
        pub.flush(120)
    return runs


def _rows(client: Client, sql: str, job_id: str) -> list[dict[str, Any]]:
    return list(client.query(sql, parameters={"j": job_id}).named_results())


#: outcome -> (detection type = incident cause class, the label field that must match)
_LIVENESS = {"hang": ("hang", "rank"), "unresponsive_node": ("node_unresponsive", "node")}


def score_findings(
    label: FaultLabel, dets: list[dict[str, Any]], incs: list[dict[str, Any]]
) -> tuple[bool, int, float | None, str]:
    """(correct, false positives, seconds to detect, what was found) for one run.

    ``dets``/``incs`` are rows shaped like the ``detections``/``incidents`` tables.
    """

    def about_label(node: str, rank: int) -> bool:
        if label.node and node and node != label.node:
            return False
        return not (label.fault_ranks and rank >= 0 and rank not in label.fault_ranks)

    correct = False
    detect_s: float | None = None
    found = "; ".join(
        [
            f"{d['detection_type']}:{d['straggler_class'] or ''}@{d['node']}/{d['rank']}"
            for d in dets
        ]
        + [f"incident:{i['cause_class']}@{i['node']}/{i['rank']}" for i in incs]
    )
    onset = label.onset_ns or 0
    if label.outcome == "root_cause":
        for i in incs:
            ok = i["cause_class"] == label.cause_class and (
                not label.node or i["node"] == label.node
            )
            if ok and label.rank is not None and i["rank"] >= 0:
                ok = i["rank"] == label.rank
            if ok:
                correct = True
                detect_s = (i["attributed_ts_ns"] - i["first_symptom_ts_ns"]) / S
                break
    elif label.outcome == "straggler":
        want = _STRAGGLER_CLASS.get(label.cause_class or "", label.cause_class)
        for d in dets:
            if d["detection_type"] != "straggler" or d["straggler_class"] != want:
                continue
            if (label.rank is not None and d["rank"] == label.rank) or (
                label.rank is None and d["node"] == label.node
            ):
                correct = True
                detect_s = (d["detected_ts_ns"] - onset) / S
                break
    elif label.outcome in _LIVENESS:
        kind, key = _LIVENESS[label.outcome]
        want = getattr(label, key)
        found_at = next(
            (d["detected_ts_ns"] for d in dets if d["detection_type"] == kind and d[key] == want),
            None,
        )
        if found_at is None:  # the incident of the cascade may name it instead
            found_at = next(
                (
                    i["attributed_ts_ns"]
                    for i in incs
                    if i["cause_class"] == kind and i[key] == want
                ),
                None,
            )
        if found_at is not None:
            correct = True
            detect_s = (found_at - onset) / S
    if label.outcome == "none":
        fps = len(dets) + len(incs)
        correct = fps == 0
    else:
        fps = sum(not about_label(d["node"], d["rank"]) for d in dets)
        fps += sum(not about_label(i["node"], i["rank"]) for i in incs)
    return correct, fps, detect_s, found


def expected_action(policy: Policy, label: FaultLabel) -> str:
    """The action the policy's job rules prescribe for the true fault ("" for none): what a
    pipeline that found the right cause decides. Confidence and job patterns are left out."""
    if label.outcome == "none":
        return ""
    for rule in policy.rules:
        m = rule.when
        if rule.per_node:
            continue
        if label.outcome in ("root_cause", "unresponsive_node"):
            if label.cause_class in m.incident_cause:
                return rule.action
        elif label.outcome in m.detection:
            return rule.action
    return ""


def score_run(
    client: Client,
    database: str,
    case: SuiteCase,
    labels: list[FaultLabel],
    events: int,
    policy: Policy | None = None,
) -> RunResult:
    job = case.config.job_id
    label = labels[0]
    dets = _rows(
        client,
        f"SELECT detection_type, straggler_class, node, rank, onset_ts_ns, detected_ts_ns "
        f"FROM {database}.detections FINAL WHERE job_id = %(j)s ORDER BY detected_ts_ns",
        job,
    )
    incs = _rows(
        client,
        f"SELECT cause_class, node, gpu, rank, device, first_symptom_ts_ns, attributed_ts_ns "
        f"FROM {database}.incidents FINAL WHERE job_id = %(j)s ORDER BY attributed_ts_ns",
        job,
    )

    correct, fps, detect_s, found = score_findings(label, dets, incs)
    want = expected_action(policy or load_policy(), label)
    action, action_s = _recovery_actions(client, database, job, label, want)
    expected = f"{label.outcome}:{label.cause_class or ''}@{label.node or ''}/{label.rank}"
    return RunResult(
        name=case.name,
        scenario=label.scenario,
        ranks=case.config.ranks,
        seed=case.config.seed,
        job_id=job,
        outcome=label.outcome,
        correct=correct,
        false_positives=fps,
        detect_s=None if detect_s is None else round(detect_s, 2),
        found=found[:400],
        expected=expected,
        events=events,
        action=action,
        expected_action=want,
        action_ok=want in action.split(">") if want else not action,
        action_s=action_s,
    )


def _recovery_actions(
    client: Client, database: str, job: str, label: FaultLabel, want: str
) -> tuple[str, float | None]:
    """The job's recovery actions in order, and the seconds of event time from the fault's onset
    to the decision of the expected action (runs play faster than real time, so the actuator's
    wall clock is not comparable; the dry-run actuator runs a decision within a poll of reading
    it). Clock-skew variants measure onset on the skewed node's clock, so this can be < 0."""
    rows = list(
        run_query(
            client, "recovery_history", database, {"job_id": job, "hours": "720"}
        ).named_results()
    )
    decided = sorted((r for r in rows if r["stage"] == "decided"), key=lambda r: r["ts"])
    if not decided:
        return "", None
    actions = ">".join(r["action"] for r in decided)
    main = next((r for r in decided if r["action"] == want), None)
    if main is None:
        return actions, None
    at = main["ts"]  # event time of the decision (runs are replayed faster than real time)
    if at.tzinfo is None:  # ClickHouse DateTime64('UTC') comes back naive
        at = at.replace(tzinfo=dt.UTC)
    if label.onset_ns is None:
        return actions, None
    return actions, round(at.timestamp() - label.onset_ns / S, 2)


def suite(
    ranks: list[int], seeds: int, duration_s: float, variants: Iterable[str] = ()
) -> list[SuiteCase]:
    """The suite's cases; ``variants`` (names such as ``hang`` or ``gpu_fell_off_bus+clock_skew``)
    keeps only those."""
    keep = set(variants)
    cases: list[SuiteCase] = []
    for r in ranks:
        for c in scenario_suite(r, seeds, duration_s=duration_s):
            if keep and c.name.rsplit("/", 1)[0] not in keep:
                continue
            cfg = c.config.model_copy(update={"job_id": f"{c.config.job_id}-r{r}"})
            cases.append(c._replace(config=cfg))
    return rebase(cases, time.time_ns())


def own_jobs(cases: list[SuiteCase], token: str | None = None) -> list[SuiteCase]:
    """The cases with job ids of their own: this evaluation's ``token`` appended to each.

    The suite's job names repeat from one evaluation to the next, and the database an
    evaluation scores from keeps what earlier ones stored (the CLI's default home and database
    are reused), so without it a run was scored on its own findings and actions plus every
    earlier run's of the same name: an earlier right cause hid a miss, an earlier false
    positive counted again. Only ``job_id`` changes; the simulation does not read it."""
    token = token or uuid.uuid4().hex[:8]
    return [
        c._replace(config=c.config.model_copy(update={"job_id": f"{c.config.job_id}-{token}"}))
        for c in cases
    ]


def write_report(report: EvalReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.to_json() + "\n")


def run_eval(
    settings: Settings,
    ranks: list[int],
    seeds: int,
    duration_s: float,
    out: Path,
    console: Console,
    drain_timeout_s: float = 1800.0,
    speed: float = 0.0,
    variants: Iterable[str] = (),
    workers: int = 1,
    cases: list[SuiteCase] | None = None,
    validators: int = 0,
) -> EvalReport:
    """Simulate, publish, process, store, score (``cases``: these runs instead of the suite's;
    the first label of each is scored)."""
    from rich.table import Table

    from rankscope.stack import local_stack

    t0 = time.monotonic()
    if cases is None:
        cases = suite(ranks, seeds, duration_s, variants)
    if not cases:
        raise ValueError(f"no suite case matches {sorted(variants)}")
    cases = own_jobs(cases)  # scored on this evaluation's rows only
    # Every run of the suite fails at about the same time, which is exactly what the fleet
    # circuit breaker stops, and the runs reuse node names (node000 fails in many of them),
    # which node rules would drain; runs are independent experiments here, so both are off.
    policy = load_policy()
    policy = policy.model_copy(
        update={
            "breaker": policy.breaker.model_copy(update={"min_jobs": 10**6, "min_nodes": 10**6}),
            "rules": [r for r in policy.rules if not r.per_node],
        }
    )
    policy_path = settings.home / "eval-recovery-policy.yaml"
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text(yaml.safe_dump(policy.model_dump(mode="json")))
    report = EvalReport()
    env = {"RANKSCOPE_RECOVERY_POLICY": str(policy_path)}
    with local_stack(settings, console.print, env=env) as stack:
        client = stack.client
        with (
            stack.pipeline(workers, validators) as pipeline,
            console.status(f"simulating and publishing {len(cases)} runs") as st,
        ):
            st.update("waiting for the stream worker to join its group")
            pipeline.wait_ready()
            st.update(f"simulating and publishing {len(cases)} runs")
            runs = publish_suite(stack.bootstrap, settings.topic_prefix, cases, speed)
            total = sum(n for _, _, n in runs.values())
            st.update(f"processing {total:,} events")

            def show(worker_lag: int, sink_lag: int) -> None:
                st.update(f"processing: worker lag {worker_lag:,} records, sink {sink_lag:,}")

            pipeline.wait_drained(drain_timeout_s, on_poll=show)
        for case, labels, n in runs.values():
            report.runs.append(score_run(client, settings.database, case, labels, n, policy))
    report.wall_s = time.monotonic() - t0

    table = Table(title=f"rankscope eval: {len(report.runs)} runs")
    cols = (
        "run",
        "ranks",
        "expected",
        "found",
        "ok",
        "FP",
        "detect s",
        "action",
        "act ok",
        "act s",
    )
    for col in cols:
        table.add_column(col)
    for r in sorted(report.runs, key=lambda r: (r.ranks, r.name)):
        table.add_row(
            r.name,
            str(r.ranks),
            r.expected,
            r.found[:60],
            "yes" if r.correct else "[red]NO[/]",
            str(r.false_positives),
            "" if r.detect_s is None else f"{r.detect_s:.1f}",
            r.action,
            "yes" if r.action_ok else f"[red]NO[/] (want {r.expected_action})",
            "" if r.action_s is None else f"{r.action_s:.1f}",
        )
    console.print(table)
    console.print_json(json.dumps(report.totals()))
    write_report(report, out)
    console.print(f"written to {out}")
    return report
