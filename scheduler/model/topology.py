"""The cluster as a tree (Sakkara), and placement constraints per level.

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
    # Level -> the node label its units are read from (a tree built from labels).
    label_keys: Mapping[str, str] = field(default_factory=dict)

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
    All of it counts over the whole gang, whatever levels lie above: partitions 2 on racks
    under zones is two racks in all (one in each of two zones, or both in one), not two per
    zone. Soft unless ``hard``: a hard constraint that cannot be met places nothing.
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

    def problems(self, *, levels: tuple[str, ...], size: int) -> list[str]:
        """What makes these constraints unusable on ``levels`` for a gang of ``size``. Their
        own ``errors`` are not repeated: the codec reported those, saying where they came from."""
        found: list[str] = []
        for level, c in sorted(self.by_level.items()):
            where = f"constraint for level {level!r}"
            if level not in levels:
                found.append(
                    f"{where}: the topology has no such level; its levels are {', '.join(levels)}"
                )
            if c.partitions is not None and c.partitions > size:
                found.append(f"{where}: {c.partitions} partitions for a gang of {size}")
            if c.hard and c.min is not None and c.min > size:
                found.append(f"{where}: hard min {c.min} for a gang of {size}")
        return found


def topology_from_labels(
    levels: tuple[tuple[str, str], ...], nodes: Mapping[str, Mapping[str, str]]
) -> Topology:
    """A tree from node labels ((level, label key), ...), then the nodes.

    This is how Volcano, Kueue and KAI describe topology. The level with the fewest distinct
    values is the top (zones above racks), whatever order the levels were given in; on a tie
    the one given last is higher. Nodes lacking one of the labels are left out of the tree.
    """
    distinct = {
        key: len({labels[key] for labels in nodes.values() if key in labels}) for _, key in levels
    }
    ranked = sorted(enumerate(levels), key=lambda il: (distinct[il[1][1]], -il[0]))
    levels = tuple(level for _, level in ranked)
    paths: dict[str, tuple[str, ...]] = {}
    for name, labels in nodes.items():
        units = tuple(labels.get(key, "") for _, key in levels)
        if all(units):
            paths[name] = (*units, name)
    return Topology(
        name="node-labels",
        levels=(*(level for level, _ in levels), "node"),
        paths=paths,
        label_keys=dict(levels),
    )


@dataclass(frozen=True, slots=True)
class SakkaraGroup:
    """A Sakkara group ConfigMap (label ``sakkara.group``): the gang of the pods labelled
    ``sakkara.group.name`` with its ``name``, in the ConfigMap's namespace."""

    namespace: str
    name: str  # data.name: what the pods' label says
    configmap: str  # metadata.name
    uid: str = ""
    size: int = 1
    priority: int = 0
    constraints: Constraints = field(default_factory=Constraints)
    status: str = ""  # what the ConfigMap's status key says (Bound once written back)
    errors: tuple[str, ...] = ()
