"""The node agent: runs the collectors of one node and gets their events to Kafka without loss.

One agent runs per node (a systemd unit, or a DaemonSet pod). It owns:

* the **collectors** named in its YAML config (``gpu``, ``fabric``, ``nccl_log``, ``slurm``,
  ``kubernetes``; looked up lazily through :data:`COLLECTORS`, so a node without, say, the
  Kubernetes client never imports it) plus any ready-made collector instances passed in
  (``Agent(config, collectors=[...])``: tests, benchmarks, site-specific sources);
* a built-in **heartbeat** (liveness: ``node_unresponsive`` is detected from its absence) and
  **node inventory** (driver/CUDA/NCCL/kernel/firmware versions, emitted at start and whenever
  its fingerprint changes: config drift is a straggler cause);
* a **scheduler** thread that calls each polling collector's ``poll`` at its interval;
* a **write-ahead spool** (:mod:`rankscope.collectors.spool`) and a **delivery** thread that
replays it to Kafka.

Scheduling: one thread, earliest-deadline-first over a fixed grid per task (``start + k *
interval`` on the monotonic clock), so timing errors never accumulate. A poll that overruns its
interval skips the grid points it missed instead of running back-to-back (no catch-up bursts),
and because the earliest *deadline* runs first, with ties going to the task that ran least
recently, a slow collector delays the others by at most one of its polls and never starves them.
A poll that is still running after ``stuck_poll_s`` is reported as a ``collector_error``
(from the delivery thread, which is independent of the scheduler). Event-driven collectors
(log tailers, watches) get a thread-safe ``emit`` from ``start(emit)``.

Errors: any exception from ``poll`` (or from ``start``, or from a collector's factory) becomes
one ``agent_event`` ``collector_error`` per error *streak* (exception type and message), and a
``collector_recovered`` (with the number of failed polls) when it polls fine again. The agent
never dies because a collector did.

Delivery path (why nothing is lost): ``events -> spool (write-ahead) -> Kafka``. Events are
grouped per (kind, partition key) into batches in the Kafka wire format (the same contract as
:class:`~collectors.publisher.Publisher`: topic ``Topics(prefix).raw(kind)``, key
``partition_key(job, node)``, value ``dump_events(batch)``, content-type header) and appended to
the spool *before* any network I/O. The delivery thread reads the spool in sequence order,
produces each batch with its own delivery callback, and acknowledges a batch in the spool only
after Kafka confirmed it (acks=all, idempotent producer); the spool's cursor is the contiguous
low-water mark of confirmed batches. A failed delivery (broker gone: the producer's
``delivery.timeout.ms`` expires) pauses sending until every in-flight batch has resolved, then,
after an exponential backoff, resends from the oldest unconfirmed batch *in order* (batches
that were confirmed meanwhile are skipped, so such a batch stays ahead of an older one that
failed: order on Kafka is per partition and the stream workers order by event time anyway;
what matters is that the backlog is not starved by, or interleaved with, new data).
So while the broker is unreachable the agent keeps sampling into the spool (bounded; on
overflow the oldest batches go and a ``spool_overflow`` event with the dropped count is itself
spooled), and when it returns the backlog is replayed oldest first, followed by new data (a
``spool_replayed`` event reports the size of the backlog). A crash or restart replays what was
not yet confirmed: duplicates are possible, loss is not; ClickHouse writes are idempotent by
``event_id``.

Why not :class:`~collectors.publisher.Publisher`: it batches ``Event`` objects and only counts
deliveries, while the agent needs a confirmation *per spooled batch* (to move the spool cursor)
and sends bytes it already serialised. :class:`KafkaTransport` is a thin wrapper around
``confluent_kafka.Producer`` with exactly the publisher's settings
(:func:`~collectors.publisher.producer_settings`) and wire contract.

Config (:class:`AgentConfig`): a YAML file, overridden by environment variables
``RANKSCOPE_AGENT__<SECTION>__<KEY>=value`` (``__`` separates nesting levels, names are
case-insensitive, e.g. ``RANKSCOPE_AGENT__KAFKA__BOOTSTRAP=kafka:9092``,
``RANKSCOPE_AGENT__GPU__INTERVAL_S=2``, ``RANKSCOPE_AGENT__CLUSTER=prod``). Values are strings
that pydantic converts to the field's type; a value starting with ``{`` or ``[`` is parsed as
JSON (dicts, lists). Environment wins over the file, so one file can serve a whole fleet.
"""

from __future__ import annotations

import contextlib
import heapq
import importlib
import json
import logging
import os
import platform
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, Self, cast, runtime_checkable

import yaml
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rankscope.collectors.base import Collector, CollectorConfig, EventFactory, JobRegistry
from rankscope.collectors.publisher import (
    CONTENT_TYPE_HEADER,
    PublisherConfig,
    batch_events,
    producer_settings,
)
from rankscope.collectors.spool import (
    DEFAULT_MAX_BYTES,
    DEFAULT_SEGMENT_BYTES,
    FsyncPolicy,
    RecordTooLargeError,
    Spool,
)
from rankscope.schemas import (
    AgentEventEvent,
    Event,
    HeartbeatEvent,
    NodeInventoryEvent,
    Topics,
    dump_events,
)
from rankscope.schemas.payloads import (
    AgentEvent,
    AgentEventType,
    Heartbeat,
    NodeInventory,
    inventory_fingerprint,
)

__all__ = [
    "COLLECTORS",
    "ENV_PREFIX",
    "Agent",
    "AgentConfig",
    "AgentConfigError",
    "AgentStats",
    "CollectorFactory",
    "CollectorStats",
    "DefaultInventorySource",
    "DeliveryError",
    "InventorySource",
    "KafkaTransport",
    "Scheduler",
    "SpoolConfig",
    "Transport",
    "agent_version",
    "env_overrides",
    "load_collector",
    "run_agent",
]

log = logging.getLogger(__name__)

#: section name -> (module, config class, factory). Factories are called as
#: ``factory(config, event_factory)``. Add an entry to support a new section; modules are
#: imported only when their section is configured.
COLLECTORS: dict[str, tuple[str, str, str]] = {
    "gpu": ("rankscope.collectors.gpu", "GpuCollectorConfig", "create_gpu_collector"),
    "fabric": ("rankscope.collectors.fabric", "FabricCollectorConfig", "create_fabric_collector"),
    "nccl_log": (
        "rankscope.collectors.nccl_log",
        "NcclLogCollectorConfig",
        "create_nccl_log_collector",
    ),
    "slurm": ("rankscope.collectors.slurm", "SlurmCollectorConfig", "create_slurm_collector"),
    "kubernetes": (
        "rankscope.collectors.kubernetes",
        "KubernetesCollectorConfig",
        "create_kubernetes_collector",
    ),
}

ENV_PREFIX = "RANKSCOPE_AGENT__"
AGENT_NAME = "rankscope-agent"

CollectorFactory = Callable[..., Collector]
#: A ready-made collector, or a callable that builds one from the agent's EventFactory (so an
#: injected source stamps events with the agent's node, cluster and job registry).
CollectorSpec = Collector | Callable[[EventFactory], Collector]


class AgentConfigError(ValueError):
    """The agent's configuration is invalid or names a collector that cannot be loaded."""


# ===================================================================================== config


class SpoolConfig(BaseModel):
    """Where and how much the agent buffers while Kafka is unreachable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path = Field(
        default=Path(".rankscope/agent-spool"),
        description="Spool directory (one agent per directory; relative to the working dir).",
    )
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=64 * 1024)
    segment_bytes: int = Field(default=DEFAULT_SEGMENT_BYTES, ge=4 * 1024)
    fsync: FsyncPolicy = "interval"
    fsync_interval_s: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _segments_fit(self) -> Self:
        if self.segment_bytes * 2 > self.max_bytes:
            raise ValueError("spool.segment_bytes must be at most half of spool.max_bytes")
        return self


class AgentConfig(BaseModel):
    """The node agent's config: identity, Kafka, spool, built-in sources, one section per
    collector (validated by that collector's own config class, see :data:`COLLECTORS`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    cluster: str = Field(min_length=1, max_length=256)
    node: str = Field(default_factory=socket.gethostname, min_length=1, max_length=256)
    agent_name: str = Field(default=AGENT_NAME, min_length=1, max_length=256)
    job_id: str = Field(
        default="",
        max_length=256,
        description="Job id for node-level events when no GPU is bound to a job.",
    )
    kafka: PublisherConfig
    spool: SpoolConfig = SpoolConfig()
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    inventory_interval_s: float = Field(default=300.0, gt=0)
    shutdown_timeout_s: float = Field(
        default=10.0, ge=0, description="On SIGTERM: how long to keep delivering the spool."
    )
    max_inflight_batches: int = Field(default=1000, ge=1)
    retry_backoff_s: float = Field(default=0.5, gt=0)
    retry_backoff_max_s: float = Field(default=30.0, gt=0)
    stuck_poll_s: float = Field(
        default=60.0, gt=0, description="Report a poll still running after this long."
    )
    gpu: dict[str, Any] | None = None
    fabric: dict[str, Any] | None = None
    nccl_log: dict[str, Any] | None = None
    slurm: dict[str, Any] | None = None
    kubernetes: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _agent_client_id(cls, data: Any) -> Any:
        """Name the producer after the agent (broker logs, quotas) unless the config does."""
        if isinstance(data, dict) and isinstance(data.get("kafka"), dict):
            kafka = data["kafka"]
            if "client_id" not in kafka:
                data = {**data, "kafka": {**kafka, "client_id": AGENT_NAME}}
        return data

    @model_validator(mode="after")
    def _known_sections(self) -> Self:
        """Extra top-level keys are allowed only for collectors registered in COLLECTORS, so a
        typo ("gpus:") fails loudly instead of silently disabling a collector."""
        for key, value in (self.model_extra or {}).items():
            if key not in COLLECTORS:
                known = ", ".join(sorted({*type(self).model_fields, *COLLECTORS}))
                raise ValueError(f"unknown agent config key {key!r} (known: {known})")
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"collector section {key!r} must be a mapping")
        return self

    def collector_sections(self) -> dict[str, dict[str, Any]]:
        """Configured collector sections, in registry order (an empty section means defaults)."""
        out: dict[str, dict[str, Any]] = {}
        extra = self.model_extra or {}
        for name in COLLECTORS:
            value = getattr(self, name, None) if name in type(self).model_fields else None
            if value is None:
                value = extra.get(name)
            if value is not None:
                out[name] = dict(value)
        return out

    def collector_configs(self) -> dict[str, CollectorConfig]:
        """Validate every configured section with its collector's config class (imports the
        collector modules). Raises :class:`AgentConfigError` with the section name."""
        out: dict[str, CollectorConfig] = {}
        for name, section in self.collector_sections().items():
            config_cls, _ = load_collector(name)
            try:
                out[name] = config_cls.model_validate(section)
            except ValidationError as exc:
                raise AgentConfigError(f"invalid `{name}` section: {exc}") from exc
        return out

    @classmethod
    def load(cls, path: Path | str, env: Mapping[str, str] | None = None) -> AgentConfig:
        """Read a YAML file and apply ``RANKSCOPE_AGENT__*`` overrides from ``env``."""
        env = os.environ if env is None else env
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except FileNotFoundError as exc:
            raise AgentConfigError(f"agent config {path} does not exist") from exc
        except (OSError, yaml.YAMLError) as exc:
            raise AgentConfigError(f"{path}: cannot be read as YAML: {exc}") from exc
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise AgentConfigError(f"{path}: the top level must be a mapping")
        merged = _deep_merge(raw, env_overrides(env))
        try:
            return cls.model_validate(merged)
        except ValidationError as exc:
            raise AgentConfigError(f"{path}: {exc}") from exc


def env_overrides(env: Mapping[str, str], prefix: str = ENV_PREFIX) -> dict[str, Any]:
    """``RANKSCOPE_AGENT__KAFKA__BOOTSTRAP=x`` -> ``{"kafka": {"bootstrap": "x"}}``."""
    out: dict[str, Any] = {}
    plen = len(prefix)
    for name, value in sorted(env.items()):
        if name[:plen].upper() != prefix:
            continue
        path = [p.lower() for p in name[plen:].split("__") if p]
        if not path:
            continue
        parsed: Any = value
        if value[:1] in ("{", "["):
            try:
                parsed = json.loads(value)
            except ValueError as exc:
                raise AgentConfigError(f"{name}: not valid JSON: {exc}") from exc
        node = out
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise AgentConfigError(f"{name}: conflicts with another override")
            node = child
        node[path[-1]] = parsed
    return out


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_collector(section: str) -> tuple[type[CollectorConfig], CollectorFactory]:
    """(config class, factory) of a registered collector section, imported on first use."""
    try:
        module_name, config_name, factory_name = COLLECTORS[section]
    except KeyError:
        raise AgentConfigError(f"no collector registered for section {section!r}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentConfigError(
            f"the `{section}` collector needs module {module_name!r}, which cannot be imported "
            f"({exc}); remove the section or install what it needs"
        ) from exc
    try:
        config_cls = getattr(module, config_name)
        factory = getattr(module, factory_name)
    except AttributeError as exc:
        raise AgentConfigError(f"{module_name} does not provide {exc.name!r}") from exc
    if not (isinstance(config_cls, type) and issubclass(config_cls, BaseModel)):
        raise AgentConfigError(f"{module_name}.{config_name} is not a pydantic model")
    if not callable(factory):
        raise AgentConfigError(f"{module_name}.{factory_name} is not callable")
    return cast("type[CollectorConfig]", config_cls), cast("CollectorFactory", factory)


def agent_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("rankscope")
    except (ImportError, PackageNotFoundError):
        return "0+unknown"


# ================================================================================== inventory


@runtime_checkable
class InventorySource(Protocol):
    """What the node runs: ``NodeInventory`` fields except ``fingerprint`` (missing ones are
    left at their defaults). Called every ``inventory_interval_s``; must be cheap-ish."""

    def read(self) -> Mapping[str, Any]: ...


_DRIVER_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+)+)")
_NCCL_SO_RE = re.compile(r"libnccl\.so\.([0-9]+(?:\.[0-9]+)+)$")
_NCCL_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/local/cuda/lib64",
    "usr/local/lib",
)


class DefaultInventorySource:
    """Reads what it can, cheaply, and never raises for a missing source.

    * kernel: ``/proc/sys/kernel/osrelease`` (``platform.release()`` as fallback);
    * os: ``PRETTY_NAME`` from ``/etc/os-release``;
    * driver, CUDA (driver API) version, GPU model/count/VBIOS: NVML when ``pynvml`` initialises,
      else the driver version from ``/proc/driver/nvidia/version``;
    * NCCL: ``$NCCL_VERSION`` (set by NGC containers) or the newest ``libnccl.so.X.Y.Z`` in the
      usual library directories (a directory listing, no dlopen);
    * HCA firmware: ``/sys/class/infiniband/*/fw_ver``.

    ``root`` relocates every path (tests build a fake tree); ``nvml`` injects an NVML module or
    function table (None: import ``pynvml``; False: do not use NVML).
    """

    def __init__(
        self,
        root: Path | str = "/",
        environ: Mapping[str, str] | None = None,
        nvml: Any = None,
    ) -> None:
        self.root = Path(root)
        self.environ = os.environ if environ is None else environ
        self._nvml = nvml

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def _text(self, rel: str) -> str:
        try:
            return self._path(rel).read_text(errors="replace").strip()
        except OSError:
            return ""

    def read(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "kernel": self._text("proc/sys/kernel/osrelease")
            or (platform.release() if str(self.root) == "/" else ""),
            "os": self._os_name(),
            "extra": {"arch": platform.machine()} if str(self.root) == "/" else {},
        }
        fields.update(self._nvml_fields())
        if not fields.get("driver_version"):
            match = _DRIVER_RE.search(self._text("proc/driver/nvidia/version"))
            if match:
                fields["driver_version"] = match.group(1)
        if not fields.get("cuda_version") and self.environ.get("CUDA_DRIVER_VERSION"):
            fields["cuda_version"] = self.environ["CUDA_DRIVER_VERSION"]
        fields["nccl_version"] = self._nccl_version()
        fields["hca_firmware"] = self._hca_firmware()
        return {k: v for k, v in fields.items() if v not in ("", None, {})}

    def _os_name(self) -> str:
        values: dict[str, str] = {}
        for line in self._text("etc/os-release").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip('"')
        return values.get("PRETTY_NAME") or values.get("NAME", "")

    def _nvml_fields(self) -> dict[str, Any]:
        nvml = self._nvml
        if nvml is False:
            return {}
        if nvml is None:
            try:
                import pynvml

                nvml = pynvml
            except ImportError:
                return {}
        try:
            nvml.nvmlInit()
        except Exception:  # no driver (NVMLError_LibraryNotFound, ...): not a GPU node
            return {}
        out: dict[str, Any] = {}
        try:
            with contextlib.suppress(Exception):
                out["driver_version"] = _str(nvml.nvmlSystemGetDriverVersion())
            with contextlib.suppress(Exception):
                cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
                out["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
            with contextlib.suppress(Exception):
                count = int(nvml.nvmlDeviceGetCount())
                out["gpu_count"] = count
                vbios: dict[str, str] = {}
                for index in range(min(count, 64)):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    if index == 0:
                        with contextlib.suppress(Exception):
                            out["gpu_model"] = _str(nvml.nvmlDeviceGetName(handle))
                    with contextlib.suppress(Exception):
                        vbios[str(index)] = _str(nvml.nvmlDeviceGetVbiosVersion(handle))
                out["gpu_vbios"] = vbios
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
        return out

    def _nccl_version(self) -> str:
        env = self.environ.get("NCCL_VERSION", "").strip()
        if env:
            return env
        best: tuple[int, ...] = ()
        for rel in _NCCL_DIRS:
            directory = self._path(rel)
            try:
                names = [p.name for p in directory.glob("libnccl.so.*")]
            except OSError:
                continue
            for name in names:
                match = _NCCL_SO_RE.search(name)
                if match:
                    version = tuple(int(p) for p in match.group(1).split("."))
                    best = max(best, version)
        return ".".join(str(p) for p in best)

    def _hca_firmware(self) -> dict[str, str]:
        out: dict[str, str] = {}
        base = self._path("sys/class/infiniband")
        try:
            devices = sorted(base.iterdir())
        except OSError:
            return out
        for device in devices[:64]:
            with contextlib.suppress(OSError):
                out[device.name] = (device / "fw_ver").read_text().strip()
        return out


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# ================================================================================== transport


@dataclass(frozen=True, slots=True)
class DeliveryError:
    """Why a batch was not delivered; ``permanent`` ones are never retried (and are counted)."""

    message: str
    permanent: bool = False


DeliveryCallback = Callable[[int, DeliveryError | None], None]


class PermanentSendError(Exception):
    """The batch can never be produced (e.g. larger than the broker accepts)."""


class Transport(Protocol):
    """The delivery layer: bytes to a topic, one confirmation per batch through ``on_done``
    (called from :meth:`poll`/:meth:`close` on the delivery thread)."""

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: DeliveryCallback
    ) -> None:
        """Queue one batch. Raises ``BufferError`` when the local queue is full (try later) and
        :class:`PermanentSendError` when it can never be sent."""
        ...

    def poll(self, timeout_s: float) -> None: ...

    @property
    def broken(self) -> str | None:
        """Set after a fatal client error: the agent then builds a new transport."""
        ...

    def close(self, timeout_s: float) -> None: ...


# Errors on which retrying the same bytes cannot help.
_PERMANENT_CODES = frozenset(
    code
    for code in (
        getattr(KafkaError, "MSG_SIZE_TOO_LARGE", None),
        getattr(KafkaError, "INVALID_MSG", None),
        getattr(KafkaError, "INVALID_RECORD", None),
        getattr(KafkaError, "RECORD_LIST_TOO_LARGE", None),
        getattr(KafkaError, "TOPIC_EXCEPTION", None),
        getattr(KafkaError, "_INVALID_ARG", None),
    )
    if code is not None
)


class _RepeatFilter(logging.Filter):
    """Lets one librdkafka message of each shape through per ``interval_s``: during an outage
    librdkafka logs every reconnect attempt (several a second), which would drown the agent's
    own, more useful "delivery failing / replayed" lines."""

    def __init__(self, interval_s: float = 60.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        shape = re.sub(r"\d+", "#", record.getMessage())[:300]
        now = time.monotonic()
        if now - self._last.get(shape, -self.interval_s) < self.interval_s:
            return False
        if len(self._last) > 1000:
            self._last.clear()
        self._last[shape] = now
        return True


_LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
_LIBRDKAFKA_LOG.addFilter(_RepeatFilter())


class KafkaTransport:
    """``confluent_kafka.Producer`` with the publisher's settings and a callback per batch
    (librdkafka's own log lines go to ``rankscope.collectors.agent.librdkafka``, repeats
    suppressed)."""

    def __init__(
        self,
        config: PublisherConfig,
        *,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    ) -> None:
        self.config = config
        self._fatal: str | None = None
        self.last_client_error: str | None = None
        settings = producer_settings(config, error_cb=self._on_error)
        settings["logger"] = _LIBRDKAFKA_LOG
        self._producer = producer_factory(settings)

    def send(
        self, seq: int, topic: str, key: bytes, value: bytes, on_done: DeliveryCallback
    ) -> None:
        try:
            self._producer.produce(
                topic,
                value,
                key,
                on_delivery=partial(self._delivered, seq, on_done),
                headers=[CONTENT_TYPE_HEADER],
            )
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in _PERMANENT_CODES:
                raise PermanentSendError(f"{err.name()}: {err.str()}") from exc
            raise

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    @property
    def broken(self) -> str | None:
        return self._fatal

    def close(self, timeout_s: float) -> None:
        """Deliver what is queued within ``timeout_s``; the rest stays in the spool."""
        with contextlib.suppress(Exception):
            if self._producer.flush(timeout_s):
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.poll(0)

    @staticmethod
    def _delivered(
        seq: int, on_done: DeliveryCallback, err: KafkaError | None, msg: Message
    ) -> None:
        if err is None:
            on_done(seq, None)
            return
        on_done(
            seq,
            DeliveryError(
                f"{msg.topic()}: {err.name()}: {err.str()}",
                permanent=err.code() in _PERMANENT_CODES,
            ),
        )

    def _on_error(self, err: KafkaError) -> None:
        self.last_client_error = f"{err.name()}: {err.str()}"
        if err.fatal():
            self._fatal = self.last_client_error
            log.error("fatal Kafka producer error: %s", self.last_client_error)
        else:
            log.debug("kafka client error: %s", self.last_client_error)


TransportFactory = Callable[[PublisherConfig], Transport]


# ================================================================================== scheduler


@dataclass(eq=False)
class _Task:
    name: str
    interval_s: float
    fn: Callable[[], None]
    next_due: float
    last_run: float = float("-inf")
    runs: int = 0
    skipped: int = 0


class Scheduler:
    """Earliest-deadline-first over fixed per-task grids (see the module docstring).

    Pure logic over an injectable monotonic clock: :meth:`run_due` runs every task due at
    ``now`` once and returns when the next one is due, so tests drive it with a fake clock and
    the agent's thread just sleeps until that time.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._tasks: list[_Task] = []

    def add(
        self, name: str, interval_s: float, fn: Callable[[], None], first_due: float | None = None
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: interval must be positive")
        due = self.clock() if first_due is None else first_due
        self._tasks.append(_Task(name, interval_s, fn, due))

    @property
    def tasks(self) -> list[_Task]:
        return list(self._tasks)

    def next_due(self) -> float:
        return min((t.next_due for t in self._tasks), default=float("inf"))

    def run_due(self, now: float | None = None) -> float:
        """Run each task that is due, once, earliest deadline first (ties: least recently run
        first); returns the monotonic time the next task is due."""
        now = self.clock() if now is None else now
        due = [
            (t.next_due, t.last_run, i, t) for i, t in enumerate(self._tasks) if t.next_due <= now
        ]
        heapq.heapify(due)
        while due:
            _, _, _, task = heapq.heappop(due)
            started = self.clock()
            try:
                task.fn()
            finally:
                task.runs += 1
                task.last_run = started
                self._advance(task, self.clock())
        return self.next_due()

    @staticmethod
    def _advance(task: _Task, now: float) -> None:
        """Next grid point after ``now``: no drift, and missed points are skipped, not queued."""
        task.next_due += task.interval_s
        if task.next_due <= now:
            missed = int((now - task.next_due) // task.interval_s) + 1
            task.skipped += missed
            task.next_due += missed * task.interval_s


# ================================================================================== stats


@dataclass(slots=True)
class CollectorStats:
    """Per-source counters, including the agent's own CPU time spent on it (poll + serialise +
    spool append, measured with the thread CPU clock)."""

    name: str
    interval_s: float | None = None
    polls: int = 0
    errors: int = 0
    events: int = 0
    cpu_s: float = 0.0
    skipped_ticks: int = 0
    failing: bool = False
    streak: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class AgentStats:
    """A snapshot of the agent's counters (events unless said otherwise)."""

    sampled: int
    spooled: int
    published: int
    delivered: int
    dropped: int
    rejected: int
    pending: int
    spool_bytes: int
    in_flight_batches: int
    delivery_failures: int
    collector_errors: int
    broker_ok: bool | None
    last_delivery_error: str
    uptime_s: float
    collectors: tuple[CollectorStats, ...] = ()

    def line(self) -> str:
        """One human-readable status line (the CLI prints it on stderr)."""
        broker = {True: "up", False: "DOWN", None: "?"}[self.broker_ok]
        return (
            f"sampled={self.sampled} delivered={self.delivered} pending={self.pending} "
            f"({self.spool_bytes / 1e6:.1f} MB) in_flight={self.in_flight_batches} "
            f"dropped={self.dropped} collector_errors={self.collector_errors} broker={broker}"
        )


# ================================================================================== delivery


class _Delivery:
    """Spool -> Kafka, on its own thread. Owns every piece of in-flight state (only this
    thread touches it; the transport's callbacks run inside ``transport.poll``)."""

    def __init__(
        self,
        spool: Spool,
        transport_factory: Callable[[], Transport],
        topics: Topics,
        *,
        max_inflight: int,
        backoff_s: float,
        backoff_max_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool = spool
        self._transport_factory = transport_factory
        self.transport = transport_factory()
        self.topics = topics
        self.max_inflight = max_inflight
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.lwm = spool.committed_seq  # every seq <= lwm is confirmed (or gone)
        self.sent_upto = self.lwm  # every seq <= sent_upto was handed to the transport
        self.inflight: dict[int, int] = {}
        self.done: set[int] = set()
        self.failed: list[int] = []
        self.retry_at = 0.0
        self._backoff = backoff_s
        self.broker_ok: bool | None = None
        self.last_error = ""
        # counters (events unless said otherwise)
        self.published = 0
        self.delivered = 0
        self.rejected = 0
        self.failures = 0  # batches
        # backlog tracking for spool_replayed
        self.backlog_target: int | None = spool.last_seq if spool.pending_records else None
        self.backlog_events = 0  # events acknowledged since the backlog began
        self.backlog_since = clock()
        self.replayed: list[tuple[int, float]] = []  # (events, seconds) to report

    # --------------------------------------------------------------- one iteration

    def step(self, wait_s: float) -> None:
        if self.transport.broken is not None:
            self._reset_transport()
        # After a failure nothing new is sent until every batch in flight has resolved and the
        # backoff has passed: then the resend starts from the oldest unconfirmed batch.
        if not self.failed and self.clock() >= self.retry_at:
            self.retry_at = 0.0
            self._fill()
        self.transport.poll(wait_s if self.inflight else 0.0)
        self._settle()

    def _fill(self) -> None:
        # Records the bound dropped are behind the spool's cursor: never wait for them.
        self.sent_upto = max(self.sent_upto, self.spool.committed_seq)
        room = self.max_inflight - len(self.inflight)
        while room > 0:
            records = self.spool.read(after=self.sent_upto, max_records=min(room, 256))
            if not records:
                return
            for record in records:
                seq = record.seq
                if seq > self.sent_upto + 1:
                    # A record in between vanished (corrupt on disk): nothing to wait for.
                    self.done.update(range(self.sent_upto + 1, seq))
                if seq in self.done or seq in self.inflight:
                    self.sent_upto = seq
                    continue
                kind, _, key = record.meta.partition(b"\n")
                try:
                    self.transport.send(
                        seq, self.topics.raw(kind.decode()), key, record.data, self._on_done
                    )
                except BufferError:
                    return  # local queue full: serve callbacks first
                except PermanentSendError as exc:
                    log.error(
                        "dropping spooled batch %d (%d events): %s", seq, record.n_events, exc
                    )
                    self.rejected += record.n_events
                    self.done.add(seq)
                    self.sent_upto = seq
                    continue
                except KafkaException as exc:
                    self._note_failure(seq, f"produce failed: {exc}")
                    return
                self.inflight[seq] = record.n_events
                self.published += record.n_events
                self.sent_upto = seq
                room -= 1
                if room <= 0:
                    return

    def _on_done(self, seq: int, error: DeliveryError | None) -> None:
        n_events = self.inflight.pop(seq, None)
        if n_events is None:
            return  # from a transport we already replaced
        if error is None:
            self.done.add(seq)
            self.delivered += n_events
            self.broker_ok = True
            self._backoff = self.backoff_s
        elif error.permanent:
            log.error(
                "Kafka rejected spooled batch %d (%d events): %s", seq, n_events, error.message
            )
            self.done.add(seq)
            self.rejected += n_events
            self.last_error = error.message
        else:
            self._note_failure(seq, error.message)

    def _note_failure(self, seq: int, message: str) -> None:
        self.failed.append(seq)
        self.failures += 1
        self.last_error = message
        if self.broker_ok is not False:
            log.warning("Kafka delivery failing, spooling until it recovers: %s", message)
        self.broker_ok = False

    def _settle(self) -> None:
        if self.failed and not self.inflight:
            # Everything in flight resolved: resend from the oldest unconfirmed batch, in order,
            # after a backoff. Batches confirmed meanwhile are skipped by _fill.
            first = min(self.failed)
            self.failed.clear()
            self.sent_upto = min(self.sent_upto, max(first - 1, self.lwm))
            self.retry_at = self.clock() + self._backoff
            self._backoff = min(self._backoff * 2, self.backoff_max_s)
            if self.backlog_target is None:
                self.backlog_target = self.spool.last_seq
                self.backlog_events = 0
                self.backlog_since = self.clock()
        committed = self.spool.committed_seq  # moves past records dropped by the bound
        if committed > self.lwm:
            self.lwm = committed
            self.done = {s for s in self.done if s > committed}
            self.sent_upto = max(self.sent_upto, committed)
        lwm = self.lwm
        while lwm + 1 in self.done:
            lwm += 1
            self.done.discard(lwm)
        if lwm > self.lwm:
            acked = self.spool.ack(lwm)
            if self.backlog_target is not None:
                self.backlog_events += acked
            self.lwm = lwm
        if self.backlog_target is not None and self.lwm >= self.backlog_target:
            if self.backlog_events:
                self.replayed.append((self.backlog_events, self.clock() - self.backlog_since))
            self.backlog_target = None
            self.backlog_events = 0
        if self.backlog_target is not None and self.broker_ok is False:
            # Still failing: the backlog keeps growing; it is reported once it has drained.
            self.backlog_target = self.spool.last_seq

    def _reset_transport(self) -> None:
        reason = self.transport.broken
        log.error("recreating the Kafka producer after a fatal error: %s", reason)
        self.inflight.clear()  # first, so the old producer's purge reports are ignored
        self.failed.clear()
        with contextlib.suppress(Exception):
            self.transport.close(0.0)
        self.sent_upto = self.lwm
        self.transport = self._transport_factory()

    # --------------------------------------------------------------- shutdown

    @property
    def drained(self) -> bool:
        return self.lwm >= self.spool.last_seq

    def close(self, timeout_s: float) -> None:
        self.transport.close(timeout_s)
        self._settle()


# ================================================================================== the agent


class Agent:
    """The node agent runtime (see the module docstring). ``start()``, then ``stop()``."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        collectors: Iterable[CollectorSpec] = (),
        inventory: InventorySource | None = None,
        transport_factory: TransportFactory | None = None,
        event_factory: EventFactory | None = None,
        tap: Callable[[Sequence[Event]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        if event_factory is None:
            self.jobs = JobRegistry(default_job_id=config.job_id)
            self.factory = EventFactory(config.cluster, config.node, self.jobs)
        else:
            self.factory = event_factory
            self.jobs = event_factory.jobs
        self.inventory: InventorySource = inventory or DefaultInventorySource()
        self._transport_factory: TransportFactory = transport_factory or KafkaTransport
        self._tap = tap
        self._clock = clock
        self.version = agent_version()
        self.collectors: list[Collector] = []
        self._build_errors: list[tuple[str, BaseException]] = []
        self._build_configured()
        for spec in collectors:
            self.collectors.append(spec if isinstance(spec, Collector) else spec(self.factory))
        names = [c.name for c in self.collectors]
        if len(set(names)) != len(names) or {"heartbeat", "inventory"} & set(names):
            raise AgentConfigError(
                f"collector names must be unique and not heartbeat/inventory, got {names}"
            )

        self._stats: dict[str, CollectorStats] = {
            c.name: CollectorStats(c.name, c.interval_s) for c in self.collectors
        }
        for name in ("heartbeat", "inventory"):
            self._stats.setdefault(name, CollectorStats(name))
        self._stats["heartbeat"].interval_s = config.heartbeat_interval_s
        self._stats["inventory"].interval_s = config.inventory_interval_s
        self._state_lock = threading.Lock()
        self._ingest_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._delivery_stop = threading.Event()
        self._current: tuple[str, float, bool] | None = None  # (task, started, reported stuck)
        self.scheduler = Scheduler(clock)
        self.spool: Spool | None = None
        self._delivery: _Delivery | None = None
        self._sampled = 0
        self._spooled = 0
        self._lost = 0  # could not be spooled at all (too large, spool closed)
        self._collector_errors = 0
        self._reported_dropped = 0
        self._hb_seq = 0
        self._inventory_fp: str | None = None
        self._started_at: float | None = None
        self._running = False
        #: events the spool held from a previous run when this one started
        self.pending_at_start = 0
        self._delivery_deadline = 0.0
        self._scheduler_thread: threading.Thread | None = None
        self._delivery_thread: threading.Thread | None = None

    # ----------------------------------------------------------------- construction

    def _build_configured(self) -> None:
        """Configured sections -> collectors. A section that does not validate, or whose module
        cannot be imported, is a deployment error (raised); a factory that fails at runtime (no
        NVML on this node, API unreachable) is reported as collector_error and skipped."""
        for name, config in self.config.collector_configs().items():
            if not config.enabled:
                continue
            _, factory = load_collector(name)
            try:
                self.collectors.append(factory(config, self.factory))
            except Exception as exc:
                log.error(
                    "collector %s could not be created: %s: %s", name, type(exc).__name__, exc
                )
                self._build_errors.append((name, exc))

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._running:
            return
        cfg = self.config
        self.spool = Spool(
            cfg.spool.dir,
            cfg.spool.max_bytes,
            cfg.spool.segment_bytes,
            fsync=cfg.spool.fsync,
            fsync_interval_s=cfg.spool.fsync_interval_s,
        )
        pending = self.pending_at_start = self.spool.pending_events
        try:
            self._delivery = _Delivery(
                self.spool,
                lambda: self._transport_factory(cfg.kafka),
                Topics(cfg.kafka.topic_prefix),
                max_inflight=cfg.max_inflight_batches,
                backoff_s=cfg.retry_backoff_s,
                backoff_max_s=cfg.retry_backoff_max_s,
                clock=self._clock,
            )
        except BaseException:  # e.g. a bad librdkafka setting in kafka.extra
            self.spool.close()
            raise
        self._started_at = self._clock()
        self._running = True
        self._stop.clear()
        self._delivery_stop.clear()
        self._delivery_thread = threading.Thread(
            target=self._delivery_loop, name="agent-delivery", daemon=True
        )
        self._delivery_thread.start()

        self._agent_event(
            "agent_started",
            message=(
                f"{cfg.agent_name} {self.version} on {cfg.node}: "
                f"{len(self.collectors)} collector(s) "
                f"[{', '.join(c.name for c in self.collectors)}]; "
                f"{pending} event(s) pending in the spool from a previous run"
            ),
            count=pending,
        )
        for name, exc in self._build_errors:
            self._stats.setdefault(name, CollectorStats(name))
            self._failed(name, exc, during="create")
        for collector in self.collectors:
            try:
                collector.start(partial(self._emit_from, collector.name))
            except Exception as exc:
                self._failed(collector.name, exc, during="start")

        now = self._clock()
        self.scheduler = Scheduler(self._clock)
        self.scheduler.add("heartbeat", cfg.heartbeat_interval_s, self._heartbeat_task, now)
        self.scheduler.add("inventory", cfg.inventory_interval_s, self._inventory_task, now)
        for collector in self.collectors:
            if collector.interval_s:
                self.scheduler.add(
                    collector.name,
                    collector.interval_s,
                    partial(self._poll_task, collector),
                    now,
                )
        self._scheduler_thread = threading.Thread(
            target=self._scheduler_loop, name="agent-scheduler", daemon=True
        )
        self._scheduler_thread.start()

    def stop(self, timeout_s: float | None = None) -> AgentStats:
        """Stop sampling, deliver what can be delivered within ``timeout_s`` (default
        ``shutdown_timeout_s``), persist the spool. Idempotent."""
        if not self._running:
            return self.stats()
        deadline = self._clock() + (
            self.config.shutdown_timeout_s if timeout_s is None else timeout_s
        )
        self._stop.set()
        sched = self._scheduler_thread
        if sched is not None:
            sched.join(max(1.0, deadline - self._clock()))
            if sched.is_alive():
                log.error("a collector poll is still running at shutdown; not waiting for it")
        for collector in self.collectors:
            try:
                collector.stop()
            except Exception as exc:
                log.warning(
                    "collector %s failed to stop: %s: %s", collector.name, type(exc).__name__, exc
                )
        self._agent_event("agent_stopped", message="shutdown requested", count=self._sampled)
        self._delivery_deadline = deadline
        self._delivery_stop.set()
        self._wake.set()
        if self._delivery_thread is not None:
            self._delivery_thread.join(max(1.0, deadline - self._clock()) + 5.0)
        self._running = False
        stats = self.stats()
        with self._ingest_lock:
            if self.spool is not None:
                self.spool.close()
        if stats.pending:
            log.warning("%d event(s) left in the spool for the next start", stats.pending)
        return stats

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- threads

    def _scheduler_loop(self) -> None:
        while not self._stop.is_set():
            next_due = self.scheduler.run_due()
            delay = next_due - self._clock()
            if delay > 0:
                self._stop.wait(min(delay, 3600.0))

    def _delivery_loop(self) -> None:
        delivery = self._delivery
        assert delivery is not None
        while True:
            stopping = self._delivery_stop.is_set()
            if stopping and (delivery.drained or self._clock() >= self._delivery_deadline):
                break
            try:
                delivery.step(0.05)
            except Exception:  # never let the delivery thread die: the spool keeps the data
                log.exception("delivery step failed")
                time.sleep(0.5)
            self._after_delivery_step(delivery)
            if not delivery.inflight:
                # Idle: appends wake us (self._wake); the timeout only serves producer events
                # and the stuck-poll check, so a slow tick keeps an idle agent near 0 CPU.
                wait = 0.02 if stopping else min(1.0, self.config.stuck_poll_s / 4)
                if delivery.retry_at:
                    wait = min(wait, max(0.0, delivery.retry_at - self._clock()))
                if self._wake.wait(wait):
                    self._wake.clear()
        remaining = max(0.0, self._delivery_deadline - self._clock())
        delivery.close(min(remaining, 2.0))

    def _after_delivery_step(self, delivery: _Delivery) -> None:
        for events, seconds in delivery.replayed:
            self._agent_event(
                "spool_replayed",
                message=f"replayed {events} spooled event(s) after {seconds:.1f}s of backlog",
                count=events,
            )
        delivery.replayed.clear()
        self._check_stuck()

    # ----------------------------------------------------------------- tasks

    def _run_task(self, name: str, fn: Callable[[], int]) -> None:
        """Run one source under the error-streak logic, timing its thread CPU."""
        stats = self._stats[name]
        started_cpu = time.thread_time()
        with self._state_lock:
            self._current = (name, self._clock(), False)
        try:
            events = fn()
        except Exception as exc:
            self._failed(name, exc, during="poll")
        else:
            stats.events += events
            self._succeeded(name)
        finally:
            with self._state_lock:
                self._current = None
            stats.polls += 1
            stats.cpu_s += time.thread_time() - started_cpu

    def _poll_task(self, collector: Collector) -> None:
        def poll() -> int:
            events = collector.poll(self.factory.clock_ns())
            self._ingest(events)
            return len(events)

        self._run_task(collector.name, poll)

    def _heartbeat_task(self) -> None:
        def beat() -> int:
            payload = Heartbeat(
                agent=self.config.agent_name,
                agent_version=self.version,
                seq=self._hb_seq,
                interval_s=self.config.heartbeat_interval_s,
            )
            self._hb_seq += 1
            self._ingest([self.factory.make(HeartbeatEvent, payload)])
            return 1

        self._run_task("heartbeat", beat)

    def _inventory_task(self) -> None:
        def check() -> int:
            fields = dict(self.inventory.read())
            fields.pop("fingerprint", None)
            fingerprint = inventory_fingerprint(fields)
            if fingerprint == self._inventory_fp:
                return 0
            payload = NodeInventory.model_validate({**fields, "fingerprint": fingerprint})
            self._ingest([self.factory.make(NodeInventoryEvent, payload)])
            if self._inventory_fp is not None:
                log.info(
                    "node inventory changed: fingerprint %s -> %s", self._inventory_fp, fingerprint
                )
            self._inventory_fp = fingerprint
            return 1

        self._run_task("inventory", check)

    # ----------------------------------------------------------------- error streaks

    def _failed(self, name: str, exc: BaseException, during: str) -> None:
        message = f"{type(exc).__name__}: {exc}"
        with self._state_lock:
            stats = self._stats.setdefault(name, CollectorStats(name))
            stats.errors += 1
            stats.streak += 1
            stats.last_error = message
            first = not stats.failing
            stats.failing = True
        if first:
            self._collector_errors += 1
            log.warning("collector %s failed during %s: %s", name, during, message)
            self._agent_event(
                "collector_error",
                collector=name,
                count=1,
                message=f"{during}: {message}"[:16_000],
            )
        else:
            log.debug("collector %s still failing: %s", name, message)

    def _succeeded(self, name: str) -> None:
        with self._state_lock:
            stats = self._stats[name]
            if not stats.failing:
                return
            streak, stats.streak, stats.failing = stats.streak, 0, False
        log.info("collector %s recovered after %d failed poll(s)", name, streak)
        self._agent_event(
            "collector_recovered",
            collector=name,
            count=streak,
            message=f"recovered after {streak} failed poll(s)",
        )

    def _check_stuck(self) -> None:
        with self._state_lock:
            current = self._current
            if current is None:
                return
            name, started, reported = current
            elapsed = self._clock() - started
            if reported or elapsed < self.config.stuck_poll_s:
                return
            self._current = (name, started, True)
        self._failed(name, TimeoutError(f"poll still running after {elapsed:.0f}s"), during="poll")

    # ----------------------------------------------------------------- ingest

    def _emit_from(self, name: str, events: Sequence[Event]) -> None:
        """The ``emit`` handed to event-driven collectors (thread-safe)."""
        stats = self._stats.get(name)
        if stats is not None:
            stats.events += len(events)
        self._ingest(events)

    def _agent_event(
        self, event_type: AgentEventType, *, collector: str = "", count: int = 0, message: str = ""
    ) -> None:
        payload = AgentEvent(
            event_type=event_type,
            agent=self.config.agent_name,
            collector=collector,
            count=count,
            message=message,
        )
        self._ingest([self.factory.make(AgentEventEvent, payload)])

    def _ingest(self, events: Sequence[Event]) -> None:
        """Serialise per (kind, key) batch and append to the spool: the write-ahead step."""
        if not events:
            return
        with self._ingest_lock:
            self._sampled += len(events)
            if self._tap is not None:
                self._tap(events)
            spool = self.spool
            if spool is None or spool.closed:
                self._lost += len(events)
                log.error("agent not running: %d event(s) not spooled", len(events))
                return
            self._append(spool, events)
            dropped = spool.dropped_events
            if dropped > self._reported_dropped:
                delta = dropped - self._reported_dropped
                self._reported_dropped = dropped  # before appending: a drop it causes is next
                overflow = self.factory.make(
                    AgentEventEvent,
                    AgentEvent(
                        event_type="spool_overflow",
                        agent=self.config.agent_name,
                        count=delta,
                        message=(
                            f"spool full ({spool.max_bytes} bytes): dropped the {delta} oldest "
                            f"undelivered event(s); {dropped} since start"
                        ),
                    ),
                )
                self._sampled += 1
                if self._tap is not None:
                    self._tap([overflow])
                self._append(spool, [overflow])
        self._wake.set()

    def _append(self, spool: Spool, events: Sequence[Event]) -> None:
        for kind, key, batch in batch_events(events, self.config.kafka.max_batch_events):
            data = dump_events(batch)
            try:
                spool.append(data, len(batch), meta=kind.encode() + b"\n" + key)
            except (RecordTooLargeError, OSError) as exc:  # OSError: disk full, I/O error
                self._lost += len(batch)
                log.error("batch of %d %s event(s) not spooled: %s", len(batch), kind, exc)
                continue
            self._spooled += len(batch)

    # ----------------------------------------------------------------- introspection

    def stats(self) -> AgentStats:
        spool = self.spool
        delivery = self._delivery
        spool_stats = spool.stats() if spool is not None and not spool.closed else None
        skipped = {t.name: t.skipped for t in self.scheduler.tasks}
        with self._state_lock:
            collectors = tuple(
                replace(s, skipped_ticks=skipped.get(s.name, 0)) for s in self._stats.values()
            )
        return AgentStats(
            sampled=self._sampled,
            spooled=self._spooled,
            published=delivery.published if delivery else 0,
            delivered=delivery.delivered if delivery else 0,
            dropped=(spool_stats.dropped_events if spool_stats else self._reported_dropped)
            + self._lost,
            rejected=delivery.rejected if delivery else 0,
            pending=spool_stats.pending_events if spool_stats else 0,
            spool_bytes=spool_stats.size_bytes if spool_stats else 0,
            in_flight_batches=len(delivery.inflight) if delivery else 0,
            delivery_failures=delivery.failures if delivery else 0,
            collector_errors=self._collector_errors,
            broker_ok=delivery.broker_ok if delivery else None,
            last_delivery_error=delivery.last_error if delivery else "",
            uptime_s=(self._clock() - self._started_at) if self._started_at is not None else 0.0,
            collectors=collectors,
        )


# ================================================================================== entry point


def run_agent(
    config_path: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    collectors: Iterable[CollectorSpec] = (),
    status: Callable[[AgentStats], None] | None = None,
    status_interval_s: float = 30.0,
    on_start: Callable[[Agent], None] | None = None,
    stop_event: threading.Event | None = None,
    install_signal_handlers: bool = True,
) -> AgentStats:
    """Load the config, run the agent until SIGTERM/SIGINT (or ``stop_event``), then stop it
    cleanly: collectors stopped, spool delivered within ``shutdown_timeout_s``, the rest
    persisted for the next start. Returns the final stats (the CLI then exits 0).

    ``status`` is called every ``status_interval_s`` with a stats snapshot, ``on_start`` once
    the agent runs. Signal handlers are installed only on the main thread and restored after.
    """
    config = AgentConfig.load(config_path, env)
    stop = stop_event or threading.Event()
    agent = Agent(config, collectors=collectors)
    previous: dict[signal.Signals, Any] = {}
    if install_signal_handlers and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        agent.start()
        if on_start is not None:
            on_start(agent)
        interval = status_interval_s if status is not None and status_interval_s > 0 else 3600.0
        while not stop.wait(interval):
            if status is not None:
                status(agent.stats())
    finally:
        final = agent.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return final
