"""Process and port helpers shared by the local services (Kafka broker, chDB server)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Progress = Callable[[str], None]

# chDB server settings shared by the launcher (clickhouse_local) and the server module itself;
# kept here so that importing the launcher does not import the `-m` entry point.
DEFAULT_MEMORY_RATIO = 0.5  # max_server_memory_usage_to_ram_ratio: leave room for the broker


def run_dir_for(data_dir: Path) -> Path:
    """chDB's private working directory (config.xml, log), a sibling of its data dir."""
    return data_dir.parent / f"{data_dir.name}.run"


class ServiceError(RuntimeError):
    """A local service could not be prepared, started or stopped; the message carries log tails."""


def default_cache_dir() -> Path:
    """Where downloaded artefacts (Kafka jars, the Maven repo) live, shared by all state dirs."""
    env = os.environ.get("RANKSCOPE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "rankscope"
    return Path.home() / ".cache" / "rankscope"


def free_port(host: str = "127.0.0.1") -> int:
    """Let the kernel pick a free port; racy by nature, but good enough for local services."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def port_free(host: str, port: int) -> bool:
    """True when a server could bind host:port right now (TIME_WAIT leftovers don't count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Java and ClickHouse listen with SO_REUSEADDR, so mirror that here.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    """True when pid runs and is not a zombie (zombies of our own children are reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError, OSError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # Field 3 follows the parenthesised command name, which may itself contain spaces.
    state = stat.rpartition(")")[2].split()[:1]
    return state != ["Z"]


def pid_cmdline(pid: int) -> str:
    """The command line of pid joined by spaces, or "" when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def pid_matches(pid: int, *needles: str) -> bool:
    """Guard against pid reuse: pid is alive and its command line contains every needle."""
    if not pid_alive(pid):
        return False
    cmdline = pid_cmdline(pid)
    if not cmdline:  # no /proc (not Linux): trust the pid
        return True
    return all(needle in cmdline for needle in needles)


def pids_with(*needles: str) -> list[int]:
    """Live processes whose command line contains every needle (Linux /proc; [] elsewhere)."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        cmdline = pid_cmdline(int(entry.name))
        if cmdline and all(n in cmdline for n in needles) and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(data.splitlines()[-lines:])


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    """Poll predicate until it is true or timeout_s passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def terminate(pid: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM pid, wait up to timeout_s, then SIGKILL its process group (it leads its session)."""

    def alive() -> bool:
        if proc is not None:
            return proc.poll() is None
        return pid_alive(pid)

    if not alive():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_until(lambda: not alive(), timeout_s):
        _kill_group(pid)  # stragglers (e.g. chDB's engine child) go with their leader
        return
    _kill_group(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_until(lambda: not alive(), 10.0):
        raise ServiceError(f"process {pid} survived SIGKILL")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so concurrent `up`s or jar downloads don't race."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
