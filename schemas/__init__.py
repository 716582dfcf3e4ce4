"""Event contracts: pydantic models are the single definition; JSON Schema is exported from them."""

from rankscope.schemas.derived import DeadLetter, LateEvent, RankWindow
from rankscope.schemas.envelope import Envelope, new_event_id
from rankscope.schemas.events import (
    EVENT_ADAPTER,
    EVENT_LIST_ADAPTER,
    EVENT_MODELS,
    KINDS,
    MODEL_BY_SCHEMA,
    AgentEventEvent,
    CommEventEvent,
    Event,
    FabricCountersEvent,
    FabricEventEvent,
    GpuEventEvent,
    GpuSampleEvent,
    HeartbeatEvent,
    NodeInventoryEvent,
    SchedulerEventEvent,
    SpanEvent,
    dump_event,
    dump_events,
)
from rankscope.schemas.topics import Topics, partition_key

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_LIST_ADAPTER",
    "EVENT_MODELS",
    "KINDS",
    "MODEL_BY_SCHEMA",
    "AgentEventEvent",
    "CommEventEvent",
    "DeadLetter",
    "Envelope",
    "Event",
    "FabricCountersEvent",
    "FabricEventEvent",
    "GpuEventEvent",
    "GpuSampleEvent",
    "HeartbeatEvent",
    "LateEvent",
    "NodeInventoryEvent",
    "RankWindow",
    "SchedulerEventEvent",
    "SpanEvent",
    "Topics",
    "dump_event",
    "dump_events",
    "new_event_id",
    "partition_key",
]
