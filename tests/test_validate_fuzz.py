"""Fuzzing the validate stage: no generated record may raise out of it (issue 15).

Three generators, about 10,000 records together in CI: arbitrary bytes, arbitrary JSON
documents (deep, huge numbers, NaN, lone surrogates, long strings), and valid events with one
field swapped for such a value. Properties: nothing escapes ``validate_message``; every record
ends as events, dead letters or both; a record's dead letters stay bounded; the events it keeps
serialise and validate again to themselves (what the stage does with them next).

``make fuzz`` runs the same tests longer: ``RANKSCOPE_FUZZ_EXAMPLES`` sets examples per test.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankscope.schemas.events import dump_event, dump_events
from rankscope.streams.config import ValidationLimits
from rankscope.streams.validate import RecordRef, validate_message
from tests.factories import NOW_NS, comm, gpu_sample, heartbeat, scheduler, span

LIMITS = ValidationLimits()
REF = RecordRef(topic="rankscope.raw.span", partition=0, offset=7, timestamp_ns=NOW_NS)
_PER_TEST = int(os.environ.get("RANKSCOPE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    deadline=None,
    derandomize=_PER_TEST == 0,  # CI: the same records every run; make fuzz: new ones
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**80), max_value=10**80),
    st.just(2**63 + 5),
    st.just(2**40),
    st.just(-1),
    st.floats(allow_nan=True, allow_infinity=True),
)
_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(["\ud800", "\u202e", "\x00", "\ufeff", "job\u20241", "../../etc", "é" * 3]),
    st.builds(lambda n: "x" * n, st.integers(min_value=200, max_value=70_000)),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=40,
)


def _valid_docs() -> list[dict[str, Any]]:
    events = [
        span(3, NOW_NS),
        gpu_sample(1, NOW_NS),
        heartbeat("node001", NOW_NS),
        scheduler("job_started", NOW_NS),
        comm("NCCL WARN Call to recv from 10.0.0.2<45678> failed", NOW_NS),
    ]
    return [json.loads(dump_event(e)) for e in events]


VALID = _valid_docs()


def _check(value: bytes) -> None:
    res = validate_message(value, REF, LIMITS, now_ns=NOW_NS)
    assert res.events or res.dead, "a record vanished: no events and no dead letter"
    assert len(res.dead) <= LIMITS.max_dead_letters_per_record + 1
    if res.events:
        again = validate_message(dump_events(res.events), REF, LIMITS, now_ns=NOW_NS)
        assert again.dead == [] and again.events == res.events


def _examples(n: int) -> settings:
    return settings(FUZZ, max_examples=_PER_TEST or n)


@_examples(3_000)
@given(st.binary(max_size=2_048))
def test_arbitrary_bytes(value: bytes) -> None:
    _check(value)


@_examples(3_000)
@given(_json, st.integers(min_value=0, max_value=3))
def test_arbitrary_json(doc: Any, wrap: int) -> None:
    for _ in range(wrap):
        doc = [doc]
    _check(json.dumps(doc).encode())


@st.composite
def _mutated_batch(draw: st.DrawFn) -> bytes:
    docs = [json.loads(json.dumps(d)) for d in draw(st.lists(st.sampled_from(VALID), max_size=5))]
    for doc in docs:
        target = doc["payload"] if draw(st.booleans()) else doc
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.integers(min_value=0, max_value=4)) == 0:
            del target[key]
        else:
            target[key] = draw(_json)
    text = json.dumps(docs)
    if draw(st.booleans()):  # numbers past Python's int-string limit, raw in the text
        text = text.replace("1", "1" * draw(st.integers(min_value=1, max_value=6_000)), 1)
    return text.encode()


@_examples(4_000)
@given(_mutated_batch())
def test_valid_events_with_one_bad_field(value: bytes) -> None:
    _check(value)
