"""How fragmented the free room is (#26): what is free but of no use to what waits.

Users ask for it (KAI #1311, #1373; Volcano #3948): GPUs show free on the dashboard while a
gang waits, because no single node has room for one of its members. Three figures, from the
free room of the ready, schedulable nodes and the requests of our pods that wait:

- **stranded**, per resource: what is free on the nodes that cannot take any waiting
  member (by their requests alone; selectors and tolerations are not weighed; the
  distinct shapes that wait, up to MAX_SHAPES of the smallest): room nothing that waits
  can use;
- **placeable**: how many members of the smallest shape the cluster could take now, node
  by node (the largest gang of them that room alone would allow);
- **whole GPU nodes**: nodes whose GPUs are all free (the largest gang of whole-node GPU
  members that could start now, in nodes' worth).

With nothing waiting nothing is stranded. Pure data in, data out: the shell feeds it from
its cache every few seconds, ``explain --cluster`` from a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.model.resources import CPU, GPU, MEMORY, Resources, describe

# The resources whose stranding is measured (a gauge each).
MEASURED = (CPU, MEMORY, GPU)
# The distinct waiting shapes weighed, the smallest first: O(nodes x shapes) a measure.
MAX_SHAPES = 32


@dataclass(frozen=True, slots=True)
class Fragmentation:
    stranded: Mapping[str, int] = field(default_factory=dict)
    smallest: Resources | None = None  # the smallest waiting member's requests
    placeable: int = 0
    whole_gpu_nodes: int = 0
    waiting: int = 0  # members waiting


def _fits(room: Mapping[str, int], requests: Resources) -> bool:
    return all(room.get(r, 0) >= a for r, a in requests.items() if a > 0)


def _size(requests: Resources) -> tuple[int, ...]:
    """GPUs first (the scarce part), then CPU, then memory."""
    return tuple(requests.get(r, 0) for r in (GPU, CPU, MEMORY))


def measure(
    free: Mapping[str, Resources],
    *,
    allocatable: Mapping[str, Resources],
    waiting: Iterable[Resources],
) -> Fragmentation:
    """``free``: each ready, schedulable node's free room; ``allocatable``: its whole room;
    ``waiting``: the requests of the members that wait."""
    wanted = list(waiting)
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
        # stranded although the "smallest" does not fit it (review of #26).
        if not any(_fits(room, shape) for shape in shapes):
            for resource in MEASURED:
                stranded[resource] += max(room.get(resource, 0), 0)
    return Fragmentation(
        stranded=stranded,
        smallest=smallest,
        placeable=placeable,
        whole_gpu_nodes=whole,
        waiting=len(wanted),
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
    ]
