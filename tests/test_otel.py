"""OTel spans -> span/1 events: the SDK mapping, the tracer API, the exporter, the OTLP decoder.

Unit tests without a broker: the exporter gets a recording publisher (the Publisher's own wire
behaviour is tested in test_publisher_unit and the integration suite). OTLP bytes are built
with the real opentelemetry-proto classes and with the SDK's own OTLP encoder.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, TracesData
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags
from pydantic import ValidationError

from rankscope.collectors.base import JobBinding
from rankscope.collectors.otel import (
    KafkaSpanExporter,
    OtelExportConfig,
    RankTracer,
    SpanMappingError,
    span_to_event,
)
from rankscope.collectors.publisher import Publisher, PublisherConfig, PublishError, PublisherStats
from rankscope.schemas import EVENT_LIST_ADAPTER, Event, SpanEvent, dump_events
from rankscope.schemas.otel_mapping import MAX_ATTR_VALUE_CHARS, MAX_ATTRIBUTES
from rankscope.schemas.payloads import Span
from rankscope.streams.otlp import OtlpDecodeError, decode_otlp_traces

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000_000_000
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
SPAN = 0x00F067AA0BA902B7
PARENT = 0x1111111111111111
OBSERVED = T0 + 5_000_000_000
CONFIG = OtelExportConfig(
    publisher=PublisherConfig(bootstrap="127.0.0.1:1"), cluster="c1", node="node-a"
)
RANK_ENV = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "RANKSCOPE_JOB_ID": "job-7"}


def readable(
    name: str = "forward",
    *,
    attributes: dict[str, Any] | None = None,
    resource: dict[str, Any] | None = None,
    events: Iterable[SdkEvent] = (),
    status: Status | None = None,
    trace_id: int = TRACE,
    span_id: int = SPAN,
    parent: int | None = PARENT,
    start: int | None = T0,
    end: int | None = T0 + 250_000_000,
) -> ReadableSpan:
    """A finished SDK span with exactly the given fields (Resource() adds no defaults)."""
    flags = TraceFlags(TraceFlags.SAMPLED)
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
        parent=SpanContext(trace_id, parent, is_remote=False) if parent is not None else None,
        resource=Resource(resource or {}),
        attributes=attributes or {},
        events=tuple(events),
        status=status or Status(StatusCode.UNSET),
        start_time=start,
        end_time=end,
    )


def exception_event(etype: str = "RuntimeError", message: str = "boom") -> SdkEvent:
    return SdkEvent(
        "exception",
        {
            "exception.type": etype,
            "exception.message": message,
            "exception.stacktrace": "Traceback (most recent call last):\n  ...\n" + "x" * 3000,
            "exception.escaped": "True",
        },
        timestamp=T0 + 200_000_000,
    )


class RecordingPublisher:
    """Records what the exporter hands to Kafka; can be told to fail."""

    def __init__(
        self, publish_error: Exception | None = None, flush_error: Exception | None = None
    ) -> None:
        self.batches: list[list[Event]] = []
        self.flushes: list[float] = []
        self.closed = False
        self.publish_error = publish_error
        self.flush_error = flush_error

    def publish(self, events: Iterable[Event]) -> None:
        if self.publish_error is not None:
            raise self.publish_error
        self.batches.append(list(events))

    def flush(self, timeout_s: float = 30.0) -> None:
        self.flushes.append(timeout_s)
        if self.flush_error is not None:
            raise self.flush_error

    def close(self, timeout_s: float = 5.0) -> None:
        self.closed = True

    @property
    def events(self) -> list[SpanEvent]:
        return [e for batch in self.batches for e in batch if isinstance(e, SpanEvent)]


def memory_tracer(env: dict[str, str] | None = None) -> tuple[RankTracer, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracer = RankTracer.from_env(CONFIG, env=RANK_ENV if env is None else env, exporter=memory)
    return tracer, memory


# ------------------------------------------------------------------------------ span_to_event


def test_span_to_event_maps_identity_phase_step_and_ids() -> None:
    span = readable(
        "fwd",
        attributes={"rankscope.phase": "forward", "rankscope.step": 12, "micro_batches": 4},
        resource={
            "rankscope.rank": 3,
            "rankscope.local_rank": 3,
            "rankscope.job_id": "job-9",
            "rankscope.cluster": "east",
            "host.name": "gpu-node-17",
            "service.name": "trainer",
            "rankscope.world_size": 16,
        },
        status=Status(StatusCode.OK),
    )
    ev = span_to_event(span, cluster="fallback", node="fallback-node", observed_ns=OBSERVED)
    assert (ev.kind, ev.schema_id, ev.cluster, ev.node) == ("span", "span/1", "east", "gpu-node-17")
    assert (ev.job_id, ev.rank, ev.local_rank, ev.gpu) == ("job-9", 3, 3, None)
    assert ev.ts == T0 + 250_000_000 and ev.observed_ts == OBSERVED
    p = ev.payload
    assert (p.name, p.phase, p.step, p.status) == ("fwd", "forward", 12, "ok")
    assert p.trace_id == f"{TRACE:032x}" and p.span_id == f"{SPAN:016x}"
    assert p.parent_span_id == f"{PARENT:016x}"
    assert ev.event_id == p.trace_id + p.span_id  # deterministic: re-exports dedupe downstream
    assert (p.start_ns, p.end_ns) == (T0, T0 + 250_000_000)
    # resource context first, then the span's own; the consumed rankscope.* keys are not repeated
    assert p.attributes == {
        "service.name": "trainer",
        "rankscope.world_size": 16,
        "micro_batches": 4,
    }


def test_phase_falls_back_to_the_name_then_other() -> None:
    assert span_to_event(readable("backward")).payload.phase == "backward"
    assert span_to_event(readable("my_phase")).payload.phase == "other"
    odd = span_to_event(readable("collective", attributes={"rankscope.phase": "warmup"}))
    assert odd.payload.phase == "collective"
    assert odd.payload.attributes["rankscope.phase"] == "warmup"  # not understood: kept
    assert span_to_event(readable(attributes={"rankscope.step": "7"})).payload.step == 7
    bad_step = span_to_event(readable(attributes={"rankscope.step": -1}))
    assert bad_step.payload.step is None and bad_step.payload.attributes["rankscope.step"] == -1


def test_span_attributes_beat_resource_then_fallbacks_apply() -> None:
    span = readable(
        attributes={"rankscope.rank": 5},
        resource={"rankscope.rank": 4, "rank": 9, "k8s.node.name": "n7", "host.name": "pod-x"},
    )
    binding = JobBinding(job_id="slurm-42", rank=0, local_rank=2)
    ev = span_to_event(span, cluster="c9", node="ignored", binding=binding)
    assert (ev.rank, ev.local_rank, ev.job_id) == (5, 2, "slurm-42")
    assert (ev.node, ev.cluster) == ("n7", "c9")  # the machine, not the pod's host name
    bare = span_to_event(readable(), cluster="c9", node="fallback-node")
    assert (bare.node, bare.rank, bare.job_id) == ("fallback-node", None, "")
    plain = span_to_event(readable(resource={"rank": "11", "job_id": 12345}))
    assert (plain.rank, plain.job_id) == (11, "12345")


def test_exception_event_fills_error_fields() -> None:
    span = readable(
        events=[
            SdkEvent("checkpoint_saved", {}),
            exception_event("torch.OutOfMemoryError", "CUDA"),
        ],
        status=Status(StatusCode.ERROR, "OutOfMemoryError: CUDA"),
    )
    p = span_to_event(span).payload
    assert (p.status, p.error_type, p.error_message) == ("error", "torch.OutOfMemoryError", "CUDA")
    stack = p.attributes["exception.stacktrace"]
    assert isinstance(stack, str) and len(stack) == MAX_ATTR_VALUE_CHARS and stack.endswith("x")
    only_status = span_to_event(readable(status=Status(StatusCode.ERROR, "NCCL timeout")))
    assert only_status.payload.error_message == "NCCL timeout"
    assert only_status.payload.error_type == ""


def test_error_fields_are_truncated_to_the_schema() -> None:
    span = readable(events=[exception_event("E" * 1000, "m" * 20_000)])
    p = span_to_event(span).payload
    assert len(p.error_type) == 256 and len(p.error_message) == 16_384


def test_attributes_are_scalars_bounded_and_truncated() -> None:
    attrs: dict[str, Any] = {f"a{i:03d}": i for i in range(100)}
    attrs = {
        "list": [1, 2],
        "nan": float("nan"),
        "inf": float("inf"),
        "k" * 300: "long key",
        "text": "v" * 5000,
        "flag": True,
        "ratio": 0.5,
        **attrs,
    }
    p = span_to_event(readable(attributes=attrs)).payload
    assert len(p.attributes) == MAX_ATTRIBUTES
    assert "list" not in p.attributes and "nan" not in p.attributes and "inf" not in p.attributes
    assert p.attributes["k" * 256] == "long key"
    assert p.attributes["text"] == "v" * MAX_ATTR_VALUE_CHARS
    assert p.attributes["flag"] is True and p.attributes["ratio"] == 0.5
    # the mapping's bound is the schema's bound
    with pytest.raises(ValidationError):
        Span.model_validate(
            {**p.model_dump(), "attributes": {f"x{i}": i for i in range(MAX_ATTRIBUTES + 1)}}
        )
    # the event survives the wire format unchanged (what the validate stage will parse)
    ev = span_to_event(readable(attributes=attrs), observed_ns=OBSERVED)
    assert EVENT_LIST_ADAPTER.validate_json(dump_events([ev])) == [ev]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"trace_id": 0}, "trace_id is all zeros"),
        ({"span_id": 0}, "span_id is all zeros"),
        ({"end": None}, "no end time"),
        ({"start": None}, "no start time"),
    ],
)
def test_unmappable_spans_raise_with_a_reason(kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(SpanMappingError, match=reason):
        span_to_event(readable(**kwargs))


# ------------------------------------------------------------------------------ RankTracer


def test_tracer_nests_phases_under_steps_with_identity() -> None:
    tracer, memory = memory_tracer()
    with tracer.step(3):
        with tracer.phase("data"):
            pass
        with tracer.phase("collective", name="nccl:all_reduce", bucket=2):
            assert tracer.current_step == 3
    assert tracer.current_step is None
    assert tracer.force_flush()
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert set(spans) == {"train_step", "data", "nccl:all_reduce"}
    step = spans["train_step"]
    step_ctx = step.get_span_context()
    assert step_ctx is not None and step.parent is None
    for child in (spans["data"], spans["nccl:all_reduce"]):
        ctx = child.get_span_context()
        assert child.parent is not None and child.parent.span_id == step_ctx.span_id
        assert ctx is not None and ctx.trace_id == step_ctx.trace_id
    events = {s.name: span_to_event(s) for s in spans.values()}
    assert {n: (e.payload.phase, e.payload.step) for n, e in events.items()} == {
        "train_step": ("step", 3),
        "data": ("data", 3),
        "nccl:all_reduce": ("collective", 3),
    }
    for e in events.values():
        assert (e.rank, e.local_rank, e.job_id, e.cluster, e.node) == (
            1,
            1,
            "job-7",
            "c1",
            "node-a",
        )
        assert e.payload.status == "ok"
        assert e.payload.attributes["rankscope.world_size"] == 2
    assert events["nccl:all_reduce"].payload.attributes["bucket"] == 2
    assert events["data"].payload.parent_span_id == events["train_step"].payload.span_id
    tracer.shutdown()


def test_exception_escaping_a_phase_is_recorded_on_phase_and_step_and_reraised() -> None:
    tracer, memory = memory_tracer()
    with pytest.raises(RuntimeError, match="NCCL watchdog"), tracer.step(4):
        with tracer.phase("forward"):
            pass
        with tracer.phase("backward"):
            raise RuntimeError("NCCL watchdog timed out")
    tracer.force_flush()
    spans = {s.name: s for s in memory.get_finished_spans()}
    for name in ("backward", "train_step"):
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR
        (exc,) = [e for e in span.events if e.name == "exception"]
        attrs = exc.attributes or {}
        assert attrs["rankscope.rank"] == 1 and attrs["rankscope.job_id"] == "job-7"
        assert attrs["rankscope.step"] == 4 and attrs["exception.type"] == "RuntimeError"
        p = span_to_event(span).payload
        assert (p.status, p.error_type, p.error_message) == (
            "error",
            "RuntimeError",
            "NCCL watchdog timed out",
        )
    assert span_to_event(spans["forward"]).payload.status == "ok"
    tracer.shutdown()


def test_tracer_rejects_bad_steps_and_phases() -> None:
    tracer, memory = memory_tracer()
    with pytest.raises(ValueError, match="step"), tracer.step(-1):
        pass
    with pytest.raises(ValueError, match="phase must be one of"), tracer.phase("step"):
        pass
    with tracer.phase("checkpoint"):  # outside a step: no step number
        pass
    tracer.force_flush()
    (span,) = memory.get_finished_spans()
    assert span_to_event(span).payload.step is None
    tracer.shutdown()


# ------------------------------------------------------------------------------ exporter


def test_exporter_publishes_tracer_spans_and_flushes_on_shutdown() -> None:
    fake = RecordingPublisher()
    with RankTracer.from_env(CONFIG, env=RANK_ENV, publisher=fake) as tracer:
        for n in range(2):
            with tracer.step(n), tracer.phase("forward"):
                pass
    assert fake.closed and fake.flushes
    events = fake.events
    assert len(events) == 4
    assert {(e.payload.phase, e.payload.step) for e in events} == {
        ("step", 0),
        ("forward", 0),
        ("step", 1),
        ("forward", 1),
    }
    assert {(e.rank, e.job_id, e.cluster, e.node) for e in events} == {(1, "job-7", "c1", "node-a")}
    exporter = tracer.exporter
    assert isinstance(exporter, KafkaSpanExporter)
    assert exporter.stats.spans_published == 4 and exporter.stats.spans_rejected == 0


def test_exporter_falls_back_to_the_process_env() -> None:
    fake = RecordingPublisher()
    config = OtelExportConfig(publisher=CONFIG.publisher)
    env = {"SLURM_JOB_ID": "991", "SLURM_PROCID": "5", "SLURM_LOCALID": "1"}
    exporter = KafkaSpanExporter(
        config, publisher=fake, env={**env, "RANKSCOPE_CLUSTER": "slurm-a"}, clock_ns=lambda: 7
    )
    assert exporter.export([readable(resource={"host.name": "h1"})]) is SpanExportResult.SUCCESS
    (ev,) = fake.events
    assert (ev.job_id, ev.rank, ev.local_rank, ev.cluster, ev.node) == (
        "991",
        5,
        1,
        "slurm-a",
        "h1",
    )
    assert ev.observed_ts == 7


def test_exporter_counts_rejected_spans_and_failed_batches() -> None:
    fake = RecordingPublisher()
    exporter = KafkaSpanExporter(CONFIG, publisher=fake, env={})
    result = exporter.export([readable(trace_id=0), readable()])
    assert result is SpanExportResult.SUCCESS and len(fake.events) == 1
    assert exporter.stats.spans_rejected == 1 and "trace_id" in (exporter.stats.last_error or "")

    failing = RecordingPublisher(publish_error=RuntimeError("publisher is closed"))
    broken = KafkaSpanExporter(CONFIG, publisher=failing, env={})
    assert broken.export([readable()]) is SpanExportResult.FAILURE
    assert broken.stats.export_failures == 1

    lossy = RecordingPublisher(flush_error=PublishError("2 messages failed", PublisherStats()))
    lost = KafkaSpanExporter(CONFIG, publisher=lossy, env={})
    assert lost.force_flush(60_000) is False
    assert lossy.flushes == [CONFIG.flush_timeout_s]  # bounded by the config
    lost.shutdown()
    assert lossy.closed and lost.export([readable()]) is SpanExportResult.FAILURE
    assert lost.force_flush() is False


def test_default_publisher_reports_undelivered_spans_instead_of_hanging() -> None:
    """The real Publisher against a port nothing listens on: export only enqueues, the bounded
    flush says the spans were not delivered."""
    config = CONFIG.model_copy(update={"flush_timeout_s": 0.5})
    exporter = KafkaSpanExporter(config, env={})
    assert isinstance(exporter.publisher, Publisher)
    assert exporter.export([readable()]) is SpanExportResult.SUCCESS
    started = time.monotonic()
    assert exporter.force_flush() is False
    assert "still queued" in (exporter.stats.last_error or "")
    exporter.shutdown()
    assert time.monotonic() - started < 10
    assert exporter.export([readable()]) is SpanExportResult.FAILURE


# ------------------------------------------------------------------------------ OTLP decode


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, bytes):
        return KeyValue(key=key, value=AnyValue(bytes_value=value))
    if isinstance(value, list):
        items = [AnyValue(int_value=v) for v in value]
        return KeyValue(key=key, value=AnyValue(array_value=ArrayValue(values=items)))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def pb_span(
    name: str, span_id: bytes, *, trace_id: bytes = bytes.fromhex(f"{TRACE:032x}"), **kw: Any
) -> PbSpan:
    return PbSpan(
        trace_id=trace_id,
        span_id=span_id,
        name=name,
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 1_000_000,
        **kw,
    )


def resource_spans(attrs: dict[str, Any], spans: list[PbSpan]) -> ResourceSpans:
    return ResourceSpans(
        resource=PbResource(attributes=[kv(k, v) for k, v in attrs.items()]),
        scope_spans=[ScopeSpans(spans=spans)],
    )


def two_ranks() -> TracesData:
    step_id = bytes.fromhex("aa" * 8)
    return TracesData(
        resource_spans=[
            resource_spans(
                {"host.name": "n0", "rankscope.rank": 0, "rankscope.job_id": "j1"},
                [
                    pb_span(
                        "train_step",
                        step_id,
                        attributes=[kv("rankscope.phase", "step"), kv("rankscope.step", 9)],
                        status=PbStatus(code=PbStatus.STATUS_CODE_OK),
                    ),
                    pb_span(
                        "forward",
                        bytes.fromhex("ab" * 8),
                        parent_span_id=step_id,
                        attributes=[
                            kv("rankscope.step", 9),
                            kv("shape", [1, 2]),
                            kv("blob", b"\x00"),
                            kv("lr", 0.001),
                        ],
                    ),
                ],
            ),
            resource_spans(
                {"host.name": "n1", "rank": 1, "job_id": "j1", "k8s.pod.name": "trainer-1"},
                [
                    pb_span(
                        "backward",
                        bytes.fromhex("bb" * 8),
                        status=PbStatus(code=PbStatus.STATUS_CODE_ERROR, message="boom"),
                        events=[
                            PbSpan.Event(
                                name="exception",
                                time_unix_nano=T0 + 10,
                                attributes=[
                                    kv("exception.type", "ValueError"),
                                    kv("exception.message", "boom"),
                                ],
                            )
                        ],
                    ),
                    pb_span("orphan", b""),
                    pb_span("short", bytes.fromhex("cc" * 4)),
                ],
            ),
        ]
    )


def test_decode_maps_resources_spans_and_exceptions() -> None:
    events, reasons = decode_otlp_traces(
        two_ranks().SerializeToString(), cluster_default="coll", observed_ns=OBSERVED
    )
    by_name = {e.payload.name: e for e in events}
    assert set(by_name) == {"train_step", "forward", "backward"}
    step, fwd, bwd = by_name["train_step"], by_name["forward"], by_name["backward"]
    assert (step.node, step.rank, step.job_id, step.cluster) == ("n0", 0, "j1", "coll")
    assert (step.payload.phase, step.payload.step, step.payload.status) == ("step", 9, "ok")
    assert fwd.payload.parent_span_id == step.payload.span_id == "aa" * 8
    assert (fwd.payload.phase, fwd.payload.step) == ("forward", 9)
    assert fwd.payload.attributes == {"lr": 0.001}  # array and bytes values are not scalars
    assert (bwd.node, bwd.rank, bwd.job_id) == ("n1", 1, "j1")
    assert (bwd.payload.status, bwd.payload.error_type, bwd.payload.error_message) == (
        "error",
        "ValueError",
        "boom",
    )
    assert bwd.payload.attributes == {"k8s.pod.name": "trainer-1"}
    assert all(e.observed_ts == OBSERVED and e.ts == T0 + 1_000_000 for e in events)
    assert len(reasons) == 2
    assert reasons[0].startswith("resource_spans[1].scope_spans[0].spans[1]")
    assert "span_id has 0 bytes" in reasons[0] and "span_id has 4 bytes" in reasons[1]


def test_decode_reads_export_trace_service_request_bytes_too() -> None:
    data = two_ranks()
    request = ExportTraceServiceRequest(resource_spans=data.resource_spans)
    from_request = decode_otlp_traces(request.SerializeToString(), observed_ns=OBSERVED)
    assert from_request == decode_otlp_traces(data.SerializeToString(), observed_ns=OBSERVED)
    assert decode_otlp_traces(b"") == ([], [])


@pytest.mark.parametrize(
    "payload",
    [b"not protobuf", b'[{"schema": "span/1"}]', b"\x08\x01", b"\x0a\x05hello"],
)
def test_decode_refuses_what_is_not_otlp(payload: bytes) -> None:
    with pytest.raises(OtlpDecodeError, match="not an OTLP traces message"):
        decode_otlp_traces(payload)


def test_sdk_otlp_encoding_round_trips_to_the_exporters_events() -> None:
    tracer, memory = memory_tracer()
    with tracer.step(1), tracer.phase("forward", tokens=4096):
        pass
    with pytest.raises(ZeroDivisionError), tracer.step(2), tracer.phase("optimizer"):
        _ = 1 / 0
    tracer.force_flush()
    spans = memory.get_finished_spans()
    assert len(spans) == 4
    direct = [span_to_event(s, cluster="x", node="y", observed_ns=OBSERVED) for s in spans]
    wire = encode_spans(spans).SerializeToString()
    decoded, reasons = decode_otlp_traces(
        wire, cluster_default="x", node_default="y", observed_ns=OBSERVED
    )
    assert reasons == []
    assert sorted(decoded, key=lambda e: e.event_id) == sorted(direct, key=lambda e: e.event_id)
    assert any(e.payload.error_type == "ZeroDivisionError" for e in decoded)
    # ptrace.ProtoMarshaler's TracesData and the SDK's ExportTraceServiceRequest share a wire
    assert TracesData.FromString(wire).SerializeToString() == wire
    tracer.shutdown()


def test_streams_decoder_does_not_import_collectors_or_the_sdk() -> None:
    code = (
        "import sys, streams.otlp; "
        "bad = [m for m in sys.modules if m.startswith(('collectors', 'opentelemetry.sdk'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
