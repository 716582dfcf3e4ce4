"""The collector registry: which module builds each agent config section, imported on first use.

Why a table of module paths rather than imports: a node without, say, the Kubernetes client
never imports it, and a section whose module cannot be loaded fails as a deployment error that
names the section (:class:`AgentConfigError`) instead of an ``ImportError`` at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from pydantic import BaseModel

from rankscope.collectors.base import Collector, CollectorConfig, EventFactory

__all__ = ["COLLECTORS", "AgentConfigError", "CollectorFactory", "CollectorSpec", "load_collector"]

#: section name -> (module, config class, factory). Factories are called as
#: ``factory(config, event_factory)``. Add an entry to support a new section; modules are
#: imported only when their section is configured.
COLLECTORS: dict[str, tuple[str, str, str]] = {
    "gpu": ("rankscope.collectors.gpu", "GpuCollectorConfig", "create_gpu_collector"),
    "dcgm": ("rankscope.collectors.dcgm", "DcgmCollectorConfig", "create_dcgm_collector"),
    "fabric": ("rankscope.collectors.fabric", "FabricCollectorConfig", "create_fabric_collector"),
    "nccl_log": (
        "rankscope.collectors.nccl_log",
        "NcclLogCollectorConfig",
        "create_nccl_log_collector",
    ),
    "kernel_log": (
        "rankscope.collectors.kernel_log",
        "KernelLogCollectorConfig",
        "create_kernel_log_collector",
    ),
    "slurm": ("rankscope.collectors.slurm", "SlurmCollectorConfig", "create_slurm_collector"),
    "kubernetes": (
        "rankscope.collectors.kubernetes",
        "KubernetesCollectorConfig",
        "create_kubernetes_collector",
    ),
}

CollectorFactory = Callable[..., Collector]
#: A ready-made collector, or a callable that builds one from the agent's EventFactory (so an
#: injected source stamps events with the agent's node, cluster and job registry).
CollectorSpec = Collector | Callable[[EventFactory], Collector]


class AgentConfigError(ValueError):
    """The agent's configuration is invalid or names a collector that cannot be loaded."""


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
