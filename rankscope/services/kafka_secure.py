"""The local broker's optional SASL_SSL listener: TLS from PEM, SCRAM users, ACLs enforced.

What a deployment would run, on one node: the client listener speaks only SASL_SSL (SCRAM-SHA-512
over TLS, optionally with client certificates), users are created when the storage is formatted
(KRaft keeps SCRAM credentials in its metadata log), and the StandardAuthorizer denies whatever
no ACL allows. The admin user is a super user (it creates topics and ACLs) and is also the
broker's own inter-broker login. The KRaft controller listener stays PLAINTEXT on 127.0.0.1 with
``User:ANONYMOUS`` as a super user: the broker half registers with the controller half over it,
and KRaft does not support SCRAM there. That is acceptable for a loopback test broker only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rankscope.kafka_security import KafkaSecurity

__all__ = ["SecureListener"]

MECHANISM = "SCRAM-SHA-512"
_TOKEN = re.compile(r"[A-Za-z0-9._~+/@-]{1,256}")


def _inline(pem: str) -> str:
    """A PEM block as one properties value (java.util.Properties turns ``\\n`` back)."""
    return pem.strip().replace("\n", "\\n")


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class SecureListener(BaseModel):
    """Certificates, users and client-auth policy of the broker's SASL_SSL listener."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_file: Path = Field(description="CA (PEM) clients and the broker trust.")
    server_cert_file: Path = Field(description="Broker certificate chain (PEM), SAN 127.0.0.1.")
    server_key_file: Path = Field(description="Broker private key, unencrypted PKCS#8 PEM.")
    users: dict[str, str] = Field(description="SCRAM-SHA-512 user -> password, made at format.")
    admin_user: str = Field(default="admin", description="Super user; the broker's own login.")
    client_auth: Literal["required", "requested", "none"] = Field(
        default="none", description="'required': mTLS, every client presents a CA-signed cert."
    )

    @field_validator("users")
    @classmethod
    def _plain_tokens(cls, users: dict[str, str]) -> dict[str, str]:
        """Names and passwords go into ``--add-scram name=..,password=..`` and a JAAS line:
        only characters neither format treats specially."""
        for text in (*users, *users.values()):
            if not _TOKEN.fullmatch(text):
                raise ValueError("SCRAM user names and passwords: letters, digits and ._~+/@-")
        return users

    def broker_config(
        self,
        host: str,
        port: int,
        controller_port: int,
        *,
        bind_host: str | None = None,
        controller_host: str | None = None,
        external: tuple[str, int] | None = None,
    ) -> dict[str, str]:
        """server.properties entries that replace the PLAINTEXT client listener.

        Clients reach the broker as ``host:port`` (listener ``SASL_SSL``, bound on ``bind_host``,
        default ``host``); ``external`` adds a second SASL_SSL listener, ``EXTERNAL``, advertised
        as that (host, port) and bound on ``bind_host`` too (a port published to another network,
        as compose does). The controller listener binds ``controller_host`` (default ``host``):
        keep it a loopback address, it is PLAINTEXT with ``User:ANONYMOUS`` a super user.
        The certificates go in line, so the file needs nothing else at the broker's paths."""
        if self.admin_user not in self.users:
            raise ValueError(f"admin user {self.admin_user!r} needs a password in users")
        bind = host if bind_host is None else bind_host
        controller = host if controller_host is None else controller_host
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{_jaas_quote(self.admin_user)}" '
            f'password="{_jaas_quote(self.users[self.admin_user])}";'
        )
        # name -> (bound address, advertised address), every one SASL_SSL
        client_listeners = {"SASL_SSL": (f"{bind}:{port}", f"{host}:{port}")}
        if external is not None:
            ext_host, ext_port = external
            client_listeners["EXTERNAL"] = (f"{bind}:{ext_port}", f"{ext_host}:{ext_port}")
        listeners = [f"{name}://{bound}" for name, (bound, _) in client_listeners.items()]
        config = {
            "listeners": ",".join([*listeners, f"CONTROLLER://{controller}:{controller_port}"]),
            "advertised.listeners": ",".join(
                f"{name}://{advertised}" for name, (_, advertised) in client_listeners.items()
            ),
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": ",".join(
                [*(f"{name}:SASL_SSL" for name in client_listeners), "CONTROLLER:PLAINTEXT"]
            ),
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
        }
        for name in client_listeners:
            config[f"listener.name.{name.lower()}.{MECHANISM.lower()}.sasl.jaas.config"] = jaas
        return config | {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": _inline(self.server_cert_file.read_text()),
            "ssl.keystore.key": _inline(self.server_key_file.read_text()),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": _inline(self.ca_file.read_text()),
            "ssl.client.auth": self.client_auth,
            "ssl.endpoint.identification.algorithm": "https",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{self.admin_user};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def java_client_properties(self, user: str) -> dict[str, str]:
        """A Java client's (the Kafka CLI tools') properties to log in as ``user``, CA in line:
        what ``--command-config`` takes."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{_jaas_quote(user)}" password="{_jaas_quote(self.users[user])}";'
        )
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": jaas,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": _inline(self.ca_file.read_text()),
            "ssl.endpoint.identification.algorithm": "https",
        }

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that create the SCRAM users (KRaft, 3.5+)."""
        args: list[str] = []
        for name, password in self.users.items():
            args += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        return args

    def client(
        self,
        user: str,
        password: str | None = None,
        *,
        cert_file: Path | None = None,
        key_file: Path | None = None,
    ) -> KafkaSecurity:
        """The security block of a client logging in as ``user`` (its password unless given)."""
        return KafkaSecurity(
            security_protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_username=user,
            sasl_password=password if password is not None else self.users[user],
            ssl_ca_file=self.ca_file,
            ssl_cert_file=cert_file,
            ssl_key_file=key_file,
        )

    def admin(
        self, *, cert_file: Path | None = None, key_file: Path | None = None
    ) -> KafkaSecurity:
        return self.client(self.admin_user, cert_file=cert_file, key_file=key_file)
