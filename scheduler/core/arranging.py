"""Placing a whole gang on a tree topology under per-level constraints (Sakkara, seed 004).

Best-first over the tree, top down: at each level the gang's share is split among the
units below the current one, by that level's constraint (pack, spread, partitions, a range
per unit, a factor), then each chosen unit places its part the same way one level down,
until the nodes. What a unit can take is counted beforehand from its nodes' free capacity
for these very members, so a split never sends more to a unit than its nodes can hold;
a hard range or factor bounds it further. When a unit still cannot place its share (members
of different shapes, a hard constraint lower down) the split is redone with that unit
counted smaller, a bounded number of times.

Soft constraints are tried first and dropped, level by level and said so, when they cannot
be met; a hard one that cannot be met places nothing, with a reason that names the level.
All of it happens on a scratch ledger that the caller commits or drops, and every choice
breaks ties by tree order, so the same snapshot always gives the same placement.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.core.placing import Ledger, NodeFinder
from scheduler.model.pods import Pod, PodRef
from scheduler.model.resources import Resources
from scheduler.model.status import Status
from scheduler.model.topology import PACK, SPREAD, Constraints, LevelConstraint, Topology

# How often a level redoes its split after a unit could not place its share.
MAX_RESPLITS = 16

Path = tuple[str, ...]


def tree_order(name: str) -> tuple:
    """Natural order: rack-2 before rack-10."""
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", name) if t)


def describe(constraint: LevelConstraint) -> str:
    """A constraint as the user wrote it, for messages."""
    parts = [constraint.type]
    for key in ("partitions", "min", "max", "factor"):
        value = getattr(constraint, key)
        if value is not None:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Tree:
    """The topology restricted to nodes that exist, children in tree order."""

    topology: Topology
    children: Mapping[Path, tuple[str, ...]]
    leaves: tuple[Path, ...]
    missing: tuple[str, ...]  # nodes of the cluster that the tree does not name
    unknown: tuple[str, ...] = ()  # names in the tree that are no node of the cluster

    @classmethod
    def of(cls, topology: Topology, nodes: Iterable[str]) -> Tree:
        known = set(nodes)
        kids: dict[Path, set[str]] = {}
        leaves: list[Path] = []
        for node, path in topology.paths.items():
            if node not in known:
                continue
            leaves.append(path)
            for depth in range(len(path)):
                kids.setdefault(path[:depth], set()).add(path[depth])
        children = {p: tuple(sorted(c, key=tree_order)) for p, c in kids.items()}
        missing = tuple(sorted(known - set(topology.paths), key=tree_order))
        unknown = tuple(sorted(set(topology.paths) - known, key=tree_order))
        leaves.sort(key=lambda p: tuple(tree_order(u) for u in p))
        return cls(
            topology=topology,
            children=children,
            leaves=tuple(leaves),
            missing=missing,
            unknown=unknown,
        )

    def notes(self) -> tuple[str, ...]:
        """What an operator should hear once: nodes left out, names that match nothing."""

        def shown(items: tuple[str, ...]) -> str:
            return ", ".join(items[:10]) + " …" * (len(items) > 10)

        said = []
        if self.missing:
            said.append(
                f"{len(self.missing)} nodes are not in topology {self.topology.name} and are "
                f"not used for topology-placed gangs: {shown(self.missing)}"
            )
        if self.unknown:
            said.append(
                f"topology {self.topology.name} names {len(self.unknown)} nodes that do not "
                f"exist; they are ignored: {shown(self.unknown)}"
            )
        return tuple(said)

    @property
    def levels(self) -> tuple[str, ...]:
        return self.topology.levels


@dataclass(frozen=True, slots=True)
class Arrangement:
    """Where each member goes, or why the gang cannot be placed."""

    placements: tuple[tuple[Pod, str], ...]
    status: Status
    relaxed: tuple[str, ...] = ()  # soft constraints that could not be met, said plainly


# -- splitting a share among the units of one level ------------------------------------------


def _allowed(c: LevelConstraint, k: int) -> bool:
    if k == 0:
        return True
    if c.min is not None and k < c.min:
        return False
    if c.max is not None and k > c.max:
        return False
    return not (c.factor and k % c.factor)


def _largest_allowed(c: LevelConstraint, cap: int) -> int:
    for k in range(cap, 0, -1):
        if _allowed(c, k):
            return k
    return 0


def _partitions(n: int, caps: Sequence[int], c: LevelConstraint) -> dict[int, int] | None:
    parts = c.partitions or 1
    if parts > n:
        return None
    sizes = sorted((n // parts + (1 if i < n % parts else 0) for i in range(parts)), reverse=True)
    if not all(_allowed(c, size) for size in sizes):
        return None
    chosen: dict[int, int] = {}
    for size in sizes:
        free = [i for i, cap in enumerate(caps) if i not in chosen and cap >= size]
        if not free:
            return None
        # pack: the tightest unit that holds the partition; spread: the roomiest.
        best = min(free, key=lambda i: (caps[i] if c.type == PACK else -caps[i], i))
        chosen[best] = size
    return chosen


def _pack(n: int, caps: Sequence[int], c: LevelConstraint) -> dict[int, int] | None:
    counts: dict[int, int]
    whole = [i for i, cap in enumerate(caps) if cap >= n and _allowed(c, n)]
    if whole:  # one unit takes it all: the tightest such, to keep roomy units whole
        return {min(whole, key=lambda i: (caps[i], i)): n}
    order = sorted((i for i, cap in enumerate(caps) if cap > 0), key=lambda i: (-caps[i], i))
    if c.min is None and not c.factor:  # every count up to a cap is allowed: plain greedy
        counts = {}
        remaining = n
        for i in order:
            if remaining == 0:
                break
            counts[i] = min(caps[i], c.max or n, remaining)
            remaining -= counts[i]
        return counts if remaining == 0 else None
    options = [[k for k in range(min(caps[i], n), 0, -1) if _allowed(c, k)] for i in order]
    # reach[j]: the bitset of totals the units order[j:] can take together.
    mask = (1 << (n + 1)) - 1
    reach = [0] * (len(order) + 1)
    reach[-1] = 1
    for j in range(len(order) - 1, -1, -1):
        acc = rest = reach[j + 1]
        for k in options[j]:
            acc |= rest << k
        reach[j] = acc & mask
    if not reach[0] >> n & 1:
        return None
    counts = {}
    remaining = n
    for j, i in enumerate(order):
        if remaining == 0:
            break
        for k in options[j]:  # the most this unit can take with the rest still placeable
            if k <= remaining and reach[j + 1] >> (remaining - k) & 1:
                counts[i] = k
                remaining -= k
                break
    return counts if remaining == 0 else None


def _fill(counts: list[int], caps: Sequence[int], step: int, remaining: int) -> int:
    """Add ``step`` at a time to the least-filled unit that has room (roomiest, then tree
    order, first); what could not be added is returned."""
    heap = [(counts[i], -caps[i], i) for i in range(len(caps)) if counts[i] + step <= caps[i]]
    heapq.heapify(heap)
    while remaining >= step and heap:
        _, negcap, i = heapq.heappop(heap)
        counts[i] += step
        remaining -= step
        if counts[i] + step <= caps[i]:
            heapq.heappush(heap, (counts[i], negcap, i))
    return remaining


def _spread(n: int, caps: Sequence[int], c: LevelConstraint) -> dict[int, int] | None:
    caps = [min(cap, c.max) if c.max is not None else cap for cap in caps]
    if c.min is None and not c.factor:
        counts = [0] * len(caps)
        return _counted(counts) if _fill(counts, caps, 1, n) == 0 else None
    step = c.factor or 1
    base = next((k for k in range(1, n + 1) if _allowed(c, k)), 0)  # least a used unit takes
    if not base:
        return None
    eligible = sorted((i for i, cap in enumerate(caps) if cap >= base), key=lambda i: (-caps[i], i))
    for used in range(min(len(eligible), n // base), 0, -1):  # as many units as can be
        chosen = eligible[:used]
        counts = [0] * len(caps)
        for i in chosen:
            counts[i] = base
        limits = [caps[i] if i in chosen else 0 for i in range(len(caps))]
        if _fill(counts, limits, step, n - used * base) == 0:
            return _counted(counts)
    return None


def _counted(counts: Sequence[int]) -> dict[int, int]:
    return {i: k for i, k in enumerate(counts) if k}


def split(n: int, caps: Sequence[int], c: LevelConstraint) -> dict[int, int] | None:
    """How many of ``n`` members each unit takes (by index), or None if ``c`` cannot be met.
    ``caps`` is what each unit can hold."""
    if n == 0:
        return {}
    if c.partitions is not None:
        return _partitions(n, caps, c)
    return _spread(n, caps, c) if c.type == SPREAD else _pack(n, caps, c)


# -- the solver ------------------------------------------------------------------------------


class Arranger:
    """Places gangs on one tree for one pass; knows the nodes' static fit via the finder."""

    def __init__(self, tree: Tree, finder: NodeFinder) -> None:
        self._tree = tree
        self._finder = finder

    def arrange(
        self, members: Sequence[Pod], *, constraints: Constraints, ledger: Ledger
    ) -> Arrangement:
        """Place every one of ``members`` on ``ledger`` (a scratch the caller owns)."""
        tree = self._tree
        if not members:
            return Arrangement((), Status.success())
        fit = {id(p): self._finder.static_fit(p) for p in members}
        leaves = self._leaf_room(members, fit, ledger)
        raw = self._capacities(leaves, Constraints(), len(members))
        if raw[()] < len(members):
            outside = f"; {len(tree.missing)} nodes outside the topology are not used" * bool(
                tree.missing
            )
            detail = f" ({self._finder.explain(members[-1], ledger).message})" * (raw[()] == 0)
            return Arrangement(
                (),
                Status.unschedulable(
                    f"the topology has room for {raw[()]} of {len(members)} members"
                    f"{outside}{detail}"
                ),
            )
        # First every constraint as if hard: a soft range or factor low in the tree then
        # bounds what the levels above send down, instead of being given up under a pack.
        # Only if that finds nothing are the soft ones tried and dropped one by one.
        attempts = [constraints]
        strict = Constraints(
            by_level={k: replace(c, hard=True) for k, c in constraints.by_level.items()}
        )
        if strict != constraints:
            attempts.insert(0, strict)
        status = Status.success()
        for attempt in attempts:
            trial = ledger.scratch()
            placements, relaxed, status = self._place(
                (),
                list(members),
                fit=fit,
                caps=self._capacities(leaves, attempt, len(members)),
                raw=raw,
                constraints=attempt,
                ledger=trial,
            )
            if status.ok:
                trial.commit()
                return Arrangement(tuple(placements), status, tuple(relaxed))
        return Arrangement((), status)

    def room(self, members: Sequence[Pod], *, ledger: Ledger) -> dict[Path, int]:
        """How many of ``members`` each unit of the tree could hold, constraints aside (for
        ``explain``)."""
        fit = {id(p): self._finder.static_fit(p) for p in members}
        return self._capacities(self._leaf_room(members, fit, ledger), Constraints(), len(members))

    def _leaf_room(
        self, members: Sequence[Pod], fit: Mapping[int, frozenset[str]], ledger: Ledger
    ) -> dict[Path, int]:
        """How many of the members each node could hold, counted per member shape (requests
        and the nodes it may go on): the costly part, done once per gang."""
        shapes: dict[tuple[Resources, frozenset[str]], int] = {}
        for pod in members:
            key = (pod.requests, fit[id(pod)])
            shapes[key] = shapes.get(key, 0) + 1
        n = len(members)
        room: dict[Path, int] = {}
        for path in self._tree.leaves:
            node = path[-1]
            free = dict(ledger.free(node))
            held = 0
            for (requests, nodes), count in shapes.items():
                if node not in nodes:
                    continue
                k = count
                for resource, amount in requests.items():
                    if amount > 0:
                        k = min(k, max(free.get(resource, 0), 0) // amount)
                for resource, amount in requests.items():
                    free[resource] = free.get(resource, 0) - k * amount
                held += k
            room[path] = min(held, n)
        return room

    def _capacities(
        self, leaves: Mapping[Path, int], constraints: Constraints, n: int
    ) -> dict[Path, int]:
        """What each unit could hold: its nodes' room summed up the tree, bounded on the way
        by hard ranges and factors. Empty units (a tree naming no existing node) hold 0."""
        caps: dict[Path, int] = {(): 0}
        levels = self._tree.levels
        for depth in range(len(levels), -1, -1):
            hard = constraints.by_level.get(levels[depth - 1]) if depth else None
            paths = (
                self._tree.leaves
                if depth == len(levels)
                else [p for p in self._tree.children if len(p) == depth]
            )
            for path in paths:
                if depth == len(levels):
                    caps[path] = leaves[path]
                else:
                    kids = self._tree.children.get(path, ())
                    caps[path] = min(sum(caps[(*path, k)] for k in kids), n)
                if hard is not None and hard.hard:
                    caps[path] = _largest_allowed(hard, caps[path])
        return caps

    def _split(
        self,
        n: int,
        caps: Sequence[int],
        *,
        raw: Sequence[int],
        constraint: LevelConstraint,
        where: str,
    ) -> tuple[dict[int, int] | None, str, Status]:
        """``caps`` bounded by hard constraints below, ``raw`` by free capacity alone."""
        counts = split(n, caps, constraint)
        if counts is not None:
            return counts, "", Status.success()
        level = constraint.level
        if constraint.hard:
            room = ", ".join(str(c) for c in sorted(raw, reverse=True)[:8])
            return (
                None,
                "",
                Status.unschedulable(
                    f"hard constraint on level {level!r} ({describe(constraint)}) cannot be met "
                    f"for {n} members under {where}: the {level} units there can take "
                    f"{room or 'none'}"
                ),
            )
        plain = LevelConstraint(level=level, type=constraint.type)
        counts = split(n, caps, plain)
        if counts is None:
            return (
                None,
                "",
                Status.unschedulable(f"the {level} units under {where} cannot hold {n} members"),
            )
        return counts, f"{level}: {describe(constraint)} not met under {where}", Status.success()

    def _place(
        self,
        prefix: Path,
        members: list[Pod],
        *,
        fit: Mapping[int, frozenset[str]],
        caps: dict[Path, int],
        raw: Mapping[Path, int],
        constraints: Constraints,
        ledger: Ledger,
    ) -> tuple[list[tuple[Pod, str]], list[str], Status]:
        levels = self._tree.levels
        where = "/".join(prefix) or "the root"
        if len(prefix) == len(levels):
            node = prefix[-1]
            for pod in members:
                if node not in fit[id(pod)] or not ledger.fits(node, pod.requests):
                    return [], [], Status.unschedulable(f"{pod.ref.name} does not fit on {node}")
                ledger.take(node, pod.requests)
            return [(pod, node) for pod in members], [], Status.success()
        level = levels[len(prefix)]
        constraint = constraints.by_level.get(level) or LevelConstraint(level=level)
        children = self._tree.children.get(prefix, ())
        local = [caps[(*prefix, child)] for child in children]
        room = [raw[(*prefix, child)] for child in children]
        last = Status.unschedulable(f"no placement found under {where}")
        shrunk: set[int] = set()
        for _ in range(MAX_RESPLITS):
            counts, note, status = self._split(
                len(members), local, raw=room, constraint=constraint, where=where
            )
            if counts is None:
                return [], [], status
            scratch = ledger.scratch()
            placed: list[tuple[Pod, str]] = []
            notes = [note] if note else []
            start = 0
            failed: int | None = None
            for index in sorted(counts):  # tree order: consecutive members stay together
                share = members[start : start + counts[index]]
                got, more, status = self._place(
                    (*prefix, children[index]),
                    share,
                    fit=fit,
                    caps=caps,
                    raw=raw,
                    constraints=constraints,
                    ledger=scratch,
                )
                if not status.ok:
                    failed, last = index, status
                    break
                placed += got
                notes += more
                start += counts[index]
            if failed is None:
                scratch.commit()
                return placed, notes, Status.success()
            # It cannot take that many: count it one smaller, and the second time not at all
            # (so a unit that cannot be used costs two tries, not one per member).
            local[failed] = counts[failed] - 1 if failed not in shrunk else 0
            shrunk.add(failed)
        return [], [], last


# -- what is written back ----------------------------------------------------------------------


def master_of(refs: Iterable[PodRef]) -> PodRef:
    """The pod whose name says master, else the first by name."""
    ordered = sorted(refs, key=lambda r: tree_order(r.name))
    return next((r for r in ordered if "master" in r.name), ordered[0])


def ranks(placements: Sequence[tuple[PodRef, str]], topology: Topology) -> list[tuple[PodRef, int]]:
    """Rank by distance in the tree from the master pod, ties in tree order, so consecutive
    ranks share a node, then a unit one level up, and so on."""
    if not placements:
        return []
    where = dict(placements)
    master = master_of(where)
    origin = where[master]

    def key(ref: PodRef) -> tuple:
        if ref == master:
            return (-1,)
        node = where[ref]
        path = topology.paths.get(node, (node,))
        distance = topology.distance(origin, node) if node in topology.paths else 1 << 30
        return (distance, tuple(tree_order(u) for u in path), tree_order(ref.name))

    return [(ref, rank) for rank, ref in enumerate(sorted(where, key=key))]


def placement_tree(placements: Sequence[tuple[PodRef, str]], topology: Topology) -> dict[str, Any]:
    """{"root": {unit: {... {node: [pod names]}}}} in tree order: valid JSON, unlike the
    seed's sketch."""
    root: dict[str, Any] = {}
    for ref, node in sorted(
        placements,
        key=lambda rn: (
            tuple(tree_order(u) for u in topology.paths.get(rn[1], (rn[1],))),
            tree_order(rn[0].name),
        ),
    ):
        here = root
        path = topology.paths.get(node, (node,))
        for unit in path[:-1]:
            here = here.setdefault(unit, {})
        here.setdefault(path[-1], []).append(ref.name)
    return {"root": root}
