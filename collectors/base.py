"""The node-agent component model: every collector is a small component with a typed config.

A collector turns one source (NVML, sysfs, a log file, the scheduler API, OTel spans) into
schema-validated events. The agent (``rankscope.collectors.agent``) owns the components:

- polling collectors get ``poll(now_ns)`` called every ``interval_s`` on the agent's thread and
  return the events of that cycle;
- event-driven collectors (NVML events, log tailers, Kubernetes watches) run their own thread
  from ``start(emit)`` and call ``emit`` as events happen;
- any exception from ``poll`` is caught by the agent and reported as an ``agent_event``
  (``collector_error``), never an agent crash.

``EventFactory`` stamps the envelope (ids, node, cluster, observed time) so collectors only
build payloads; ``JobRegistry`` tells any collector which job and rank a GPU belongs to.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from rankscope.schemas.envelope import Envelope, kind_of, schema_id_of
from rankscope.schemas.events import Event

Emit = Callable[[Sequence[Event]], None]
E = TypeVar("E", bound=Envelope)


class CollectorConfig(BaseModel):
    """Common part of every collector's config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    interval_s: float = 1.0


@runtime_checkable
class Collector(Protocol):
    name: str
    #: seconds between ``poll`` calls; None for purely event-driven collectors
    interval_s: float | None

    def start(self, emit: Emit) -> None: ...

    def poll(self, now_ns: int) -> list[Event]: ...

    def stop(self) -> None: ...


class BaseCollector:
    """Defaults for the protocol: nothing to start or stop, nothing to poll."""

    name = "collector"
    interval_s: float | None = None

    def start(self, emit: Emit) -> None:
        return None

    def poll(self, now_ns: int) -> list[Event]:
        return []

    def stop(self) -> None:
        return None


@dataclass(frozen=True)
class JobBinding:
    """Which job and rank a process (and so its GPU) belongs to."""

    job_id: str
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    pod: str = ""


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for n in names:
        v = env.get(n)
        if v is not None and v.strip().lstrip("-").isdigit():
            return int(v)
    return None


def binding_from_environ(env: Mapping[str, str]) -> JobBinding | None:
    """Job and rank from a training process's environment (torchrun, Slurm, Kubernetes).

    torchrun sets RANK/LOCAL_RANK/WORLD_SIZE (and TORCHELASTIC_RUN_ID); Slurm sets SLURM_JOB_ID,
    SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS; Kubernetes pods have HOSTNAME (= pod name) and
    training operators set JOB_NAME-like variables, so the pod is kept for correlation.
    """
    job = (
        env.get("RANKSCOPE_JOB_ID")
        or env.get("SLURM_JOB_ID")
        or env.get("TORCHELASTIC_RUN_ID")
        or env.get("JOB_ID")
        or ""
    )
    rank = _int(env, "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    local = _int(env, "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
    world = _int(env, "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")
    pod = env.get("POD_NAME", "") if "KUBERNETES_SERVICE_HOST" in env else ""
    if not pod and "KUBERNETES_SERVICE_HOST" in env:
        pod = env.get("HOSTNAME", "")
    if not job and rank is None:
        return None
    if job == "none":  # torchelastic's default run id when none was given
        job = ""
    return JobBinding(job_id=job, rank=rank, local_rank=local, world_size=world, pod=pod)


class JobRegistry:
    """Thread-safe map GPU index -> JobBinding, fed by whoever can see processes (the GPU
    collector) and read by every collector that stamps events."""

    def __init__(self, default_job_id: str = "") -> None:
        self._lock = threading.Lock()
        self._by_gpu: dict[int, JobBinding] = {}
        self.default_job_id = default_job_id

    def bind_gpu(self, gpu: int, binding: JobBinding | None) -> None:
        with self._lock:
            if binding is None:
                self._by_gpu.pop(gpu, None)
            else:
                self._by_gpu[gpu] = binding

    def for_gpu(self, gpu: int) -> JobBinding | None:
        with self._lock:
            return self._by_gpu.get(gpu)

    def node_job(self) -> str:
        """The job most GPUs of this node run (node-level events are stamped with it)."""
        with self._lock:
            jobs = Counter(b.job_id for b in self._by_gpu.values() if b.job_id)
        if jobs:
            return jobs.most_common(1)[0][0]
        return self.default_job_id


class EventFactory:
    """Builds envelopes for one node so collectors only deal with payloads."""

    def __init__(
        self,
        cluster: str,
        node: str,
        jobs: JobRegistry | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        id_factory: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.jobs = jobs or JobRegistry()
        self.clock_ns = clock_ns
        self.id_factory = id_factory

    def make(
        self,
        model: type[E],
        payload: BaseModel,
        ts_ns: int | None = None,
        *,
        gpu: int | None = None,
        job_id: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
    ) -> E:
        """An event of ``model`` (e.g. ``GpuSampleEvent``); job/rank come from the GPU's
        binding unless given."""
        now = self.clock_ns()
        binding = self.jobs.for_gpu(gpu) if gpu is not None else None
        if job_id is None:
            job_id = binding.job_id if binding else self.jobs.node_job()
        if rank is None and binding is not None:
            rank = binding.rank
        if local_rank is None and binding is not None:
            local_rank = binding.local_rank
        schema = schema_id_of(model)
        kind = kind_of(model)
        fields: dict[str, Any] = {
            "event_id": self.id_factory(),
            "schema_id": schema,
            "kind": kind,
            "cluster": self.cluster,
            "job_id": job_id,
            "node": self.node,
            "rank": rank,
            "local_rank": local_rank,
            "gpu": gpu,
            "ts": ts_ns if ts_ns is not None else now,
            "observed_ts": now,
            "payload": payload,
        }
        return model.model_validate(fields)
