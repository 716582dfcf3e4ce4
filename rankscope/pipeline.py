"""Run the pipeline's processes (stream worker, ClickHouse sink) and wait for them to drain.

Each stage runs as its own OS process, as it would in production, so that a test can SIGKILL
one and restart it. ``Pipeline`` is what the demo, the integration tests and the benchmark use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rankscope.kafka_admin import group_lag, group_stable, release_admins
from rankscope.kafka_security import ENV_PREFIX, KafkaSecurity
from rankscope.schemas.topics import Topics, streams_group, validate_group


@dataclass
class StageProcess:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    #: this process's Kafka login; None: the RANKSCOPE_KAFKA_* it inherits
    security: KafkaSecurity | None = None
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False  # stopped on purpose with kill() (a crash a test made)

    def start(self) -> None:
        self.killed = False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.security is not None:  # its own principal replaces whatever we inherited
            env = {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX)}
            env.update(self.security.to_env())
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**env, **self.env},
            start_new_session=True,
        )
        log.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: what a crash looks like (no flush, no commit, no goodbye)."""
        self.killed = True
        if self.proc is not None and self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@dataclass
class PipelineConfig:
    bootstrap: str
    clickhouse_url: str
    topic_prefix: str
    database: str
    home: Path
    sink_max_batch_rows: int = 50_000
    #: stream worker processes in the one consumer group (they share the partitions)
    workers: int = 1
    #: `rankscope validator` processes (0: the workers validate the raw topics themselves)
    validators: int = 0
    #: extra environment for every stage process (settings such as RANKSCOPE_RECOVERY_POLICY,
    #: RANKSCOPE_METRICS_PORT)
    env: dict[str, str] = field(default_factory=dict)
    #: extra environment for the sink alone, over ``env`` (its ClickHouse login, as password
    #: files)
    sink_env: dict[str, str] = field(default_factory=dict)
    #: run the recovery actuator (a replay does not: it must not act on the past)
    actuators: bool = True
    #: Kafka login of this process's probes (lag, group state); None: the environment's
    security: KafkaSecurity | None = None
    #: Kafka login per stage process ("worker", "sink", "actuators"); absent: inherited
    stage_security: dict[str, KafkaSecurity] = field(default_factory=dict)

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix, self.env.get("RANKSCOPE_RAW_TOPIC_PREFIX"))

    @property
    def streams_group(self) -> str:
        return streams_group(self.topic_prefix)

    @property
    def validate_group(self) -> str:
        """The group that commits the raw topics: the workers', or the validators' own."""
        return validate_group(self.streams_group) if self.validators else self.streams_group

    @property
    def sink_group(self) -> str:
        return f"{self.topic_prefix}-sink"

    def common_args(self) -> list[str]:
        return [
            "--bootstrap",
            self.bootstrap,
            "--topic-prefix",
            self.topic_prefix,
            "--home",
            str(self.home),
        ]


class Pipeline:
    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        logs = config.home / "logs"
        cli = [sys.executable, "-m", "rankscope"]
        self.workers = [self._worker(i) for i in range(1, config.workers + 1)]
        self.validators = [
            StageProcess(
                f"validator-{i}",
                [*cli, "validator", *config.common_args(), "--metrics-port", "-1"],
                logs / f"validator-{i}.log",
                dict(config.env),
                security=config.stage_security.get("worker"),
            )
            for i in range(1, config.validators + 1)
        ]
        self.sink = StageProcess(
            "sink",
            [
                *cli,
                "sink",
                *config.common_args(),
                "--clickhouse-url",
                config.clickhouse_url,
                "--database",
                config.database,
                "--max-batch-rows",
                str(config.sink_max_batch_rows),
            ],
            logs / "sink.log",
            env={**config.env, **config.sink_env},
            security=config.stage_security.get("sink"),
        )
        # recovery decisions through the dry-run actuator (the policy's default mode)
        self.actuators = StageProcess(
            "actuators",
            [*cli, "recovery", "run", *config.common_args()],
            logs / "actuators.log",
            dict(config.env),
            security=config.stage_security.get("actuators"),
        )

    @property
    def worker(self) -> StageProcess:
        """The first stream worker (the only one unless ``workers`` > 1)."""
        return self.workers[0]

    def _worker(self, i: int) -> StageProcess:
        """Stream worker ``i`` (from 1): worker 1 logs to worker.log, the others (one consumer
        group) to worker-N.log, each with its own scratch directory."""
        config = self.config
        env = {**config.env, "RANKSCOPE_WORKER_DATA_DIR": str(config.home / f"faust-{i}")}
        if config.validators:  # the validators read the raw topics
            env["RANKSCOPE_WORKER_VALIDATE"] = "false"
        return StageProcess(
            "worker" if i == 1 else f"worker-{i}",
            [sys.executable, "-m", "rankscope", "worker", *config.common_args()],
            config.home / "logs" / ("worker.log" if i == 1 else f"worker-{i}.log"),
            env,
            security=config.stage_security.get("worker"),
        )

    def add_worker(self) -> StageProcess:
        """Start one more stream worker in the group (a scale-out, or a replacement)."""
        worker = self._worker(len(self.workers) + 1)
        self.workers.append(worker)
        worker.start()
        return worker

    def start(self) -> None:
        for validator in self.validators:
            validator.start()
        for worker in self.workers:
            worker.start()
        self.sink.start()
        if self.config.actuators:
            self.actuators.start()

    def stop(self) -> None:
        # the group-state admin client must not outlive this pipeline's broker
        # (kafka_admin.release_admins: librdkafka can hang or abort on a client left behind)
        release_admins()
        if self.config.actuators:
            self.actuators.stop()
        self.sink.stop()
        for worker in self.workers:
            worker.stop()
        for validator in self.validators:
            validator.stop()

    def __enter__(self) -> Pipeline:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def lag(self) -> tuple[int, int]:
        """(stream worker lag on raw+events topics, sink lag on its topics)."""
        t = self.config.topics
        sec = self.config.security
        if self.config.validators:  # raw lag is the validators' group's
            worker = group_lag(
                self.config.bootstrap, self.config.validate_group, t.all_raw, security=sec
            ) + group_lag(
                self.config.bootstrap, self.config.streams_group, [t.events], security=sec
            )
        else:
            worker = group_lag(
                self.config.bootstrap,
                self.config.streams_group,
                [*t.all_raw, t.events],
                security=sec,
            )
        sink = group_lag(
            self.config.bootstrap,
            self.config.sink_group,
            [
                t.events,
                t.windows,
                t.late,
                t.detections,
                t.incidents,
                t.deadletter,
                t.quarantine,
                t.redaction_audit,
                t.recovery,
                t.baselines,
            ],
            security=sec,
        )
        actuators = (
            group_lag(
                self.config.bootstrap,
                f"{self.config.topic_prefix}-actuators",
                [t.recovery],
                security=sec,
            )
            if self.config.actuators
            else 0
        )
        return worker, sink + actuators

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Until the stream worker has joined its group and holds its partitions.

        Publishing before that leaves a backlog the worker reads at equal bytes per partition,
        so the busiest topic falls behind in event time (see docs/open-items.md); a run that
        measures detection latency starts from a caught-up worker, as a live deployment does.
        """
        deadline = time.monotonic() + timeout_s
        live = [w for w in self.workers if w.proc is not None and not w.killed]
        validators = [v for v in self.validators if v.proc is not None and not v.killed]
        groups = [(self.config.streams_group, len(live))]
        if validators:
            groups.append((self.config.validate_group, len(validators)))
        while not all(
            group_stable(self.config.bootstrap, group, n, security=self.config.security)
            for group, n in groups
        ):
            for worker in (*live, *validators):
                if not worker.alive:
                    raise RuntimeError(
                        f"the {worker.name} process exited; log:\n{worker.log_tail()}"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker did not join its group in {timeout_s}s")
            time.sleep(0.5)

    def wait_drained(
        self,
        timeout_s: float,
        on_poll: Callable[[int, int], None] | None = None,
        settle_polls: int = 2,
    ) -> None:
        """Until both groups have committed everything on their topics, ``settle_polls`` times
        in a row (windows are emitted a little after their events, so one zero is not enough).
        """
        deadline = time.monotonic() + timeout_s
        zeros = 0
        while True:
            running = [w for w in (*self.validators, *self.workers) if not w.killed]
            others = (self.sink, self.actuators) if self.config.actuators else (self.sink,)
            for stage in (*running, *others):
                if not stage.alive:
                    raise RuntimeError(
                        f"the {stage.name} process exited ({stage.proc and stage.proc.returncode})"
                        f"; last log lines:\n{stage.log_tail()}"
                    )
            worker_lag, sink_lag = self.lag()
            if on_poll:
                on_poll(worker_lag, sink_lag)
            zeros = zeros + 1 if worker_lag == 0 and sink_lag == 0 else 0
            if zeros >= settle_polls:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"pipeline did not drain in {timeout_s}s (worker lag {worker_lag}, "
                    f"sink lag {sink_lag}); worker log:\n{self.worker.log_tail(15)}\n"
                    f"sink log:\n{self.sink.log_tail(15)}"
                )
            time.sleep(0.5)
