"""dcgm-exporter as a GPU source: its Prometheus text endpoint -> ``gpu_sample``/``gpu_event``.

Why: most GPU clusters already run dcgm-exporter (the GPU Operator deploys it); reading its page
gives the same ``gpu_sample`` events as the NVML collector without a second NVML client on the
node, plus DCGM's profiling values (SM active, SM occupancy, tensor/DRAM active, NVLink and PCIe
bytes/s) that NVML does not have. Run it *instead of* the ``gpu`` section on such nodes (both
would sample each GPU twice).

- ``config``: the agent's ``dcgm:`` section (URL, timeout, interval, pod name patterns);
- ``parsing``: page -> one reading per physical GPU (``prometheus_client``'s parser, DCGM's blank
  sentinels, MIG series, identity labels);
- ``mapping``: DCGM field -> ``gpu_sample`` field and unit (docs/dcgm-exporter.md);
- ``identity``: pod labels -> job/rank bindings in the agent's ``JobRegistry``;
- ``collector``: scrape, stamp, XID events, one-line errors.
"""

from rankscope.collectors.dcgm.collector import (
    SOURCE,
    DcgmCollector,
    DcgmScrapeError,
    DcgmStats,
    create_dcgm_collector,
)
from rankscope.collectors.dcgm.config import DEFAULT_POD_PATTERNS, DcgmCollectorConfig
from rankscope.collectors.dcgm.mapping import DIRECT_FIELDS, MAPPED, SUMMED_FIELDS
from rankscope.collectors.dcgm.parsing import DcgmPageError, GpuReading, ParsedPage, parse_page

__all__ = [
    "DEFAULT_POD_PATTERNS",
    "DIRECT_FIELDS",
    "MAPPED",
    "SOURCE",
    "SUMMED_FIELDS",
    "DcgmCollector",
    "DcgmCollectorConfig",
    "DcgmPageError",
    "DcgmScrapeError",
    "DcgmStats",
    "GpuReading",
    "ParsedPage",
    "create_dcgm_collector",
    "parse_page",
]
