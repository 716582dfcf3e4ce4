"""Kubernetes scheduler events from watches on pods, nodes and core/v1 events.

The collector lists each resource, then watches it from the list's ``resourceVersion``
(``?watch=1&allowWatchBookmarks=true&timeoutSeconds=N``), resumes from the last version seen
(object or BOOKMARK) when a stream ends or drops, relists when the server answers 410 Gone (as
an HTTP status or as an ``ERROR`` event carrying a ``Status`` with ``code: 410``; a *list* that
keeps answering 410 is retried with tenacity's exponential backoff with jitter, capped at
``backoff_max_s``, and reported once as ``collector_error``), and reconnects with exponential
backoff on any other error. A relist is diffed against what was already
reported, so nothing is reported twice and nothing that happened while disconnected is lost.

Why a thin client over ``http.client`` and not the official ``kubernetes`` package (37.x on
PyPI): the collector needs three GETs (list and watch of pods, nodes, events) and nothing else.
The official client pulls in urllib3, google-auth, oauthlib, requests and websocket-client, has
no type stubs (``mypy --strict`` would need ignores at every call), leaves the 410 relist to the
caller anyway (its ``Watch`` raises ``ApiException(410)``), and blocks inside urllib3 until the
server's timeout, so ``stop()`` could not end a watch promptly. Owning the connection lets
``stop()`` shut the socket down and return at once, and the tests run the collector against a
plain local HTTP server. Authentication covered: the in-cluster service account (token re-read
on every request, since bound tokens rotate; the service-account CA), and a kubeconfig whose
user has a token, a token file or a client certificate (inline ``*-data`` or files); ``exec``
and ``auth-provider`` plugins are refused with a clear error (use a token for the agent).

Mapping to SchedulerEvent (``source="kubernetes"``):

- pod phase Running (first time) -> ``job_started``; Succeeded -> ``job_completed``;
- a container termination with reason ``OOMKilled`` (``state`` or ``lastState``, once per
  container instance) -> ``oom_killed`` with the exit code; another non-zero exit of a pod that
  is not being disrupted -> ``job_failed`` (a restart under ``restartPolicy: OnFailure`` is a
  crashed rank even though the pod stays Running);
- pod condition ``DisruptionTarget=True`` (PreemptionByScheduler, its 1.26 name
  PreemptionByKubeScheduler, EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet;
  Kubernetes >= 1.26), pod ``status.reason``
  ``Evicted``, or a core/v1 event ``Preempted`` (action ``Preempting``) or ``Evicted`` about a
  known pod -> ``preempted``, once per pod;
- pod phase Failed -> ``job_failed`` unless a container failure of that pod was already
  reported; a pod deleted (``deletionTimestamp``) with no disruption condition -> ``job_cancelled``
  (its containers' SIGTERM/SIGKILL exits are not reported as failures);
- node ``Ready`` False/Unknown or the node deleted -> ``node_down``; ``spec.unschedulable``
  (cordon, drain) -> ``node_drain``; schedulable and Ready again -> ``node_up``;
  ``MemoryPressure``/``DiskPressure``/``PIDPressure`` turning True -> ``other`` (a precursor of
  evictions and host OOM); a node event ``SystemOOM`` -> ``oom_killed``.

``job_id`` comes from the label ``job_label`` (default ``training.kubeflow.org/job-name``), else
the pod's controller owner, else the pod name; ``rank`` from a literal ``RANK`` env var in the
pod spec (the training operator sets it), else the first integer label of ``rank_labels``
(replica index, job-completion index). Events get the node the pod runs on (or the node the
event is about), and ids derived from the object's uid (a pod without uid: its
``namespace/name``; an event whose ``involvedObject`` has no uid finds the pod the same way), so
a restarted agent, or agents on several nodes watching the same objects, produce rows that
ClickHouse deduplicates. The first list counts as news: a pod already running, a container
already OOM-killed, a node already cordoned are reported with their own timestamps (an agent
that starts late still reports them, and the ids make the repeats of a restarted agent
harmless). A core/v1 event about a pod the pod watch has not seen is ignored (the pod's own
status reports the same disruption).

A watch thread's failures are reported as ``agent_event`` ``collector_error`` (once per run of
failures, with the message) and ``collector_recovered`` when the watch is back.

Layout: :mod:`.config` (what the agent's ``kubernetes:`` section says), :mod:`.client` (the
connection and a minimal API client), :mod:`.parsing` (pure readers of API objects),
:mod:`.state` (what both halves of the collector share), :mod:`.watch` (the list/watch loop),
:mod:`.diff` (pod, node and event objects -> SchedulerEvents), :mod:`.collector` (the halves
joined, and the factory the agent calls).
"""

from rankscope.collectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeConfigError,
    KubernetesConnection,
    resolve_connection,
)
from rankscope.collectors.kubernetes.collector import (
    KubernetesCollector,
    create_kubernetes_collector,
)
from rankscope.collectors.kubernetes.config import KubernetesCollectorConfig
from rankscope.collectors.kubernetes.parsing import parse_k8s_time

__all__ = [
    "KubeApiError",
    "KubeClient",
    "KubeConfigError",
    "KubernetesCollector",
    "KubernetesCollectorConfig",
    "KubernetesConnection",
    "create_kubernetes_collector",
    "parse_k8s_time",
    "resolve_connection",
]
