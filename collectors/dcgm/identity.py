"""dcgm-exporter's pod labels -> the job/rank identity the agent stamps events with.

Why: the agent's identity is a ``JobBinding`` per GPU index in its ``JobRegistry`` (the NVML
collector fills it from ``/proc/<pid>/environ``). dcgm-exporter knows no processes, but on
Kubernetes it labels each GPU with the pod the device plugin gave it to. From that:

- ``job_id``: the ``job`` group of the first ``pod_patterns`` regex that matches the pod name
  (the controller owner: a training-operator job, an Indexed Job, a ReplicaSet), else the pod
  name itself;
- ``local_rank``: the GPU's position among this pod's GPUs on the node, by index (how the device
  plugin's ``CUDA_VISIBLE_DEVICES`` orders them, and how torchrun assigns local ranks);
- ``rank``: ``index * gpus_of_the_pod + local_rank`` when the pattern yields a replica index
  (one process per GPU, equal pods), else ``local_rank`` (a one-pod job). A heuristic stated as
  such; a binding from process environments, when the NVML collector runs too, is preferred.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rankscope.collectors.base import JobBinding
from rankscope.collectors.dcgm.parsing import GpuReading

__all__ = ["pod_bindings", "pod_job"]


def pod_job(pod: str, patterns: Sequence[re.Pattern[str]]) -> tuple[str, int | None]:
    """(job, replica index or None) of a pod name."""
    for pattern in patterns:
        m = pattern.match(pod)
        if m and m.group("job"):
            index = m.groupdict().get("index")
            return m.group("job"), int(index) if index is not None else None
    return pod, None


def pod_bindings(
    readings: Iterable[GpuReading], patterns: Sequence[re.Pattern[str]]
) -> dict[int, JobBinding]:
    """GPU index -> binding, for the GPUs that carry a pod label."""
    by_pod: dict[tuple[str, str], list[int]] = {}
    for r in readings:
        if r.pod:
            by_pod.setdefault((r.namespace, r.pod), []).append(r.gpu)
    out: dict[int, JobBinding] = {}
    for (_, pod), gpus in by_pod.items():
        job, index = pod_job(pod, patterns)
        gpus.sort()
        for local, gpu in enumerate(gpus):
            rank = index * len(gpus) + local if index is not None else local
            out[gpu] = JobBinding(job_id=job, rank=rank, local_rank=local, pod=pod)
    return out
