"""Reference baselines (issue 19): a job's throughput profile with its configuration fingerprint.

Why a contract of its own: the same record is computed by ``rankscope baseline record`` (from
ClickHouse), published to the compacted ``<p>.baselines`` topic (the source of truth: the sink's
``baselines`` table and the worker's lookup are both rebuilt from it), and compared by the
analysis with the profile it builds from a live job's step joins. One model keeps the three
agreeing on what a profile and a configuration difference are.

Where the job's configuration comes from (docs/reference.md, "Reference baselines"):

* the node's versions (driver, CUDA, NCCL, kernel, GPU model and count, HCAs) from the agent's
  ``node_inventory`` events;
* SM/memory clocks from GPU samples;
* the model/config key and the NCCL environment from span attributes the training process sets:
  ``rankscope.model``, ``rankscope.global_batch`` and ``rankscope.env.NCCL_*`` (the node agent
  cannot see a job's environment; the process that NCCL runs in can).
  :func:`nccl_env_attributes` builds the latter from ``os.environ`` with an allow-list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

ShortText = Annotated[str, StringConstraints(max_length=256)]

#: the phases a profile measures, in step order (``step`` itself is their sum per rank)
PROFILE_PHASES: tuple[str, ...] = ("data", "forward", "backward", "optimizer", "collective")

ATTR_MODEL = "rankscope.model"
ATTR_GLOBAL_BATCH = "rankscope.global_batch"
ATTR_SAMPLES = "rankscope.samples"
ATTR_TOKENS = "rankscope.tokens"
ATTR_ENV_PREFIX = "rankscope.env."

#: NCCL variables that change how collectives perform (algorithm, protocol, transport, channel
#: and buffer sizing, which HCAs and interfaces, GPUDirect levels), from NVIDIA's NCCL user
#: guide, "Environment Variables" (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
#: Debug and file-path variables (NCCL_DEBUG*, NCCL_*_FILE) are left out: they do not change
#: throughput and may name paths.
NCCL_ENV_ALLOW: frozenset[str] = frozenset(
    {
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_SL",
        "NCCL_IB_TC",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_IB_PCI_RELAXED_ORDERING",
        "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_NET",
        "NCCL_NET_PLUGIN",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_READ",
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_SHM_DISABLE",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_CTAS",
        "NCCL_MAX_CTAS",
        "NCCL_CROSS_NIC",
        "NCCL_COLLNET_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_PXN_DISABLE",
        "NCCL_P2P_PXN_LEVEL",
        "NCCL_CUMEM_ENABLE",
        "NCCL_DMABUF_ENABLE",
        "NCCL_TREE_THRESHOLD",
        "NCCL_LL_THRESHOLD",
    }
)


def nccl_env_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed NCCL variables of ``environ`` as span attributes (``rankscope.env.X``):
    what the training process sets on its spans so the job's NCCL settings reach the analysis."""
    return {ATTR_ENV_PREFIX + k: v[:256] for k, v in sorted(environ.items()) if k in NCCL_ENV_ALLOW}


def nccl_env_of(attributes: Mapping[str, object]) -> dict[str, str]:
    """The NCCL variables carried by span attributes (inverse of :func:`nccl_env_attributes`)."""
    n = len(ATTR_ENV_PREFIX)
    return {
        k[n:]: str(v)
        for k, v in attributes.items()
        if k.startswith(ATTR_ENV_PREFIX) and k[n:] in NCCL_ENV_ALLOW
    }


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelKey(_Frozen):
    """What makes two jobs "the same model and configuration", comparable step for step: the
    model the training code names, the world size, the GPU model and the global batch. The same
    key with other software (driver, NCCL, env) is exactly what a baseline comparison explains."""

    model: ShortText = Field(min_length=1, description="The rankscope.model span attribute.")
    ranks: int = Field(ge=1, description="World size: ranks seen in the step joins.")
    gpu_model: ShortText = ""
    global_batch: int | None = Field(default=None, ge=1)

    @property
    def key(self) -> str:
        batch = "-" if self.global_batch is None else str(self.global_batch)
        return f"{self.model}|ranks={self.ranks}|gpu={self.gpu_model or '-'}|batch={batch}"


class PhaseStat(_Frozen):
    """One phase across steps: the median of the per-step medians over ranks, and the spread
    (interquartile range across steps)."""

    median_s: float = Field(ge=0)
    spread_s: float = Field(default=0.0, ge=0)


class ConfigFingerprint(_Frozen):
    """The configuration a profile ran on; what :meth:`differences` compares."""

    driver_version: ShortText = ""
    cuda_version: ShortText = ""
    nccl_version: ShortText = ""
    kernel: ShortText = ""
    nccl_env: dict[ShortText, ShortText] = Field(default_factory=dict, max_length=64)
    sm_clock_mhz: float | None = Field(default=None, ge=0)
    mem_clock_mhz: float | None = Field(default=None, ge=0)
    gpus_per_node: int = Field(default=0, ge=0)
    nodes: int = Field(default=0, ge=0)
    hcas_per_node: int = Field(default=0, ge=0)

    def differences(
        self, job: ConfigFingerprint, clock_tolerance: float = 0.02
    ) -> list[ConfigDifference]:
        """Every setting where ``job`` differs from this (the baseline's) configuration, in a
        fixed order: versions, NCCL environment (a variable set on one side only counts), clocks
        beyond ``clock_tolerance``, topology."""
        out: list[ConfigDifference] = []
        for name in ("driver_version", "nccl_version", "cuda_version", "kernel"):
            mine, theirs = getattr(self, name), getattr(job, name)
            if mine != theirs:
                out.append(ConfigDifference(setting=name, baseline=mine, job=theirs))
        for var in sorted(set(self.nccl_env) | set(job.nccl_env)):
            mine, theirs = self.nccl_env.get(var, "(unset)"), job.nccl_env.get(var, "(unset)")
            if mine != theirs:
                out.append(ConfigDifference(setting=var, baseline=mine, job=theirs))
        for name in ("sm_clock_mhz", "mem_clock_mhz"):
            a, b = getattr(self, name), getattr(job, name)
            if a and b and abs(b - a) > clock_tolerance * a:
                out.append(ConfigDifference(setting=name, baseline=f"{a:.0f}", job=f"{b:.0f}"))
        for name in ("gpus_per_node", "nodes", "hcas_per_node"):
            a, b = getattr(self, name), getattr(job, name)
            if a and b and a != b:
                out.append(ConfigDifference(setting=name, baseline=str(a), job=str(b)))
        return out


class ConfigDifference(_Frozen):
    setting: str
    baseline: str
    job: str

    def __str__(self) -> str:
        return f"{self.setting}: {self.baseline} -> {self.job}"


class JobProfile(_Frozen):
    """A job's throughput profile: per-phase step times, step time, comm share, power, and the
    configuration it ran on."""

    cluster: ShortText
    job_id: ShortText
    model_key: ModelKey
    steps: int = Field(ge=1, description="Steps the profile was measured on.")
    phases: dict[str, PhaseStat] = Field(description="Keys: PROFILE_PHASES present in the job.")
    step: PhaseStat = Field(description="Per-rank sum of the phases, medians as for a phase.")
    comm_share: float = Field(ge=0, le=1, description="Collective median / step median.")
    power_w_per_gpu: float | None = Field(default=None, ge=0)
    samples_per_s: float | None = Field(default=None, ge=0)
    tokens_per_s: float | None = Field(default=None, ge=0)
    config: ConfigFingerprint = Field(default_factory=ConfigFingerprint)


class Baseline(_Frozen):
    """A recorded reference, on the compacted ``<p>.baselines`` topic keyed by its model/config
    key: the latest record per key is the reference every later job with that key is compared
    with."""

    baseline_id: str = Field(description="sha256 of (name, job, recorded_ts), 16 hex digits.")
    name: ShortText = Field(min_length=1)
    key: ShortText = Field(description="ModelKey.key of the profile: the topic's record key.")
    recorded_ts: int = Field(ge=0, description="Wall clock of the recording, ns (metadata).")
    recorded_by: ShortText = ""
    profile: JobProfile

    @staticmethod
    def make_id(name: str, job_id: str, recorded_ts: int) -> str:
        return hashlib.sha256(f"{name}\0{job_id}\0{recorded_ts}".encode()).hexdigest()[:16]

    @classmethod
    def of(
        cls, name: str, profile: JobProfile, recorded_ts: int, recorded_by: str = ""
    ) -> Baseline:
        return cls(
            baseline_id=cls.make_id(name, profile.job_id, recorded_ts),
            name=name,
            key=profile.model_key.key,
            recorded_ts=recorded_ts,
            recorded_by=recorded_by,
            profile=profile,
        )
