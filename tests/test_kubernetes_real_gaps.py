"""Kubernetes gaps found on real clusters (issue 17): the 1.26 preemption reason, an evicted pod
without uid, and a list that keeps answering 410 Gone (retried with bounded exponential backoff
and jitter, counted against a fake clock). Documents: tests/data/kubernetes/README.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rankscope.collectors.kubernetes import KubernetesCollector
from rankscope.schemas.events import SchedulerEventEvent
from tests.test_kubernetes_collector import (
    DATA,
    PODS,
    ApiServer,
    Sink,
    config,
    doc,
    factory,
    server,
    status_doc,
    stop_promptly,
    stream,
    token,
)

__all__ = ["server", "token"]  # the fixtures, shared with the collector's own tests


def _doc(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / name).read_text())
    return loaded


def _collector(server: ApiServer, token: Path, **kw: Any) -> KubernetesCollector:
    return KubernetesCollector(config(server, token, watch_nodes=False, **kw), factory())


def _scheduler(events: list[Any]) -> list[SchedulerEventEvent]:
    return [e for e in events if isinstance(e, SchedulerEventEvent)]


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("PreemptionByKubeScheduler", "Kube-scheduler: preempting"),  # 1.26
        (
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod",
        ),
    ],
)
def test_both_preemption_reasons_are_preemptions(
    server: ApiServer, token: Path, reason: str, message: str
) -> None:
    col = _collector(server, token)
    pod = _doc("pod_preempted_k8s_1_26.json")
    for cond in pod["status"]["conditions"]:
        if cond["type"] == "DisruptionTarget":
            cond["reason"], cond["message"] = reason, message
    pod["metadata"]["deletionTimestamp"] = "2025-11-10T17:00:30Z"  # then deleted: not cancelled

    got = _scheduler(col._on_pod("MODIFIED", pod))

    types = [e.payload.event_type for e in got]
    assert "preempted" in types and "job_cancelled" not in types
    (pre,) = [e for e in got if e.payload.event_type == "preempted"]
    assert pre.payload.reason == f"{reason}: {message}"
    assert (pre.job_id, pre.rank) == ("llama-70b", 0)


def test_evicted_pod_without_uid_yields_an_event_keyed_by_namespace_and_name(
    server: ApiServer, token: Path
) -> None:
    col = _collector(server, token)
    pod = _doc("pod_evicted_without_uid.json")
    assert "uid" not in pod["metadata"]

    first = _scheduler(col._on_pod("MODIFIED", pod))
    again = _scheduler(col._on_pod("MODIFIED", pod))

    assert [e.payload.event_type for e in first] == ["preempted", "job_failed"]
    assert first[0].payload.reason.startswith("Evicted: The node was low on resource: memory.")
    assert (first[0].job_id, first[0].rank) == ("llama-70b", 2)
    assert again == []  # the same pod, known by namespace/name: reported once
    assert "train/llama-70b-worker-2" in col._pods
    # the event id is stable across agents: derived from namespace/name, not from memory
    other = _scheduler(_collector(server, token)._on_pod("MODIFIED", pod))
    assert [e.event_id for e in other] == [e.event_id for e in first]


def test_a_list_that_keeps_answering_410_backs_off_exponentially_with_jitter(
    server: ApiServer, token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = [status_doc(410, "Expired", "too old resource version: 1 (3000)") for _ in range(8)]
    server.script(PODS, False, *gone, doc("pods_list_1.json"))
    server.script(PODS, True, stream(None, end="hold"))
    sink = Sink()
    col = _collector(server, token, backoff_initial_s=0.5, backoff_max_s=8.0)
    clock: list[float] = []  # the fake clock: each wait is recorded, none is slept
    monkeypatch.setattr(col, "_sleep", clock.append)
    col.start(sink)
    try:
        server.next_request(PODS)  # the watch opened after the ninth list
        while not any(r.watch for r in server.requests_for(PODS)):
            server.next_request(PODS)
        lists = [r for r in server.requests_for(PODS) if not r.watch]
    finally:
        stop_promptly(col)

    assert len(lists) == 9  # 8 refused + the one that worked: no request without a wait
    assert len(clock) == 8
    for attempt, wait in enumerate(clock):
        base = min(0.5 * 2**attempt, 8.0)
        assert base <= wait <= min(base + 0.5, 8.0), (attempt, clock)  # jitter within 0.5 s
    assert max(clock) == 8.0 and sum(clock) < 8 * 8.0  # bounded, and grows from 0.5 s
    assert len(set(clock[:4])) == 4
    agent = [e.payload.event_type for e in sink.agent()]
    assert agent[:2] == ["collector_error", "collector_recovered"]  # reported once, then cleared
    assert col.stats["pods"]["relists"] == 8


def test_eviction_event_without_involved_uid_finds_the_pod_by_namespace_and_name(
    server: ApiServer, token: Path
) -> None:
    col = _collector(server, token)
    listed = _doc("pods_list_events.json")["items"]
    worker2 = next(p for p in listed if p["metadata"]["name"] == "llama-70b-worker-2")
    col._on_pod("ADDED", worker2)  # known by its uid
    lines = (DATA / "events_watch_1.ndjson").read_text().splitlines()
    event = next(json.loads(x)["object"] for x in lines if '"reason":"Evicted"' in x)
    del event["involvedObject"]["uid"]

    got = _scheduler(col._on_event("ADDED", event))

    assert [(e.payload.event_type, e.job_id, e.rank) for e in got] == [
        ("preempted", "llama-70b", 2)
    ]
