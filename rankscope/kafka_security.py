"""One settings block for how every Kafka client authenticates: TLS, SASL (SCRAM) and mTLS.

Every client the project builds (publisher and agent, faust worker, sink, recovery runner, admin
and probes, CLI) takes its security from here, so one operator setting covers them all:

* :class:`KafkaSecurity` is the typed block; a client given one explicitly uses it (tests run
  several principals in one process);
* otherwise :func:`security_from_env` reads ``RANKSCOPE_KAFKA_*`` variables and the optional
  file named by ``RANKSCOPE_KAFKA_CONFIG_FILE`` (YAML), so processes the pipeline spawns inherit
  the operator's setting;
* :func:`kafka_config` is the librdkafka (confluent-kafka) dict, :func:`faust_credentials` the
  faust/aiokafka one;
* :func:`check_access` turns a failed login into one :class:`KafkaAuthError` line instead of
  librdkafka retrying forever.

A leaf module (stdlib, pydantic, confluent-kafka; faust only when asked for), so collectors,
streams and sinks may import it without importing the orchestration layer.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from confluent_kafka import KafkaError, KafkaException, Producer
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT

__all__ = [
    "AUTH_ERROR_CODES",
    "CONFIG_FILE_ENV",
    "ENV_PREFIX",
    "KafkaAuthError",
    "KafkaSecurity",
    "KafkaUnreachableError",
    "check_access",
    "faust_credentials",
    "kafka_config",
    "resolve",
    "security_from_env",
]

ENV_PREFIX = "RANKSCOPE_KAFKA_"
CONFIG_FILE_ENV = "RANKSCOPE_KAFKA_CONFIG_FILE"

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]

#: librdkafka's codes for a login or handshake the broker refused (not a network problem)
AUTH_ERROR_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
    }
)
#: librdkafka's own log of a probe: the error it raises says it once, not every retry
_QUIET = logging.getLogger("rankscope.kafka_security.librdkafka")
_QUIET.propagate = False
_QUIET.addHandler(logging.NullHandler())


class KafkaAuthError(RuntimeError):
    """The broker refused this client's credentials or TLS handshake (one line, no traceback)."""


class KafkaUnreachableError(ConnectionError):
    """No broker answered within the deadline (wrong address, broker down, network)."""


class KafkaSecurity(BaseModel):
    """How a Kafka client authenticates; the default (PLAINTEXT) is the local dev broker's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    security_protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: Mechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = Field(
        default=None, description="Read the password from this file (a mounted secret)."
    )
    ssl_ca_file: Path | None = Field(
        default=None, description="CA bundle (PEM) the broker's certificate must chain to."
    )
    ssl_cert_file: Path | None = Field(default=None, description="Client certificate (mTLS).")
    ssl_key_file: Path | None = Field(default=None, description="Client private key (mTLS).")
    ssl_key_password: SecretStr | None = None
    ssl_endpoint_identification: bool = Field(
        default=True, description="Check the broker's certificate names its host (off: lab only)."
    )

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.sasl:
            if not self.sasl_username:
                raise ValueError(f"{self.security_protocol} needs sasl_username")
            if self.sasl_password is None and self.sasl_password_file is None:
                raise ValueError(
                    f"{self.security_protocol} needs sasl_password or sasl_password_file"
                )
        if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
            raise ValueError("mTLS needs both ssl_cert_file and ssl_key_file")
        return self

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def password(self) -> str:
        """The SASL password, read from its file at use so a rotated secret is picked up."""
        if self.sasl_password is not None:
            return self.sasl_password.get_secret_value()
        if self.sasl_password_file is not None:
            return self.sasl_password_file.read_text().strip()
        return ""

    def describe(self) -> str:
        """``user 'x' (SASL_SSL/SCRAM-SHA-512)``: who tried, for error lines (no secrets)."""
        how = self.security_protocol + (f"/{self.sasl_mechanism}" if self.sasl else "")
        who = f"user {self.sasl_username!r} " if self.sasl else ""
        return f"{who}({how})"

    def librdkafka(self) -> dict[str, Any]:
        """The librdkafka (confluent-kafka) properties for this block."""
        conf: dict[str, Any] = {"security.protocol": self.security_protocol.lower()}
        if self.sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.password()
        if self.tls:
            if self.ssl_ca_file is not None:
                conf["ssl.ca.location"] = str(self.ssl_ca_file)
            if self.ssl_cert_file is not None and self.ssl_key_file is not None:
                conf["ssl.certificate.location"] = str(self.ssl_cert_file)
                conf["ssl.key.location"] = str(self.ssl_key_file)
            if self.ssl_key_password is not None:
                conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
            conf["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        return conf

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context aiokafka (faust) uses: same CA, client certificate and host check."""
        ctx = ssl.create_default_context(cafile=str(self.ssl_ca_file) if self.ssl_ca_file else None)
        ctx.check_hostname = self.ssl_endpoint_identification
        if self.ssl_cert_file is not None and self.ssl_key_file is not None:
            key_password = (
                self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            )
            ctx.load_cert_chain(str(self.ssl_cert_file), str(self.ssl_key_file), key_password)
        return ctx

    def to_env(self) -> dict[str, str]:
        """``RANKSCOPE_KAFKA_*`` variables that :func:`security_from_env` reads back as this
        block (a spawned process's environment)."""
        env: dict[str, str] = {f"{ENV_PREFIX}SECURITY_PROTOCOL": self.security_protocol}
        for name, raw in self.model_dump(exclude={"security_protocol"}).items():
            if raw is None:
                continue
            value = raw.get_secret_value() if isinstance(raw, SecretStr) else raw
            text = str(value).lower() if isinstance(value, bool) else str(value)
            env[f"{ENV_PREFIX}{name.upper()}"] = text
        return env


class _EnvSecurity(BaseSettings):
    """The environment and config-file side of :class:`KafkaSecurity` (env wins over file)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    security_protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: Mechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_ca_file: Path | None = None
    ssl_cert_file: Path | None = None
    ssl_key_file: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_endpoint_identification: bool = True

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"{CONFIG_FILE_ENV}={config_file}: no such file")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)


def security_from_env() -> KafkaSecurity:
    """The operator's block: ``RANKSCOPE_KAFKA_*`` variables over ``RANKSCOPE_KAFKA_CONFIG_FILE``.

    Read at each call (cheap), so a process's clients follow its environment."""
    return KafkaSecurity.model_validate(_EnvSecurity().model_dump())


def resolve(security: KafkaSecurity | None) -> KafkaSecurity:
    """An explicit block wins; None means the environment's."""
    return security if security is not None else security_from_env()


def kafka_config(
    bootstrap: str, security: KafkaSecurity | None = None, /, **settings: Any
) -> dict[str, Any]:
    """A confluent-kafka client config: bootstrap, the security block, then ``settings``
    (dotted librdkafka names may be passed through ``**{"group.id": ...}``)."""
    return {"bootstrap.servers": bootstrap, **resolve(security).librdkafka(), **settings}


def faust_credentials(security: KafkaSecurity | None = None) -> CredentialsT | None:
    """faust's ``broker_credentials`` for the block (None for PLAINTEXT).

    faust hands these to aiokafka, which supports SCRAM-SHA-256/512 and PLAIN over SASL and
    takes TLS (CA, client certificate, host check) as an ``ssl.SSLContext``."""
    import faust

    sec = resolve(security)
    if sec.sasl:
        return faust.SASLCredentials(
            username=sec.sasl_username,
            password=sec.password(),
            ssl_context=sec.ssl_context() if sec.tls else None,
            mechanism=sec.sasl_mechanism,
        )
    if sec.tls:
        return faust.SSLCredentials(sec.ssl_context())
    return None


def check_access(
    bootstrap: str, security: KafkaSecurity | None = None, timeout_s: float = 15.0
) -> None:
    """Log in and fetch metadata once; raise one-line errors instead of retrying forever.

    Long-running stages call this before they start: librdkafka and aiokafka would otherwise
    log a refused login and retry it for good, which looks like a hang."""
    sec = resolve(security)
    errors: list[KafkaError] = []
    probe = Producer(
        kafka_config(
            bootstrap,
            sec,
            **{"error_cb": errors.append, "logger": _QUIET, "socket.timeout.ms": 10_000},
        )
    )
    deadline = time.monotonic() + timeout_s
    failure = "no metadata"
    while True:  # short tries, so a refused login is reported at once, not at the deadline
        try:
            probe.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            failure = str(exc.args[0] if exc.args else exc)
        probe.poll(0)  # deliver error_cb for what happened meanwhile
        refused = [e for e in errors if e.code() in AUTH_ERROR_CODES]
        if refused:
            reason = refused[-1].str().replace("\n", " ")
            raise KafkaAuthError(
                f"Kafka authentication failed for {sec.describe()} at {bootstrap}: {reason}"
            )
        if time.monotonic() >= deadline:
            detail = errors[-1].str() if errors else failure
            raise KafkaUnreachableError(
                f"Kafka at {bootstrap} did not answer in {timeout_s:g}s as {sec.describe()}: "
                f"{detail}"
            )
