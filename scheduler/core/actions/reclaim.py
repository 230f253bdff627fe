"""Reclaim: a gang of a queue below its fair share that did not fit takes room back
from queues above theirs.

After allocate and preempt, in the fair order, each GangGroup that failed for want of room
in this pass, whose queue would stay within its fair share with the group's minimum
(``QueueBook.below_fair``) and whose capability lets it in, looks for victims among the
gangs of other queues, whatever their priority: those whose queue is reclaimable and would
stay at or above its fair share and its guarantee without them (``QueueBook.may_lose``),
counted victim by victim. Victims come in preemption's units (a gang's members above its
minimum one by one, then the whole gang: no gang is left below its minimum), lowest priority
and youngest first, PodDisruptionBudgets kept where possible; the group is placed on a
scratch ledger with them gone, each victim given back if the group still fits without it,
and only then evicted, with the group nominated where they were (preemption's machinery: the
DisruptionTarget condition, the room held as it frees, nothing more evicted meanwhile).
Nothing is evicted for a group that would not fit even with every candidate gone.

A GangGroup whose gangs are in different queues does not reclaim (whose share would it
restore?), nor one with a member whose ``preemptionPolicy`` is ``Never``.
"""

from __future__ import annotations

from scheduler.core.queues import QueueBook
from scheduler.core.session import Session, pending
from scheduler.core.solvers.victims import (
    MAX_TRIES,
    Choice,
    Victims,
    breaks_budgets,
    candidates,
    evict_and_nominate,
    fewest,
    fits,
    freeing_first,
    reprieve,
)
from scheduler.core.statement import Statement
from scheduler.model.decisions import Verdict
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod
from scheduler.model.resources import Resources


class Reclaim:
    """A GangGroup of a queue below its fair share takes room back from queues above theirs."""

    name = "reclaim"

    def run(self, session: Session) -> None:
        reclaim(session)


def reclaim(session: Session) -> None:
    book = session.queues.book
    if book is None:
        return
    failed = session.failed_in(Verdict.UNSCHEDULABLE)
    if not failed:
        return
    taken: dict[str, Pod] = {}  # evicted in this pass, by uid
    for unit in session.order.units():
        gangs = session.preemptors(unit, failed)
        if not gangs:
            continue
        states = [session.outcomes[g.key].state for g in gangs]
        if any(s.nominated or session.readiness.victims_present(s) for s in states):
            continue  # preempted for already (in this pass, or its victims still leave)
        queue = book.name_of(gangs[0].queue)
        if any(book.name_of(g.queue) != queue for g in gangs):
            continue
        with session.turn(unit, gangs) as statement:
            _reclaim_for(session, statement, book, queue, gangs, taken=taken)


def _reclaim_for(
    session: Session,
    statement: Statement,
    book: QueueBook,
    queue: str,
    gangs: list[Gang],
    *,
    taken: dict[str, Pod],
) -> None:
    # In the queue's terms: the devices of the members' claims count too.
    need = Resources.total(
        session.queues.amounts(p)
        for g in gangs
        for p in session.order.ordered(pending(g))[: g.need]
    )
    room = session.queues.room()
    if not book.below_fair(queue, need) or (
        room is not None and room.refuse(queue, need, guarantees=False)
    ):
        return
    choice = _choose(session, book, queue, gangs, taken=taken, weighed=book.dominant(need))
    if choice is None:
        return
    evicted = choice.pods
    broke = breaks_budgets(session.snapshot.budgets, evicted, gone=list(taken.values()))
    names = ", ".join(str(g.key) for g in gangs)
    evict_and_nominate(
        session,
        statement,
        gangs,
        choice,
        broke_budgets=broke,
        why=f"Reclaimed by gang {names} of queue {queue}, below its fair share,",
    )
    for pod in evicted:
        taken[pod.ref.uid] = pod


def _choose(
    session: Session,
    book: QueueBook,
    queue: str,
    gangs: list[Gang],
    *,
    taken: dict[str, Pod],
    weighed: frozenset[str],
) -> Choice | None:
    """The victims to evict and the group's placements once they are gone; None if the
    group does not fit even with every victim reclaim may take."""
    names = session.config.scheduler_names

    def admit(pod: Pod) -> bool:
        theirs = session.queues.of(pod)
        return pod.scheduler_name in names and not book.related(theirs, queue)

    # Only victims reclaim may take, each on its own (a queue at its share gives nothing:
    # more victims chosen before only make it stricter), count for where to free first: a
    # node that keeps another queue's pods is not freed whole (fairness bench, 32 nodes:
    # the surplus of the flood spent on half-freed nodes while one of its gangs alone would
    # have emptied a whole node).
    units = freeing_first(
        session,
        [
            v
            for v in candidates(session, below=None, taken=taken, admit=admit)
            if book.may_lose(
                session.queues.of(v.pods[0][0]),
                Resources.total(session.queues.amounts(p) for p, _ in v.pods),
                to=queue,
                weighed=weighed,
            )
        ],
        weighed=weighed,
        members=[p for g in gangs for p in session.order.ordered(pending(g))[: g.need]],
    )
    base = session.ledger.scratch()
    chosen: list[Victims] = []
    lost: dict[str, Resources] = {}  # by queue, ancestors included: what the chosen free
    gone: set[str] = set()  # the pods of the chosen units, by uid
    placements = None
    tries = 0
    for victims in units:
        if tries >= MAX_TRIES:
            break
        if not _may_lose(session, book, victims, to=queue, weighed=weighed, lost=lost, gone=gone):
            continue  # it would take that queue (or a parent) below its share: not a victim
        chosen.append(victims)
        tries += 1
        placements = fits(session, base, gangs, chosen)
        if placements is not None:
            break
    if placements is None:
        session.finder.restore()
        return None
    chosen, placements = reprieve(session, base, chosen, placements, gangs)

    def keeps_shares(subset: list[Victims]) -> bool:
        lost: dict[str, Resources] = {}
        gone: set[str] = set()
        return all(
            _may_lose(session, book, v, to=queue, weighed=weighed, lost=lost, gone=gone)
            for v in subset
        )

    return fewest(
        session, base, gangs, units=units, chosen=chosen, placements=placements,
        allowed=keeps_shares, gone=taken.values(),
    )  # fmt: skip


def _may_lose(
    session: Session,
    book: QueueBook,
    victims: Victims,
    *,
    to: str,
    weighed: frozenset[str],
    lost: dict[str, Resources],
    gone: set[str],
) -> bool:
    """Whether ``victims``' queue may lose what they free, after ``lost`` (by queue,
    ancestors included) and the pods ``gone`` (by uid) of the units taken before them; if
    so, both count them."""
    theirs = session.queues.of(victims.pods[0][0])
    # A gang's member above its minimum is a unit, and so is the whole gang: what one
    # chosen before frees is not lost twice (else a gang could be refused as a victim for
    # its member counted twice).
    freed = Resources.total(
        session.queues.amounts(p) for p, _ in victims.pods if p.ref.uid not in gone
    )
    if not book.may_lose(theirs, freed, to=to, weighed=weighed, lost=lost):
        return False
    for at in book.ancestors(theirs):
        lost[at] = lost.get(at, Resources()) + freed
    gone.update(p.ref.uid for p, _ in victims.pods)
    return True
