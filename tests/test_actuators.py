"""Actuators: the webhook against a real local HTTP server, and at most once per key, also when
the process running them is killed mid-action."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from rankscope.pipeline import Pipeline, PipelineConfig, StageProcess
from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.base import ActuatorRunner, Ledger
from rankscope.sinks.actuators.dryrun import DryRunActuator
from rankscope.sinks.actuators.webhook import WebhookActuator, WebhookConfig
from rankscope.sinks.clickhouse import connect
from rankscope.streams.recovery.signing import load_keyring

S = 1_000_000_000
SECRET = b"webhook-test-secret"
ROOT = Path(__file__).resolve().parents[1]


class _Receiver:
    """A real HTTP server that checks signatures and can fail, stall or hang on purpose."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.script: list[str] = []  # per request: "ok", "500", "400", "slow", "hang"
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                good = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(good, self.headers.get("X-Rankscope-Signature", ""))
                receiver.received.append(
                    {
                        "key": self.headers.get("X-Rankscope-Key"),
                        "signed": signed,
                        "body": json.loads(body),
                        "at": time.time_ns(),
                    }
                )
                mode = receiver.script.pop(0) if receiver.script else "ok"
                if mode == "slow":
                    time.sleep(1.0)
                if mode == "hang":
                    receiver.release.wait(30)
                code = {"500": 500, "400": 400}.get(mode, 200 if signed else 401)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    r = _Receiver()
    yield r
    r.release.set()
    r.server.shutdown()


def _decision(n: int, action: str = "exclude_node_and_restart") -> RecoveryEvent:
    return RecoveryEvent(
        key=RecoveryEvent.make_key("c1", "job-1", f"inc{n}", "rule", "1"),
        stage="decided",
        action=action,  # type: ignore[arg-type]
        cluster="c1",
        job_id="job-1",
        node="node003",
        rank=26,
        rule="gpu-hardware-exclude-node",
        reason="XID 79 on node003",
        trigger_id=f"inc{n}",
        attempt=1,
        ts=1,
        not_before_ts=0,
    )


def _webhook(receiver: _Receiver, **cfg: Any) -> WebhookActuator:
    config = WebhookConfig(url=receiver.url, timeout_s=0.5, retries=2, backoff_s=0.05, **cfg)
    return WebhookActuator(config, secret=SECRET)


def test_the_webhook_signs_the_body_and_carries_the_key(
    receiver: _Receiver, tmp_path: Path
) -> None:
    runner = ActuatorRunner(_webhook(receiver), Ledger(tmp_path / "ledger.db"))
    outcome = runner.run(_decision(1))
    assert outcome is not None and outcome.stage == "succeeded" and "200" in outcome.reason
    (got,) = receiver.received
    assert got["signed"] and got["key"] == _decision(1).key
    assert got["body"]["action"] == "exclude_node_and_restart" and got["body"]["node"] == "node003"
    # a wrong secret is refused by the receiver (401): a 4xx is final, not retried
    wrong = ActuatorRunner(
        WebhookActuator(WebhookConfig(url=receiver.url, retries=3), secret=b"wrong"),
        Ledger(tmp_path / "other.db"),
    )
    bad = wrong.run(_decision(2))
    assert bad is not None and bad.stage == "failed" and "HTTP 401, not retried" in bad.reason
    assert len(receiver.received) == 2


def test_server_errors_and_timeouts_are_retried_with_backoff(
    receiver: _Receiver, tmp_path: Path
) -> None:
    receiver.script = ["500", "slow", "ok"]  # an error, a timeout (1 s > 0.5 s), then success
    runner = ActuatorRunner(_webhook(receiver), Ledger(tmp_path / "ledger.db"))
    started = time.monotonic()
    outcome = runner.run(_decision(1))
    assert outcome is not None and outcome.stage == "succeeded"
    assert len(receiver.received) == 3 and {r["key"] for r in receiver.received} == {
        _decision(1).key
    }
    assert time.monotonic() - started >= 0.5 + 0.05 + 0.1  # the timeout and both waits
    receiver.script = ["500", "500", "500"]
    failed = runner.run(_decision(2))
    assert failed is not None and failed.stage == "failed"
    assert "HTTP 500 after 3 attempt(s)" in failed.reason


def test_a_key_runs_once_however_often_its_decision_is_read(
    receiver: _Receiver, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    first = ActuatorRunner(_webhook(receiver), Ledger(ledger)).run(_decision(1))
    # a restarted runner (a new ledger handle on the same file) reads the decision again
    again = ActuatorRunner(_webhook(receiver), Ledger(ledger)).run(_decision(1))
    assert first is not None and again is not None and again.stage == first.stage
    assert len(receiver.received) == 1


def test_backoff_holds_a_decision_until_its_time(tmp_path: Path) -> None:
    dry = DryRunActuator()
    runner = ActuatorRunner(dry, Ledger(tmp_path / "ledger.db"))
    later = _decision(1).model_copy(update={"not_before_ts": 2_000})
    assert runner.run(later, now_ns=1_999) is None and dry.would == []
    outcome = runner.run(later, now_ns=2_000)
    assert outcome is not None and outcome.stage == "succeeded"
    assert dry.would == [
        "would run exclude_node_and_restart for job job-1 on node003 rank 26 "
        "(gpu-hardware-exclude-node: XID 79 on node003)"
    ]
    # outcomes and suppressed records are not decisions: nothing runs
    assert runner.run(outcome) is None


_RUN = """
import sys, json
from pathlib import Path
from rankscope.schemas.derived import RecoveryEvent
from rankscope.sinks.actuators.base import ActuatorRunner, Ledger
from rankscope.sinks.actuators.webhook import WebhookActuator, WebhookConfig
runner = ActuatorRunner(
    WebhookActuator(
        WebhookConfig(url=sys.argv[1], timeout_s=30, retries=0), secret=sys.argv[3].encode()
    ),
    Ledger(Path(sys.argv[2])),
)
for line in sys.stdin:
    out = runner.run(RecoveryEvent.model_validate_json(line))
    print(json.dumps({"key": out.key, "stage": out.stage, "reason": out.reason}), flush=True)
"""


def _runner_process(
    receiver: _Receiver, ledger: Path, decisions: list[RecoveryEvent]
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN, receiver.url, str(ledger), SECRET.decode()],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdin is not None
    proc.stdin.write("".join(d.model_dump_json() + "\n" for d in decisions))
    proc.stdin.close()
    return proc


def test_killing_the_runner_mid_way_runs_every_action_once(
    receiver: _Receiver, tmp_path: Path
) -> None:
    """Decisions 0-1 run, the process is SIGKILLed while decision 2 is being sent (3-4 decided
    but not acted on); the restarted runner reads all five again: 0-1 are not repeated (their
    keys are finished), 2 is not repeated (claimed, outcome unknown: reported, not re-run), 3-4
    run. The receiver sees each key exactly once."""
    decisions = [_decision(n) for n in range(5)]
    ledger = tmp_path / "ledger.db"
    receiver.script = ["ok", "ok", "hang"]
    proc = _runner_process(receiver, ledger, decisions)
    deadline = time.monotonic() + 30
    while len(receiver.received) < 3:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    receiver.release.set()
    proc2 = _runner_process(receiver, ledger, decisions)
    assert proc2.stdout is not None
    out = proc2.stdout.read()
    assert proc2.wait(60) == 0
    outcomes = [json.loads(line) for line in out.splitlines()]
    assert [o["stage"] for o in outcomes] == [
        "succeeded",
        "succeeded",
        "failed",
        "succeeded",
        "succeeded",
    ]
    assert outcomes[2]["reason"].startswith("webhook: interrupted")
    keys = [r["key"] for r in receiver.received]
    assert sorted(keys) == sorted(d.key for d in decisions)  # each exactly once


def _ledger_states(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, state FROM actions").fetchall())


def _wait_for(
    what: str, check: Callable[[], bool], *procs: StageProcess, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for p in procs:
            assert p.alive, f"{p.name} exited:\n{p.log_tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_killing_recovery_run_between_deciding_and_acting_and_after_acting(
    receiver: _Receiver, pipeline_config: PipelineConfig
) -> None:
    """The Kafka-consuming actuator process (`rankscope recovery run`), SIGKILLed with, at once:
    a decision read and waiting for its backoff (decided, not acted on), two decisions acted on
    whose offsets were never committed (after acting), and one in flight (mid-action); a fifth
    is decided while it is down. After a restart every action has reached the receiver exactly
    once, and ClickHouse (through the sink) holds one decision and one outcome per key."""
    cfg = pipeline_config
    topic = cfg.topics.recovery
    now = time.time_ns()
    soon = now + 25 * S  # far enough that the first process cannot reach it
    d0, d1, d2, late = (_decision(n).model_copy(update={"ts": now}) for n in (0, 1, 2, 4))
    waits = _decision(3).model_copy(update={"ts": now, "not_before_ts": soon})
    first = [waits, d0, d1, d2]  # one job key: one partition, read in this order
    keys = sorted(d.key for d in [*first, late])
    # signed as the decider signs them (the runner refuses anything else), same home's key
    keyring = load_keyring(cfg.home / "recovery.key")
    d0, d1, d2, late, waits = (
        keyring.sign(d.model_copy(update={"decided_at": now})) for d in (d0, d1, d2, late, waits)
    )
    first = [waits, d0, d1, d2]
    producer = Producer({"bootstrap.servers": cfg.bootstrap})
    for d in first:
        producer.produce(topic, key=d.job_id.encode(), value=d.model_dump_json())
    assert producer.flush(30) == 0

    ledger = cfg.home / "recovery-ledger.db"
    run = StageProcess(
        "actuators",
        [
            sys.executable,
            "-m",
            "rankscope",
            "recovery",
            "run",
            *cfg.common_args(),
            "--actuator",
            "webhook",
            "--webhook-url",
            receiver.url,
        ],
        cfg.home / "logs" / "actuators.log",
        env={"RANKSCOPE_WEBHOOK_SECRET": SECRET.decode()},
    )
    receiver.script = ["ok", "ok", "hang"]
    pipeline = Pipeline(cfg)
    client = connect(cfg.clickhouse_url)
    run.start()
    try:
        _wait_for("three requests", lambda: len(receiver.received) == 3, run)
        assert f'"key": "{waits.key}", "stage": "waiting"' in run.log_tail()
        # 0 and 1 acted on (their offsets are not committed), 2 mid-action, 3 decided and waiting
        assert _ledger_states(ledger) == {d0.key: "finished", d1.key: "finished", d2.key: "claimed"}
        run.kill()
        receiver.release.set()
        producer.produce(topic, key=late.job_id.encode(), value=late.model_dump_json())
        assert producer.flush(30) == 0

        run.start()
        pipeline.sink.start()

        def outcomes() -> dict[str, str]:
            rows = client.query(
                f"SELECT key, stage, reason FROM {cfg.database}.recovery_actions FINAL "
                "WHERE stage != 'decided'"
            ).result_rows
            return {k: f"{stage}: {why}" for k, stage, why in rows}

        _wait_for("every outcome in ClickHouse", lambda: len(outcomes()) == 5, run, pipeline.sink)
    finally:
        receiver.release.set()
        run.stop()
        pipeline.sink.stop()

    got = [r["key"] for r in receiver.received]
    assert sorted(got) == keys  # each action exactly once
    assert all(r["signed"] for r in receiver.received)
    # the waiting one ran after its backoff (by the new process: the first one had not run it)
    assert next(r["at"] for r in receiver.received if r["key"] == waits.key) >= soon
    done = outcomes()
    assert done[d2.key].startswith("failed: webhook: interrupted")
    for d in (d0, d1, waits, late):
        assert done[d.key].startswith("succeeded: webhook: POST"), done[d.key]
    rows = client.query(
        f"SELECT key, stage, count() FROM {cfg.database}.recovery_actions FINAL GROUP BY key, stage"
    ).result_rows
    assert sorted((k, s, n) for k, s, n in rows) == sorted(
        [(k, "decided", 1) for k in keys] + [(k, done[k].split(":")[0], 1) for k in keys]
    )
