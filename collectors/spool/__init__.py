"""A bounded on-disk spool: the node agent's write-ahead log between sampling and Kafka.

Why: a broker outage (or a network partition, or a rolling Kafka upgrade) must not lose the very
telemetry that explains why a job died during it. The agent therefore writes every event batch
here *before* handing it to the producer, and forgets it only after Kafka confirmed delivery.
While the broker is unreachable the agent keeps sampling into the spool; when it returns, the
spool is replayed in order. A crash (or ``kill -9``) of the agent loses nothing that was spooled:
a restart replays everything not yet acknowledged. Replay may duplicate a batch that was
delivered but not yet acknowledged here; that is fine, ClickHouse writes are idempotent by
``event_id``.

The package holds one module per part; the public names are re-exported here, so
``from rankscope.collectors.spool import Spool`` stays the import path:

* :mod:`~rankscope.collectors.spool.segments`: the on-disk format (record frames, segment files)
  and the in-memory index of one segment;
* :mod:`~rankscope.collectors.spool.directory`: the spool directory's lock, crash recovery on
  open, cursor file and segment deletion;
* :mod:`~rankscope.collectors.spool.core`: :class:`Spool` itself (append, read, ack within the
  byte bound, durability, thread safety).
"""

from rankscope.collectors.spool.core import (
    DEFAULT_MAX_BYTES,
    DEFAULT_SEGMENT_BYTES,
    FsyncPolicy,
    RecordTooLargeError,
    Spool,
    SpoolStats,
)
from rankscope.collectors.spool.directory import SpoolError
from rankscope.collectors.spool.segments import SpoolRecord

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "FsyncPolicy",
    "RecordTooLargeError",
    "Spool",
    "SpoolError",
    "SpoolRecord",
    "SpoolStats",
]
