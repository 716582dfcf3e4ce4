"""Fleet drift: each node pool's majority configuration and the nodes that diverge from it.

Why: driver, NCCL, CUDA, kernel, firmware and clock settings drift across node images and erode
throughput silently; the in-job ``config_drift`` straggler class sees it inside one job only.
This model sees the fleet. It is pure and decides in event time: it keeps, per node, the
inventories at which the node's configuration changed (sorted by event time), so the same
inventories in any arrival order, repeated or not, give the same findings.

- **Pool**: nodes that should be configured alike. Default key: ``gpu_model`` + ``gpu_count``,
  plus the value of the ``extra`` label named by ``pool_label`` where a node carries it (a
  scheduler partition or node-pool label copied into the inventory).
- **Attributes compared**: driver, CUDA, NCCL, kernel, OS, the set of GPU VBIOS versions, the
  set of HCA firmware versions, and every ``extra`` key not matching ``noise_keys`` (clocks,
  BIOS-like settings); serials, UUIDs, host names and addresses are per-node noise. An empty
  value (the agent could not read it) is unknown: it neither votes nor diverges.
- **Quorum**: a pool with fewer than ``min_pool_size`` nodes yields nothing; an attribute's
  majority value must be held by more than ``quorum`` of the nodes that report it (default:
  strictly more than half), so a tie has no majority and yields no finding.
- **Since**: the later of the event time at which the node took its current value (the first
  inventory of that run) and the event time at which the majority value reached quorum among
  the nodes now holding it. A node that returns to the majority clears.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from rankscope.schemas.derived import Detection
from rankscope.schemas.payloads import NodeInventory

#: attributes compared as they are (NodeInventory fields)
SCALAR_ATTRIBUTES = ("driver_version", "cuda_version", "nccl_version", "kernel", "os")
#: per-device maps compared as the set of their values (a GPU index or HCA name is no setting)
MAP_ATTRIBUTES = ("gpu_vbios", "hca_firmware")
#: the prefix of an ``extra`` setting's attribute name
EXTRA_PREFIX = "extra."
FLEET_JOB_PREFIX = "fleet:"


class FleetConfig(BaseModel):
    """How pools are formed and how much agreement a majority needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool_fields: tuple[str, ...] = Field(
        default=("gpu_model", "gpu_count"),
        description="NodeInventory fields whose values form the pool key.",
    )
    pool_label: str = Field(
        default="pool",
        description="An ``extra`` key whose value (a scheduler partition or node-pool label) "
        "is added to the pool key where a node carries it; empty: none.",
    )
    min_pool_size: int = Field(default=8, ge=3, description="Smaller pools yield nothing.")
    quorum: float = Field(
        default=0.5,
        ge=0.5,
        lt=1.0,
        description="The majority value must be held by MORE than this share of the nodes "
        "reporting the attribute (0.5: strict majority; a tie has none).",
    )
    noise_keys: str = Field(
        default=r"(?i).*(serial|uuid|guid|host|boot|mac|ip_?addr|address|uptime|pool).*",
        description="``extra`` keys (full match) that are per-node noise, never compared.",
    )


@dataclass(frozen=True)
class Config:
    """One node's configuration as compared: attribute -> value (unknown ones left out)."""

    fingerprint: str
    pool: str
    values: tuple[tuple[str, str], ...]

    def get(self, attribute: str) -> str:
        return dict(self.values).get(attribute, "")


def configuration(inv: NodeInventory, config: FleetConfig) -> Config:
    """The attributes of ``inv`` that count, and its pool key."""
    noise = re.compile(config.noise_keys)
    values: dict[str, str] = {}
    for name in SCALAR_ATTRIBUTES:
        v = str(getattr(inv, name))
        if v:
            values[name] = v
    for name in MAP_ATTRIBUTES:
        m: Mapping[str, str] = getattr(inv, name)
        if m:
            values[name] = ",".join(sorted(set(m.values())))
    for key, v in inv.extra.items():
        if v and not noise.fullmatch(key):
            values[EXTRA_PREFIX + key] = v
    pool = [f"{f}={getattr(inv, f)}" for f in config.pool_fields]
    if config.pool_label and inv.extra.get(config.pool_label):
        pool.append(f"{config.pool_label}={inv.extra[config.pool_label]}")
    return Config(inv.fingerprint, "|".join(pool), tuple(sorted(values.items())))


@dataclass(frozen=True)
class Difference:
    attribute: str
    value: str
    majority: str
    since_ns: int


@dataclass(frozen=True)
class DriftFinding:
    """One node that diverges from its pool's majority: what differs and since when."""

    cluster: str
    node: str
    pool: str
    pool_size: int
    fingerprint: str
    differences: tuple[Difference, ...]

    @property
    def since_ns(self) -> int:
        return min(d.since_ns for d in self.differences)

    @property
    def detection_id(self) -> str:
        """Per node and differing fingerprint: a re-emission rewrites the same row."""
        raw = f"node_drift|{self.cluster}|{self.node}|{self.fingerprint}".encode()
        return hashlib.blake2b(raw, digest_size=16).hexdigest()

    def detection(self, emitted_ns: int, cleared_ns: int = 0) -> Detection:
        """The ``node_drift`` Detection. Its job is the fleet pseudo-job ``fleet:<node>``: the
        finding belongs to no job, and the recovery decider's per-job bounds (cool-down,
        backoff) must not let one drifted node hold back the action on another.
        ``cleared_ns``: the node is back with its pool since then (the same row, rewritten)."""
        what = "; ".join(f"{d.attribute} {d.value} (pool: {d.majority})" for d in self.differences)
        details: dict[str, float | int | str] = {
            "pool": self.pool[:256],
            "pool_size": self.pool_size,
            "fingerprint": self.fingerprint,
            "differs": ",".join(d.attribute for d in self.differences)[:512],
        }
        for d in self.differences[:20]:
            details[f"value.{d.attribute}"[:128]] = d.value[:256]
            details[f"majority.{d.attribute}"[:128]] = d.majority[:256]
            details[f"since.{d.attribute}"[:128]] = d.since_ns
        if cleared_ns:
            details["cleared_ts"] = cleared_ns
            what = f"cleared at {cleared_ns}; was: {what}"
        return Detection(
            detection_id=self.detection_id,
            detection_type="node_drift",
            cluster=self.cluster,
            job_id=FLEET_JOB_PREFIX + self.node,
            node=self.node,
            score=float(len(self.differences)),
            onset_ts=self.since_ns,
            detected_ts=self.since_ns,
            emitted_ts=emitted_ns,
            summary=f"{self.node} differs from its pool ({self.pool}): {what}"[:2048],
            evidence=[
                f"{d.attribute}: {d.value} vs majority {d.majority} since {d.since_ns}"
                for d in self.differences
            ][:64],
            details=details,
        )


@dataclass
class _Node:
    """A node's distinct inventories sorted by (event time, fingerprint). Every one is kept (an
    agent sends at start and on change, so few): dropping a repeat could lose a change between
    two copies that arrives later, and the findings must not depend on arrival order."""

    changes: list[tuple[int, str, Config]] = field(default_factory=list)

    def add(self, ts: int, cfg: Config) -> bool:
        """Insert; False for an inventory already held (the agent re-sent it)."""
        key = (ts, cfg.fingerprint)
        i = bisect.bisect_left(self.changes, key, key=lambda c: (c[0], c[1]))
        if i < len(self.changes) and self.changes[i][:2] == key:
            return False
        self.changes.insert(i, (ts, cfg.fingerprint, cfg))
        return True

    @property
    def current(self) -> Config:
        return self.changes[-1][2]

    def value_since(self, attribute: str) -> int:
        """Event time of the first inventory of the current run of ``attribute``'s value."""
        value = self.current.get(attribute)
        since = self.changes[-1][0]
        for ts, _, cfg in reversed(self.changes):
            if cfg.get(attribute) != value:
                break
            since = ts
        return since


class FleetModel:
    """All nodes' inventories (per cluster) -> the findings of every pool."""

    def __init__(self, config: FleetConfig | None = None) -> None:
        self.config = config or FleetConfig()
        self._nodes: dict[tuple[str, str], _Node] = {}

    def observe(self, cluster: str, node: str, ts: int, inv: NodeInventory) -> bool:
        """One inventory at event time ``ts``; True when the fleet view may have changed."""
        n = self._nodes.setdefault((cluster, node), _Node())
        return n.add(ts, configuration(inv, self.config))

    def nodes(self) -> int:
        return len(self._nodes)

    def last_seen(self, cluster: str, node: str) -> int:
        """Event time of the node's newest inventory (0: never seen)."""
        n = self._nodes.get((cluster, node))
        return n.changes[-1][0] if n else 0

    def findings(self) -> list[DriftFinding]:
        """Every node diverging from its pool's majority now, sorted by (cluster, node)."""
        pools: dict[tuple[str, str], list[tuple[str, _Node]]] = {}
        for (cluster, node), n in sorted(self._nodes.items()):
            pools.setdefault((cluster, n.current.pool), []).append((node, n))
        out: list[DriftFinding] = []
        for (cluster, pool), members in sorted(pools.items()):
            out += self._pool_findings(cluster, pool, members)
        return sorted(out, key=lambda f: (f.cluster, f.node))

    def _pool_findings(
        self, cluster: str, pool: str, members: list[tuple[str, _Node]]
    ) -> Iterable[DriftFinding]:
        if len(members) < self.config.min_pool_size:
            return []
        attributes = sorted({a for _, n in members for a, _ in n.current.values})
        majority: dict[str, tuple[str, int]] = {}  # attribute -> (value, when it had quorum)
        for a in attributes:
            votes = Counter(v for _, n in members if (v := n.current.get(a)))
            reporting = sum(votes.values())
            ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))
            value, count = ranked[0]
            if count <= self.config.quorum * reporting:
                continue  # no majority (a tie included): nothing to diverge from
            needed = int(self.config.quorum * reporting) + 1
            starts = sorted(n.value_since(a) for _, n in members if n.current.get(a) == value)
            majority[a] = (value, starts[needed - 1])
        out = []
        for node, n in members:
            diffs = []
            for a, (value, quorum_ts) in majority.items():
                mine = n.current.get(a)
                if mine and mine != value:
                    since = max(n.value_since(a), quorum_ts)
                    diffs.append(Difference(a, mine, value, since))
            if diffs:
                out.append(
                    DriftFinding(
                        cluster, node, pool, len(members), n.current.fingerprint, tuple(diffs)
                    )
                )
        return out


class FleetView:
    """The model plus what was published: which findings are new or changed, which cleared.

    A cleared finding is published again under its id with ``details.cleared_ts`` (the event
    time of the node's newest inventory), so the row says the node is back with its pool."""

    def __init__(self, config: FleetConfig | None = None) -> None:
        self.config = config or FleetConfig()
        self.model = FleetModel(self.config)
        self.published: dict[str, DriftFinding] = {}
        self.dirty = False

    def observe(self, cluster: str, node: str, ts: int, inv: NodeInventory) -> None:
        self.dirty |= self.model.observe(cluster, node, ts, inv)

    def reset(self) -> None:
        """Start again: a rebuild replays the whole input next, and :meth:`settle` then
        publishes every current finding again (same ids: the same rows)."""
        self.model = FleetModel(self.config)
        self.published = {}
        self.dirty = False

    def settle(self, emitted_ns: int) -> tuple[list[Detection], list[Detection]]:
        """(new or changed findings, cleared findings) since the last call, as Detections."""
        self.dirty = False
        now = {f.detection_id: f for f in self.model.findings()}
        fresh = [f.detection(emitted_ns) for i, f in now.items() if self.published.get(i) != f]
        cleared = [
            f.detection(emitted_ns, cleared_ns=max(self.model.last_seen(f.cluster, f.node), 1))
            for i, f in self.published.items()
            if i not in now
        ]
        self.published = now
        return fresh, cleared
