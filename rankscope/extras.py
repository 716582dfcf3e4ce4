"""Which per-role extra installs a package that is missing (README "Install").

The base install is what the node agent needs; the packages of the other roles (faust, the
ClickHouse client, chDB, Presidio) come with an extra and are imported lazily by the commands
and code paths that use them. When one is absent, the user is told which extra to install
instead of being shown a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

__all__ = ["PROVIDED_BY", "MissingExtraError", "extra_for", "missing_extra"]

#: top-level (or dotted) module -> the extra of pyproject.toml that installs it; the longest
#: matching prefix wins (``tests/test_extras.py`` checks every entry against pyproject.toml)
PROVIDED_BY: dict[str, str] = {
    "pynvml": "agent",
    "opentelemetry.sdk": "tracing",
    "presidio_analyzer": "redact",
    "presidio_anonymizer": "redact",
    "spacy": "redact",
    "phonenumbers": "agent",  # (phonenumberslite installs the same module)
    "tldextract": "agent",
    "faust": "worker",
    "mode": "worker",
    "aiokafka": "worker",
    "uvloop": "worker",
    # the OTLP decoders of the worker (the namespace package alone: the worker's too)
    "opentelemetry": "worker",
    "opentelemetry.proto": "worker",
    "clickhouse_connect": "sink",
    "orjson": "sink",
    "sqlglot": "sink",
    "chdb": "local",
    "matplotlib": "local",
    "grafana_foundation_sdk": "local",
}


def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (a dotted name), or None for an unknown module."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        extra = PROVIDED_BY.get(".".join(parts[:n]))
        if extra is not None:
            return extra
    return None


class MissingExtraError(ImportError):
    """A code path needs a package of an extra that this install lacks."""

    def __init__(self, what: str, extra: str, module: str, hint: str = "") -> None:
        self.extra = extra
        super().__init__(
            f"{what} needs the {extra!r} extra ({module} is not installed): "
            f"pip install 'rankscope[{extra}]'{hint}",
            name=module,
        )


def missing_extra(exc: BaseException, what: str, hint: str = "") -> MissingExtraError | None:
    """``exc`` as a :class:`MissingExtraError` when it is an import of an extra's package."""
    if isinstance(exc, MissingExtraError):
        return exc
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    extra = extra_for(exc.name)
    return None if extra is None else MissingExtraError(what, extra, exc.name, hint)
