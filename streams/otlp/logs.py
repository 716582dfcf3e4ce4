"""OTLP logs -> ``comm_event`` events: NCCL/PyTorch lines shipped by a Collector's filelog receiver.

Why: clusters that already ship training logs through an OpenTelemetry Collector need not run
the agent's NCCL log collector too. Each log record whose body is a string is split into lines
and each line goes through the agent's own parser (:mod:`rankscope.schemas.comm_lines`);
lines the parser does not recognise (the bulk of any log) are counted and dropped: rankscope
has no table for arbitrary log text, and keeping it would only widen what redaction must catch.

Identity, per envelope field, record attributes before resource attributes, with the key lists
spans use (:mod:`rankscope.schemas.otel_mapping`): ``rankscope.job_id``/``job.id``/``job_id``,
``rankscope.node``/``k8s.node.name``/``host.name``, ``rankscope.cluster``/``k8s.cluster.name``.
Rank and local rank come from the line first (the c10 ``[rankN]:`` prefix, a launcher label, the
default process group's prefix), as in the agent, then from ``rankscope.rank``/``rank``; the GPU
from ``rankscope.gpu``, else NCCL's ``[cudaDev]``. ``log_file`` is the filelog receiver's
``log.file.path`` (or ``log.file.name``). Time: the record's ``time_unix_nano`` (set when a
timestamp operator parsed the line), else ``observed_time_unix_nano`` (when the receiver read
it), else the worker's clock. ``event_id`` hashes the resource, the record's times and the line,
so a record exported twice is written once by the idempotent sink.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, LogsData
from pydantic import ValidationError

from rankscope.schemas.comm_lines import comm_payload, parse_line
from rankscope.schemas.events import CommEventEvent
from rankscope.schemas.otel_mapping import (
    CLUSTER_KEYS,
    GPU_KEYS,
    JOB_KEYS,
    LOCAL_RANK_KEYS,
    NODE_KEYS,
    RANK_KEYS,
)
from rankscope.streams.otlp.common import OtlpDecodeError, otlp_attributes
from rankscope.streams.otlp.wire import parse_otlp

__all__ = ["LogsDecoded", "decode_otlp_logs"]

LOG_FILE_KEYS: tuple[str, ...] = ("log.file.path", "log.file.name")
_MAX_LINE_CHARS = 16_384  # as the agent's NCCL log collector (max_line_bytes default)


@dataclass
class LogsDecoded:
    """What one logs record gave: events, per-line reasons, and lines that were not NCCL's."""

    events: list[CommEventEvent] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    ignored: int = 0


def _first(
    keys: Sequence[str], record: Mapping[str, object], resource: Mapping[str, object]
) -> object:
    for key in keys:
        for source in (record, resource):
            value = source.get(key)
            if value is not None and value != "":
                return value
    return None


def _text(value: object, default: str) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()[:256]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return default


def _number(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _event_id(resource: Mapping[str, object], rec: LogRecord, index: int, line: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(sorted(resource.items()), default=str).encode())
    h.update(f"\x1f{rec.time_unix_nano}\x1f{rec.observed_time_unix_nano}\x1f{index}\x1f".encode())
    h.update(line.encode("utf-8", "replace"))
    return h.hexdigest()[:32]


def decode_otlp_logs(
    data: bytes | bytearray | memoryview,
    *,
    cluster_default: str = "otel",
    node_default: str = "unknown",
    observed_ns: int | None = None,
    content_type: str | None = None,
) -> LogsDecoded:
    """Decode one OTLP logs record (either encoding); raises :class:`OtlpDecodeError`."""
    message = parse_otlp(bytes(data), LogsData(), "logs", content_type)
    if data and not message.resource_logs:
        raise OtlpDecodeError("not an OTLP logs message: no resource_logs in a non-empty body")
    observed = time.time_ns() if observed_ns is None else observed_ns
    out = LogsDecoded()
    for i, resource_logs in enumerate(message.resource_logs):
        resource = otlp_attributes(resource_logs.resource.attributes)
        for j, scope_logs in enumerate(resource_logs.scope_logs):
            for k, rec in enumerate(scope_logs.log_records):
                where = f"resource_logs[{i}].scope_logs[{j}].log_records[{k}]"
                _decode_record(rec, resource, where, cluster_default, node_default, observed, out)
    return out


def _decode_record(
    rec: LogRecord,
    resource: Mapping[str, object],
    where: str,
    cluster_default: str,
    node_default: str,
    observed: int,
    out: LogsDecoded,
) -> None:
    if rec.body.WhichOneof("value") != "string_value":
        out.ignored += 1  # maps, bytes, arrays: not a text line
        return
    attrs = otlp_attributes(rec.attributes)
    ts = rec.time_unix_nano or rec.observed_time_unix_nano or observed
    path = _first(LOG_FILE_KEYS, attrs, resource)
    log_file = path if isinstance(path, str) else ""
    for n, line in enumerate(rec.body.string_value.splitlines()):
        parsed = parse_line(line[:_MAX_LINE_CHARS])
        if parsed is None:
            out.ignored += 1
            continue
        rank = (
            parsed.rank if parsed.rank is not None else _number(_first(RANK_KEYS, attrs, resource))
        )
        local_rank = (
            parsed.local_rank
            if parsed.local_rank is not None
            else _number(_first(LOCAL_RANK_KEYS, attrs, resource))
        )
        gpu = _number(_first(GPU_KEYS, attrs, resource))
        try:
            event = CommEventEvent.model_validate(
                {
                    "event_id": _event_id(resource, rec, n, line),
                    "schema": "comm_event/1",
                    "kind": "comm_event",
                    "cluster": _text(_first(CLUSTER_KEYS, attrs, resource), cluster_default),
                    "job_id": _text(_first(JOB_KEYS, attrs, resource), ""),
                    "node": _text(_first(NODE_KEYS, attrs, resource), node_default),
                    "rank": rank,
                    "local_rank": local_rank,
                    "gpu": gpu if gpu is not None else parsed.cuda_dev,
                    "ts": ts,
                    "observed_ts": observed,
                    "payload": comm_payload(parsed, log_file),
                }
            )
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
            out.reasons.append(f"{where} line {n}: invalid comm_event ({', '.join(fields)})")
            continue
        out.events.append(event)
