"""The object half of the collector: how a pod, a node or a core/v1 event changes what is known,
and the SchedulerEvents that change means (the mapping in the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from rankscope.collectors.kubernetes.parsing import (
    _cond_text,
    _condition,
    _dicts,
    _get,
    _int_text,
    _pod_key,
    _stable_id,
    parse_k8s_time,
)
from rankscope.collectors.kubernetes.state import _KubernetesCollectorBase, _NodeState, _PodState
from rankscope.schemas.events import Event, SchedulerEventEvent
from rankscope.schemas.payloads import SchedulerEventType

#: DisruptionTarget reasons that end a pod for a reason Kubernetes chose. The scheduler's was
#: "PreemptionByKubeScheduler" in 1.26 (kubernetes PR 110959) and "PreemptionByScheduler" from 1.27
#: on (PR 114623): both are read, 1.26 clusters are still run.
DISRUPTION_REASONS = frozenset(
    {
        "PreemptionByScheduler",
        "PreemptionByKubeScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "DeletionByPodGC",
        "TerminationByKubelet",
    }
)
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")


class _ObjectDiff(_KubernetesCollectorBase):
    """Pods, nodes and core/v1 events -> SchedulerEvents, each change reported once."""

    # -- pods --------------------------------------------------------------------------------

    def _pod_identity(self, pod: Mapping[str, Any]) -> tuple[str, int | None]:
        labels = _get(pod, "metadata", "labels") or {}
        job = labels.get(self.config.job_label) if isinstance(labels, Mapping) else None
        if not job:
            owners = _dicts(_get(pod, "metadata", "ownerReferences"))
            owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
            job = owner.get("name") if owner else None
        job = str(job or _get(pod, "metadata", "name") or "")
        rank: int | None = None
        for c in _dicts(_get(pod, "spec", "containers")):
            for env in _dicts(c.get("env")):
                if env.get("name") in self.config.rank_env and rank is None:
                    rank = _int_text(env.get("value"))
        if rank is None and isinstance(labels, Mapping):
            for label in self.config.rank_labels:
                rank = _int_text(labels.get(label))
                if rank is not None:
                    break
        return job, rank

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> list[Event]:
        uid = _pod_key(pod)
        if not uid:
            return []  # neither uid nor name: nothing to key it by
        st = self._pods.get(uid)
        if st is None:
            job, rank = self._pod_identity(pod)
            st = _PodState(
                uid=uid,
                name=str(_get(pod, "metadata", "name") or ""),
                namespace=str(_get(pod, "metadata", "namespace") or ""),
                node=str(_get(pod, "spec", "nodeName") or ""),
                job_id=job,
                rank=rank,
            )
            self._pods[uid] = st
        st.node = str(_get(pod, "spec", "nodeName") or st.node)
        events: list[Event] = []
        status = _get(pod, "status") or {}
        phase = str(status.get("phase") or "")
        deleting = bool(_get(pod, "metadata", "deletionTimestamp")) or etype == "DELETED"
        disruption = _condition(pod, "DisruptionTarget")
        disrupted = (
            disruption is not None
            and disruption.get("status") == "True"
            and str(disruption.get("reason")) in DISRUPTION_REASONS
        )
        evicted = status.get("reason") == "Evicted"

        restarts = max(
            (
                _int_text(cs.get("restartCount")) or 0
                for cs in _dicts(status.get("containerStatuses"))
            ),
            default=0,
        )
        if phase == "Running" and not st.started:
            st.started = True
            st.restarts = restarts
            started = [
                parse_k8s_time(_get(cs, "state", "running", "startedAt"))
                for cs in _dicts(status.get("containerStatuses"))
            ]
            ts = min((t for t in started if t), default=None) or parse_k8s_time(
                status.get("startTime")
            )
            events.append(
                self._pod_event(
                    st, "job_started", "Running", "", None, ts, ("start",), restarts + 1
                )
            )
        if (disrupted or evicted) and not st.preempted:
            st.preempted = True
            if disrupted and disruption is not None:
                reason = f"{disruption.get('reason')}: {disruption.get('message', '')}".rstrip(": ")
                ts = parse_k8s_time(disruption.get("lastTransitionTime"))
            else:
                reason = f"Evicted: {status.get('message', '')}".rstrip(": ")
                ts = None
            events.append(
                self._pod_event(
                    st,
                    "preempted",
                    phase or "Unknown",
                    reason,
                    None,
                    ts,
                    ("preempt",),
                    restarts + 1,
                )
            )

        quiet = deleting or disrupted or evicted  # exits caused by the disruption are not news
        for cs in _dicts(status.get("containerStatuses")):
            cname = str(cs.get("name", ""))
            for where in ("lastState", "state"):
                term = _get(cs, where, "terminated")
                if not isinstance(term, Mapping):
                    continue
                key = str(
                    term.get("containerID")
                    or f"{cname}:{cs.get('restartCount', 0)}:{where}:{term.get('finishedAt')}"
                )
                if key in st.terms:
                    continue
                st.terms.add(key)
                code = _int_text(term.get("exitCode"))
                reason = str(term.get("reason") or "")
                detail = f"{reason}: container {cname} exited {code}"
                if term.get("message"):
                    detail += f": {str(term['message']).strip()[:2000]}"
                ts = parse_k8s_time(term.get("finishedAt"))
                # lastState: the run before the latest restart; state: the current one
                count = _int_text(cs.get("restartCount")) or 0
                attempt = count if where == "lastState" and count else count + 1
                if reason == "OOMKilled":
                    st.failed_terms.add(key)
                    events.append(
                        self._pod_event(
                            st, "oom_killed", "OOMKilled", detail, code, ts, (key,), attempt
                        )
                    )
                elif code and not quiet:
                    st.failed_terms.add(key)
                    events.append(
                        self._pod_event(
                            st, "job_failed", "Terminated", detail, code, ts, (key,), attempt
                        )
                    )

        if st.started and phase == "Running" and restarts > st.restarts:
            # restartPolicy OnFailure (PyTorchJob): the container restarted in place, a new attempt
            st.restarts = restarts
            started = [
                parse_k8s_time(_get(cs, "state", "running", "startedAt"))
                for cs in _dicts(status.get("containerStatuses"))
                if (_int_text(cs.get("restartCount")) or 0) == restarts
            ]
            ts = min((t for t in started if t), default=None)
            events.append(
                self._pod_event(
                    st, "job_started", "Running", f"restart {restarts}", None, ts,
                    ("start", restarts), restarts + 1,
                )
            )  # fmt: skip

        if not st.ended and phase in ("Succeeded", "Failed"):
            st.ended = True
            terms = [
                t
                for t in (
                    _get(cs, "state", "terminated")
                    for cs in _dicts(status.get("containerStatuses"))
                )
                if isinstance(t, Mapping)
            ]
            ts = max((parse_k8s_time(t.get("finishedAt")) or 0 for t in terms), default=0) or None
            if phase == "Succeeded":
                events.append(
                    self._pod_event(st, "job_completed", phase, "", 0, ts, ("end",), restarts + 1)
                )
            elif not (st.failed_terms and not quiet):
                code = next(
                    (_int_text(t.get("exitCode")) for t in terms if t.get("exitCode")), None
                )
                reason = ": ".join(
                    str(x) for x in (status.get("reason"), status.get("message")) if x
                )
                events.append(
                    self._pod_event(
                        st,
                        "job_failed",
                        phase,
                        reason or "Failed",
                        code,
                        ts,
                        ("end",),
                        restarts + 1,
                    )
                )
        if deleting and not st.ended and not st.preempted:
            st.ended = True
            events.append(
                self._pod_event(
                    st,
                    "job_cancelled",
                    phase or "Unknown",
                    "pod deleted",
                    None,
                    None,
                    ("deleted",),
                    restarts + 1,
                )
            )
        if etype == "DELETED":
            self._pods.pop(uid, None)
        return events

    def _pod_event(
        self,
        st: _PodState,
        etype: SchedulerEventType,
        state: str,
        reason: str,
        exit_code: int | None,
        ts_ns: int | None,
        key: tuple[object, ...],
        attempt: int = 0,
    ) -> SchedulerEventEvent:
        return self._event(
            etype,
            state=state,
            reason=reason,
            exit_code=exit_code,
            ts_ns=ts_ns,
            job_id=st.job_id,
            rank=st.rank,
            node=st.node or None,
            event_id=_stable_id(self.factory.cluster, "pod", st.uid, etype, *key),
            attempt=attempt,
        )

    # -- nodes -------------------------------------------------------------------------------

    def _on_node(self, etype: str, node: dict[str, Any]) -> list[Event]:
        name = str(_get(node, "metadata", "name") or "")
        if not name:
            return []
        prev = self._nodes.get(name)
        ready = _condition(node, "Ready")
        if etype == "DELETED":
            self._nodes.pop(name, None)
            if prev is None or prev.klass == "down":
                return []
            return [self._node_event(name, "node_down", "Deleted", "node object deleted", None)]
        unschedulable = bool(_get(node, "spec", "unschedulable"))
        if ready is None or ready.get("status") != "True":
            klass: Literal["up", "drain", "down"] = "down"
        elif unschedulable:
            klass = "drain"
        else:
            klass = "up"
        cur = _NodeState(klass=klass)
        for ctype in PRESSURE_CONDITIONS:
            c = _condition(node, ctype)
            if c is not None and c.get("status") == "True":
                cur.pressure.add(ctype)
        self._nodes[name] = cur
        events: list[Event] = []
        for ctype in PRESSURE_CONDITIONS:
            if ctype in cur.pressure and (prev is None or ctype not in prev.pressure):
                c = _condition(node, ctype) or {}
                events.append(
                    self._node_event(
                        name,
                        "other",
                        ctype,
                        _cond_text(c),
                        parse_k8s_time(c.get("lastTransitionTime")),
                    )
                )
        if klass == (prev.klass if prev else "up"):
            return events
        taints = ", ".join(
            f"{t.get('key')}:{t.get('effect')}" for t in _dicts(_get(node, "spec", "taints"))
        )
        if klass == "down":
            cond = ready or {}
            state = f"Ready={cond.get('status', 'Missing')}"
            events.append(
                self._node_event(
                    name,
                    "node_down",
                    state,
                    _cond_text(cond),
                    parse_k8s_time(cond.get("lastTransitionTime")),
                )
            )
        elif klass == "drain":
            reason = "spec.unschedulable=true (cordoned)" + (
                f"; taints: {taints}" if taints else ""
            )
            events.append(self._node_event(name, "node_drain", "Unschedulable", reason, None))
        else:
            ts = (
                parse_k8s_time((ready or {}).get("lastTransitionTime"))
                if prev and prev.klass == "down"
                else None
            )
            events.append(self._node_event(name, "node_up", "Ready", _cond_text(ready or {}), ts))
        return events

    def _node_event(
        self,
        name: str,
        etype: SchedulerEventType,
        state: str,
        reason: str,
        ts_ns: int | None,
    ) -> SchedulerEventEvent:
        return self._event(
            etype,
            state=state,
            reason=reason,
            exit_code=None,
            ts_ns=ts_ns,
            job_id=self._node_job(name),
            rank=None,
            node=name,
            event_id=_stable_id(self.factory.cluster, "node", name, etype, state, ts_ns)
            if ts_ns
            else None,
        )

    # -- core/v1 events ----------------------------------------------------------------------

    def _on_event(self, etype: str, ev: dict[str, Any]) -> list[Event]:
        if etype == "DELETED":
            return []
        reason = str(ev.get("reason") or "")
        action = str(ev.get("action") or "")
        involved = ev.get("involvedObject") or {}
        kind = str(involved.get("kind") or "")
        uid = str(_get(ev, "metadata", "uid") or "")
        count = ev.get("count") or _get(ev, "series", "count") or 1
        seen_key = f"{uid}:{count}"
        if seen_key in self._events_seen:
            return []
        ts = (
            parse_k8s_time(ev.get("eventTime"))
            or parse_k8s_time(ev.get("lastTimestamp"))
            or parse_k8s_time(ev.get("firstTimestamp"))
            or parse_k8s_time(_get(ev, "metadata", "creationTimestamp"))
        )
        message = str(ev.get("message") or "")
        events: list[Event] = []
        if kind == "Pod" and (reason in ("Preempted", "Evicted") or action == "Preempting"):
            st = self._pods.get(str(involved.get("uid") or "")) or next(
                (  # an involvedObject without uid: the pod by namespace/name
                    p
                    for p in self._pods.values()
                    if (p.namespace, p.name) == (involved.get("namespace"), involved.get("name"))
                ),
                None,
            )
            if st is not None and not st.preempted:
                st.preempted = True
                events.append(
                    self._pod_event(
                        st,
                        "preempted",
                        reason,
                        f"{reason}: {message}".rstrip(": "),
                        None,
                        ts,
                        ("preempt",),
                    )
                )
        elif kind == "Node":
            node = str(involved.get("name") or "")
            mine = self.config.node_name is None or node == self.config.node_name
            if mine and reason == "SystemOOM":
                events.append(
                    self._event(
                        "oom_killed",
                        state="SystemOOM",
                        reason=message,
                        exit_code=None,
                        ts_ns=ts,
                        job_id=self._node_job(node),
                        rank=None,
                        node=node or None,
                        event_id=_stable_id(self.factory.cluster, "event", uid, count),
                    )
                )
            elif mine and not self.config.watch_nodes:
                etype_map: dict[str, SchedulerEventType] = {
                    "NodeNotReady": "node_down",
                    "NodeNotSchedulable": "node_drain",
                    "NodeReady": "node_up",
                    "NodeSchedulable": "node_up",
                }
                if reason in etype_map:
                    events.append(
                        self._event(
                            etype_map[reason],
                            state=reason,
                            reason=message,
                            exit_code=None,
                            ts_ns=ts,
                            job_id=self._node_job(node),
                            rank=None,
                            node=node or None,
                            event_id=_stable_id(self.factory.cluster, "event", uid, count),
                        )
                    )
        if uid:
            self._events_seen[seen_key] = None
            while len(self._events_seen) > 8192:
                self._events_seen.pop(next(iter(self._events_seen)))
        return events

    def _node_job(self, node: str) -> str | None:
        """The job of the watched pods on ``node``; this node's own job (registry) otherwise,
        and none for another node."""
        jobs = sorted({p.job_id for p in self._pods.values() if p.node == node and p.job_id})
        return jobs[0] if jobs else (None if node == self.factory.node else "")
