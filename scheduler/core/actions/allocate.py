"""Allocate: each GangGroup in queue order, whole or not at all, on a Statement of its own.

A GangGroup's turn: gangs of it that are satisfied (a live bound member) place their
remaining members one by one (after gang); the others are tried together. Timed-out,
invalid or not yet complete gangs are not tried, and say why. Every unsatisfied gang of the
group must place ``min_member`` members, less those that completed (``Gang.need``); then
the Statement is committed and the group is one commit point (one ``GroupBinding``); else
it is discarded (Strict), or its allocations are kept as holds that are never bound
(NonStrict).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from scheduler.core.actions.tiering import (
    Fence,
    everywhere,
    fence_of_running,
    place_within_tier,
    unit_name,
)
from scheduler.core.arranging import master_of, tree_order
from scheduler.core.gangs import tier_level
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.core.queues import QueueRoom
from scheduler.core.session import (
    REASON_SCHEDULED,
    REASON_TIMEOUT,
    REASON_UNSCHEDULABLE,
    Session,
    gated,
    of_timeout,
    pending,
)
from scheduler.core.statement import Statement
from scheduler.model import names
from scheduler.model.decisions import Binding, GangBinding, GroupBinding, PodPatch, Verdict
from scheduler.model.devices import Allocation, ResourceClaim
from scheduler.model.gangs import Gang, SubGroup
from scheduler.model.pods import SUCCEEDED, GangKey, Mode, Pod, PodRef
from scheduler.model.resources import Resources
from scheduler.model.status import Status
from scheduler.model.topology import Constraints, LevelConstraint, Topology


class Allocate:
    """Each GangGroup in queue order, whole or not at all."""

    name = "allocate"

    def run(self, session: Session) -> None:
        allocate(session)


def allocate(session: Session) -> None:
    for unit in session.units():
        present = [session.gangs[k] for k in unit if k in session.gangs]
        if len(present) == 1 and _settled(session, present[0]):
            _place_after_gang(session, None, present[0])  # nothing to place: no turn needed
            continue
        with session.turn(unit, present) as statement:
            _turn(session, statement, unit, present)


def _settled(session: Session, gang: Gang) -> bool:
    """Satisfied, with nobody left to place: the common case of a running gang."""
    return session.outcomes[gang.key].state.satisfied and not pending(gang)


def _turn(
    session: Session, statement: Statement, unit: tuple[GangKey, ...], present: list[Gang]
) -> None:
    # A gang of the group that is satisfied (half a group bound before a crash, say) places
    # its remaining members one by one; the others are tried whole, together.
    # While binds of an unsatisfied gang of the group are in flight, its fate is the
    # binder's: placing anything of the group now could outlive a rejected first bind.
    if any(session.in_flight(g) and not session.outcomes[g.key].state.satisfied for g in present):
        return
    # A gang with nobody pending (every member finished) has nothing to place.
    waiting = [
        g
        for g in present
        if not session.outcomes[g.key].state.satisfied and (pending(g) or gated(g))
    ]
    room = session.queue_room()  # one for the whole turn: what one part takes, the next sees
    for gang in present:
        if session.outcomes[gang.key].state.satisfied:
            _place_after_gang(session, statement, gang, room)
    statement.commit()  # bound one by one whatever the others do: never undone below
    if not waiting:
        return
    expired = [g for g in waiting if session.timed_out(g)]
    if expired:  # a timed-out gang stays so, and takes its GangGroup with it
        for gang in waiting:
            _time_out(session, gang, because=expired[0])
        session.attempted(waiting, Verdict.TIMED_OUT)
        return
    for gang in waiting:
        if gang.mode is Mode.NON_STRICT and not session.outcomes[gang.key].state.nominated:
            keep_holds(session, statement, gang)
    if (why := session.why_not_ready(unit, waiting)) is not None:
        session.attempted(waiting, Verdict.NOT_READY, Status.wait(why))
        return
    if any(session.awaiting_victims(g) for g in waiting):
        # A preemptor whose victims are still leaving: their going is what it waits for.
        session.attempted(waiting, Verdict.AWAITING_VICTIMS)
        return
    retry_at = max(session.outcomes[g.key].state.retry_at for g in waiting)
    if session.now < retry_at:
        session.wake(retry_at)
        session.attempted(waiting, Verdict.BACKING_OFF)
        _hold_for_head(session, statement, waiting)  # a head holds its room between tries too
        return
    if not session.worth_trying(waiting):
        session.attempted(waiting, Verdict.PARKED)
        _hold_for_head(session, statement, waiting)
        return  # parked: nothing changed that could help it
    _attempt(session, statement, waiting, room)


def _bound_of(gang: Gang, count: int) -> str:
    """The Scheduled condition's message: members bound of the minimum, and those that
    completed, which count toward it."""
    done = gang.completed
    return f"{count} of {gang.min_member} members bound" + (f", {done} completed" if done else "")


def _place_after_gang(
    session: Session, statement: Statement | None, gang: Gang, room: QueueRoom | None = None
) -> None:
    outcome = session.outcomes[gang.key]
    members = sum(1 for p in gang.members if p.bound and p.alive)
    outcome.condition = ("True", REASON_SCHEDULED, _bound_of(gang, members))
    todo = session.ordered(pending(gang))
    session.check_min_member(gang, members=members, waiting=len(todo))
    groups: list[GroupBinding] = []
    if todo and statement is not None:
        mark, cursors = statement.mark(), session.finder.mark()
        groups = _place_pending_members(session, statement, gang, room, todo)
    # Stale is judged with what this pass placed (KAI's stale-gang eviction runs after
    # allocate: review of #23, a replacement that fits when the grace ends makes the gang
    # whole rather than see it evicted). A gang still short is evicted, and what was placed
    # for it now is taken back: nothing binds beside an eviction.
    placed = sum(len(b.bindings) for g in groups for b in g.gangs)
    if session.check_stale(gang, running=members, placing=placed):
        if placed and statement is not None:
            done = [b for g in groups for gb in g.gangs for b in gb.bindings]
            _undo(
                session, statement, gang, room, mark=mark, cursors=cursors, placed=done, todo=todo
            )
            outcome.bindings = []
        return
    session.bindings.extend(groups)


def _place_pending_members(
    session: Session, statement: Statement, gang: Gang, room: QueueRoom | None, todo: list[Pod]
) -> list[GroupBinding]:
    """A running gang's pending members (after gang): where they fit, each its own commit
    point, inside the unit where the gang runs when it has a tier (#23). The groups to bind;
    why the others did not fit is said."""
    outcome = session.outcomes[gang.key]
    if session.now < outcome.state.retry_at:
        session.wake(outcome.state.retry_at)
        return []
    fence = fence_of_running(session, gang)
    if isinstance(fence, Status):  # its tier names no level: nothing goes, and it says so
        session.failed_attempt(gang, fence.message, pods=todo)
        return []
    if gang.subgroup_minimums:
        return _place_after_subgroups(session, statement, gang, room, todo, fence=fence)
    if fence is None:
        failures = _one_by_one(session, statement, gang, room, todo)
    else:  # inside the unit where the rest of it runs (#23); a soft one anywhere after that
        with session.finder.fenced(fence.nodes):
            failures = _one_by_one(session, statement, gang, room, todo, where=fence.where)
        placed = {b.pod for b in outcome.bindings}
        if failures and not fence.hard:
            left = [p for p in todo if p.ref not in placed]
            failures = _one_by_one(session, statement, gang, room, left)
    if failures:
        placed = {b.pod for b in outcome.bindings}
        unplaced = [p for p in todo if p.ref not in placed]
        session.failed_attempt(gang, "; ".join(failures), pods=unplaced)
    if not outcome.bindings:
        return []
    placement = session.refill_ranks(gang, outcome.bindings) if gang.topology_placed else None
    binding = GangBinding(gang.key, tuple(outcome.bindings), placement=placement)
    return [GroupBinding((binding,), all_or_nothing=False)]


def _one_by_one(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    todo: list[Pod],
    *,
    where: str = "",
) -> list[str]:
    """A running gang's pending members, each where it fits (its bindings go to the
    gang's outcome); why each of the others did not (``where`` says which unit they were
    kept to)."""
    outcome = session.outcomes[gang.key]
    failures: list[str] = []
    finder = session.finder
    inside = f" (kept to {where}, where the gang runs)" if where else ""
    for pod in todo:
        problem = session.volume_problem(pod)
        if not problem and room is not None:
            problem = room.refuse(gang.queue, pod.requests)
        node = None if problem else finder.find(pod, statement.ledger)
        if node is None:
            why = problem or finder.explain(pod, statement.ledger).message + inside
            failures.append(f"{pod.ref.name}: {why}")
            continue
        statement.allocate(pod, node)
        if room is not None:
            room.take(gang.queue, pod.requests)
        outcome.bindings.append(Binding(pod.ref, node))
    return failures


def _place_after_subgroups(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    todo: list[Pod],
    *,
    fence: Fence | None,
) -> list[GroupBinding]:
    """A running gang of subgroups (#23): a subgroup not started yet goes whole or waits,
    one whole subgroup at a time as room appears (the elastic part); the members a running
    subgroup lost come back together; plain members one by one. Each bound as it is placed:
    the gang runs already."""
    outcome = session.outcomes[gang.key]
    usable = [p for p in todo if not session.volume_problem(p)]
    if fence is None:
        got, status = _place_subgroups(session, statement, gang, room, usable, need=0)
    else:  # inside the unit of the gang's tier where it runs (#23); soft: anywhere after
        with session.finder.fenced(fence.nodes):
            got, status = _place_subgroups(session, statement, gang, room, usable, need=0)
        if not fence.hard and len(got) < len(usable):
            placed = {b.pod for b in got}
            left = [p for p in usable if p.ref not in placed]
            more, anywhere = _place_subgroups(session, statement, gang, room, left, need=0)
            got += more
            status = anywhere if more or status.ok else status  # why inside its unit, else
    outcome.bindings.extend(got)
    # A subgroup that starts now is one commit point (its first bind gates the rest: a
    # rejected one never leaves it partly running); the rest go one by one.
    started = {p.ref for p in gang.members if p.bound}
    fresh = {
        ref: subgroup.name
        for subgroup in gang.subgroups
        if not started.intersection(subgroup.members)
        for ref in subgroup.members
    }
    whole: dict[str, list[Binding]] = {}
    single: list[Binding] = []
    for binding in got:
        if binding.pod in fresh:
            whole.setdefault(fresh[binding.pod], []).append(binding)
        else:
            single.append(binding)
    groups = [
        GroupBinding((GangBinding(gang.key, tuple(bindings)),), all_or_nothing=True)
        for bindings in whole.values()
    ]
    if single:
        groups.append(GroupBinding((GangBinding(gang.key, tuple(single)),), all_or_nothing=False))
    placed = {b.pod for b in got}
    unplaced = [p for p in todo if p.ref not in placed]
    if unplaced:
        why = (
            status.message
            if not status.ok
            else (f"{len(unplaced)} member(s) wait: a subgroup is placed whole or not at all")
        )
        session.failed_attempt(gang, why, pods=unplaced)
    return groups


def keep_holds(session: Session, statement: Statement, gang: Gang) -> None:
    """A NonStrict gang takes its holds again at its turn, where they still fit: a gang
    ahead of it in the queue may have taken their room, and then it lets them go (and says
    so), rather than two holders each waiting out their time for room the other has."""
    outcome = session.outcomes[gang.key]
    held = outcome.state.reservations
    if not held:
        return
    waiting = {p.ref: p for p in pending(gang)}
    kept = {}
    for ref, node in sorted(held.items()):
        pod = waiting.get(ref)
        if pod is None or not statement.ledger.admits(pod, node):
            continue
        check = session.finder.check(pod, statement.ledger)
        if check is not None and check.reason(node):
            continue
        statement.hold(pod, node)
        kept[ref] = node
    lost = [ref for ref in held if ref not in kept and ref in waiting]
    if lost:
        session.say(
            gang,
            reason="HoldReleased",
            message=(
                f"gang {gang.key} let go of {len(lost)} held member(s): their room went to "
                f"gangs ahead of it in the queue (higher priority or older); it holds "
                f"{len(kept)} of {gang.min_member}"
            ),
            pods=[waiting[ref] for ref in lost],
            warning=False,
        )
    outcome.state = replace(outcome.state, reservations=kept)


def _time_out(session: Session, gang: Gang, *, because: Gang) -> None:
    outcome = session.outcomes[gang.key]
    todo = pending(gang)
    if because is gang:
        message = (
            f"gang {gang.key} was not placed within {gang.timeout_seconds:g}s of its first "
            f"attempt; its pods are marked {names.KOORD_TIMEOUT}=true and will not be tried "
            "again: delete them (or the PodGroup) and create them anew to retry"
        )
    else:
        message = f"gang {because.key} of the same GangGroup timed out, so this gang did too"
    at = outcome.state.timed_out_at if outcome.state.timed_out_at is not None else session.now
    outcome.state = replace(outcome.state, timed_out=True, timed_out_at=at, reservations={})
    outcome.condition = ("False", REASON_TIMEOUT, message)
    # Pods created after the timeout (a Job replacing them) are not marked: they will be
    # a new incarnation once the marked ones have gone.
    todo = [p for p in todo if of_timeout(p, outcome.state)]
    session.patches.extend(
        PodPatch(p.ref, {names.KOORD_TIMEOUT: "true"}) for p in todo if not p.timed_out
    )
    session.say(gang, reason="GangTimeout", message=message, pods=todo)


def _attempt(
    session: Session, statement: Statement, gangs: list[Gang], room: QueueRoom | None
) -> None:
    """Try the whole GangGroup on the statement; commit it whole or not at all."""
    placed: dict[GangKey, list[Binding]] = {}
    short: dict[GangKey, Status] = {}  # why a gang fell short of min_member
    for gang in gangs:
        outcome = session.outcomes[gang.key]
        if outcome.state.first_attempt is None:
            outcome.state = replace(outcome.state, first_attempt=session.now)
        shape = session.shape(gang) if len(gangs) == 1 else None
        names_now = [p.ref.name for p in session.ordered(pending(gang))] if shape else []
        known = session.failed_shapes.get(shape) if shape is not None else None
        if known is not None:  # the same shapes already failed in this pass: so does this
            status = _renamed(known, names_now)
            placed[gang.key] = []
        else:
            placed[gang.key], status = _place_gang(session, statement, gang, room)
            if not status.ok and shape is not None:
                session.failed_shapes[shape] = (status, names_now)
        if not status.ok:
            short[gang.key] = status
    if short:
        first = next(g for g in gangs if g.key in short)
        session.attempted(gangs, Verdict.UNSCHEDULABLE, short[first.key])
        _unit_failed(session, statement, gangs, placed, short)
        _hold_for_head(session, statement, gangs)
        for gang in gangs:
            session.park(gang)
        return
    session.attempted(gangs, Verdict.SCHEDULED)
    for gang in gangs:
        session.unpark(gang)
    committed: list[GangBinding] = []
    for gang in gangs:
        # The gang's clock ends with this commit: a first-attempt mark left on a member whose
        # bind then fails would outlive the incarnation and, after a restart, time the next
        # one out early (found by test_stateful). Marks go with the binds.
        session.patches.extend(
            PodPatch(p.ref, {names.FIRST_ATTEMPT: None})
            for p in pending(gang)
            if p.first_attempt is not None
        )
        outcome = session.outcomes[gang.key]
        retries = outcome.state.attempts + 1
        # A gang of subgroups binds only the holds of subgroups that are whole: the placer
        # returned those among its bindings (review of #23: a held member of a subgroup that
        # fell short was bound alone).
        held = [
            Binding(ref, node)
            for ref, node in sorted(outcome.state.reservations.items())
            if not gang.subgroup_minimums
        ]
        outcome.bindings = held + placed[gang.key]
        outcome.state = replace(
            outcome.state,
            satisfied=True,
            reservations={},
            nominated={},
            victims=frozenset(),
            attempts=0,
            retry_at=0.0,
            last_message="",
        )
        count = len(outcome.bindings)
        outcome.condition = ("True", REASON_SCHEDULED, _bound_of(gang, count))
        placement = (
            session.placement(gang, outcome.bindings, retries) if gang.topology_placed else None
        )
        if outcome.bindings:
            committed.append(GangBinding(gang.key, tuple(outcome.bindings), placement=placement))
        if outcome.relaxed:
            session.say(
                gang,
                reason="TopologyRelaxed",
                message=f"gang {gang.key} placed with soft constraints not met: "
                + "; ".join(outcome.relaxed),
                pods=pending(gang),
                warning=False,
            )
    if committed:
        session.bindings.append(GroupBinding(tuple(committed), all_or_nothing=True))


def _hold_for_head(session: Session, statement: Statement, gangs: list[Gang]) -> None:
    """Starvation-free backfill (issue #12): a Strict GangGroup that has waited past
    ``--starvation-after`` is the head. The nodes it will go to are chosen once (emptiest
    first, as if they were empty: the room frees there first) and kept; at its turn, after
    it failed, the room its members need there is held, negative where it is still taken,
    so that no gang behind it in the queue places on what the head needs. What the head
    does not need on a node stays free for others (backfill), and gangs ahead of it in the
    queue have had their turn already. One head per pass."""
    if session.head_held or any(g.mode is not Mode.STRICT for g in gangs):
        return
    for gang in gangs:
        first = session.outcomes[gang.key].state.first_attempt
        if first is None or session.now - first < session.starvation_after(gang):
            session.wake(first + session.starvation_after(gang) if first is not None else 0)
            return
    targets = {gang.key: _head_target(session, gang) for gang in gangs}
    if not all(targets.values()):
        return  # it would not fit even on empty nodes: nothing to wait for
    session.head_held = True
    for gang in gangs:
        target = targets[gang.key]
        for pod in pending(gang):
            if pod.ref in target:
                statement.hold(pod, target[pod.ref])
        outcome = session.outcomes[gang.key]
        outcome.state = replace(outcome.state, head_target=target)
        nodes = sorted(set(target.values()))
        session.say(
            gang,
            reason="StarvationHold",
            message=(
                f"gang {gang.key} has waited over {session.starvation_after(gang):g}s: the "
                f"room it needs is held for it on {', '.join(nodes[:5])}"
                f"{', ...' if len(nodes) > 5 else ''} as it frees; other gangs use the rest"
            ),
            pods=pending(gang),
            warning=False,
        )


def _head_target(session: Session, gang: Gang) -> dict:
    """Where the head's pending members go: the remembered target while it still names a
    node for each, else a placement on the nodes as if empty, emptiest now first."""
    todo = session.ordered(pending(gang))
    nodes = session.snapshot.nodes
    known = session.outcomes[gang.key].state.head_target
    if todo and all(known.get(p.ref) in nodes for p in todo):
        return {p.ref: known[p.ref] for p in todo}
    empty = Ledger.over(nodes, {})
    finder = NodeFinder(nodes, empty, infos=session.infos, scoring="spread")
    target = {}
    for pod in todo:
        node = finder.find(replace(pod, scoring="spread"), empty)
        if node is None:
            return {}
        empty.place(pod, node)
        target[pod.ref] = node
    return target


def _renamed(known: tuple[Status, list[str]], names: list[str]) -> Status:
    """A remembered failure, told of this gang: its message names a member ("w-7: 0/50
    nodes are available: ..."); the member at the same place in this gang's order is named
    instead."""
    status, before = known
    name, sep, rest = status.message.partition(": ")
    if sep and name in before and len(names) == len(before):
        return Status.unschedulable(f"{names[before.index(name)]}: {rest}")
    return status


def place_group(
    session: Session, statement: Statement, gangs: list[Gang], room: QueueRoom | None = None
) -> bool | None:
    """Place every gang of a group on the statement, each at least its min_member, within
    ``room`` (else the queues' room on the statement's ledger); None if one falls short (the
    statement then holds what was placed: the caller drops it)."""
    if room is None:
        room = session.queue_room(statement.ledger)
    for gang in gangs:
        _, status = _place_gang(session, statement, gang, room)
        if not status.ok:
            return None
    return True


def _place_gang(
    session: Session, statement: Statement, gang: Gang, room: QueueRoom | None
) -> tuple[list[Binding], Status]:
    """Place as many pending members as fit (min_member at least, or it falls short), within
    the room its queue's limits leave (``room``, #22)."""
    status = session.enough_in_total(gang)
    if not status.ok:
        return [], status
    if gang.topology_placed:
        return place_within_tier(
            session, statement, gang, room, held={},
            place=lambda: _arrange_gang(session, statement, gang, room),
        )  # fmt: skip
    held = session.outcomes[gang.key].state.reservations
    need = gang.need - len(held)
    members = [p for p in session.ordered(pending(gang)) if p.ref not in held]
    if room is not None:
        # What it holds (NonStrict holds; a preemptor's nominated room is in the book
        # already) and its minimum must fit in its queue: else it is said of the gang.
        holding = Resources.total(
            p.requests for p in gang.members if p.ref in held and p.ref not in session.counted_refs
        )
        minimum = Resources.total(p.requests for p in members[: max(need, 0)])
        refused = room.refuse(gang.queue, minimum, held=holding) if holding or need > 0 else ""
        if refused:
            return [], Status.unschedulable(refused)
        room.take(gang.queue, holding, placed=False)
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
        return _place_subgroups(session, statement, gang, room, members, need=gang.need, held=held)
    shared = _shared_claim(session, statement, members)
    if shared is None:
        return _place_members(session, statement, gang, members, need=need, room=room)
    # Members that share a claim not yet allocated go where its devices are: the first one
    # placed would choose them for all (a rack's channel chosen where the rest do not fit).
    # So each allocation the claim could have (one per reach: a rack, a node) is tried in
    # turn, the gang placed around it, until one holds the whole gang.
    got: list[Binding] = []
    status = Status.unschedulable("no allocation of its shared claim holds the gang")
    for allocation in _alternatives(session, statement, shared, members):
        mark, cursors = statement.mark(), session.finder.mark()
        statement.claim(shared.key, allocation)
        got, status = _place_members(session, statement, gang, members, need=need, room=room)
        if status.ok:
            return got, status
        _undo(session, statement, gang, room, mark=mark, cursors=cursors, placed=got, todo=members)
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
    must not hide the empty node behind them (review of #24)."""
    first = next(p for p in members if any(e.claim == claim.name for e in p.resource_claims))
    world, ledger = session.devices, statement.ledger
    found: dict[object, Allocation] = {}
    for name in session.finder.candidates(first):
        if len(found) >= MAX_ALTERNATIVES:
            break
        if not ledger.fits(name, first.requests):
            continue
        done = world.allocate([claim], session.snapshot.nodes[name], taken=ledger.taken)
        if isinstance(done, str):
            continue
        found.setdefault(done[0].node_selector, done[0])
    return list(found.values())


def _place_members(
    session: Session,
    statement: Statement,
    gang: Gang,
    members: list[Pod],
    *,
    need: int,
    room: QueueRoom | None,
) -> tuple[list[Binding], Status]:
    got: list[Binding] = []
    first_miss: Status | None = None
    finder = session.finder
    for i, pod in enumerate(members):
        if gang.mode is Mode.STRICT and len(got) + (len(members) - i) < need:
            break  # min_member is out of reach: stop early
        refused = room.refuse(gang.queue, pod.requests) if room is not None else ""
        node = None if refused else finder.find(pod, statement.ledger)
        if node is None:
            if first_miss is None and len(got) < need:
                if refused:
                    first_miss = Status.unschedulable(refused)
                else:
                    detail = finder.explain(pod, statement.ledger).message
                    first_miss = Status.unschedulable(f"{pod.ref.name}: {detail}")
            continue
        statement.allocate(pod, node)
        if room is not None:
            room.take(gang.queue, pod.requests)
        got.append(Binding(pod.ref, node))
    if len(got) >= need:
        return got, Status.success()
    return got, first_miss or Status.unschedulable(f"only {len(got)} of {need} members fit")


def _place_subgroups(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    members: list[Pod],
    *,
    need: int,
    held: Mapping[PodRef, str] = MappingProxyType({}),
) -> tuple[list[Binding], Status]:
    """A gang of subgroups (#23), as Volcano orders its subjobs: first each policy's
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
    misses: dict[str, str] = {}  # per policy, why its first subgroup that failed did

    def attempt(subgroup: SubGroup, *, extras: bool) -> None:
        placed_refs = {b.pod for b in got}
        todo = session.ordered(
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
            misses.setdefault(subgroup.policy, f"subgroup {subgroup.name}: {miss}")
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
    # (second review of #23: a launcher beside two workers waited out its nomination).
    got += [Binding(r, n) for r, n in sorted(held.items()) if r not in in_subgroups]
    loose = [p for p in session.ordered(members) if p.ref not in in_subgroups]
    placed, loose_miss = _place_each(session, statement, gang, room, loose)
    got += placed
    for subgroup in gang.subgroups:  # the elastic part
        if subgroup.name in done:
            placed_refs = {b.pod for b in got}
            rest = [pending_by_ref[r] for r in subgroup.members if r in pending_by_ref]
            rest = [p for p in rest if p.ref not in placed_refs]
            if rest and not _tiered(session, subgroup):
                got += _place_each(session, statement, gang, room, session.ordered(rest))[0]
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
    tiered = _tiered(session, subgroup)
    if nodes and tiered and todo:
        # Healing: back where the rest of the subgroup runs (its domain of the tier).
        placed, status = _heal_subgroup(
            session, statement, gang, room, subgroup=subgroup, todo=todo, nodes=nodes, short=short
        )
        return (kept + placed, "") if status.ok else ([], status.message)
    if not short:  # whole already: the rest follow one by one (the elastic part)
        more = _place_each(session, statement, gang, room, todo)[0] if extras else []
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
    cursors = session.finder.mark()
    mark = statement.mark()
    # At its size: the members that fit, skipping one that does not (second review of #23:
    # the first `short` alone were tried, and one that fits nowhere sank the subgroup).
    placed, miss = _place_each(
        session, statement, gang, room, todo, limit=None if extras else short
    )
    if len(placed) >= short:
        return kept + placed, ""
    _undo(session, statement, gang, room, mark=mark, cursors=cursors, placed=placed, todo=todo)
    return [], miss


def _undo(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    mark: int,
    cursors: dict,
    placed: list[Binding],
    todo: list[Pod],
) -> None:
    """Undo a subgroup that fell short: its placements on the statement, the queue's room
    they took, and the node finder's cursors (a trial's statement has no restore of its own:
    the next subgroup of the same shape would find no node, review of #23)."""
    statement.undo_to(mark)
    session.finder.restore(cursors)
    if room is not None:
        requests = {p.ref: p.requests for p in todo}
        for binding in placed:
            room.untake(gang.queue, requests[binding.pod])


def _arrange_subgroup(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    subgroup: SubGroup,
    todo: list[Pod],
) -> tuple[list[Binding], Status]:
    """A subgroup with a ``networkTopology`` (#23): by the topology solver, all of it in one
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
    got, status, _ = _arranged(session, statement, gang, room, tries=tries, constraints=constraints)
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
    """Members of a running subgroup with a ``networkTopology`` (#23): those it lost (a
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
    cursors = session.finder.mark()
    mark = statement.mark()
    got: list[Binding] = []
    first_miss = ""
    for pod in todo:
        refused = room.refuse(gang.queue, pod.requests) if room is not None else ""
        node = None if refused else _find_among(session, statement, pod, where)
        if node is None:
            first_miss = (
                first_miss or refused or f"{pod.ref.name}: no node of {level} {domain} has room"
            )
            continue
        statement.allocate(pod, node)
        if room is not None:
            room.take(gang.queue, pod.requests)
        got.append(Binding(pod.ref, node))
    if len(got) >= short:
        return got, Status.success()
    _undo(session, statement, gang, room, mark=mark, cursors=cursors, placed=got, todo=todo)
    if subgroup.topology.mode == "soft":
        return _arrange_subgroup(session, statement, gang, room, subgroup=subgroup, todo=todo)
    return [], Status.unschedulable(
        f"{first_miss}; the rest of the subgroup runs in {level} {domain}, and a hard "
        "networkTopology keeps its members there: it waits for room in it"
    )


def _find_among(
    session: Session, statement: Statement, pod: Pod, nodes: frozenset[str]
) -> str | None:
    """A node of ``nodes`` for ``pod``: every filter, its room, what the other pods
    allow; the first by name."""
    finder = session.finder
    check = finder.check(pod, statement.ledger)
    for node in sorted(nodes & finder.static_fit(pod)):
        if statement.ledger.admits(pod, node) and (check is None or not check.reason(node)):
            return node
    return None


def _tiered(session: Session, subgroup: SubGroup) -> bool:
    """Whether a subgroup's networkTopology keeps it inside a unit (a soft one above every
    level asks for nothing: review of #23)."""
    spec = subgroup.topology
    return spec is not None and not everywhere(session.topology, spec)


def subgroup_level(topology: Topology, subgroup: SubGroup) -> tuple[str, str]:
    """The level of ``topology`` a subgroup's networkTopology names (``tier_level``)."""
    assert subgroup.topology is not None
    return tier_level(
        topology, subgroup.topology, where=f"subgroup {subgroup.name}: networkTopology"
    )


def _place_each(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    pods: list[Pod],
    *,
    limit: int | None = None,
) -> tuple[list[Binding], str]:
    """Each of ``pods`` where it fits (``limit`` of them at most), within its queue's
    room; the bindings, and why the first that did not fit did not ("" if all did)."""
    got: list[Binding] = []
    first_miss = ""
    finder = session.finder
    for pod in pods:
        if limit is not None and len(got) >= limit:
            break
        refused = room.refuse(gang.queue, pod.requests) if room is not None else ""
        node = None if refused else finder.find(pod, statement.ledger)
        if node is None:
            if not first_miss:
                first_miss = (
                    refused or f"{pod.ref.name}: {finder.explain(pod, statement.ledger).message}"
                )
            continue
        statement.allocate(pod, node)
        if room is not None:
            room.take(gang.queue, pod.requests)
        got.append(Binding(pod.ref, node))
    return got, first_miss


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
    got, status, relaxed = _arranged(
        session, statement, gang, room, tries=tries, constraints=constraints
    )
    if status.ok:
        session.outcomes[gang.key].relaxed = relaxed
    return got, status


def _arranged(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    *,
    tries: list[list[Pod]],
    constraints: Constraints,
) -> tuple[list[Binding], Status, tuple[str, ...]]:
    """The first of ``tries`` the topology solver places, the other pods allow and the
    queue's room takes, put on the statement; the bindings, the status of the last try, and
    the soft constraints it relaxed."""
    status = Status.success()
    for chosen in tries:
        # The solver works on a scratch of its own; what it places goes on the statement.
        trial = statement.ledger.scratch()
        arrangement = session.arranger.arrange(chosen, constraints=constraints, ledger=trial)
        status = arrangement.status
        if status.ok:
            status = _other_pods_allow(session, statement, arrangement.placements)
        wanted = Resources.total(p.requests for p, _ in arrangement.placements)
        if status.ok and room is not None and (refused := room.refuse(gang.queue, wanted)):
            status = Status.unschedulable(refused)
        if status.ok:
            if room is not None:
                room.take(gang.queue, wanted)
            for pod, node in arrangement.placements:
                statement.allocate(pod, node)
            placed = [Binding(p.ref, node) for p, node in arrangement.placements]
            return placed, status, tuple(arrangement.relaxed)
    return [], status, ()


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


def _other_pods_allow(
    session: Session, statement: Statement, placements: Sequence[tuple[Pod, str]]
) -> Status:
    """The topology solver places by room; what the other pods forbid (anti-affinity, host
    ports, affinity) is checked on its answer, member by member, before anything is kept."""
    probe = statement.ledger.scratch()
    for pod, node in placements:
        check = session.finder.check(pod, probe)
        reason = check.reason(node) if check is not None else ""
        if reason:
            return Status.unschedulable(
                f"{pod.ref.name}: the topology placement chose {node}, but 1 {reason}"
            )
        probe.place(pod, node)
    return Status.success()


def _unit_failed(
    session: Session,
    statement: Statement,
    gangs: list[Gang],
    placed: Mapping[GangKey, list[Binding]],
    short: Mapping[GangKey, Status],
) -> None:
    first_short = next(g for g in gangs if g.key in short)
    why = (
        f"{first_short.key}: {short[first_short.key].message}"
        if len(gangs) > 1
        else (short[first_short.key].message)
    )
    if all(g.mode is Mode.NON_STRICT for g in gangs):
        # NonStrict: keep what was placed as reservations, in memory, never bound. The
        # statement's allocations stay taken for the rest of this pass.
        for gang in gangs:
            outcome = session.outcomes[gang.key]
            held = dict(outcome.state.reservations)
            held.update({b.pod: b.node for b in placed[gang.key]})
            outcome.state = replace(outcome.state, reservations=held)
            message = (
                f"gang {gang.key} holds {len(held)} of {gang.min_member} members (NonStrict) "
                f"and waits for the rest; {why}"
            )
            outcome.condition = ("False", REASON_UNSCHEDULABLE, message)
            session.failed_attempt(
                gang, message, pods=[p for p in pending(gang) if p.ref not in held]
            )
        return
    statement.discard()  # its capacity is free again
    group = ", ".join(str(g.key) for g in gangs)
    for gang in gangs:
        outcome = session.outcomes[gang.key]
        subject = f"gang {gang.key}" if len(gangs) == 1 else f"GangGroup [{group}]"
        message = f"{subject} does not fit, nothing was bound; {why}"
        outcome.state = replace(outcome.state, reservations={})
        outcome.condition = ("False", REASON_UNSCHEDULABLE, message)
        session.failed_attempt(gang, message, pods=pending(gang))
