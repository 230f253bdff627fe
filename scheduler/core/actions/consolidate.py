"""Consolidate: a GangGroup that did not fit, but would if some running pods moved, has them
moved (KAI's consolidation). Off unless ``--actions`` names it.

In queue order, each GangGroup that failed for want of room in this pass looks for pods to
move among the movable ones (``solvers.moves.movable_units``: marked so, owned by a
controller, below ``Config.movable_below_priority``, never a gang below its minimum, never
against a PodDisruptionBudget), by the victim search preemption uses: the fewest that make
room. They move only if each of them fits on another node in the same what-if, with the
group placed; then they are evicted through the Eviction API (so budgets hold at the moment
of eviction too), the group's members are nominated to the room they leave, and their
controllers make them again, to be placed where they fit. At most
``Config.max_moves_per_pass`` pods move in one pass, so that a wrong guess costs little.

A group its queue's room holds back is not helped by moves and is left alone: a moved pod
comes back into its queue.
"""

from __future__ import annotations

from scheduler.core.session import Session
from scheduler.core.solvers.moves import movable_units, rehome
from scheduler.core.solvers.victims import (
    Victims,
    evict_and_nominate,
    fewest,
    greedy,
    minimum_asked,
    own_holds,
    reprieve,
)
from scheduler.core.statement import Statement
from scheduler.model.decisions import Verdict
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod


class Consolidate:
    """A GangGroup that did not fit has movable pods moved where they fit elsewhere."""

    name = "consolidate"

    def run(self, session: Session) -> None:
        consolidate(session)


def consolidate(session: Session) -> None:
    left = session.config.max_moves_per_pass
    failed = session.failed_in(Verdict.UNSCHEDULABLE)
    if not failed or left <= 0:
        return
    taken: dict[str, Pod] = {}
    units: list[Victims] | None = None
    for unit in session.order.units():
        gangs = [session.gangs[k] for k in unit if k in session.gangs]
        if not gangs or not all(g.key in failed for g in gangs):
            continue
        if any(session.readiness.victims_present(session.outcomes[g.key].state) for g in gangs):
            continue  # what it moved or evicted is still leaving
        if _held_by_queue(session, gangs):
            continue
        if units is None:
            units = movable_units(session, taken=taken)
        fitting = [u for u in units if len(u.pods) <= left]
        if not fitting:
            if not units:
                return  # nothing movable at all: the common case, and no turn
            continue
        with session.turn(unit, gangs) as statement:
            moved = _consolidate_for(session, gangs, statement, fitting, left=left)
        if moved:
            taken.update((p.ref.uid, p) for p in moved)
            left -= len(moved)
            units = None  # built again without what moved
            if left <= 0:
                return


def _held_by_queue(session: Session, gangs: list[Gang]) -> bool:
    """Whether the group's queue cannot take even its least: moving pods frees no queue
    room (each comes back into its own)."""
    room = session.queues.room(session.ledger)
    if room is None:
        return False
    asked = minimum_asked(session, gangs)
    return bool(room.refuse(gangs[0].queue, asked))


def _consolidate_for(
    session: Session,
    gangs: list[Gang],
    statement: Statement,
    units: list[Victims],
    *,
    left: int,
) -> list[Pod]:
    """Move the fewest pods of ``units`` that make room for the group, if each fits
    elsewhere; the pods moved."""
    own = own_holds(session, gangs)
    base = session.ledger.scratch()
    for pod, node in own:
        base.set_aside(pod, node)
    chosen, placements = greedy(session, base, units, gangs)
    if placements is None:
        session.finder.restore()
        return []
    chosen, placements = reprieve(session, base, chosen, placements, gangs)
    choice = fewest(session, base, gangs, units=units, chosen=chosen, placements=placements)
    homes = rehome(session, base, choice) if len(choice.pods) <= left else None
    session.finder.restore()
    if homes is None or not choice.pods:
        return []
    for pod, node in own:
        statement.release(pod, node)
    evict_and_nominate(session, statement, gangs, choice, moves=homes)
    return choice.pods
