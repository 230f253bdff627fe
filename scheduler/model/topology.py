"""The cluster as a tree (Sakkara, seed 004), and placement constraints per level.

Levels are named top to bottom and end with the node level, e.g. ("zone", "rack", "node").
Every node has a path: the unit it belongs to at each level, the node itself last. Without a
topology the tree is flat: the root and the nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PACK = "pack"
SPREAD = "spread"


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    levels: tuple[str, ...]
    paths: Mapping[str, tuple[str, ...]]  # node name -> unit per level, top to bottom
    resource_names: tuple[str, ...] = ("cpu", "memory")
    # Tree entries that could not be used, said once (unknown nodes, duplicates).
    warnings: tuple[str, ...] = ()

    @classmethod
    def flat(cls, nodes: tuple[str, ...] | list[str]) -> Topology:
        return cls(name="flat", levels=("node",), paths={n: (n,) for n in nodes})

    def unit(self, node: str, level: str) -> str:
        """The unit ``node`` belongs to at ``level``."""
        return self.paths[node][self.levels.index(level)]

    def distance(self, a: str, b: str) -> int:
        """Edges between two nodes in the tree (0 for the same node)."""
        pa, pb = self.paths[a], self.paths[b]
        shared = 0
        for x, y in zip(pa, pb, strict=True):
            if x != y:
                break
            shared += 1
        return 2 * (len(pa) - shared)


@dataclass(frozen=True, slots=True)
class LevelConstraint:
    """How a gang's members spread over the units of one level (chic-sched's LevelConstraint).

    ``type`` pack puts as many as possible on one unit, spread as evenly as possible;
    ``partitions`` divides the gang into that many near-equal parts, one unit each;
    ``min``/``max`` bound the members per used unit; ``factor`` makes that a multiple.
    Soft unless ``hard``: a hard constraint that cannot be met places nothing.
    """

    level: str
    type: str = PACK
    partitions: int | None = None
    min: int | None = None
    max: int | None = None
    factor: int | None = None
    hard: bool = False


@dataclass(frozen=True, slots=True)
class Constraints:
    by_level: Mapping[str, LevelConstraint] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
