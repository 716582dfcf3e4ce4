"""``pip install 'rankscope[agent]'`` as a GPU node does it: only the agent's dependencies.

The wheel is built from the tree (``tests/test_wheel.py``'s fixture), installed with the
``agent`` extra into a fresh virtualenv outside the repository, resolving its dependencies from
the package index as a node would (pip's cache keeps a rerun fast). That environment must not
hold the heavy packages of the other roles, must stay small (issue 18: under 80 MB), and its
``rankscope agent``, redacting at the source (the default, light mode without Presidio), must
publish to the local broker what a node's NCCL log says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from rankscope.kafka_admin import create_pipeline_topics
from rankscope.schemas import EVENT_LIST_ADAPTER, Event, Topics
from rankscope.schemas.events import CommEventEvent
from tests.conftest import Services
from tests.test_wheel import ROOT, _clean_env, _run, wheel  # noqa: F401  (the wheel fixture)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: packages of the other roles (worker, sink, local, redact): none may come with the agent
HEAVY = ("chdb", "faust", "aiokafka", "presidio_analyzer", "spacy", "clickhouse_connect")
#: issue 18's goal for the agent's install (site-packages of a venv created without pip)
MAX_AGENT_MB = 80


def _tree_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


@pytest.fixture(scope="module")
def agent_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A venv outside the repository with ``<wheel>[agent]`` and nothing else; its python.

    Created without pip (the test's own pip installs into it), so that its site-packages is
    exactly what the install adds."""
    env_dir = tmp_path_factory.mktemp("agent-venv")
    assert not env_dir.resolve().is_relative_to(ROOT)
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=env_dir)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"{wheel}[agent]",
        ],
        cwd=env_dir,
        env=env,
    )
    return python


def _site_packages(python: Path, cwd: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([str(python), "-c", code], cwd=cwd).strip())


def test_the_agent_extra_leaves_out_the_other_roles_and_is_small(
    agent_env: Path, tmp_path: Path
) -> None:
    probe = (
        "import importlib.util, json; "
        f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {HEAVY!r}}}))"
    )
    found = json.loads(_run([str(agent_env), "-c", probe], cwd=tmp_path, env=_clean_env(tmp_path)))
    assert found == dict.fromkeys(HEAVY, False)
    site = _site_packages(agent_env, tmp_path)
    size = _tree_mb(site)
    biggest = sorted(((_tree_mb(p), p.name) for p in site.iterdir() if p.is_dir()), reverse=True)
    print(f"\nagent-only install: {size:.1f} MiB in {site}")
    print("largest: " + ", ".join(f"{name} {mb:.1f}" for mb, name in biggest[:6]))
    assert size < MAX_AGENT_MB, f"the agent's install is {size:.1f} MiB"


def test_every_collector_imports_in_the_agent_only_install(agent_env: Path, tmp_path: Path) -> None:
    """What an agent config can enable must not need another extra (the in-process OTel
    exporter is the training process's, with the 'tracing' extra)."""
    probe = (
        "import importlib, json, pkgutil, rankscope.collectors as c; missing = {}\n"
        "for m in pkgutil.walk_packages(c.__path__, 'rankscope.collectors.'):\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        missing[m.name] = exc.name\n"
        "print(json.dumps(missing))"
    )
    out = _run([str(agent_env), "-c", probe], cwd=tmp_path, env=_clean_env(tmp_path))
    assert json.loads(out) == {"rankscope.collectors.otel": "opentelemetry"}


def test_a_command_of_another_role_names_its_extra(agent_env: Path, tmp_path: Path) -> None:
    rankscope = agent_env.parent / "rankscope"
    r = subprocess.run(
        [str(rankscope), "sink", "--bootstrap", "127.0.0.1:1", "--clickhouse-url", "http://x:1"],
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    # which of the sink's packages is imported first is the sink's business
    assert re.fullmatch(
        r"rankscope: error: rankscope sink needs the 'sink' extra \((clickhouse_connect|orjson|"
        r"sqlglot) is not installed\): pip install 'rankscope\[sink\]'",
        line,
    ), line


def _real_nccl_line() -> str:
    """A real NCCL WARN line (tests/data/nccl_log/real_lines.json cites its public source)."""
    data = json.loads((ROOT / "tests" / "data" / "nccl_log" / "real_lines.json").read_text())
    base = next(b for b in data["bases"] if b["source"] == "NVIDIA/nccl issue 963")
    return str(base["line"])


def _consume(bootstrap: str, topic: str, done: object, timeout_s: float) -> list[Event]:
    """Events on ``topic`` from the beginning until ``done(events)`` or the deadline."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"it-agent-extra-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    events: list[Event] = []
    try:
        md = consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done(events):  # type: ignore[operator]
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                events.extend(EVENT_LIST_ADAPTER.validate_json(msg.value()))
    finally:
        consumer.close()
    return events


def test_the_agent_of_the_agent_only_install_publishes_to_the_local_broker(
    agent_env: Path, services: Services, tmp_path: Path
) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}")
    create_pipeline_topics(services.bootstrap, topics, partitions=1)
    logs = tmp_path / "nccl"
    logs.mkdir()
    # a token planted after the real line (GitHub's classic-token shape, docs/redaction-formats.md;
    # a generated value): the agent redacts at the source, so the raw topic never holds it
    planted = " (export GITHUB_TOKEN=ghp_R8vKq2LmX7tZp4WnY9cBd3HfJs6GaE1uQo5V)"
    (logs / "nccl.node.248281").write_text(_real_nccl_line() + planted + "\n")
    config = {
        "cluster": "it",
        "node": "agent-extra-node-01",
        "kafka": {"bootstrap": services.bootstrap, "topic_prefix": topics.prefix, "linger_ms": 5},
        "spool": {"dir": str(tmp_path / "spool")},
        "heartbeat_interval_s": 0.5,
        "nccl_log": {"paths": [str(logs / "nccl.*")], "from_start": True, "interval_s": 0.2},
        # source redaction on (the default): light mode, no Presidio in this install
    }
    path = tmp_path / "agent.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = tmp_path / "agent.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(agent_env.parent / "rankscope"), "agent", "-c", str(path), "--metrics-port", "-1"],
            cwd=tmp_path,
            env=_clean_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def done(events: list[Event]) -> bool:
            kinds = {e.kind for e in events}
            return {"heartbeat", "comm_event"} <= kinds

        events = _consume(services.bootstrap, topics.raw, done, timeout_s=90)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()
    assert done(events), f"{sorted({e.kind for e in events})}\n{log.read_text()}"
    (comm,) = [e for e in events if isinstance(e, CommEventEvent)]
    # what the data file says the parser reads from this line
    assert comm.node == "agent-extra-node-01" and comm.gpu == 2
    assert (comm.payload.source, comm.payload.event_type) == ("nccl", "remote_process_exited")
    assert (comm.payload.peer, comm.payload.pid) == ("172.17.0.2<40537>", 248281)
    assert "ghp_" not in comm.payload.message and "[API_TOKEN]" in comm.payload.message
