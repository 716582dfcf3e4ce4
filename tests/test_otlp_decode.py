"""The OTel Collector's Kafka output, decoded: both encodings, traces and logs, and the split of
a record per job (pure functions; the path on a real broker is tests/test_otlp_collector.py).

Records are built the way the Collector's kafkaexporter writes them (tests/otlp_payloads.py); log
lines are real shapes (tests/data/otlp_collector/README.md names their sources)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from rankscope.collectors.base import EventFactory, JobBinding, JobRegistry
from rankscope.collectors.nccl_log import NcclLogCollectorConfig, create_nccl_log_collector
from rankscope.schemas.events import CommEventEvent, Event, SpanEvent
from rankscope.schemas.topics import Topics
from rankscope.streams.config import StreamsConfig, ValidationLimits
from rankscope.streams.otlp import OtlpDecodeError, decode_otlp_traces
from rankscope.streams.otlp.logs import decode_otlp_logs
from rankscope.streams.otlp.wire import content_type_of, detect_encoding
from rankscope.streams.sources import SourceOffsets, record_source, source_headers
from rankscope.streams.stages.validate import by_partition_key
from rankscope.streams.validate import RecordRef, validate_otlp_message
from tests.otlp_payloads import DATA, data_lines, encode, log_lines, logs, resource, span, traces

T0 = 1_760_000_000 * 10**9
OBSERVED = T0 + 60 * 10**9
ENCODINGS = ["otlp_proto", "otlp_json"]


def _spans(events: list[SpanEvent]) -> list[SpanEvent]:
    return sorted(events, key=lambda e: e.event_id)


# ---------------------------------------------------------------------------- topics and wire


def test_default_topics_are_the_collectors_and_are_configurable() -> None:
    t = Topics("p")
    assert t.all_raw == ["p.raw.events", "otlp_spans", "p.raw.otlp_spans", "otlp_logs"]
    assert (t.otlp_signal("otlp_spans"), t.otlp_signal("p.raw.otlp_spans")) == ("traces", "traces")
    assert t.otlp_signal("otlp_logs") == "logs"
    assert t.otlp_signal("p.raw.events") is None
    cfg = StreamsConfig(
        bootstrap="b", topic_prefix="p", otlp_traces_topics=["a"], otlp_logs_topics=["b", "a"]
    )
    assert cfg.topics.all_raw == ["p.raw.events", "a", "p.raw.otlp_spans", "b"]


def test_encoding_from_a_content_type_header_else_from_the_first_byte() -> None:
    assert detect_encoding(b' \n{"resourceSpans": []}') == "otlp_json"
    assert detect_encoding(b"\x0a\x00") == "otlp_proto"
    assert detect_encoding(b"{", "application/x-protobuf") == "otlp_proto"
    assert content_type_of([("Content-Type", b"application/json; charset=utf-8")]) == (
        "application/json"
    )
    assert content_type_of([("x", b"y")]) is None
    # a JSON record the operator labelled protobuf is tried as protobuf, and says so
    with pytest.raises(OtlpDecodeError, match="otlp_proto"):
        decode_otlp_traces(b'{"resourceSpans": []}', content_type="application/x-protobuf")


# ---------------------------------------------------------------------------- traces


def test_the_otlp_json_example_of_the_specification_decodes() -> None:
    events, reasons = decode_otlp_traces((DATA / "trace.json").read_bytes(), observed_ns=OBSERVED)
    assert reasons == []
    (ev,) = events
    assert ev.payload.trace_id == "5b8efff798038103d269b633813fc60c"
    assert ev.payload.span_id == "eee19b7ec3c1b174"
    assert ev.payload.parent_span_id == "eee19b7ec3c1b173"
    assert (ev.payload.start_ns, ev.payload.end_ns) == (1544712660 * 10**9, 1544712661 * 10**9)
    assert ev.payload.attributes["my.span.attr"] == "some value"
    assert ev.payload.attributes["service.name"] == "my.service"


def test_both_encodings_give_the_same_span_events() -> None:
    data = traces(
        (resource(rankscope__job_id="job-a", host__name="n1"), [span(1, 1, T0), span(1, 2, T0)]),
        (resource(rankscope__job_id="job-b", host__name="n2"), [span(2, 3, T0, step=7)]),
    )
    proto, reasons_p = decode_otlp_traces(encode(data, "otlp_proto"), observed_ns=OBSERVED)
    as_json, reasons_j = decode_otlp_traces(encode(data, "otlp_json"), observed_ns=OBSERVED)
    assert reasons_p == reasons_j == []
    assert len(proto) == 3
    assert _spans(proto) == _spans(as_json)
    assert {e.job_id for e in proto} == {"job-a", "job-b"}


def test_otlp_json_enum_names_string_int64_and_unknown_fields_are_accepted() -> None:
    doc = json.loads(encode(traces((resource(host__name="n"), [span(5, 6, T0)])), "otlp_json"))
    s = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    s["kind"] = "SPAN_KIND_SERVER"  # names are what protobuf's own JSON writer emits
    s["startTimeUnixNano"] = str(s["startTimeUnixNano"])
    s["aFieldFromANewerOtlp"] = {"x": 1}
    events, reasons = decode_otlp_traces(json.dumps(doc).encode(), observed_ns=OBSERVED)
    assert reasons == [] and len(events) == 1
    assert events[0].payload.start_ns == T0


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff\x00 definitely not protobuf", "neither otlp_json"),
        (b'{"schema": "span/1", "kind": "span"}', "no resource_spans"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "not hex"),
        (b'{"resourceSpans": {"not": "a list"}}', "not OTLP traces"),
        (b'{"resourceSpans": [', "not JSON"),
        (b'{"a":' + b"[" * 200 + b"]" * 200 + b"}", "nested"),
    ],
)
def test_what_is_not_otlp_is_refused_with_a_reason(payload: bytes, why: str) -> None:
    with pytest.raises(OtlpDecodeError, match=why):
        decode_otlp_traces(payload)
    ref = RecordRef("otlp_spans", 0, 7, T0)
    result = validate_otlp_message(payload, ref, ValidationLimits(), now_ns=T0)
    assert result.events == []
    (dead,) = result.dead
    assert dead.reason_code == "not_an_event"
    assert why in dead.reason and dead.reason.startswith("not an OTLP traces message")


# ---------------------------------------------------------------------------- logs


def _rank0_logs(encoding: str) -> bytes:
    res = resource(
        rankscope__job_id="job-a",
        rankscope__rank=0,
        k8s__node__name="gpu-a03",
        k8s__cluster__name="c1",
    )
    recs = log_lines(data_lines("rank0.log"), OBSERVED, **{"log.file.path": "/logs/rank0.log"})
    return encode(logs((res, recs)), encoding)  # type: ignore[arg-type]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_nccl_lines_in_otlp_logs_become_comm_events(encoding: str) -> None:
    out = decode_otlp_logs(_rank0_logs(encoding), observed_ns=OBSERVED)
    assert out.reasons == []
    assert out.ignored == 1  # the NCCL INFO line
    ib, watchdog = out.events
    assert (ib.payload.event_type, ib.payload.peer, ib.payload.vendor_err) == (
        "net_ib_error",
        "10.216.210.236<54862>",
        129,
    )
    assert (ib.job_id, ib.rank, ib.gpu, ib.node, ib.cluster) == ("job-a", 0, 4, "gpu-a03", "c1")
    assert ib.payload.log_file == "/logs/rank0.log"
    assert ib.ts == OBSERVED  # no timestamp operator: the receiver's read time
    assert (watchdog.payload.event_type, watchdog.payload.seq, watchdog.rank) == (
        "watchdog_timeout",
        808,
        0,
    )


def test_both_log_encodings_give_the_same_events_and_ids_are_stable() -> None:
    a = decode_otlp_logs(_rank0_logs("otlp_proto"), observed_ns=OBSERVED)
    b = decode_otlp_logs(_rank0_logs("otlp_json"), observed_ns=OBSERVED)
    assert a.events == b.events
    assert len({e.event_id for e in a.events}) == 2


def test_the_rank_in_the_line_wins_over_the_resources() -> None:
    res = resource(rankscope__job_id="job-a", rankscope__rank=99, host__name="n")
    out = decode_otlp_logs(
        encode(logs((res, log_lines(data_lines("rank1.log"), OBSERVED))), "otlp_proto"),
        observed_ns=OBSERVED,
    )
    assert out.ignored == 1  # the progress bar line
    assert [(e.payload.event_type, e.rank) for e in out.events] == [
        ("watchdog_timeout", 1),
        ("other", 1),
    ]


def test_a_log_line_is_the_same_event_as_the_agents_nccl_collector_makes(tmp_path: Path) -> None:
    """Same parser, same payload: only ids and times differ between the two paths."""
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    path = logs_dir / "rank0.log"
    path.write_text((DATA / "rank0.log").read_text())
    jobs = JobRegistry(default_job_id="job-a")
    jobs.bind_gpu(4, JobBinding("job-a", rank=0))
    collector = create_nccl_log_collector(
        NcclLogCollectorConfig(paths=[str(logs_dir / "*.log")], from_start=True),
        EventFactory("c1", "gpu-a03", jobs=jobs),
    )
    agent: list[Event] = collector.poll(OBSERVED)
    res = resource(
        rankscope__job_id="job-a",
        rankscope__rank=0,
        k8s__node__name="gpu-a03",
        k8s__cluster__name="c1",
    )
    recs = log_lines(data_lines("rank0.log"), OBSERVED, **{"log.file.path": str(path)})
    otlp = decode_otlp_logs(encode(logs((res, recs)), "otlp_proto"), observed_ns=OBSERVED).events

    def comparable(e: Event) -> dict[str, object]:
        return e.model_dump(exclude={"event_id", "ts", "observed_ts"})

    assert all(isinstance(e, CommEventEvent) for e in agent)
    assert [comparable(e) for e in otlp] == [comparable(e) for e in agent]


def test_non_text_bodies_and_chatter_are_counted_not_stored() -> None:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValueList
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

    recs = [
        LogRecord(body=AnyValue(kvlist_value=KeyValueList())),
        LogRecord(body=AnyValue(string_value="INFO step 10 loss 2.31\nINFO step 11 loss 2.30")),
    ]
    out = decode_otlp_logs(encode(logs((resource(), recs)), "otlp_json"), observed_ns=OBSERVED)
    assert (out.events, out.reasons, out.ignored) == ([], [], 3)
    result = validate_otlp_message(
        encode(logs((resource(), recs)), "otlp_proto"),
        RecordRef("otlp_logs", 0, 1, OBSERVED),
        ValidationLimits(),
        now_ns=OBSERVED,
        signal="logs",
    )
    assert (result.events, result.dead, result.ignored) == ([], [], 3)


# ---------------------------------------------------------------------------- split per job


def test_a_record_mixing_jobs_splits_per_job_and_each_split_is_its_own_source() -> None:
    data = traces(
        (resource(rankscope__job_id="job-a", host__name="n1"), [span(1, 1, T0)]),
        (resource(rankscope__job_id="job-b", host__name="n2"), [span(2, 2, T0)]),
        (resource(rankscope__job_id="job-a", host__name="n3"), [span(3, 3, T0)]),
        (resource(host__name="n4"), [span(4, 4, T0)]),  # no job: keyed by its node
    )
    events, _ = decode_otlp_traces(encode(data, "otlp_json"), observed_ns=OBSERVED)
    groups = by_partition_key(list(events))
    assert [(k, len(v)) for k, v in groups.items()] == [
        (b"job-a", 2),
        (b"job-b", 1),
        (b"node:n4", 1),
    ]
    # two splits of one raw record on the same events partition are both new, and both
    # duplicates when the raw record is validated again
    seen = SourceOffsets()
    first = [record_source(source_headers("otlp_spans", 0, 41, i)) for i in range(3)]
    assert [seen.first_time("tp0", s) for s in first] == [True, True, True]
    assert [seen.first_time("tp0", s) for s in first] == [False, False, False]
    assert source_headers("otlp_spans", 0, 41) == source_headers("otlp_spans", 0, 41, 0)


def test_round_trip_through_the_official_classes() -> None:
    data = traces((resource(host__name="n"), [span(9, 9, T0)]))
    assert TracesData.FromString(encode(data, "otlp_proto")) == data


def test_the_example_collector_configuration_writes_where_the_worker_reads() -> None:
    import yaml

    from rankscope.schemas.topics import DEFAULT_OTLP_LOGS_TOPICS, DEFAULT_OTLP_TRACES_TOPICS

    root = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((root / "examples" / "otel-collector" / "config.yaml").read_text())
    kafka = cfg["exporters"]["kafka"]
    assert kafka["traces"]["topic"] in DEFAULT_OTLP_TRACES_TOPICS
    assert kafka["logs"]["topic"] in DEFAULT_OTLP_LOGS_TOPICS
    assert {kafka["traces"]["encoding"], kafka["logs"]["encoding"]} == set(ENCODINGS)
    pipelines = cfg["service"]["pipelines"]
    assert pipelines["logs"]["receivers"] == ["filelog/training"]
    assert all("kafka" in p["exporters"] for p in pipelines.values())
    # the path regex of the filelog receiver gives the job and rank rankscope reads
    import re

    ops = cfg["receivers"]["filelog/training"]["operators"]
    m = re.match(ops[0]["regex"], "/var/log/training/job-7/rank-12.log")
    assert m is not None and m.groupdict() == {"job": "job-7", "rank": "12"}
    assert {op["to"] for op in ops[1:]} == {
        'resource["rankscope.job_id"]',
        'resource["rankscope.rank"]',
    }


# ---------------------------------------------------------------------------- a real Collector


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_records_a_real_collector_wrote_decode(encoding: str) -> None:
    """Written by a Collector v0.165.0 built from examples/otel-collector/builder-manifest.yaml,
    running the example configuration (tests/data/otlp_collector/record_collector_output.py)."""
    ext = "json" if encoding == "otlp_json" else "bin"
    rec = DATA / "recorded"
    raw_traces = (rec / f"traces.{encoding}.{ext}").read_bytes()
    raw_logs = (rec / f"logs.{encoding}.{ext}").read_bytes()
    assert detect_encoding(raw_traces) == detect_encoding(raw_logs) == encoding
    (ev,), reasons = decode_otlp_traces(raw_traces, observed_ns=OBSERVED)
    assert reasons == []
    assert (ev.job_id, ev.node, ev.payload.trace_id, ev.payload.step) == (
        "job-7",
        "gpu-a03",
        f"{0xABC:032x}",
        3,
    )
    out = decode_otlp_logs(raw_logs, observed_ns=OBSERVED)
    assert out.reasons == [] and out.ignored == 2  # the NCCL INFO line, the progress bar
    got = [
        (e.job_id, e.rank, e.node, e.cluster, e.gpu, e.payload.event_type, e.payload.seq)
        for e in out.events
    ]
    assert got == [
        ("job-7", 0, "gpu-a03", "train-cluster-1", 4, "net_ib_error", None),
        ("job-7", 0, "gpu-a03", "train-cluster-1", None, "watchdog_timeout", 808),
        ("job-7", 1, "gpu-a03", "train-cluster-1", None, "watchdog_timeout", 808),
        ("job-7", 1, "gpu-a03", "train-cluster-1", None, "other", 808),
    ]
    # the time is the filelog receiver's read time, not the worker's clock
    assert all(e.ts != OBSERVED and e.ts > 1_700_000_000 * 10**9 for e in out.events)
    assert out.events[0].payload.log_file.endswith("/job-7/rank-0.log")


def test_both_encodings_of_one_collector_batch_give_the_same_events() -> None:
    rec = DATA / "recorded"
    proto = decode_otlp_logs((rec / "logs.otlp_proto.bin").read_bytes(), observed_ns=OBSERVED)
    as_json = decode_otlp_logs((rec / "logs.otlp_json.json").read_bytes(), observed_ns=OBSERVED)
    assert proto.events == as_json.events
