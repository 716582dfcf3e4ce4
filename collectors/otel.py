"""Application spans: OpenTelemetry in the training process -> ``span/1`` events on Kafka.

Why OTel: training code (or a framework hook) already knows when a step, a forward pass or a
collective starts and ends, and whether it raised; the OTel SDK gives ids, parent links,
batching and exception events for free, and the same spans can also go to an OTel Collector
(decoded by ``rankscope.streams.otlp`` with the same mapping, ``rankscope.schemas.otel_mapping``).

Three layers, each usable alone:

* :func:`span_to_event`: pure conversion of a finished SDK span (testable without Kafka);
* :class:`KafkaSpanExporter`: an SDK ``SpanExporter`` publishing those events with the
  collectors' :class:`~collectors.publisher.Publisher` (one JSON array per batch and job);
* :class:`RankTracer`: a small API for training loops::

      with RankTracer.from_env(OtelExportConfig(publisher=PublisherConfig(bootstrap=...))) as t:
          for n in range(steps):
              with t.step(n):
                  with t.phase("data"):
                      batch = next(loader)
                  with t.phase("forward"):
                      ...

  Rank, local rank and job come from the launcher's environment (torchrun, Slurm, MPI; see
  :func:`~collectors.base.binding_from_environ`) and are put on the OTel ``Resource``, so they
  travel with every span by either path. An exception escaping a step or phase is recorded on
  the span (``exception`` event with rank, job and step) with an error status, and re-raised.

Attributes for runs and efficiency (issue 19; docs/reference.md "Runs" and "Efficiency"): on
the resource, ``rankscope.run_id``, ``rankscope.attempt`` (1-based; both copied onto every span)
and ``rankscope.model`` (the efficiency query's model), e.g. in the launcher
``OTEL_RESOURCE_ATTRIBUTES=rankscope.run_id=llama-0412,rankscope.attempt=2,rankscope.model=x``;
on each step span, the step's global batch as ``rankscope.samples`` and ``rankscope.tokens``
(any rank may set them)::

      with t.step(n) as span:
          loss = train_step(batch)
          span.set_attribute("rankscope.samples", global_batch_size)
          span.set_attribute("rankscope.tokens", global_batch_size * seq_len)
          if n % 500 == 0:
              with t.phase("checkpoint"):   # its step (n) is the step saved
                  save_checkpoint(n)
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span as ApiSpan
from opentelemetry.trace import Status, StatusCode
from pydantic import BaseModel, ConfigDict, Field

from rankscope.collectors.base import JobBinding, binding_from_environ
from rankscope.collectors.publisher import Publisher, PublisherConfig
from rankscope.redaction.source import SourceRedaction, SourceRedactionConfig
from rankscope.schemas.envelope import new_event_id
from rankscope.schemas.events import AgentEventEvent, Event, SpanEvent
from rankscope.schemas.otel_mapping import (
    ATTR_CLUSTER,
    ATTR_JOB_ID,
    ATTR_LOCAL_RANK,
    ATTR_NODE,
    ATTR_PHASE,
    ATTR_RANK,
    ATTR_STEP,
    ATTR_WORLD_SIZE,
    PHASES,
    IdentityDefaults,
    OtelEvent,
    OtelSpan,
    SpanMappingError,
    StatusText,
    build_span_event,
)
from rankscope.schemas.payloads import AgentEvent, AttrValue, SpanPhase

__all__ = [
    "ExporterStats",
    "KafkaSpanExporter",
    "OtelExportConfig",
    "RankTracer",
    "SpanMappingError",
    "SpanPublisher",
    "identity_defaults",
    "resource_attributes",
    "span_to_event",
]

log = logging.getLogger(__name__)

DEFAULT_CLUSTER = "default"
EXPORTER_NAME = "rankscope-otel-exporter"  # the agent field of its redaction report events
STEP_SPAN_NAME = "train_step"  # what the simulator calls it too
_STATUS: dict[StatusCode, StatusText] = {
    StatusCode.UNSET: "unset",
    StatusCode.OK: "ok",
    StatusCode.ERROR: "error",
}


class OtelExportConfig(BaseModel):
    """Typed config of the span exporter and of :meth:`RankTracer.from_env`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    publisher: PublisherConfig
    cluster: str | None = Field(
        default=None, max_length=256, description="None: $RANKSCOPE_CLUSTER, else 'default'."
    )
    node: str | None = Field(
        default=None,
        max_length=256,
        description=(
            "Node of this process's spans (RankTracer puts it on the resource as "
            "rankscope.node); for other spans only a fallback after k8s.node.name/host.name. "
            "None: $RANKSCOPE_NODE, else the host name."
        ),
    )
    job_id: str | None = Field(
        default=None, max_length=256, description="Overrides the job id found in the env."
    )
    service_name: str = Field(default="rankscope-train", min_length=1)
    schedule_delay_ms: int = Field(default=500, ge=1, description="BatchSpanProcessor delay.")
    max_export_batch_size: int = Field(default=512, ge=1)
    max_queue_size: int = Field(default=8192, ge=1)
    flush_timeout_s: float = Field(
        default=10.0, gt=0, description="Longest force_flush/shutdown waits for Kafka acks."
    )
    redaction: SourceRedactionConfig = Field(
        default_factory=SourceRedactionConfig,
        description="Redaction of span text (names, status, attributes) before producing; on "
        "by default, redaction.enabled=False turns it off.",
    )


class SpanPublisher(Protocol):
    """What the exporter needs of :class:`~collectors.publisher.Publisher` (a test seam)."""

    def publish(self, events: Iterable[Event]) -> object: ...

    def flush(self, timeout_s: float = ...) -> object: ...

    def close(self, timeout_s: float = ...) -> None: ...


@dataclass(slots=True)
class ExporterStats:
    """Counted, never silent: spans handed to Kafka, refused by the mapping, failed batches."""

    spans_published: int = 0
    spans_rejected: int = 0
    export_failures: int = 0
    last_error: str | None = None


# ---------------------------------------------------------------------------- conversion


def _resolve_cluster(config_cluster: str | None, env: Mapping[str, str]) -> str:
    return config_cluster or env.get("RANKSCOPE_CLUSTER") or DEFAULT_CLUSTER


def identity_defaults(
    *,
    cluster: str = DEFAULT_CLUSTER,
    node: str | None = None,
    binding: JobBinding | None = None,
    job_id: str | None = None,
) -> IdentityDefaults:
    """Fallback identity for spans whose attributes and resource do not say."""
    return IdentityDefaults(
        cluster=cluster,
        node=node or socket.gethostname() or "unknown",
        job_id=job_id if job_id is not None else (binding.job_id if binding else ""),
        rank=binding.rank if binding else None,
        local_rank=binding.local_rank if binding else None,
    )


def _otel_span(span: ReadableSpan) -> OtelSpan:
    ctx = span.get_span_context()
    if ctx is None:
        raise SpanMappingError("span has no span context")
    parent = span.parent
    status = span.status
    return OtelSpan(
        name=span.name,
        trace_id=ctx.trace_id.to_bytes(16, "big"),
        span_id=ctx.span_id.to_bytes(8, "big"),
        parent_span_id=parent.span_id.to_bytes(8, "big") if parent is not None else b"",
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        status=_STATUS.get(status.status_code, "unset"),
        status_message=status.description or "",
        attributes=dict(span.attributes or {}),
        resource=dict(span.resource.attributes),
        events=[OtelEvent(e.name, dict(e.attributes or {})) for e in span.events],
    )


def span_to_event(
    span: ReadableSpan,
    *,
    cluster: str = DEFAULT_CLUSTER,
    node: str | None = None,
    binding: JobBinding | None = None,
    job_id: str | None = None,
    observed_ns: int | None = None,
) -> SpanEvent:
    """The ``span/1`` event of a finished SDK span (raises :class:`SpanMappingError`).

    Span and resource attributes win over ``cluster``/``node``/``binding``/``job_id``, which
    are only fallbacks (``node`` None: this host's name). See ``rankscope.schemas.otel_mapping``.
    """
    defaults = identity_defaults(cluster=cluster, node=node, binding=binding, job_id=job_id)
    observed = time.time_ns() if observed_ns is None else observed_ns
    return build_span_event(_otel_span(span), defaults=defaults, observed_ns=observed)


# ---------------------------------------------------------------------------- exporter


class KafkaSpanExporter(SpanExporter):
    """OTel SDK exporter: finished spans -> ``span/1`` events -> Kafka via the Publisher.

    ``export`` only enqueues into librdkafka (the BatchSpanProcessor must not block on acks);
    delivery is confirmed by ``force_flush``/``shutdown``, which wait at most
    ``config.flush_timeout_s``. Spans the mapping refuses are counted and logged, not sent.
    """

    def __init__(
        self,
        config: OtelExportConfig,
        *,
        publisher: SpanPublisher | None = None,
        env: Mapping[str, str] | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        env = os.environ if env is None else env
        self.config = config
        self.defaults = identity_defaults(
            cluster=_resolve_cluster(config.cluster, env),
            node=config.node or env.get("RANKSCOPE_NODE"),
            binding=binding_from_environ(env),
            job_id=config.job_id,
        )
        self.stats = ExporterStats()
        self._clock_ns = clock_ns
        self._publisher: SpanPublisher = (
            publisher if publisher is not None else Publisher(config.publisher)
        )
        self._lock = threading.Lock()  # export (worker thread) vs flush (caller thread)
        self._closed = False
        self.redaction = (
            SourceRedaction(config.redaction, stage="exporter", origin=self.defaults.node)
            if config.redaction.enabled
            else None
        )

    @property
    def publisher(self) -> SpanPublisher:
        return self._publisher

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Convert and enqueue; FAILURE when closed or when Kafka refused the batch."""
        if self._closed:
            return SpanExportResult.FAILURE
        now = self._clock_ns()
        events: list[SpanEvent] = []
        for span in spans:
            try:
                events.append(
                    build_span_event(_otel_span(span), defaults=self.defaults, observed_ns=now)
                )
            except SpanMappingError as exc:
                self.stats.spans_rejected += 1
                self.stats.last_error = f"span {span.name!r} refused: {exc}"
                log.warning("span not exported: %s", self.stats.last_error)
        if not events:
            return SpanExportResult.SUCCESS
        published: Sequence[Event] = events
        if self.redaction is not None:  # fails closed inside: never raises, never passes raw
            published = self.redaction.publishable(events, self._report, agent=EXPORTER_NAME)
        with self._lock:
            try:
                self._publisher.publish(published)
            except Exception as exc:  # KafkaException, closed publisher, ...: counted, reported
                self.stats.export_failures += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("span batch of %d not published: %s", len(events), exc)
                return SpanExportResult.FAILURE
        self.stats.spans_published += len(events)
        return SpanExportResult.SUCCESS

    def _report(self, payload: AgentEvent) -> AgentEventEvent:
        """The event carrying the exporter's redaction counts (node-level, this process's)."""
        now = self._clock_ns()
        d = self.defaults
        return AgentEventEvent(
            event_id=new_event_id(),
            schema_id="agent_event/1",
            kind="agent_event",
            cluster=d.cluster,
            node=d.node,
            job_id=d.job_id,
            rank=d.rank,
            ts=now,
            observed_ts=now,
            payload=payload,
        )

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait for Kafka to acknowledge what was exported; False if anything was lost."""
        if self._closed:
            return False
        timeout_s = min(self.config.flush_timeout_s, max(timeout_millis, 0) / 1000)
        with self._lock:
            try:
                self._publisher.flush(timeout_s)
            except Exception as exc:  # PublishError, closed publisher: SDK hooks must not raise
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("span delivery incomplete: %s", exc)
                return False
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Flush (bounded) and close the producer; later exports fail fast."""
        if self._closed:
            return
        self.force_flush(timeout_millis)
        self._closed = True
        with self._lock:
            try:
                self._publisher.close(min(self.config.flush_timeout_s, 5.0))
            except Exception as exc:
                log.warning("span publisher did not close cleanly: %s", exc)


# ---------------------------------------------------------------------------- tracer API


def resource_attributes(config: OtelExportConfig, env: Mapping[str, str]) -> dict[str, str | int]:
    """Resource attributes that identify this training process (rank, job, host, cluster)."""
    binding = binding_from_environ(env)
    attrs: dict[str, str | int] = {
        "service.name": config.service_name,
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        ATTR_CLUSTER: _resolve_cluster(config.cluster, env),
    }
    node = config.node or env.get("RANKSCOPE_NODE")
    if node:
        attrs[ATTR_NODE] = node
    job = config.job_id if config.job_id is not None else (binding.job_id if binding else "")
    if job:
        attrs[ATTR_JOB_ID] = job
    if binding is not None:
        if binding.rank is not None:
            attrs[ATTR_RANK] = binding.rank
        if binding.local_rank is not None:
            attrs[ATTR_LOCAL_RANK] = binding.local_rank
        if binding.world_size is not None:
            attrs[ATTR_WORLD_SIZE] = binding.world_size
        if binding.pod:
            attrs["k8s.pod.name"] = binding.pod
    return attrs


class RankTracer:
    """Step and phase spans for one training process, on an OTel ``TracerProvider``.

    Use :meth:`from_env` in training code; the constructor takes any provider (tests give one
    with an in-memory exporter). Nest phases inside a step: the phase span's parent is the step
    span and it carries the step number. Not a global provider: instrumentations of other
    libraries are not redirected to Kafka unless the caller sets ``provider`` globally.
    """

    def __init__(
        self,
        provider: TracerProvider,
        *,
        exporter: SpanExporter | None = None,
        identity: Mapping[str, AttrValue] | None = None,
    ) -> None:
        self.provider = provider
        self.exporter = exporter
        self.identity: dict[str, AttrValue] = dict(identity or {})
        self._tracer = provider.get_tracer("rankscope.collectors.otel")
        self._step: ContextVar[int | None] = ContextVar(f"rankscope_step_{id(self)}", default=None)

    @classmethod
    def from_env(
        cls,
        config: OtelExportConfig,
        *,
        env: Mapping[str, str] | None = None,
        exporter: SpanExporter | None = None,
        publisher: SpanPublisher | None = None,
    ) -> RankTracer:
        """A tracer whose spans go through a BatchSpanProcessor to ``exporter`` (default: a
        :class:`KafkaSpanExporter` from ``config``), identified by the launcher's env."""
        env = os.environ if env is None else env
        attrs = resource_attributes(config, env)
        if exporter is None:
            exporter = KafkaSpanExporter(config, publisher=publisher, env=env)
        provider = TracerProvider(resource=Resource.create(attrs))
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                max_queue_size=config.max_queue_size,
                schedule_delay_millis=config.schedule_delay_ms,
                max_export_batch_size=min(config.max_export_batch_size, config.max_queue_size),
            )
        )
        identity = {
            k: v for k, v in attrs.items() if k in (ATTR_RANK, ATTR_LOCAL_RANK, ATTR_JOB_ID)
        }
        return cls(provider, exporter=exporter, identity=identity)

    # -------------------------------------------------------------- spans

    @contextmanager
    def step(
        self, step: int, *, name: str = STEP_SPAN_NAME, **attributes: AttrValue
    ) -> Iterator[ApiSpan]:
        """One training step (a root span); phases opened inside are its children."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        token = self._step.set(step)
        try:
            with self._span(name, "step", step, attributes) as span:
                yield span
        finally:
            self._step.reset(token)

    @contextmanager
    def phase(
        self, phase: SpanPhase, *, name: str | None = None, **attributes: AttrValue
    ) -> Iterator[ApiSpan]:
        """One phase (data, forward, backward, optimizer, collective, checkpoint, other)."""
        if phase not in PHASES or phase == "step":
            allowed = ", ".join(sorted(PHASES - {"step"}))
            raise ValueError(f"phase must be one of {allowed} (use step() for steps)")
        with self._span(name or phase, phase, self._step.get(), attributes) as span:
            yield span

    @property
    def current_step(self) -> int | None:
        return self._step.get()

    @contextmanager
    def _span(
        self, name: str, phase: str, step: int | None, attributes: Mapping[str, AttrValue]
    ) -> Iterator[ApiSpan]:
        attrs: dict[str, AttrValue] = {**attributes, ATTR_PHASE: phase}
        if step is not None:
            attrs[ATTR_STEP] = step
        with self._tracer.start_as_current_span(
            name, attributes=attrs, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except GeneratorExit:
                raise
            except BaseException as exc:
                # Recorded here rather than by the SDK so the event says who and when.
                event_attrs: dict[str, AttrValue] = dict(self.identity)
                if step is not None:
                    event_attrs[ATTR_STEP] = step
                span.record_exception(exc, attributes=event_attrs, escaped=True)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise
            else:
                unset = not isinstance(span, ReadableSpan) or (
                    span.status.status_code is StatusCode.UNSET
                )
                if unset:
                    span.set_status(Status(StatusCode.OK))

    # -------------------------------------------------------------- lifecycle

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every ended span and wait for Kafka's acks (BatchSpanProcessor's own
        force_flush does not reach the exporter's)."""
        ok = self.provider.force_flush(timeout_millis)
        if self.exporter is not None:
            ok = self.exporter.force_flush(timeout_millis) and ok
        return ok

    def shutdown(self) -> None:
        """Export what is left, flush and close (idempotent). Call it before a worker exits:
        multiprocessing children skip atexit handlers."""
        self.provider.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()
