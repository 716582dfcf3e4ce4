"""A local multi-node Kafka cluster (KRaft): N :class:`LocalKafka` nodes, each broker+controller.

For fault tests: replication factor N, ``min.insync.replicas`` N-1, so one node can be
SIGKILLed mid-stream and an ``acks=all`` producer, the stream worker and the sink carry on.
A KRaft quorum elects a leader only once a majority of its controllers are up, so the nodes
are launched together and awaited afterwards (a node started and awaited alone never gets
ready). Every node keeps its ports and data directory across :meth:`kill` and :meth:`start`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

from rankscope.services._common import Progress, free_port
from rankscope.services.kafka import HOST, KAFKA_VERSION, LocalKafka, new_cluster_id


def cluster_config(nodes: int) -> dict[str, str]:
    """Broker settings of an ``nodes``-node cluster: every topic (the consumer offsets and the
    transaction log too) on every node, writes acknowledged by all in-sync replicas, at least
    ``nodes - 1`` of them."""
    rf = str(nodes)
    isr = str(max(1, nodes - 1))
    return {
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        # an out-of-sync replica rejoins the ISR quickly after its restart
        "replica.lag.time.max.ms": "10000",
    }


class LocalKafkaCluster:
    """``nodes`` KRaft nodes on 127.0.0.1 sharing one cluster id and one controller quorum."""

    def __init__(
        self,
        data_dir: Path | None = None,
        nodes: int = 3,
        *,
        libs_dir: Path | None = None,
        version: str = KAFKA_VERSION,
        heap: str = "384m",
        progress: Progress | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self._owns_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="rankscope-kafka-cluster-"))
            if data_dir is None
            else data_dir
        ).resolve()
        self.cluster_id = new_cluster_id()
        ports: set[int] = set()

        def port() -> int:
            while (p := free_port(HOST)) in ports:
                pass
            ports.add(p)
            return p

        addresses = [(i + 1, port(), port()) for i in range(nodes)]
        voters = ",".join(f"{node_id}@{HOST}:{ctl}" for node_id, _, ctl in addresses)
        config = cluster_config(nodes)
        self.nodes = [
            LocalKafka(
                self.data_dir / f"node-{node_id}",
                client_port,
                controller_port,
                libs_dir=libs_dir,
                version=version,
                heap=heap,
                extra_config=config,
                progress=progress,
                node_id=node_id,
                cluster_id=self.cluster_id,
                quorum_voters=voters,
            )
            for node_id, client_port, controller_port in addresses
        ]

    @property
    def bootstrap(self) -> str:
        """Every node's listener, so a client finds the cluster whichever node is down."""
        return ",".join(node.bootstrap for node in self.nodes)

    def start(self, timeout_s: float = 120) -> Self:
        """Launch every node that is not running, then wait until each one lists them all."""
        for node in self.nodes:
            node.launch()
        deadline = time.monotonic() + timeout_s
        everyone = [node.node_id for node in self.nodes]
        try:
            for node in self.nodes:
                node.wait_ready(max(1.0, deadline - time.monotonic()), brokers=everyone)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, i: int) -> LocalKafka:
        """SIGKILL node ``i`` (0-based); its data directory and ports are kept."""
        node = self.nodes[i]
        node.kill()
        return node

    def start_node(self, i: int, timeout_s: float = 90) -> LocalKafka:
        """(Re)start node ``i`` on its ports and data directory; the others must form a quorum."""
        node = self.nodes[i]
        node.start(timeout_s)
        return node

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM every node (SIGKILL after timeout_s), then remove the data if we made it."""
        # together: a node shutting down alone waits for a quorum the others took away
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.stop(timeout_s), self.nodes))
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
