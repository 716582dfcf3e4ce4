"""Whole-node slowdowns: every rank of one node slower by a similar factor, steadily.

Why a module of its own: config drift (another driver, NCCL or CUDA on one node) costs a few
percent on *every* rank of that node, which per-rank straggler rules either miss (3-5% is inside
the per-rank noise) or report as several per-rank compute stragglers (issue 20). The node is the
unit: per step, the median of its ranks' compute ratios averages the per-rank jitter away (the
standard error of a windowed median shrinks with sqrt(ranks x steps)), so a steady 3% on an
8-GPU node stands out at 3% jitter and 5% does at 8%. The pattern alone decides, not magnitude:
the node's median ratio above the job's noise bound, above 1 in most steps (steady), and most of
its ranks slow (uniform, not one bad GPU). The caller rules out thermal and input causes and
reads the inventory fingerprint as supporting evidence.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

#: (1.2533)^2: a median's standard error over a normal mean's, applied twice (ranks, steps)
_MEDIAN_EFFICIENCY_2 = 1.5708


class NodeSlowdownConfig(BaseModel):
    min_ratio: float = Field(
        default=1.02, gt=1, description="A node slower than this x the median, at least."
    )
    z: float = Field(
        default=4.5,
        ge=0,
        description="...and this many standard errors of the node's windowed median above 1.",
    )
    min_steps: int = Field(default=10, ge=2, description="Steps before a node is judged.")
    history: int = Field(default=30, ge=2, description="Steps of a node's ratios kept.")
    steady_share: float = Field(
        default=0.7, gt=0, le=1, description="The node's median above 1 in this share of steps."
    )
    uniform_share: float = Field(
        default=0.75, gt=0, le=1, description="This share of its ranks slower than the median."
    )


@dataclass
class _Node:
    ratios: deque[float]
    ranks: int = 0
    first_ts: int | None = None
    flagged: bool = False


@dataclass
class NodeSlowdown:
    """Per node, the median of its ranks' compute ratios per step, and the pattern test."""

    config: NodeSlowdownConfig = field(default_factory=NodeSlowdownConfig)
    nodes: dict[str, _Node] = field(default_factory=dict)

    def on_step(self, ratios_by_node: Mapping[str, list[float]], step_end_ts: int) -> None:
        for name, ratios in ratios_by_node.items():
            node = self.nodes.get(name)
            if node is None:
                node = self.nodes[name] = _Node(ratios=deque(maxlen=self.config.history))
            node.ranks = max(node.ranks, len(ratios))
            med = statistics.median(ratios)
            node.ratios.append(med)
            if med > 1 and node.first_ts is None:
                node.first_ts = step_end_ts

    def candidate(self, name: str, spread: float) -> float | None:
        """The node's median ratio when it is steadily above the job's noise bound, else None
        (``spread``: the job's per-step robust sigma of compute ratios)."""
        cfg = self.config
        node = self.nodes.get(name)
        if node is None or node.ranks < 2 or len(node.ratios) < cfg.min_steps:
            return None
        n = len(node.ratios)
        ratio = statistics.median(node.ratios)
        bound = cfg.z * math.sqrt(_MEDIAN_EFFICIENCY_2) * spread / math.sqrt(node.ranks * n)
        if ratio < max(cfg.min_ratio, 1 + bound):
            return None
        if sum(r > 1 for r in node.ratios) < cfg.steady_share * n:
            return None
        return ratio

    def uniform(self, ratio: float, rank_medians: list[float]) -> bool:
        """Most of the node's ranks (each's median ratio over its recent steps) share the
        slowdown: not one bad GPU pulling the node's median."""
        part = 1 + (ratio - 1) / 4  # a quarter of the node's excess: jitter moves the rest
        need = self.config.uniform_share * len(rank_medians)
        return sum(r >= part for r in rank_medians) >= need

    def recovered(self, name: str) -> bool:
        """A flagged node whose recent steps are back at the job median: re-arm."""
        node = self.nodes.get(name)
        if node is None or len(node.ratios) < self.config.min_steps:
            return False
        recent = list(node.ratios)[-self.config.min_steps :]
        return statistics.median(recent) <= 1.0
