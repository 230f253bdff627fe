"""Placing a whole gang on a tree topology under per-level constraints (Sakkara).

Best-first over the tree, top down: at each level the gang's share is split among the
units below the current one, by that level's constraint (pack, spread, partitions, a range
per unit, a factor), then each chosen unit places its part the same way one level down,
until the nodes. What a unit can take is counted beforehand from its nodes' free capacity
for these very members, so a split never sends more to a unit than its nodes can hold;
a hard range, factor or partitions bound it further. When a unit still cannot place its
share (members of different shapes, a hard constraint lower down) the split is redone with
that unit counted smaller, a bounded number of times.

Every constraint is read over the whole gang, whatever levels lie above its own: a range or
factor bounds each unit of its level the gang uses, and ``partitions`` is the number of units
of its level the gang uses in all, the gang cut into that many near-equal parts (``Parts``),
one unit each. A level above one with partitions therefore splits whole parts, not members
(``share_parts``), and hands each chosen unit a quota: how many units of each parted level
further down its subtree must use, the quotas adding up to the partitions.

Soft constraints are tried first and dropped, level by level and said so, when they cannot
be met; a hard one that cannot be met places nothing, with a reason that names the level.
All of it happens on a scratch ledger that the caller commits or drops, and every choice
breaks ties by tree order, so the same snapshot always gives the same placement.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain, pairwise
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
    """Natural order: rack-2 before rack-10.

    A run of digits compares by its value as (length without leading zeros, the digits),
    not ``int()``: a unit of a topology ConfigMap's tree may be named with more than the
    4,300 digits ``int()`` accepts, or with "²", a digit to ``str.isdigit`` but not to
    ``int()``; either made every topology gang of every pass fail. The runs are the odd
    parts of the split (its captured group), so "²", which ``\\d`` does not match, is text.
    """
    return tuple(
        (0, len(t.lstrip("0")), t.lstrip("0")) if i % 2 else (1, t)
        for i, t in enumerate(re.split(r"(\d+)", name))
        if t
    )


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


# -- partitions over the whole gang -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parts:
    """One level's ``partitions``, read over the whole gang: ``count`` near-equal parts, ``big``
    of them of ``size + 1`` members and the rest of ``size``, each on a unit of that level of
    its own, whatever levels lie above. A unit above takes whole parts: ``k`` of them are
    between ``k * size`` and ``k * (size + 1)`` members."""

    depth: int  # the level's index, top down
    count: int
    size: int
    big: int

    @classmethod
    def of(cls, depth: int, count: int, members: int) -> Parts:
        return cls(depth=depth, count=count, size=members // count, big=members % count)

    def counts(self, share: int) -> tuple[int, int]:
        """The fewest and the most of these parts ``share`` members can be (none if the
        first is larger)."""
        return -(-share // (self.size + 1)), share // self.size

    def sizes(self) -> str:
        return f"{self.size}" if not self.big else f"{self.size} or {self.size + 1}"


# A unit's ways to take parts: (parts, least big ones, most big ones, step between them).
Options = list[tuple[int, int, int, int]]


def _part_options(
    cap: int, c: LevelConstraint, *, parts: Parts, quota: int, bigs: int, small: int, big: int
) -> Options:
    """What a unit of ``cap`` members, ``small`` units below with room for a part and ``big``
    with room for a big one, may take of ``quota`` parts (``bigs`` of them big), its members
    bounded by ``c``'s range and factor."""
    q = parts.size
    found: Options = []
    for k in range(1, min(quota, small) + 1):
        if k * q > cap:
            break
        low = 0 if c.min is None else max(0, c.min - k * q)
        high = min(k, big, bigs, cap - k * q)
        if c.max is not None:
            high = min(high, c.max - k * q)
        step = c.factor or 1
        low += -(k * q + low) % step
        if low <= high:
            found.append((k, low, low + (high - low) // step * step, step))
    return found


def _smear(bits: int, count: int, step: int) -> int:
    """``bits | bits << step | ... | bits << (count - 1) * step``, in log(count) shifts."""
    done = 1
    while done < count:
        more = min(done, count - done)
        bits |= bits << (more * step)
        done += more
    return bits


def _reach(options: Sequence[Options], quota: int, bigs: int, width: int) -> list[int]:
    """``reach[j]``: the (parts, big parts) totals that ``options[j:]`` can make together, as
    bit ``parts * width + big`` (``width`` > 2 * ``bigs``, so a sum never runs into the next
    count)."""
    row = (1 << (bigs + 1)) - 1
    mask = 0
    for k in range(quota + 1):
        mask |= row << (k * width)
    reach = [0] * (len(options) + 1)
    reach[-1] = 1
    for j in range(len(options) - 1, -1, -1):
        acc = rest = reach[j + 1]
        for k, low, high, step in options[j]:
            acc |= _smear(rest << (k * width + low), (high - low) // step + 1, step)
        reach[j] = acc & mask
    return reach


def _bigs(option: tuple[int, int, int, int], most: int) -> range:
    """The big parts ``option`` allows, at most ``most``, the fewest first."""
    _, low, high, step = option
    return range(low, min(high, most) + 1, step)


def _nearest(values: range, target: int) -> Iterator[int]:
    """``values`` (ascending) by distance from ``target``, the larger first on a tie."""
    above = bisect_left(values, target)
    below = above - 1
    while below >= 0 or above < len(values):
        if above < len(values) and (below < 0 or values[above] - target <= target - values[below]):
            yield values[above]
            above += 1
        else:
            yield values[below]
            below -= 1


def _ranked(
    found: Options, kind: str, q: int, left: tuple[int, int, int], units: int
) -> Iterator[tuple[int, int]]:
    """A unit's (parts, big parts) in the order it would rather take them, ``left`` being the
    (parts, big parts, members) still to place: under pack the most it can; under spread the
    nearest to an even share of the members left over the ``units`` that could take some."""
    parts_left, bigs_left, members_left = left
    if kind == PACK:
        for option in reversed(found):
            for b in reversed(_bigs(option, bigs_left)):
                yield option[0], b
        return
    even = -(-members_left // units)

    def by_distance(option: tuple[int, int, int, int]) -> Iterator[tuple[tuple, int, int]]:
        k = option[0]
        for b in _nearest(_bigs(option, bigs_left), even - k * q):
            share = k * q + b
            yield (abs(share - even), -share), k, b

    for _, k, b in heapq.merge(*(by_distance(o) for o in found if o[0] <= parts_left)):
        yield k, b


def share_parts(
    n: int,
    caps: Sequence[int],
    c: LevelConstraint,
    *,
    parts: Parts,
    quota: int,
    small: Sequence[int],
    big: Sequence[int],
) -> dict[int, tuple[int, int]] | None:
    """How ``n`` members, ``quota`` whole parts of a level further down, go to the units of
    this level: (members, parts) per unit by index, or None. Unit ``i`` holds ``caps[i]``
    members and has ``small[i]`` units of the parted level with room for a part, ``big[i]``
    with room for a big one. ``c`` is this level's own constraint (its partitions aside):
    pack puts the parts on as few units as it can, spread on as many as it can, as evenly."""
    q = parts.size
    bigs = n - quota * q
    if quota < 1 or not 0 <= bigs <= quota:
        return None
    options: dict[int, Options] = {}
    for i, cap in enumerate(caps):
        found = _part_options(
            cap, c, parts=parts, quota=quota, bigs=bigs, small=small[i], big=big[i]
        )
        if found:
            options[i] = found
    if c.type == PACK:
        whole = [
            i
            for i, found in options.items()
            if any(o[0] == quota and bigs in _bigs(o, bigs) for o in found)
        ]
        if whole:  # one unit takes it all: the tightest such, as in split
            return {min(whole, key=lambda i: (caps[i], i)): (n, quota)}
    order = sorted(options, key=lambda i: (-caps[i], i))  # roomiest first
    width = 2 * (bigs + 1)
    reach = _reach([options[i] for i in order], quota, bigs, width)
    if not reach[0] >> (quota * width + bigs) & 1:
        return None
    chosen: dict[int, tuple[int, int]] = {}
    parts_left, bigs_left = quota, bigs
    for j, i in enumerate(order):
        if parts_left == 0:
            break
        found = [o for o in options[i] if o[0] <= parts_left]
        units = min(len(order) - j, parts_left)
        left = (parts_left, bigs_left, parts_left * q + bigs_left)
        for k, b in chain(_ranked(found, c.type, q, left, units), [(0, 0)]):
            if reach[j + 1] >> ((parts_left - k) * width + bigs_left - b) & 1:
                if k:
                    chosen[i] = (k, b)
                    parts_left -= k
                    bigs_left -= b
                break
    if parts_left or bigs_left:  # cannot happen: reach said the rest was placeable
        return None
    return {i: (k * q + b, k) for i, (k, b) in chosen.items()}


# -- the solver ------------------------------------------------------------------------------

# Partitions still to be met in a subtree: level index -> how many units of that level.
Quota = Mapping[int, int]
# A split: unit index -> (members, the quota that unit's subtree must meet).
Plan = dict[int, tuple[int, dict[int, int]]]


@dataclass(frozen=True, slots=True)
class _Attempt:
    """What one attempt (a reading of the constraints) places against."""

    fit: Mapping[int, frozenset[str]]
    caps: Mapping[Path, int]  # bounded by this attempt's hard constraints
    raw: Mapping[Path, int]  # free capacity alone
    constraints: Constraints
    parts: Mapping[int, Parts]  # every level with partitions, by index
    # (level index, unit) -> units of that level below it with room for a part, a big part
    units: Mapping[tuple[int, Path], tuple[int, int]]


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
        n = len(members)
        fit = {id(p): self._finder.static_fit(p) for p in members}
        leaves = self._leaf_room(members, fit, ledger)
        raw = self._capacities(leaves, Constraints(), n)
        if raw[()] < n:
            outside = f"; {len(tree.missing)} nodes outside the topology are not used" * bool(
                tree.missing
            )
            detail = f" ({self._finder.explain(members[-1], ledger).message})" * (raw[()] == 0)
            return Arrangement(
                (),
                Status.unschedulable(
                    f"the topology has room for {raw[()]} of {n} members{outside}{detail}"
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
            parts, dropped, problem = self._parts(attempt, n)
            if problem is not None:
                status = problem
                continue
            caps = self._capacities(leaves, attempt, n, parts)
            context = _Attempt(
                fit=fit,
                caps=caps,
                raw=raw,
                constraints=attempt,
                parts=parts,
                units=self._units(caps, parts),
            )
            trial = ledger.scratch()
            quota = {depth: p.count for depth, p in parts.items()}
            placements, relaxed, status = self._place((), list(members), quota, context, trial)
            if status.ok:
                trial.commit()
                return Arrangement(tuple(placements), status, (*dropped, *relaxed))
        return Arrangement((), status)

    def room(self, members: Sequence[Pod], *, ledger: Ledger) -> dict[Path, int]:
        """How many of ``members`` each unit of the tree could hold, constraints aside (for
        ``explain``)."""
        fit = {id(p): self._finder.static_fit(p) for p in members}
        return self._capacities(self._leaf_room(members, fit, ledger), Constraints(), len(members))

    def _leaf_room(
        self, members: Sequence[Pod], fit: Mapping[int, frozenset[str]], ledger: Ledger
    ) -> dict[Path, int]:
        """How many of the members each node could hold, counted per member shape (requests,
        the devices its claims ask, and the nodes it may go on): the costly part, done once
        per gang. A node's cpu alone would take eight members whose claims ask its eight
        GPUs each."""
        shapes: dict[tuple[Resources, frozenset[str]], int] = {}
        for pod in members:
            key = (ledger.asks(pod), fit[id(pod)])
            shapes[key] = shapes.get(key, 0) + 1
        world = ledger.devices
        devices = {r for asks, _ in shapes for r in asks if world and world.served(r)}
        n = len(members)
        room: dict[Path, int] = {}
        for path in self._tree.leaves:
            node = path[-1]
            free = ledger.room(node, devices) if devices else dict(ledger.free(node))
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

    def _parts(
        self, constraints: Constraints, n: int
    ) -> tuple[dict[int, Parts], list[str], Status | None]:
        """Every level's partitions over the whole gang; soft ones that cannot be met at all
        are dropped and said so, hard ones that cannot are the reason nothing is placed."""
        levels = self._tree.levels
        parts: dict[int, Parts] = {}
        dropped: list[str] = []
        for depth, level in enumerate(levels):
            c = constraints.by_level.get(level)
            if c is None or c.partitions is None:
                continue
            if c.partitions > n:
                reason = f"{c.partitions} partitions for {n} members"
                if c.hard:
                    return (
                        {},
                        [],
                        Status.unschedulable(
                            f"hard constraint on level {level!r} ({describe(c)}) cannot be met: "
                            f"{reason}"
                        ),
                    )
                dropped.append(f"{level}: {describe(c)} not met: {reason}")
                continue
            parts[depth] = Parts.of(depth, c.partitions, n)
        hard = [p for depth, p in sorted(parts.items()) if constraints.by_level[levels[depth]].hard]
        for upper, lower in pairwise(hard):
            # Each of the upper level's parts is whole parts of the lower level's.
            ranges = [lower.counts(upper.size + 1)] * upper.big + [lower.counts(upper.size)] * (
                upper.count - upper.big
            )
            if all(a <= b for a, b in ranges) and (
                sum(a for a, _ in ranges) <= lower.count <= sum(b for _, b in ranges)
            ):
                continue
            a, b = levels[upper.depth], levels[lower.depth]
            return (
                {},
                [],
                Status.unschedulable(
                    f"hard constraints on levels {a!r} ({describe(constraints.by_level[a])}) and "
                    f"{b!r} ({describe(constraints.by_level[b])}) cannot both be met for {n} "
                    f"members: {upper.count} near-equal {a} partitions cannot each be made of "
                    f"whole ones of the {lower.count} near-equal {b} partitions"
                ),
            )
        return parts, dropped, None

    def _capacities(
        self,
        leaves: Mapping[Path, int],
        constraints: Constraints,
        n: int,
        parts: Mapping[int, Parts] | None = None,
    ) -> dict[Path, int]:
        """What each unit could hold: its nodes' room summed up the tree, bounded on the way
        by hard ranges and factors, and by hard partitions: a unit of a parted level holds
        one part, a unit above it no more than that many of its roomiest such units do.
        Empty units (a tree naming no existing node) hold 0."""
        caps: dict[Path, int] = {(): 0}
        levels = self._tree.levels
        bounding = {
            depth: p
            for depth, p in (parts or {}).items()
            if constraints.by_level[levels[depth]].hard
        }
        tops: dict[int, dict[Path, list[int]]] = {depth: {} for depth in bounding}
        for depth in range(len(levels), -1, -1):
            hard = constraints.by_level.get(levels[depth - 1]) if depth else None
            paths = (
                self._tree.leaves
                if depth == len(levels)
                else [p for p in self._tree.children if len(p) == depth]
            )
            for path in paths:
                kids = self._tree.children.get(path, ())
                cap = (
                    leaves[path]
                    if depth == len(levels)
                    else min(sum(caps[(*path, k)] for k in kids), n)
                )
                for at, p in bounding.items():
                    if depth == at + 1:
                        cap = min(cap, p.size + (p.big > 0)) if cap >= p.size else 0
                    elif depth <= at:
                        top = heapq.nlargest(p.count, chain(*(tops[at][(*path, k)] for k in kids)))
                        tops[at][path] = top
                        cap = min(cap, sum(top))
                if hard is not None and hard.hard:
                    cap = _largest_allowed(hard, cap)
                caps[path] = cap
                for at in bounding:
                    if depth == at + 1:
                        tops[at][path] = [cap] if cap else []
        return caps

    def _units(
        self, caps: Mapping[Path, int], parts: Mapping[int, Parts]
    ) -> dict[tuple[int, Path], tuple[int, int]]:
        """For each parted level and each unit at or above it: how many of the level's units
        at or below it have room for a part, and for a big one."""
        counted: dict[tuple[int, Path], tuple[int, int]] = {}
        for depth, p in parts.items():
            for path, cap in caps.items():
                if len(path) != depth + 1 or cap < p.size:
                    continue
                big = int(cap > p.size)
                for j in range(1, depth + 2):
                    key = (depth, path[:j])
                    small_so_far, big_so_far = counted.get(key, (0, 0))
                    counted[key] = (small_so_far + 1, big_so_far + big)
        return counted

    def _constraint(self, context: _Attempt, depth: int) -> LevelConstraint:
        level = self._tree.levels[depth]
        return context.constraints.by_level.get(level) or LevelConstraint(level=level)

    def _try(
        self,
        prefix: Path,
        n: int,
        caps: Sequence[int],
        *,
        constraint: LevelConstraint,
        quota: Quota,
        context: _Attempt,
    ) -> Plan | None:
        """One split of ``n`` members among the units below ``prefix``: this level's
        ``constraint`` (its partitions only as ``quota`` has them) and, for the levels further
        down, how many of their units each chosen unit's subtree must use."""
        depth = len(prefix)
        children = self._tree.children.get(prefix, ())
        own = replace(constraint, partitions=quota.get(depth))
        if not quota:
            counts = split(n, caps, own)
            return None if counts is None else {i: (k, {}) for i, k in counts.items()}
        top = min(quota)
        shares: dict[int, tuple[int, int]] | None
        if top == depth:  # this level's parts, one unit each
            counts = split(n, caps, own)
            shares = None if counts is None else {i: (k, 1) for i, k in counts.items()}
        else:  # whole parts of a level further down
            units = [context.units.get((top, (*prefix, child)), (0, 0)) for child in children]
            shares = share_parts(
                n,
                caps,
                own,
                parts=context.parts[top],
                quota=quota[top],
                small=[small for small, _ in units],
                big=[big for _, big in units],
            )
        if shares is None:
            return None
        plan: Plan = {i: (share, {}) for i, (share, _) in shares.items()}
        used = {i: k for i, (_, k) in shares.items()}  # units of the level above, per subtree
        for at in sorted(quota):
            if at == depth:
                continue
            if at == top:
                for i, k in used.items():
                    plan[i][1][at] = k
                continue
            # A subtree's members are between the fewest and the most parts of this level
            # they can be, no fewer than the parts of the level above it holds (each of those
            # is whole parts of this one), no more than its units here have room for, and
            # enough that its units with room for a big part can take the big ones.
            p = context.parts[at]
            low: dict[int, int] = {}
            high: dict[int, int] = {}
            for i, (share, _) in shares.items():
                small, big = context.units.get((at, (*prefix, children[i])), (0, 0))
                least, most = p.counts(share)
                low[i] = max(least, used[i], -(-(share - big) // p.size))
                high[i] = min(most, small)
                if low[i] > high[i]:
                    return None
            extra = quota[at] - sum(low.values())
            if extra < 0 or extra > sum(high[i] - low[i] for i in low):
                return None
            for i in sorted(low, key=lambda i: (low[i] - high[i], i)):  # the most room first
                more = min(extra, high[i] - low[i])
                low[i] += more
                extra -= more
            for i, k in low.items():
                plan[i][1][at] = k
            used = low
        return plan

    def _split(
        self,
        prefix: Path,
        n: int,
        caps: Sequence[int],
        *,
        raw: Sequence[int],
        constraint: LevelConstraint,
        quota: Quota,
        context: _Attempt,
    ) -> tuple[Plan | None, list[str], Status]:
        """``caps`` bounded by hard constraints below, ``raw`` by free capacity alone. Soft
        constraints that cannot be met here are dropped (this level's first, then the
        partitions of the levels below), said in the notes."""
        plan = self._try(prefix, n, caps, constraint=constraint, quota=quota, context=context)
        if plan is not None:
            return plan, [], Status.success()
        depth = len(prefix)
        level = constraint.level
        where = "/".join(prefix) or "the root"
        plain = LevelConstraint(level=level, type=constraint.type)
        own = constraint if constraint.hard else plain
        kept = {at: k for at, k in quota.items() if self._constraint(context, at).hard}
        mine = {depth: quota[depth]} if depth in quota else {}
        lower = {at: k for at, k in quota.items() if at != depth}
        lower_kept = {at: k for at, k in kept.items() if at != depth}
        soft_below = sorted(set(lower) - set(kept))
        tries: list[tuple[LevelConstraint, Quota, list[int]]] = []
        if own != constraint:  # its partitions go with it
            tries.append((own, lower, [depth]))
        if soft_below:
            tries.append((constraint, {**mine, **lower_kept}, soft_below))
            if own != constraint:
                tries.append((own, lower_kept, [depth, *soft_below]))
        for relaxed_constraint, relaxed_quota, given_up in tries:
            plan = self._try(
                prefix, n, caps, constraint=relaxed_constraint, quota=relaxed_quota, context=context
            )
            if plan is not None:
                notes = [
                    f"{self._tree.levels[at]}: {describe(self._constraint(context, at))} "
                    f"not met under {where}"
                    for at in given_up
                ]
                return plan, notes, Status.success()
        return None, [], self._why(prefix, n, caps, raw=raw, own=own, kept=kept, context=context)

    def _why(
        self,
        prefix: Path,
        n: int,
        caps: Sequence[int],
        *,
        raw: Sequence[int],
        own: LevelConstraint,
        kept: Quota,
        context: _Attempt,
    ) -> Status:
        """Why no split meets the hard constraints here: the first that alone cannot be met,
        this level's own before those below."""
        depth = len(prefix)
        level = own.level
        where = "/".join(prefix) or "the root"
        plain = LevelConstraint(level=level, type=own.type)
        mine = {depth: kept[depth]} if depth in kept else {}
        bounded = replace(own, hard=False) != plain or bool(mine)

        def fails(constraint: LevelConstraint, quota: Quota) -> bool:
            return (
                self._try(prefix, n, caps, constraint=constraint, quota=quota, context=context)
                is None
            )

        if bounded and fails(own, mine):
            room = ", ".join(str(c) for c in sorted(raw, reverse=True)[:8])
            return Status.unschedulable(
                f"hard constraint on level {level!r} ({describe(own)}) cannot be met for {n} "
                f"members under {where}: the {level} units there can take {room or 'none'}"
            )
        below = sorted(at for at in kept if at != depth)
        for at in below:
            if fails(plain, {at: kept[at]}):
                return self._parts_unmet(prefix, n, at, kept[at], context)
        if below:
            names = ", ".join(
                f"{self._tree.levels[at]!r} ({describe(self._constraint(context, at))})"
                for at in [depth] * bounded + below
            )
            return Status.unschedulable(
                f"hard constraints on levels {names} cannot be met together for {n} members "
                f"under {where}"
            )
        return Status.unschedulable(f"the {level} units under {where} cannot hold {n} members")

    def _parts_unmet(
        self, prefix: Path, n: int, depth: int, quota: int, context: _Attempt
    ) -> Status:
        level = self._tree.levels[depth]
        where = "/".join(prefix) or "the root"
        p = context.parts[depth]
        rooms = sorted(
            (
                cap
                for path, cap in context.raw.items()
                if len(path) == depth + 1 and path[: len(prefix)] == prefix
            ),
            reverse=True,
        )
        room = ", ".join(str(c) for c in rooms[:8]) + " …" * (len(rooms) > 8)
        return Status.unschedulable(
            f"hard constraint on level {level!r} ({describe(self._constraint(context, depth))}) "
            f"cannot be met for {n} members under {where}: they are {quota} of the gang's "
            f"{p.count} {level} partitions ({p.sizes()} members each), each on a {level} unit "
            f"of its own, and the {level} units there can take {room or 'none'}"
        )

    def _place(
        self,
        prefix: Path,
        members: list[Pod],
        quota: Quota,
        context: _Attempt,
        ledger: Ledger,
    ) -> tuple[list[tuple[Pod, str]], list[str], Status]:
        levels = self._tree.levels
        where = "/".join(prefix) or "the root"
        if len(prefix) == len(levels):
            node = prefix[-1]
            for pod in members:
                if node not in context.fit[id(pod)] or not ledger.admits(pod, node):
                    return [], [], Status.unschedulable(f"{pod.ref.name} does not fit on {node}")
                if ledger.asks_devices(pod) or ledger.asks_volumes(pod):
                    # Its devices and volumes, so that the next member sees them taken (and
                    # counted against the node's attach limits).
                    ledger.place(pod, node)
                else:
                    ledger.take(node, pod.requests)
            return [(pod, node) for pod in members], [], Status.success()
        constraint = self._constraint(context, len(prefix))
        children = self._tree.children.get(prefix, ())
        local = [context.caps[(*prefix, child)] for child in children]
        room = [context.raw[(*prefix, child)] for child in children]
        last = Status.unschedulable(f"no placement found under {where}")
        shrunk: set[int] = set()
        for _ in range(MAX_RESPLITS):
            plan, notes, status = self._split(
                prefix,
                len(members),
                local,
                raw=room,
                constraint=constraint,
                quota=quota,
                context=context,
            )
            if plan is None:  # after a unit failed, its reason says more than this split's
                return [], [], last if shrunk else status
            scratch = ledger.scratch()
            placed: list[tuple[Pod, str]] = []
            start = 0
            failed: int | None = None
            for index in sorted(plan):  # tree order: consecutive members stay together
                count, below = plan[index]
                got, more, status = self._place(
                    (*prefix, children[index]),
                    members[start : start + count],
                    below,
                    context,
                    scratch,
                )
                if not status.ok:
                    failed, last = index, status
                    break
                placed += got
                notes += more
                start += count
            if failed is None:
                scratch.commit()
                return placed, notes, Status.success()
            # It cannot take that many: count it one smaller, and the second time not at all
            # (so a unit that cannot be used costs two tries, not one per member).
            local[failed] = plan[failed][0] - 1 if failed not in shrunk else 0
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
    sketch in Sakkara's proposal."""
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
