"""A gang of subgroups (Volcano's subGroupPolicy): each policy's minSubGroups whole, each
subgroup exactly its size or not at all, then the plain members and the elastic part; a
subgroup with a networkTopology inside one domain of its tier, and healed back into it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from scheduler.core.arranging import tree_order
from scheduler.core.gangs import tier_level
from scheduler.core.queues import QueueRoom
from scheduler.core.session import Session
from scheduler.core.solvers.members import arranged, find_among, place_each
from scheduler.core.solvers.tiers import everywhere, unit_name
from scheduler.core.statement import Statement
from scheduler.model.decisions import Binding
from scheduler.model.gangs import Gang, SubGroup
from scheduler.model.pods import SUCCEEDED, Pod, PodRef
from scheduler.model.status import Status
from scheduler.model.topology import Constraints, LevelConstraint, Topology


def place_subgroups(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    members: list[Pod],
    *,
    need: int,
    held: Mapping[PodRef, str] = MappingProxyType({}),
) -> tuple[list[Binding], Status]:
    """A gang of subgroups, as Volcano orders its subjobs: first each policy's
    minSubGroups, each subgroup exactly its size (whole, or undone on the statement), then
    the plain members, then the elastic part (the members of placed subgroups beyond their
    size, and further whole subgroups). It holds if every policy has its minimum whole and
    ``need`` members are placed. ``held``: members holding nominated room (a preemptor's),
    placed already; they count for their subgroup, and are bound (returned among the
    bindings) only if it ends whole."""
    pending_by_ref = {p.ref: p for p in members}
    # Finished members count for their subgroup as Volcano's ready ones do: a subgroup whose
    # member succeeded is not short of it.
    running = {
        p.ref: p.node_name for p in gang.members if p.bound and (p.alive or p.phase == SUCCEEDED)
    }
    got: list[Binding] = []
    whole: dict[str, int] = {}
    done: set[str] = set()
    # Per policy, why its first subgroup that failed did: one with all its members first,
    # as one short of members can only wait for them (and says least about the room).
    misses: dict[str, str] = {}
    lacking: set[str] = set()  # policies whose miss is a subgroup short of members

    def attempt(subgroup: SubGroup, *, extras: bool) -> None:
        placed_refs = {b.pod for b in got}
        todo = session.order.ordered(
            [
                pending_by_ref[r]
                for r in subgroup.members
                if r in pending_by_ref and r not in placed_refs
            ]
        )
        placed, miss = _place_subgroup(
            session,
            statement,
            gang,
            room,
            subgroup=subgroup,
            todo=todo,
            nodes=[running[r] for r in subgroup.members if r in running],
            held={r: held[r] for r in subgroup.members if r in held},
            extras=extras,
        )
        got.extend(placed)
        if miss:
            complete = len(subgroup.members) >= subgroup.size
            if subgroup.policy not in misses or (complete and subgroup.policy in lacking):
                misses[subgroup.policy] = f"subgroup {subgroup.name}: {miss}"
                (lacking.discard if complete else lacking.add)(subgroup.policy)
        else:
            done.add(subgroup.name)
            whole[subgroup.policy] = whole.get(subgroup.policy, 0) + 1

    tried: set[str] = set()
    for policy, least in gang.subgroup_minimums:
        for subgroup in gang.subgroups:
            if subgroup.policy == policy and whole.get(policy, 0) < least:
                tried.add(subgroup.name)
                attempt(subgroup, extras=False)
    short = _short_of(gang, whole, misses)
    if short is not None and need:
        return got, short  # a gang not running yet that misses a minimum goes no further
    in_subgroups = {r for g in gang.subgroups for r in g.members}
    # Held plain members (a preemptor's) are placed already: they count and are bound
    # (else a launcher beside two workers would wait out its nomination).
    got += [Binding(r, n) for r, n in sorted(held.items()) if r not in in_subgroups]
    loose = [p for p in session.order.ordered(members) if p.ref not in in_subgroups]
    placed, loose_miss = place_each(session, statement, gang, room, loose)
    got += placed
    for subgroup in gang.subgroups:  # the elastic part
        if subgroup.name in done:
            placed_refs = {b.pod for b in got}
            rest = [pending_by_ref[r] for r in subgroup.members if r in pending_by_ref]
            rest = [p for p in rest if p.ref not in placed_refs]
            if rest and not tiered_subgroup(session, subgroup):
                got += place_each(session, statement, gang, room, session.order.ordered(rest))[0]
        elif subgroup.name not in tried:  # one that fell short above would again
            attempt(subgroup, extras=True)
    short = _short_of(gang, whole, misses)
    if short is not None:
        return got, short
    if len(got) < need:
        why = loose_miss or next(iter(misses.values()), "")
        return got, Status.unschedulable(
            f"only {len(got)} of {need} members fit{': ' + why if why else ''}"
        )
    return got, Status.success()


def _short_of(gang: Gang, whole: Mapping[str, int], misses: Mapping[str, str]) -> Status | None:
    """Why the gang misses a policy's minSubGroups, if it does."""
    for policy, least in gang.subgroup_minimums:
        if whole.get(policy, 0) < least:
            why = misses.get(policy, "")
            return Status.unschedulable(
                f"only {whole.get(policy, 0)} of the {least} subgroups of policy {policy} "
                f"that the gang needs fit whole{': ' + why if why else ''}"
            )
    return None


def _place_subgroup(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    subgroup: SubGroup,
    todo: list[Pod],
    nodes: list[str],
    held: Mapping[PodRef, str],
    extras: bool,
) -> tuple[list[Binding], str]:
    """One subgroup, whose running (or finished) members are on ``nodes`` and whose
    ``held`` members hold their room: what is to be bound of it, and "" if it is whole now,
    else why not (nothing of it is bound then, its holds included). Exactly as many members
    as make it whole, unless ``extras``: then every pending member that fits."""
    kept = [Binding(ref, node) for ref, node in sorted(held.items())]
    started = len(nodes) + len(kept)
    short = max(subgroup.size - started, 0)
    tiered = tiered_subgroup(session, subgroup)
    if nodes and tiered and todo:
        # Healing: back where the rest of the subgroup runs (its domain of the tier).
        placed, status = _heal_subgroup(
            session, statement, gang, room, subgroup=subgroup, todo=todo, nodes=nodes, short=short
        )
        return (kept + placed, "") if status.ok else ([], status.message)
    if not short:  # whole already: the rest follow one by one (the elastic part)
        more = place_each(session, statement, gang, room, todo)[0] if extras else []
        return kept + more, ""
    if len(todo) < short:
        return [], f"it has {started + len(todo)} of its {subgroup.size} members"
    if tiered:
        if kept:
            return [], "it waits for the room its preemption freed for all of its members"
        placed, status = _arrange_subgroup(
            session, statement, gang, room, subgroup=subgroup, todo=todo
        )
        return (placed, "") if status.ok else ([], status.message)
    mark = statement.mark()
    # At its size: the members that fit, skipping one that does not (were the first
    # `short` alone tried, one that fits nowhere would sink the subgroup).
    placed, miss = place_each(session, statement, gang, room, todo, limit=None if extras else short)
    if len(placed) >= short:
        return kept + placed, ""
    statement.undo_to(mark)
    return [], miss


def _arrange_subgroup(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    subgroup: SubGroup,
    todo: list[Pod],
) -> tuple[list[Binding], Status]:
    """A subgroup with a ``networkTopology``: by the topology solver, all of it in one
    domain of its tier (``hard``; ``soft`` prefers one and places anyway), every pending
    member else the first ``size`` of them; nothing placed unless it all fits."""
    level, problem = subgroup_level(session.topology, subgroup)
    if problem:
        return [], Status.unschedulable(problem)
    assert subgroup.topology is not None
    constraints = Constraints(
        by_level={
            level: LevelConstraint(level=level, partitions=1, hard=subgroup.topology.mode == "hard")
        }
    )
    members = sorted(todo, key=lambda p: tree_order(p.ref.name))
    tries = [members]
    if subgroup.size < len(members):
        tries.append(members[: subgroup.size])
    if not members:
        return [], Status.unschedulable(f"fewer than {subgroup.size} members to place")
    got, status, _ = arranged(session, statement, gang, room, tries=tries, constraints=constraints)
    return got, status


def _heal_subgroup(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    subgroup: SubGroup,
    todo: list[Pod],
    nodes: list[str],
    short: int,
) -> tuple[list[Binding], Status]:
    """Members of a running subgroup with a ``networkTopology``: those it lost (a
    node gone, a pod deleted, made again by its controller) go back into the domain of its
    tier where the rest of it runs, all of the missing ones or none (its size again); its
    extras one by one there. Where that domain has no room: a ``hard`` subgroup waits (the
    rest runs on), a ``soft`` one is placed in any one domain of its tier. Kueue's TAS
    replaces a failed node by one node of the same domain, one failed node at a time, and
    evicts the whole workload when it finds none (fail-fast) or keeps trying; here each lost
    pod is placed on its own, however many nodes went, and nothing that runs is disturbed."""
    assert subgroup.topology is not None
    topology = session.topology
    level, problem = subgroup_level(topology, subgroup)
    if problem:
        return [], Status.unschedulable(problem)
    units = {session.unit_of(n, level) for n in nodes if n in topology.paths}
    unit = units.pop() if len(units) == 1 else None
    domain = unit_name(unit) if unit is not None else ""
    where = session.domains(level)[unit] if unit is not None else frozenset(topology.paths)
    mark = statement.mark()
    got: list[Binding] = []
    first_miss = ""
    for pod in todo:
        refused = room.refuse(gang.queue, session.queues.amounts(pod)) if room is not None else ""
        node = None if refused else find_among(session, statement, pod, where)
        if node is None:
            first_miss = (
                first_miss or refused or f"{pod.ref.name}: no node of {level} {domain} has room"
            )
            continue
        statement.allocate(pod, node, queue=gang.queue)
        got.append(Binding(pod.ref, node))
    if len(got) >= short:
        return got, Status.success()
    statement.undo_to(mark)
    if subgroup.topology.mode == "soft":
        return _arrange_subgroup(session, statement, gang, room, subgroup=subgroup, todo=todo)
    return [], Status.unschedulable(
        f"{first_miss}; the rest of the subgroup runs in {level} {domain}, and a hard "
        "networkTopology keeps its members there: it waits for room in it"
    )


def tiered_subgroup(session: Session, subgroup: SubGroup) -> bool:
    """Whether a subgroup's networkTopology keeps it inside a unit (a soft one above every
    level asks for nothing)."""
    spec = subgroup.topology
    return spec is not None and not everywhere(session.topology, spec)


def subgroup_level(topology: Topology, subgroup: SubGroup) -> tuple[str, str]:
    """The level of ``topology`` a subgroup's networkTopology names (``tier_level``)."""
    assert subgroup.topology is not None
    return tier_level(
        topology, subgroup.topology, where=f"subgroup {subgroup.name}: networkTopology"
    )
