"""A gang kept inside one domain of a tier: Volcano's PodGroup ``spec.networkTopology``.

``highestTierAllowed: k`` says how high in the network the gang may spread: all of it inside
one unit of the k-th level above the nodes (or of the level ``highestTierName`` names). As
Volcano does, a lower tier is better: the units of the lowest level above the nodes are
tried first, then those of each level up to the one allowed. Inside a unit the members are
placed by the ordinary placement, each by every filter and in packing order, with the node
finder fenced to the unit's nodes: nothing a pod spec says is lost (the topology solver,
used for this first, ignored pod anti-affinity). Units are tried fullest first among those
whose free room could hold the gang's minimum (binpacking units, as the finder packs
nodes), so a gang that fits in a half-used rack leaves the empty racks to bigger gangs.

``hard``: the gang waits rather than spread over more than one unit; ``soft``: one unit is
preferred, and the gang is placed anyway if none holds it. A gang that already runs (or
holds nodes) keeps its new members inside the unit where the rest are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from scheduler.core.gangs import tier_level
from scheduler.core.queues import QueueRoom
from scheduler.core.session import Session, pending
from scheduler.core.statement import Statement
from scheduler.model.decisions import Binding
from scheduler.model.gangs import Gang
from scheduler.model.pods import NetworkTopology, PodRef
from scheduler.model.resources import Resources
from scheduler.model.status import Status
from scheduler.model.topology import Topology

Placed = tuple[list[Binding], Status]
# Units of its tier a gang tries in one attempt; the next attempt tries the next ones.
MAX_UNITS = 16
Unit = tuple[str, str, frozenset[str]]  # (level, its name as people read it, its nodes)

WHERE = "PodGroup spec.networkTopology"


def _where(spec: NetworkTopology) -> str:
    """What states the tier, as the user wrote it."""
    return "PodGroup spec.schedulingConstraints.topology" if spec.label_key else WHERE


def network_topology(gang: Gang) -> NetworkTopology | None:
    """The gang's own networkTopology, where it states one."""
    return gang.network_topology


def place_within_tier(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    held: Mapping[PodRef, str],
    place: Callable[[], Placed],
) -> Placed:
    """``place()`` (the gang's ordinary placement) inside one unit of the gang's tier, unit
    by unit until one holds it; what a unit that fell short placed is undone. ``held``:
    members already on nodes (a preemptor's nominated room), placed by the caller. At most
    MAX_UNITS units an attempt, the next ones at the next attempt (a gang that fits no rack
    of 250 would try all 250, a full placement each, every pass)."""
    spec = network_topology(gang)
    if spec is None or everywhere(session.topology, spec):
        return place()
    level, problem = tier_level(session.topology, spec, where=_where(spec))
    if problem:
        return [], Status.unschedulable(problem)
    first_miss = ""
    units = list(_units(session, statement, gang, level=level, held=held))
    window = _window(units, attempts=session.outcomes[gang.key].state.attempts)
    for unit_level, unit, nodes in window:
        mark = statement.mark()
        with session.finder.fenced(nodes):
            got, status = place()
        if status.ok:
            return got, status
        statement.undo_to(mark)  # the queue's room and the finder's cursors with it
        first_miss = first_miss or f"in {unit_level} {unit}: {status.message}"
    if spec.mode == "soft":
        return place()
    anchored = " where the rest of it is" if _anchors(session, gang, held) else ""
    why = f"; {first_miss}" if first_miss else ""
    more = ""
    if len(units) > len(window):
        more = f" of {len(units)}, the next ones at its next attempt"
    return [], Status.unschedulable(
        f"no {level} has room for the gang in one unit{anchored} ({_where(spec)}"
        f"{'' if spec.label_key else ' mode hard'}, "
        f"{len(window)} tried{more}){why}"
    )


def _window(units: list[Unit], *, attempts: int) -> list[Unit]:
    """The units an attempt tries, in their order (lowest level, fullest first): all when
    they are few; else the first half of MAX_UNITS always (the best now) and the rest in
    turns, the next ones at each attempt (a rotation of all of them would skip the fullest
    unit that fits, and put zones before racks)."""
    if len(units) <= MAX_UNITS:
        return units
    head, rest = units[: MAX_UNITS // 2], units[MAX_UNITS // 2 :]
    turn = MAX_UNITS - len(head)
    start = (attempts * turn) % len(rest)
    chosen = {*range(start, start + turn)} | {*range(start + turn - len(rest))}
    return head + [unit for i, unit in enumerate(rest) if i in chosen]


def everywhere(topology: Topology, spec: NetworkTopology) -> bool:
    """A soft tier above every level of the topology (none described: the nodes alone) asks
    for nothing: the whole cluster is one unit (else a soft tier on a flat cluster would
    make every node a unit and pack the gang onto one)."""
    if spec.mode != "soft" or spec.highest_tier_name:
        return False
    tier = spec.highest_tier if spec.highest_tier is not None else 1
    return tier >= len(topology.levels)


def unit_name(key: tuple[str, ...]) -> str:
    """A unit as people read it: its path from the top ("zone-a/r0": racks of the same name
    in two zones are two units)."""
    return "/".join(key)


@dataclass(frozen=True, slots=True)
class Fence:
    """Where a running gang's new members go: ``nodes``, the unit of its tier where its
    bound members are (``where`` names it), which they must keep to when ``hard``."""

    nodes: frozenset[str]
    where: str
    hard: bool


def fence_of_running(session: Session, gang: Gang) -> Fence | Status | None:
    """The fence for a running gang's new members; None when it has no networkTopology or
    its members are not inside one unit of it (placed before it was stated: nothing to
    keep); a Status when its tier names no level of the topology. A topology-placed gang
    (our constraints, a Sakkara group) without one keeps them in the smallest unit where
    its running members are."""
    spec = network_topology(gang)
    topology = session.topology
    if spec is None or everywhere(topology, spec):
        return _fence_of_placed(session, gang) if gang.topology_placed else None
    level, problem = tier_level(topology, spec, where=_where(spec))
    if problem:
        return Status.unschedulable(problem)
    units = {session.unit_of(n, level) for n in _anchors(session, gang, {})}
    if len(units) != 1:
        return None
    unit = units.pop()
    nodes = session.domains(level)[unit]
    return Fence(nodes, f"{level} {unit_name(unit)}", hard=spec.mode == "hard")


def _fence_of_placed(session: Session, gang: Gang) -> Fence | None:
    """Healing: a lost member of a topology-placed gang, made again, goes back into the
    smallest unit (lowest level first) that holds every running member, where the solver
    put the gang; it waits for room there when one of the gang's constraints is hard, and
    goes anywhere after trying there when all are soft. None when nothing of it runs inside
    the topology."""
    topology = session.topology
    anchors = _anchors(session, gang, {})
    if not anchors:
        return None
    levels = topology.levels
    for level in reversed(levels[:-1]):
        units = {session.unit_of(n, level) for n in anchors}
        if len(units) == 1:
            unit = units.pop()
            constraints = gang.constraints.by_level.values() if gang.constraints else ()
            hard = any(c.hard for c in constraints)
            nodes = session.domains(level)[unit]
            return Fence(nodes, f"{level} {unit_name(unit)}", hard=hard)
    return None


def _anchors(session: Session, gang: Gang, held: Mapping[PodRef, str]) -> list[str]:
    """The nodes of the topology the gang's members run on or hold."""
    paths = session.topology.paths
    bound = (p.node_name for p in gang.members if p.bound and p.alive)
    return [n for n in (*bound, *held.values()) if n in paths]


def _units(
    session: Session,
    statement: Statement,
    gang: Gang,
    *,
    level: str,
    held: Mapping[PodRef, str],
) -> Iterator[tuple[str, str, frozenset[str]]]:
    """(level, unit, its nodes) to try, lowest level first; at each level the unit where
    the gang's members already are, else every unit whose free room could hold its minimum,
    fullest first."""
    topology = session.topology
    levels = topology.levels
    top = levels.index(level)
    anchors = _anchors(session, gang, held)
    todo = session.order.ordered([p for p in pending(gang) if p.ref not in held])
    need = max(gang.need - len(anchors), 0)
    wanted = Resources.total(statement.ledger.asks(p) for p in todo[:need])
    for at in range(max(len(levels) - 2, top), top - 1, -1):
        domains = session.domains(levels[at])
        if anchors:
            units = {session.unit_of(n, levels[at]) for n in anchors}
            if len(units) == 1:
                unit = units.pop()
                yield levels[at], unit_name(unit), domains[unit]
            continue
        for unit in _fullest_first(domains, statement, wanted):
            yield levels[at], unit_name(unit), domains[unit]


def _fullest_first(
    domains: Mapping[tuple[str, ...], frozenset[str]], statement: Statement, wanted: Resources
) -> list[tuple[str, ...]]:
    """The units whose free room, summed, holds ``wanted``, the ones it fills most first
    (by the number of times it would fit, then by name)."""
    wants = [(r, amount) for r, amount in wanted.items() if amount > 0]
    names = [r for r, _ in wants]
    ledger = statement.ledger
    world = ledger.devices
    devices = [r for r in names if world is not None and world.served(r)]
    ranked: list[tuple[float, tuple[str, ...]]] = []
    for unit, nodes in domains.items():
        rooms = (ledger.room(n, devices) if devices else ledger.free(n) for n in nodes)
        free = _summed(rooms, names)
        times = min((free[r] / amount for r, amount in wants), default=1.0)
        if times >= 1.0:
            ranked.append((times, unit))
    return [unit for _, unit in sorted(ranked)]


def _summed(rooms: Iterable[Mapping[str, int]], resources: list[str]) -> dict[str, int]:
    total = dict.fromkeys(resources, 0)
    for free in rooms:
        for r in resources:
            total[r] += max(free.get(r, 0), 0)
    return total
