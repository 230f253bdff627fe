"""Placing a GangGroup whole: the solver allocate, preempt, reclaim and every new action
use. Each gang places at least its minimum on the Statement (within its queue's room, inside
a unit of its tier, around a claim its members share, by subgroups, or by the topology
solver), or the group falls short and the caller drops the Statement."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.arranging import master_of, tree_order
from scheduler.core.queues import QueueRoom
from scheduler.core.session import Session, pending
from scheduler.core.solvers.members import arranged, place_members
from scheduler.core.solvers.subgroups import place_subgroups
from scheduler.core.solvers.tiers import place_within_tier
from scheduler.core.statement import Statement
from scheduler.model.decisions import Binding
from scheduler.model.devices import Allocation, ResourceClaim
from scheduler.model.gangs import Gang
from scheduler.model.pods import GangKey, Pod, PodRef
from scheduler.model.resources import Resources
from scheduler.model.status import Status
from scheduler.model.topology import Constraints


def place_group(
    session: Session, statement: Statement, gangs: list[Gang], room: QueueRoom | None = None
) -> bool | None:
    """Place every gang of a group on the statement, each at least its min_member, within
    ``room`` (else the queues' room on the statement's ledger); None if one falls short (the
    statement then holds what was placed: the caller drops it). The gangs of a
    CompositePodGroup hierarchy need only make its quorum: one that falls short is taken
    back alone."""
    if room is None:
        room = session.queues.room(statement.ledger)
        if room is not None:
            statement.subscribe(room)
    quorum = gangs[0].quorum if gangs else None
    placed: set[GangKey] = set()
    for gang in gangs:
        mark = statement.mark()
        _, status = place_gang(session, statement, gang, room)
        if status.ok:
            placed.add(gang.key)
        elif quorum is None:
            return None
        else:
            statement.undo_to(mark)
    if quorum is not None and not quorum.met(placed | session.readiness.placed_before(quorum)):
        return None
    return True


def place_gang(
    session: Session, statement: Statement, gang: Gang, room: QueueRoom | None
) -> tuple[list[Binding], Status]:
    """Place as many pending members as fit (min_member at least, or it falls short), within
    the room its queue's limits leave (``room``)."""
    status = session.readiness.enough_in_total(gang)
    if not status.ok:
        return [], status
    if gang.topology_placed:
        return place_within_tier(
            session, statement, gang, room, held={},
            place=lambda: _arrange_gang(session, statement, gang, room),
        )  # fmt: skip
    held = session.outcomes[gang.key].state.reservations
    need = gang.need - len(held)
    members = [p for p in session.order.ordered(pending(gang)) if p.ref not in held]
    if room is not None:
        # What it holds (NonStrict holds; a preemptor's nominated room is in the book
        # already) and its minimum must fit in its queue: else it is said of the gang.
        holding = Resources.total(
            session.queues.amounts(p)
            for p in gang.members
            if p.ref in held and p.ref not in session.queues.counted_refs
        )
        minimum = Resources.total(session.queues.amounts(p) for p in members[: max(need, 0)])
        refused = room.refuse(gang.queue, minimum, held=holding) if holding or need > 0 else ""
        if refused:
            return [], Status.unschedulable(refused)
        statement.count(gang.queue, holding)
    return place_within_tier(
        session, statement, gang, room, held=held,
        place=lambda: _place_pending(session, statement, gang, room, members, need=need, held=held),
    )  # fmt: skip


def _place_pending(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    members: list[Pod],
    *,
    need: int,
    held: Mapping[PodRef, str],
) -> tuple[list[Binding], Status]:
    """The pending ``members`` (``held`` ones aside), ``need`` of them at least: by
    subgroups, around a claim they share, or one by one."""
    if gang.subgroup_minimums:
        return place_subgroups(session, statement, gang, room, members, need=gang.need, held=held)
    shared = _shared_claim(session, statement, members)
    if shared is None:
        return place_members(session, statement, gang, members, need=need, room=room)
    # Members that share a claim not yet allocated go where its devices are: the first one
    # placed would choose them for all (a rack's channel chosen where the rest do not fit).
    # So each allocation the claim could have (one per reach: a rack, a node) is tried in
    # turn, the gang placed around it, until one holds the whole gang.
    got: list[Binding] = []
    status = Status.unschedulable("no allocation of its shared claim holds the gang")
    for allocation in _alternatives(session, statement, shared, members):
        mark = statement.mark()
        statement.claim(shared.key, allocation)
        got, status = place_members(session, statement, gang, members, need=need, room=room)
        if status.ok:
            return got, status
        statement.undo_to(mark)
    return [], status


# How many allocations of a shared claim a gang tries in one pass.
MAX_ALTERNATIVES = 16


def _shared_claim(
    session: Session, statement: Statement, members: list[Pod]
) -> ResourceClaim | None:
    """The first claim two or more pending members share that has no allocation yet."""
    if session.devices is None:
        return None
    seen: dict[tuple[str, str], int] = {}
    for pod in members:
        for entry in pod.resource_claims:
            if entry.claim:
                key = (pod.ref.namespace, entry.claim)
                seen[key] = seen.get(key, 0) + 1
    for key, count in seen.items():
        claim = session.devices.claims.get(key)
        if (
            count > 1
            and claim is not None
            and claim.allocation is None
            and statement.ledger.allocated(key) is None
        ):
            return claim
    return None


def _alternatives(
    session: Session, statement: Statement, claim: ResourceClaim, members: list[Pod]
) -> list[Allocation]:
    """The distinct allocations ``claim`` could get, by the nodes the first member sharing
    it may go on and has room on (packing order), one per set of nodes they reach. Nodes
    without room for it are passed over: the fullest come first, and sixteen full ones
    must not hide the empty node behind them."""
    first = next(p for p in members if any(e.claim == claim.name for e in p.resource_claims))
    world, ledger = session.devices, statement.ledger
    found: dict[object, Allocation] = {}
    for name in session.finder.candidates(first):
        if len(found) >= MAX_ALTERNATIVES:
            break
        if not ledger.fits(name, first.requests):
            continue
        done = world.allocate(
            [claim], session.snapshot.nodes[name], taken=ledger.taken, freed=ledger.freed
        )
        if isinstance(done, str):
            continue
        found.setdefault(done[0].node_selector, done[0])
    return list(found.values())


def _arrange_gang(
    session: Session, statement: Statement, gang: Gang, room: QueueRoom | None
) -> tuple[list[Binding], Status]:
    """The whole gang in one go by the topology solver: every pending member, else the
    first min_member of them (the master first, then in name order)."""
    todo = pending(gang)
    if not todo:
        return [], Status.success()
    state = session.outcomes[gang.key].state
    if state.reservations:
        return [], _nominated_room(gang, todo, state.reservations, state.nominated)
    master = master_of(p.ref for p in todo)
    members = sorted(todo, key=lambda p: (p.ref != master, tree_order(p.ref.name)))
    constraints = gang.constraints or Constraints()
    tries = [members]
    if gang.need < len(members):
        tries.append(members[: gang.need])
    got, status, relaxed = arranged(
        session, statement, gang, room, tries=tries, constraints=constraints
    )
    if status.ok:
        session.outcomes[gang.key].relaxed = relaxed
    return got, status


def _nominated_room(
    gang: Gang, todo: list[Pod], held: Mapping[PodRef, str], nominated: Mapping[PodRef, str]
) -> Status:
    """A topology-placed preemptor's members hold the room its victims freed, where the
    solver placed them when it chose the victims: it binds there (the holds are its
    bindings) once every nominated member holds its room, and is not arranged again, which
    would place its held members a second time, or find its own holds in its way."""
    waiting = {p.ref for p in todo}
    wanted = {ref for ref in nominated if ref in waiting}
    if wanted <= set(held) and len(held) >= gang.need:
        return Status.success()
    missing = sorted(ref.name for ref in wanted - set(held))
    return Status.unschedulable(
        f"waiting for the room freed by its preemption: {', '.join(missing)} not yet free"
    )
