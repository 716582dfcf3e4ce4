"""The files the compose TLS overlay's broker runs from: SASL_SSL only, SCRAM users, ACLs enforced.

``rankscope services kafka-tls-config`` (a one-shot service of compose/compose.tls.yaml) writes
them into a volume the ``kafka`` service mounts; the broker's entrypoint is the start script:

* ``server.properties``: the one-node KRaft settings the local broker uses
  (:func:`~rankscope.services.kafka.single_node_config`) and the listener of
  :class:`~rankscope.services.kafka_secure.SecureListener`, certificates in line;
* ``kafka-start.sh``: formats the storage with the SCRAM users on first start (KRaft keeps them
  in its metadata log, so they must exist at format time), then ``exec`` s the broker;
* ``client.properties``: the admin's login for the Kafka CLI tools (the healthcheck);
* ``cluster.id``: kept, so a rewrite on the next ``up`` names the same cluster.

The apache/kafka image's own env-to-properties machinery is bypassed: it wants JKS key stores,
password files and a JAAS file for SSL/SASL listeners, and formats the storage without SCRAM users.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rankscope.services.kafka import new_cluster_id, single_node_config
from rankscope.services.kafka_secure import SecureListener

__all__ = [
    "CLIENT_PROPERTIES",
    "PROPERTIES",
    "START_SCRIPT",
    "ComposeBroker",
    "properties_text",
]

PROPERTIES = "server.properties"
START_SCRIPT = "kafka-start.sh"
CLIENT_PROPERTIES = "client.properties"
CLUSTER_ID = "cluster.id"


def properties_text(entries: dict[str, str]) -> str:
    """``key=value`` lines; values are plain tokens or in-line PEM (``\\n`` already escaped)."""
    return "".join(f"{key}={value}\n" for key, value in entries.items())


class ComposeBroker(BaseModel):
    """Where the containerised broker listens and finds its files (defaults: compose's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listener: SecureListener
    advertised_host: str = Field(default="kafka", description="Name clients on the network use.")
    port: int = 9092
    bind_host: str = Field(default="0.0.0.0", description="Client listeners bind here.")
    external: tuple[str, int] | None = Field(
        default=("localhost", 19092), description="A second SASL_SSL listener (host, port)."
    )
    controller_port: int = Field(default=9093, description="PLAINTEXT, on 127.0.0.1 only.")
    log_dir: str = "/var/lib/kafka/data"
    kafka_bin: str = Field(default="/opt/kafka/bin", description="The image's Kafka scripts.")

    def properties(self) -> dict[str, str]:
        controller = f"127.0.0.1:{self.controller_port}"
        return single_node_config(self.log_dir, controller) | self.listener.broker_config(
            self.advertised_host,
            self.port,
            self.controller_port,
            bind_host=self.bind_host,
            controller_host="127.0.0.1",
            external=self.external,
        )

    def start_script(self, config_dir: Path, cluster_id: str) -> str:
        """Format on first start (``--ignore-formatted`` later), then become the broker."""
        config = str(config_dir / PROPERTIES)
        bin_dir = Path(self.kafka_bin)
        fmt = [
            str(bin_dir / "kafka-storage.sh"),
            "format",
            "--cluster-id",
            cluster_id,
            "-c",
            config,
            "--ignore-formatted",
            *self.listener.format_args(),
        ]
        start = [str(bin_dir / "kafka-server-start.sh"), config]
        return (
            "#!/bin/sh\n"
            "# Written by `rankscope services kafka-tls-config`. SCRAM users are created when\n"
            "# the storage is first formatted; a formatted storage is left as it is.\n"
            "set -eu\n"
            f"{shlex.join(fmt)}\n"
            f"exec {shlex.join(start)}\n"
        )

    def write(self, out: Path, group: int | None = None) -> list[Path]:
        """Write the files into ``out`` (private to the owner, or to ``group`` when given: the
        broker's container joins that group to read them). Returns the paths written."""
        out.mkdir(parents=True, exist_ok=True)
        id_file = out / CLUSTER_ID
        cluster_id = id_file.read_text().strip() if id_file.is_file() else new_cluster_id()
        admin = self.listener.java_client_properties(self.listener.admin_user)
        files = {
            CLUSTER_ID: (cluster_id + "\n", 0o640),
            PROPERTIES: (properties_text(self.properties()), 0o640),
            CLIENT_PROPERTIES: (properties_text(admin), 0o640),
            START_SCRIPT: (self.start_script(out, cluster_id), 0o750),
        }
        written = []
        for name, (text, shared_mode) in files.items():
            path = out / name
            mode = shared_mode if group is not None else shared_mode & 0o700
            tmp = out / f".{name}.tmp"
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.chmod(tmp, mode)  # whatever the umask
            if group is not None:
                os.chown(tmp, -1, group)
            tmp.replace(path)
            written.append(path)
        os.chmod(out, 0o750 if group is not None else 0o700)
        if group is not None:
            os.chown(out, -1, group)
        return written
