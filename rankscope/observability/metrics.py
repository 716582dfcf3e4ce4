"""Every metric rankscope's processes export, declared once: name, kind, labels and help text.

Each long-running process (worker, sink, agent, recovery runner) gets its own
:class:`ProcessMetrics`: a private ``CollectorRegistry`` rather than prometheus-client's global
one, so several processes built in one interpreter (the tests) never collide. Counters are not
counted twice: the stages keep counting in their own stats objects as before, and a collector
reads those at scrape time (:meth:`ProcessMetrics.export`); only the histograms, which the
stats objects cannot hold, are prometheus-client objects the stages observe into.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["DEFAULT_PORTS", "METRICS", "MetricSpec", "ProcessMetrics", "Sample", "markdown_table"]

#: where each long-running role listens unless told otherwise (``--metrics-port``; -1: off)
DEFAULT_PORTS = {
    "worker": 9481,
    "sink": 9482,
    "agent": 9483,
    "runner": 9484,
    "validator": 9485,
}

Kind = Literal["counter", "gauge", "histogram"]
#: (metric name as declared, label values in the declared order, value)
Sample = tuple[str, tuple[str, ...], float]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric. Counter names carry no ``_total``: the exposition adds it."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_DELAY = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_ROWS = (1, 10, 100, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000)

_SPECS = (
    # -- every process -----------------------------------------------------------------------
    MetricSpec(
        "rankscope_up", "gauge", "1 while the process runs (its role as a label).", ("role",)
    ),
    MetricSpec(
        "rankscope_consumer_lag",
        "gauge",
        "Records on a partition not consumed yet (high watermark minus the consumer's position).",
        ("role", "topic", "partition"),
    ),
    # -- stream worker ------------------------------------------------------------------------
    MetricSpec(
        "rankscope_worker_records_in", "counter", "Raw records the validate stage read.", ("topic",)
    ),
    MetricSpec("rankscope_worker_events_valid", "counter", "Valid events sent downstream."),
    MetricSpec(
        "rankscope_worker_dead_letters",
        "counter",
        "Raw records (or parts) refused by validation, by reason code.",
        ("reason",),
    ),
    MetricSpec(
        "rankscope_worker_quarantined", "counter", "Events quarantined by the redaction stage."
    ),
    MetricSpec(
        "rankscope_worker_redaction_findings",
        "counter",
        "Values the redaction stage matched, by entity and the action taken.",
        ("entity", "action"),
    ),
    MetricSpec("rankscope_worker_window_records_in", "counter", "Event records the windows read."),
    MetricSpec("rankscope_worker_windows_emitted", "counter", "Rank windows emitted."),
    MetricSpec("rankscope_worker_late_events", "counter", "Events behind their closed window."),
    MetricSpec(
        "rankscope_worker_detections", "counter", "Detections published, by type.", ("type",)
    ),
    MetricSpec("rankscope_worker_incidents", "counter", "Incidents published."),
    MetricSpec(
        "rankscope_worker_recovery_events",
        "counter",
        "Recovery decisions and actions the decider published, by stage and action.",
        ("stage", "action"),
    ),
    MetricSpec("rankscope_worker_records_held", "gauge", "Records read but not acknowledged yet."),
    MetricSpec(
        "rankscope_worker_raw_pauses",
        "counter",
        "Times fetching the raw topics paused because the windows agent was behind.",
    ),
    MetricSpec(
        "rankscope_worker_events_parsed_again",
        "counter",
        "Events records the windows agent parsed because this worker no longer held them parsed.",
    ),
    MetricSpec(
        "rankscope_worker_handoff_not_held",
        "counter",
        "Events records the validate agent did not hand over parsed because the handoff was full.",
    ),
    MetricSpec(
        "rankscope_worker_handoff_held_events",
        "gauge",
        "Validated events held parsed for this worker's windows agent (bounded by the handoff).",
    ),
    MetricSpec(
        "rankscope_worker_window_close_delay_seconds",
        "histogram",
        "Wall clock at a window's emission minus the window's end (event time).",
        buckets=_DELAY,
    ),
    # -- ClickHouse sink ---------------------------------------------------------------------
    MetricSpec("rankscope_sink_records", "counter", "Kafka records the sink read."),
    MetricSpec("rankscope_sink_rows", "counter", "Rows stored, by table.", ("table",)),
    MetricSpec("rankscope_sink_batches", "counter", "Batches flushed to ClickHouse."),
    MetricSpec(
        "rankscope_sink_dead_letters",
        "counter",
        "Records the sink stored as dead letters itself, by reason.",
        ("reason",),
    ),
    MetricSpec("rankscope_sink_outages", "counter", "ClickHouse outages the sink waited out."),
    MetricSpec("rankscope_sink_outage_seconds", "counter", "Seconds spent waiting for ClickHouse."),
    MetricSpec("rankscope_sink_in_outage", "gauge", "1 while the sink waits for ClickHouse."),
    MetricSpec(
        "rankscope_sink_insert_seconds",
        "histogram",
        "Duration of one INSERT into ClickHouse.",
        ("table",),
        _SECONDS,
    ),
    MetricSpec("rankscope_sink_batch_rows", "histogram", "Rows per flushed batch.", buckets=_ROWS),
    # -- node agent ---------------------------------------------------------------------------
    MetricSpec("rankscope_agent_events", "counter", "Events sampled, by source.", ("source",)),
    MetricSpec("rankscope_agent_delivered", "counter", "Events the broker acknowledged."),
    MetricSpec("rankscope_agent_dropped", "counter", "Events dropped (spool full)."),
    MetricSpec("rankscope_agent_delivery_failures", "counter", "Batches the broker refused."),
    MetricSpec("rankscope_agent_collector_errors", "counter", "Failed collector polls."),
    MetricSpec("rankscope_agent_spool_events", "gauge", "Events waiting in the spool."),
    MetricSpec("rankscope_agent_spool_bytes", "gauge", "Size of the spool on disk."),
    # -- recovery runner ----------------------------------------------------------------------
    MetricSpec(
        "rankscope_runner_decisions",
        "counter",
        "Recovery decisions the actuator runner handled, by outcome.",
        ("outcome",),
    ),
)

#: the one table of metrics: name -> declaration
METRICS: dict[str, MetricSpec] = {s.name: s for s in _SPECS}


def markdown_table() -> str:
    """The README's list of metrics (a test keeps the README equal to it)."""
    rows = ["| metric | kind | labels | meaning |", "|---|---|---|---|"]
    for m in METRICS.values():
        name = f"{m.name}_total" if m.kind == "counter" else m.name
        labels = ", ".join(m.labels)
        rows.append(f"| `{name}` | {m.kind} | {labels} | {m.help} |")
    return "\n".join(rows) + "\n"


class _Snapshot(Collector):
    """Turns the samples a process's stats yield at scrape time into metric families."""

    def __init__(self, sample: Callable[[], Iterable[Sample]]) -> None:
        self._sample = sample

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for name, values, value in self._sample():
            spec = METRICS[name]
            family = families.get(name)
            if family is None:
                cls = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
                family = families[name] = cls(name, spec.help, labels=spec.labels)
            family.add_metric(list(values), value)
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the stats: collected at scrape time only


class ProcessMetrics:
    """One process's registry: its exported stats and its histograms."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.registry = CollectorRegistry(auto_describe=True)
        self._histograms: dict[str, Histogram] = {}

    def export(self, sample: Callable[[], Iterable[Sample]]) -> None:
        """Read ``sample()`` at every scrape (it runs on the HTTP server's thread: it must
        only read plain counters, never call into a client that is not thread-safe)."""
        role = self.role

        def with_up() -> Iterator[Sample]:
            yield "rankscope_up", (role,), 1.0
            yield from sample()

        self.registry.register(_Snapshot(with_up))

    def histogram(self, name: str) -> Histogram:
        """The declared histogram ``name``, registered once in this process's registry."""
        found = self._histograms.get(name)
        if found is None:
            spec = METRICS[name]
            if spec.kind != "histogram":
                raise ValueError(f"{name} is declared as a {spec.kind}, not a histogram")
            found = Histogram(
                name, spec.help, spec.labels, registry=self.registry, buckets=spec.buckets
            )
            self._histograms[name] = found
        return found
