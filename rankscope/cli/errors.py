"""The CLI's failure contract: known failures become one readable line on stderr and an exit
code from ``rankscope.cli.options.EXIT_CODES``, so an operator (or a systemd unit, or CI) sees
what to fix instead of a few hundred lines of traceback. ``--debug`` (or ``RANKSCOPE_DEBUG=1``)
keeps the traceback.

Only failures an operator can act on are translated (a service down, a login refused, a missing
file, invalid settings); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from rankscope.cli.options import EXIT_INPUT, EXIT_UNREACHABLE

__all__ = ["explain"]

#: ``[Errno 111] Connection refused`` / ``timed out`` inside a client library's long message
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")
_URL = re.compile(r"\((https?://[^)\s]+)\)")


def _without_login(url: str) -> str:
    """A URL fit for an error line: the login is dropped, the password never printed."""
    parts = urlsplit(url)
    if parts.hostname is None or "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _reason(text: str) -> str:
    """The cause a client library buries in its message, in a few words."""
    found: list[str] = _ERRNO.findall(text)
    if found:
        return found[-1].strip().lower()
    if "timed out" in text.lower() or "timeout" in text.lower():
        return "timed out"
    first = text.strip().splitlines()[0] if text.strip() else "no answer"
    return first[:300]


def _clickhouse(exc: Exception) -> tuple[int, str] | None:
    try:
        from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError
    except ImportError:  # an agent-only install has no ClickHouse client
        return None
    if not isinstance(exc, ClickHouseError):
        return None
    text = str(exc)
    if isinstance(exc, OperationalError):
        urls = _URL.findall(text)
        where = f" at {_without_login(urls[-1])}" if urls else ""
        return EXIT_UNREACHABLE, f"cannot reach ClickHouse{where}: {_reason(text)}"
    # the server answered (bad SQL, no such table, no grant): the request was wrong
    return EXIT_INPUT, f"ClickHouse: {' '.join(text.split())[:500]}"


def _kafka(exc: Exception) -> tuple[int, str] | None:
    from rankscope.kafka_security import KafkaAuthError, KafkaUnreachableError

    if isinstance(exc, KafkaAuthError | KafkaUnreachableError):
        return EXIT_UNREACHABLE, str(exc)
    try:
        from confluent_kafka import KafkaError, KafkaException
    except ImportError:
        return None
    if not isinstance(exc, KafkaException):
        return None
    err = exc.args[0] if exc.args else None
    text = err.str() if isinstance(err, KafkaError) else str(exc)
    return EXIT_UNREACHABLE, f"Kafka: {' '.join(text.split())}"


def _validation(exc: Exception) -> tuple[int, str] | None:
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or exc.title
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return EXIT_INPUT, f"invalid {exc.title} {where}: {first['msg']}{more}"


def _local(exc: Exception) -> tuple[int, str] | None:
    from rankscope.collectors.agent.registry import AgentConfigError

    if isinstance(exc, FileNotFoundError):
        return EXIT_INPUT, f"no such file: {exc.filename or exc}"
    # ValueError subclass raised before any request: a password over plain HTTP
    if isinstance(exc, AgentConfigError) or type(exc).__name__ == "InsecureClickHouseURL":
        return EXIT_INPUT, str(exc)
    if isinstance(exc, ConnectionError | TimeoutError):
        return EXIT_UNREACHABLE, f"cannot connect: {exc}"
    return None


#: the commands that run the local services (the whole pipeline): they need the 'local' extra
_LOCAL_COMMANDS = frozenset({"demo", "simulate", "eval", "services"})


def _extra(exc: Exception, command: str) -> tuple[int, str] | None:
    """A package of another role's extra is not installed (README "Install")."""
    from rankscope.extras import MissingExtraError, missing_extra

    if isinstance(exc, MissingExtraError):  # raised deeper, it names its own code path
        return EXIT_INPUT, f"{command}: {exc}"
    missing = missing_extra(exc, command)
    if missing is None:
        return None
    words = command.split()
    if len(words) > 1 and words[1] in _LOCAL_COMMANDS and missing.extra != "local":
        # these run the whole pipeline on this machine: one extra has all of it
        missing = MissingExtraError(command, "local", str(missing.name))
    return EXIT_INPUT, str(missing)


def explain(exc: BaseException, command: str = "this command") -> tuple[int, str] | None:
    """``(exit code, one line)`` for a failure an operator can fix; None for a bug.

    ``command``: how the failing command is named in the line (``rankscope sink``)."""
    if not isinstance(exc, Exception):
        return None
    extra = _extra(exc, command)
    if extra is not None:
        return extra
    for translate in (_kafka, _clickhouse, _validation, _local):
        known = translate(exc)
        if known is not None:
            return known
    return None
