"""How fragmented the free room is: what is free but of no use to what waits.

Users of KAI and Volcano ask for it: GPUs show free on the dashboard while a
gang waits, because no single node has room for one of its members. Three figures, from the
free room of the ready, schedulable nodes and the requests of our pods that wait:

- **stranded**, per resource: what is free on the nodes that cannot take any waiting
  member (by their requests alone; selectors and tolerations are not weighed; the
  distinct shapes that wait, up to MAX_SHAPES of the smallest): room nothing that waits
  can use;
- **placeable**: how many members of the smallest shape the cluster could take now, node
  by node (the largest gang of them that room alone would allow);
- **whole GPU nodes**: nodes whose GPUs are all free (the largest gang of whole-node GPU
  members that could start now, in nodes' worth);
- **stranded by topology**, per level: the free GPUs in units of that level (racks, blocks)
  with fewer free GPUs in all than the smallest waiting gang that must keep inside one
  unit of the level needs for its minimum (a hard ``networkTopology``, the gang's or a
  subgroup's): GPUs free in a rack that no rack-bound gang can use, however its members
  are shaped. By GPU count alone, as the stranded figure is by requests alone; levels no
  waiting gang is held to are not measured, and a gang that may spread uses them anyway.

With nothing waiting nothing is stranded. Pure data in, data out: the shell feeds it from
its cache every few seconds, ``explain --cluster`` from a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.core.gangs import tier_level
from scheduler.model.gangs import Gang
from scheduler.model.pods import NetworkTopology, Pod
from scheduler.model.resources import CPU, GPU, MEMORY, Resources, describe
from scheduler.model.topology import Topology

# The resources whose stranding is measured (a gauge each).
MEASURED = (CPU, MEMORY, GPU)
# The distinct waiting shapes weighed, the smallest first: O(nodes x shapes) a measure.
MAX_SHAPES = 32

# (level, GPUs): a waiting gang (or subgroup) needs that many GPUs free inside one unit of
# that level for its minimum.
TierNeed = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Fragmentation:
    stranded: Mapping[str, int] = field(default_factory=dict)
    smallest: Resources | None = None  # the smallest waiting member's requests
    placeable: int = 0
    whole_gpu_nodes: int = 0
    waiting: int = 0  # members waiting
    # By level: free GPUs in units too small for the smallest need held to that level, and
    # that smallest need.
    stranded_by_tier: Mapping[str, int] = field(default_factory=dict)
    tier_needs: Mapping[str, int] = field(default_factory=dict)


def _fits(room: Mapping[str, int], requests: Resources) -> bool:
    return all(room.get(r, 0) >= a for r, a in requests.items() if a > 0)


def _size(requests: Resources) -> tuple[int, ...]:
    """GPUs first (the scarce part), then CPU, then memory."""
    return tuple(requests.get(r, 0) for r in (GPU, CPU, MEMORY))


def tiered(gang: Gang) -> bool:
    """Whether the gang, or a subgroup of it, states a networkTopology."""
    return gang.network_topology is not None or any(s.topology for s in gang.subgroups)


def tier_needs(gang: Gang, topology: Topology) -> tuple[TierNeed, ...]:
    """What ``gang``, waiting with no member bound, needs free inside one unit of a level:
    for its hard networkTopology the GPUs of its minimum (its members asking least), and
    for each subgroup's the GPUs of that subgroup's size. A running gang is fenced to the
    unit where it is; a tier naming no level of the topology is said elsewhere."""
    if not tiered(gang):
        return ()  # most gangs: nothing to look at
    pending = [p for p in gang.members if p.alive and not p.bound]
    if not pending or any(p.alive and p.bound for p in gang.members):
        return ()
    found: list[TierNeed] = []

    def need(spec: NetworkTopology | None, members: Iterable[Pod], size: int) -> None:
        if spec is None or spec.mode != "hard":
            return
        level, problem = tier_level(topology, spec, where="")
        total = sum(sorted(p.requests.get(GPU, 0) for p in members)[:size])
        if not problem and total > 0:
            found.append((level, total))

    need(gang.network_topology, pending, gang.need)
    by_ref = {p.ref: p for p in pending}
    for subgroup in gang.subgroups:
        need(subgroup.topology, (by_ref[r] for r in subgroup.members if r in by_ref), subgroup.size)
    return tuple(found)


def stranded_by_tier(
    free: Mapping[str, Resources], *, topology: Topology, needs: Iterable[TierNeed]
) -> tuple[dict[str, int], dict[str, int]]:
    """Per level some gang is held to: the free GPUs in its units (of the nodes in ``free``
    the topology places) that hold some but fewer than the smallest need at that level;
    and that smallest need."""
    smallest: dict[str, int] = {}
    for level, gpus in needs:
        if level in topology.levels:
            smallest[level] = min(gpus, smallest.get(level, gpus))
    stranded: dict[str, int] = {}
    for level, wanted in smallest.items():
        depth = topology.levels.index(level) + 1
        units: dict[tuple[str, ...], int] = {}
        for name, room in free.items():
            path = topology.paths.get(name)
            if path is not None:
                unit = path[:depth]
                units[unit] = units.get(unit, 0) + max(room.get(GPU, 0), 0)
        stranded[level] = sum(g for g in units.values() if 0 < g < wanted)
    return stranded, smallest


def measure(
    free: Mapping[str, Resources],
    *,
    allocatable: Mapping[str, Resources],
    waiting: Iterable[Resources],
    topology: Topology | None = None,
    needs: Iterable[TierNeed] = (),
) -> Fragmentation:
    """``free``: each ready, schedulable node's free room; ``allocatable``: its whole room;
    ``waiting``: the requests of the members that wait; ``topology`` and ``needs``: the tree
    the last pass placed on and what its waiting gangs need inside one unit of a level."""
    wanted = list(waiting)
    by_tier: dict[str, int] = {}
    tier_wants: dict[str, int] = {}
    if topology is not None:
        by_tier, tier_wants = stranded_by_tier(free, topology=topology, needs=needs)
    whole = sum(
        1
        for name, room in free.items()
        if allocatable.get(name, Resources()).get(GPU, 0) > 0
        and room.get(GPU, 0) >= allocatable[name].get(GPU, 0)
    )
    if not wanted:
        return Fragmentation(whole_gpu_nodes=whole)
    shapes = sorted(set(wanted), key=_size)[:MAX_SHAPES]
    smallest = shapes[0]
    asked = [(r, a) for r, a in smallest.items() if a > 0]
    stranded = dict.fromkeys(MEASURED, 0)
    placeable = 0
    for room in free.values():
        placeable += min((max(room.get(r, 0), 0) // a for r, a in asked), default=0)
        # Shapes that do not compare (more CPU, less memory): room one of them fits is not
        # stranded although the "smallest" does not fit it.
        if not any(_fits(room, shape) for shape in shapes):
            for resource in MEASURED:
                stranded[resource] += max(room.get(resource, 0), 0)
    return Fragmentation(
        stranded=stranded,
        smallest=smallest,
        placeable=placeable,
        whole_gpu_nodes=whole,
        waiting=len(wanted),
        stranded_by_tier=by_tier,
        tier_needs=tier_wants,
    )


def lines(found: Fragmentation) -> list[str]:
    """What ``explain --cluster`` prints."""
    out = [f"whole GPU nodes free: {found.whole_gpu_nodes}"]
    if found.smallest is None:
        return [*out, "nothing waits: no free room is stranded"]
    return [
        *out,
        f"{found.waiting} members wait; the smallest asks for {describe(found.smallest)}",
        f"{found.placeable} of that shape fit now, node by node",
        f"stranded (free on nodes that cannot take any waiting member): {describe(found.stranded)}",
        *(
            f"stranded by topology at {level}: {found.stranded_by_tier[level]} GPUs free in "
            f"{level}s with fewer than {wants} free, the least a gang held to one {level} "
            "needs"
            for level, wants in sorted(found.tier_needs.items())
        ),
    ]
