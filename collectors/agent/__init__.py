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

The package holds one module per part; the public names are re-exported here, so
``from rankscope.collectors.agent import Agent`` stays the import path:

* :mod:`~rankscope.collectors.agent.registry`: section name -> collector module, loaded lazily;
* :mod:`~rankscope.collectors.agent.config`: the typed YAML config and its environment overrides;
* :mod:`~rankscope.collectors.agent.inventory`: what the node runs (driver, CUDA, NCCL, ...);
* :mod:`~rankscope.collectors.agent.transport`: bytes to Kafka, one confirmation per batch;
* :mod:`~rankscope.collectors.agent.stats`: the counters the agent reports;
* :mod:`~rankscope.collectors.agent.ingest`: events -> batches -> spool (the write-ahead step);
* :mod:`~rankscope.collectors.agent.scheduling`: the poll scheduler and its thread's tasks;
* :mod:`~rankscope.collectors.agent.delivery`: spool -> Kafka on the delivery thread;
* :mod:`~rankscope.collectors.agent.runtime`: :class:`Agent`, which puts these together;
* :mod:`~rankscope.collectors.agent.run`: :func:`run_agent`, the CLI's entry point.
"""

from rankscope.collectors.agent.config import (
    AGENT_NAME,
    ENV_PREFIX,
    AgentConfig,
    SpoolConfig,
    agent_version,
    env_overrides,
)
from rankscope.collectors.agent.inventory import DefaultInventorySource, InventorySource
from rankscope.collectors.agent.registry import (
    COLLECTORS,
    AgentConfigError,
    CollectorFactory,
    CollectorSpec,
    load_collector,
)
from rankscope.collectors.agent.run import run_agent
from rankscope.collectors.agent.runtime import Agent
from rankscope.collectors.agent.scheduling import Scheduler
from rankscope.collectors.agent.stats import AgentStats, CollectorStats
from rankscope.collectors.agent.transport import (
    DeliveryCallback,
    DeliveryError,
    KafkaTransport,
    PermanentSendError,
    Transport,
    TransportFactory,
)

__all__ = [
    "AGENT_NAME",
    "COLLECTORS",
    "ENV_PREFIX",
    "Agent",
    "AgentConfig",
    "AgentConfigError",
    "AgentStats",
    "CollectorFactory",
    "CollectorSpec",
    "CollectorStats",
    "DefaultInventorySource",
    "DeliveryCallback",
    "DeliveryError",
    "InventorySource",
    "KafkaTransport",
    "PermanentSendError",
    "Scheduler",
    "SpoolConfig",
    "Transport",
    "TransportFactory",
    "agent_version",
    "env_overrides",
    "load_collector",
    "run_agent",
]
