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

from collections.abc import Mapping
from dataclasses import replace

from scheduler.core.queues import QueueRoom
from scheduler.core.session import (
    REASON_SCHEDULED,
    REASON_TIMEOUT,
    REASON_UNSCHEDULABLE,
    Session,
    gated,
    of_timeout,
    pending,
    present,
)
from scheduler.core.solvers.gangs import place_gang
from scheduler.core.solvers.running import place_pending_members
from scheduler.core.statement import Statement
from scheduler.model import names
from scheduler.model.decisions import Binding, GangBinding, GroupBinding, PodPatch, Verdict
from scheduler.model.gangs import Gang, Quorum
from scheduler.model.pods import GangKey, Mode
from scheduler.model.status import Status


class Allocate:
    """Each GangGroup in queue order, whole or not at all."""

    name = "allocate"

    def run(self, session: Session) -> None:
        allocate(session)


def allocate(session: Session) -> None:
    for unit in session.order.units():
        present = [session.gangs[k] for k in unit if k in session.gangs]
        if len(present) == 1 and _settled(session, present[0]):
            # Most gangs of a busy cluster: nothing to place, so nothing to undo and no
            # Statement to open (a turn each was a tenth of a later pass at 5,000 nodes);
            # isolated all the same.
            try:
                _place_after_gang(session, None, present[0])
            except Exception as error:
                session.failed(unit, present, error)
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
    if any(
        session.readiness.in_flight(g) and not session.outcomes[g.key].state.satisfied
        for g in present
    ):
        return
    # A gang with nobody pending (every member finished) has nothing to place.
    waiting = [
        g
        for g in present
        if not session.outcomes[g.key].state.satisfied and (pending(g) or gated(g))
    ]
    # One room for the whole turn (what one part takes, the next sees), following what the
    # turn's Statement allocates and undoes.
    room = session.queues.room()
    if room is not None:
        statement.subscribe(room)
    for gang in present:
        if session.outcomes[gang.key].state.satisfied:
            _place_after_gang(session, statement, gang, room)
    statement.commit()  # bound one by one whatever the others do: never undone below
    if not waiting:
        return
    expired = [g for g in waiting if session.readiness.timed_out(g)]
    if expired and waiting[0].quorum is not None:
        # A part of a hierarchy times out alone: its root needs only some of its children.
        for gang in expired:
            _time_out(session, gang, because=gang)
        session.attempted(expired, Verdict.TIMED_OUT)
        gone = {g.key for g in expired}
        waiting = [g for g in waiting if g.key not in gone]
        if not waiting:
            return
    elif expired:  # a timed-out gang stays so, and takes its GangGroup with it
        for gang in waiting:
            _time_out(session, gang, because=expired[0])
        session.attempted(waiting, Verdict.TIMED_OUT)
        return
    # A Strict group that falls short undoes all it did from here, the holds it took again
    # included.
    since = statement.mark()
    for gang in waiting:
        if gang.mode is Mode.NON_STRICT and not session.outcomes[gang.key].state.nominated:
            keep_holds(session, statement, gang)
    ready, why = session.readiness.ready_parts(unit, waiting)
    if not ready:
        session.attempted(waiting, Verdict.NOT_READY, Status.wait(why))
        return
    trying = {g.key for g in ready}
    for gang in waiting:
        if gang.key not in trying:  # a part of a hierarchy, which said why it waits
            outcome = session.outcomes[gang.key]
            session.attempted([gang], Verdict.NOT_READY, Status.wait(outcome.condition[2]))
    waiting = ready
    if any(session.readiness.awaiting_victims(g) for g in waiting):
        # A preemptor whose victims are still leaving: their going is what it waits for.
        session.attempted(waiting, Verdict.AWAITING_VICTIMS)
        return
    retry_at = max(session.outcomes[g.key].state.retry_at for g in waiting)
    if session.now < retry_at:
        session.wake(retry_at)
        session.attempted(waiting, Verdict.BACKING_OFF)
        return
    if not session.parking.worth_trying(waiting):
        session.attempted(waiting, Verdict.PARKED)
        return  # parked: nothing changed that could help it
    _attempt(session, statement, waiting, room, since=since)


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
    todo = session.order.ordered(pending(gang))
    session.reporting.check_min_member(gang, members=members, waiting=len(todo))
    since = statement.mark() if statement is not None else 0
    if todo and statement is not None:
        groups = place_pending_members(session, statement, gang, room, todo)
        session.add(session.bindings, *groups)
    # Watchers may take back what was placed for it (a stale gang is evicted instead).
    session.attempted([gang], Verdict.RUNNING, since=since)


def keep_holds(session: Session, statement: Statement, gang: Gang) -> None:
    """A NonStrict gang takes its holds again at its turn, where they still fit: a gang
    ahead of it in the queue may have taken their room, and then it lets them go (and says
    so), rather than two holders each waiting out their time for room the other has."""
    outcome = session.outcomes[gang.key]
    held = outcome.state.reservations
    if not held:
        return
    waiting = {p.ref: p for p in pending(gang)}
    if (have := present(gang)) < gang.total:
        # A member gone since: the gang is not tried until all exist, and its holds would
        # stand idle until it times out.
        session.reporting.say(
            gang,
            reason="HoldReleased",
            message=(
                f"gang {gang.key} has {have} of its {gang.total} members: it lets go of its "
                f"{len(held)} held member(s) until they all exist"
            ),
            pods=[waiting[ref] for ref in sorted(held) if ref in waiting],
            warning=False,
        )
        outcome.state = replace(outcome.state, reservations={})
        return
    kept = {}
    unfit = []
    for ref, node in sorted(held.items()):
        pod = waiting.get(ref)
        if pod is None:
            continue
        # A hold is bound as it stands once the gang fits: the node must still be one the
        # pod may go on at all (a claim since bound to a volume elsewhere, a taint, a label).
        if node not in session.finder.static_fit(pod):
            unfit.append(ref)
            continue
        if not statement.ledger.admits(pod, node):
            continue
        check = session.finder.check(pod, statement.ledger)
        if check is not None and check.reason(node):
            continue
        statement.hold(pod, node)
        kept[ref] = node
    if unfit:
        session.reporting.say(
            gang,
            reason="HoldReleased",
            message=(
                f"gang {gang.key} let go of {len(unfit)} held member(s): the nodes held "
                "no longer suit them (a volume bound elsewhere, a taint or a label since); "
                f"it holds {len(kept)} of {gang.min_member}"
            ),
            pods=[waiting[ref] for ref in unfit],
            warning=False,
        )
    lost = [ref for ref in held if ref not in kept and ref in waiting and ref not in unfit]
    if lost:
        session.reporting.say(
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
    session.add(
        session.patches,
        *(PodPatch(p.ref, {names.KOORD_TIMEOUT: "true"}) for p in todo if not p.timed_out),
    )
    session.reporting.say(gang, reason="GangTimeout", message=message, pods=todo)


def _attempt(
    session: Session,
    statement: Statement,
    gangs: list[Gang],
    room: QueueRoom | None,
    *,
    since: int,
) -> None:
    """Try the whole GangGroup on the statement; commit it whole or not at all (back to
    ``since``)."""
    placed: dict[GangKey, list[Binding]] = {}
    short: dict[GangKey, Status] = {}  # why a gang fell short of min_member
    quorum = gangs[0].quorum
    for gang in gangs:
        mark = statement.mark() if quorum is not None else 0
        shape = session.parking.shape(gang) if len(gangs) == 1 else None
        names_now = [p.ref.name for p in session.order.ordered(pending(gang))] if shape else []
        known = session.parking.failed_shapes.get(shape) if shape is not None else None
        if known is not None:  # the same shapes already failed in this pass: so does this
            status = _renamed(known, names_now)
            placed[gang.key] = []
        else:
            placed[gang.key], status = place_gang(session, statement, gang, room)
            if not status.ok and shape is not None:
                session.parking.failed_shapes[shape] = (status, names_now)
        if not status.ok:
            short[gang.key] = status
            if quorum is not None:  # a part of a hierarchy falls short alone
                statement.undo_to(mark)
                placed[gang.key] = []
    if short and quorum is not None and _quorum_met(session, quorum, gangs, short):
        _parts_failed(session, [g for g in gangs if g.key in short], short)
        gangs = [g for g in gangs if g.key not in short]
    elif short:
        first = next(g for g in gangs if g.key in short)
        _unit_failed(session, statement, gangs, placed, short, since=since)
        session.attempted(gangs, Verdict.UNSCHEDULABLE, short[first.key])
        for gang in gangs:
            session.parking.park(gang)
        return
    _start_clocks(session, gangs)
    session.attempted(gangs, Verdict.SCHEDULED)
    for gang in gangs:
        session.parking.unpark(gang)
    committed: list[GangBinding] = []
    for gang in gangs:
        # The gang's clock ends with this commit: a first-attempt mark left on a member whose
        # bind then fails would outlive the incarnation and, after a restart, time the next
        # one out early. Marks go with the binds.
        session.add(
            session.patches,
            *(
                PodPatch(p.ref, {names.FIRST_ATTEMPT: None})
                for p in pending(gang)
                if p.first_attempt is not None
            ),
        )
        outcome = session.outcomes[gang.key]
        retries = outcome.state.attempts + 1
        # A gang of subgroups binds only the holds of subgroups that are whole: the placer
        # returned those among its bindings (a held member of a subgroup that fell short must
        # not be bound alone).
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
            session.reporting.placement(gang, outcome.bindings, retries)
            if gang.topology_placed
            else None
        )
        if outcome.bindings:
            committed.append(GangBinding(gang.key, tuple(outcome.bindings), placement=placement))
        if outcome.relaxed:
            session.reporting.say(
                gang,
                reason="TopologyRelaxed",
                message=f"gang {gang.key} placed with soft constraints not met: "
                + "; ".join(outcome.relaxed),
                pods=pending(gang),
                warning=False,
            )
    if committed:
        session.add(session.bindings, GroupBinding(tuple(committed), all_or_nothing=True))


def _quorum_met(
    session: Session, quorum: Quorum, gangs: list[Gang], short: Mapping[GangKey, Status]
) -> bool:
    """Whether the gangs of a CompositePodGroup hierarchy placed now, with those placed
    before (satisfied), are the quorum its root needs."""
    placed = {g.key for g in gangs if g.key not in short}
    return quorum.met(placed | session.readiness.placed_before(quorum))


def _parts_failed(session: Session, gangs: list[Gang], short: Mapping[GangKey, Status]) -> None:
    """Gangs of a hierarchy that fell short while the rest made its quorum: they wait, each
    for room for its own minimum, as a PodGroup whose hierarchy runs does."""
    _start_clocks(session, gangs)
    for gang in gangs:
        outcome = session.outcomes[gang.key]
        message = (
            f"gang {gang.key} does not fit, nothing of it was bound; {short[gang.key].message}"
        )
        outcome.state = replace(outcome.state, reservations={})
        outcome.condition = ("False", REASON_UNSCHEDULABLE, message)
        session.reporting.failed_attempt(gang, message, pods=pending(gang))
        session.attempted([gang], Verdict.UNSCHEDULABLE, short[gang.key])
        session.parking.park(gang)


def _renamed(known: tuple[Status, list[str]], names: list[str]) -> Status:
    """A remembered failure, told of this gang: its message names a member ("w-7: 0/50
    nodes are available: ..."); the member at the same place in this gang's order is named
    instead."""
    status, before = known
    name, sep, rest = status.message.partition(": ")
    if sep and name in before and len(names) == len(before):
        return Status.unschedulable(f"{names[before.index(name)]}: {rest}")
    return status


def _start_clocks(session: Session, gangs: list[Gang]) -> None:
    """A gang's timeout counts from its first attempt."""
    for gang in gangs:
        outcome = session.outcomes[gang.key]
        if outcome.state.first_attempt is None:
            outcome.state = replace(outcome.state, first_attempt=session.now)


def _unit_failed(
    session: Session,
    statement: Statement,
    gangs: list[Gang],
    placed: Mapping[GangKey, list[Binding]],
    short: Mapping[GangKey, Status],
    *,
    since: int,
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
        _start_clocks(session, gangs)
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
            session.reporting.failed_attempt(
                gang, message, pods=[p for p in pending(gang) if p.ref not in held]
            )
        return
    statement.undo_to(since)  # its capacity is free again
    _start_clocks(session, gangs)
    group = ", ".join(str(g.key) for g in gangs)
    for gang in gangs:
        outcome = session.outcomes[gang.key]
        subject = f"gang {gang.key}" if len(gangs) == 1 else f"GangGroup [{group}]"
        message = f"{subject} does not fit, nothing was bound; {why}"
        outcome.state = replace(outcome.state, reservations={})
        outcome.condition = ("False", REASON_UNSCHEDULABLE, message)
        session.reporting.failed_attempt(gang, message, pods=pending(gang))
