"""The agent's entry point for the CLI: load the config, run until a signal, stop cleanly."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rankscope.collectors.agent.config import AgentConfig
from rankscope.collectors.agent.registry import CollectorSpec
from rankscope.collectors.agent.runtime import Agent
from rankscope.collectors.agent.stats import AgentStats
from rankscope.observability.exporters import serve_agent
from rankscope.observability.server import MetricsServer

__all__ = ["run_agent"]


def run_agent(
    config_path: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    collectors: Iterable[CollectorSpec] = (),
    status: Callable[[AgentStats], None] | None = None,
    status_interval_s: float = 30.0,
    on_start: Callable[[Agent], None] | None = None,
    stop_event: threading.Event | None = None,
    install_signal_handlers: bool = True,
    metrics_port: int | None = None,
) -> AgentStats:
    """Load the config, run the agent until SIGTERM/SIGINT (or ``stop_event``), then stop it
    cleanly: collectors stopped, spool delivered within ``shutdown_timeout_s``, the rest
    persisted for the next start. Returns the final stats (the CLI then exits 0).

    ``status`` is called every ``status_interval_s`` with a stats snapshot, ``on_start`` once
    the agent runs. Signal handlers are installed only on the main thread and restored after.
    ``/metrics``, ``/healthz`` and ``/readyz`` are served on ``metrics_port`` unless None.
    """
    config = AgentConfig.load(config_path, env)
    stop = stop_event or threading.Event()
    agent = Agent(config, collectors=collectors)
    server: MetricsServer | None = None
    previous: dict[signal.Signals, Any] = {}
    if install_signal_handlers and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        agent.start()
        if metrics_port is not None:
            server = serve_agent(agent.stats, metrics_port)
        if on_start is not None:
            on_start(agent)
        interval = status_interval_s if status is not None and status_interval_s > 0 else 3600.0
        while not stop.wait(interval):
            if status is not None:
                status(agent.stats())
    finally:
        final = agent.stop()
        if server is not None:
            server.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return final
