"""Preempt: a GangGroup that did not fit may evict pods of lower priority to make room.

After allocate, in queue order, each GangGroup that failed for want of room in this pass
looks for victims among the pods bound on the nodes, of this scheduler or any other, whose
priority is lower than its own (never equal or higher). Victims come in units: a pod of
another scheduler or a gang of one alone; of a gang of ours, each member above its
minMember alone (youngest first), and then the whole gang, so that no victim gang is left
running below its minimum. Units are taken lowest priority first, then fewest pods, then
youngest, on a scratch ledger, until the group fits (placed by the same code as allocate,
topology constraints and the filters on the other pods included); then each victim is given
back, highest priority first, if the group still fits without it (kube-scheduler's
reprieve). PodDisruptionBudgets are kept where possible, as kube-scheduler keeps them: units whose
eviction, together with those before them, would take a budget below zero come after every
unit that breaks none, and are the first to be given back.
If the group fits, the victims are evicted and the group's members nominated to
their nodes: the room is held for them as it frees (``incarnations.hold_nominations``), and the
group evicts nothing more while its victims are leaving. If it does not fit even with every
candidate gone, nothing is evicted and it says so.

A group with a member whose ``preemptionPolicy`` is ``Never`` does not preempt.
"""

from __future__ import annotations

from scheduler.core.gangs import priority_of
from scheduler.core.session import Session, pending
from scheduler.core.solvers.victims import (
    Victims,
    breaks_budgets,
    candidates,
    evict_and_nominate,
    fewest,
    freeing_first,
    greedy,
    group_priority,
    minimum_asked,
    own_holds,
    reprieve,
)
from scheduler.core.statement import Statement
from scheduler.model.decisions import Verdict
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod
from scheduler.model.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources


class Preempt:
    """A GangGroup that did not fit evicts pods of lower priority to make room."""

    name = "preempt"

    def run(self, session: Session) -> None:
        preempt(session)


def preempt(session: Session) -> None:
    failed = session.failed_in(Verdict.UNSCHEDULABLE)
    if not failed:
        return
    pool = _Pool(session)
    for unit in session.order.units():
        gangs = session.preemptors(unit, failed)
        if not gangs:
            continue
        if any(session.readiness.victims_present(session.outcomes[g.key].state) for g in gangs):
            continue  # its victims are still leaving: no more evictions for it
        priority = group_priority(session, gangs)
        book = session.queues.book
        units = pool.below(priority, book.name_of(gangs[0].queue) if book is not None else "")
        if not units:
            continue  # nothing of lower priority to evict: the common case, and no turn
        with session.turn(unit, gangs) as statement:
            _preempt_for(session, gangs, pool, statement, priority=priority, units=units)


class _Pool:
    """The pass's candidate victims, built once: the lowest priority of any bound pod (a
    preemptor at or below it has nothing to evict: the common case, and free), the units
    below each preemptor priority asked for, and the shapes that found no victims."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._units: dict[tuple[int, str], list[Victims]] = {}
        self.hopeless: set[tuple] = set()
        self.taken: dict[str, Pod] = {}  # evicted in this pass, by uid
        classes = session.snapshot.priority_classes
        self.lowest = min(
            (
                priority_of(p, classes)
                for info in session.infos.values()
                for p in info.pods
                if not p.deleting
            ),
            default=None,
        )

    def reset(self) -> None:
        """Victims were taken: the units are built again when next asked for."""
        self._units.clear()

    def below(self, priority: int, queue: str = "") -> list[Victims]:
        if self.lowest is None or self.lowest >= priority:
            return []
        units = self._units.get((priority, queue))
        if units is None:
            session = self._session
            admit = None
            if session.queues.book is not None:
                # With queues, preemption stays inside the preemptor's queue (as Volcano's
                # and KAI's do): taking from another queue is reclaim's, by shares.
                names = session.config.scheduler_names

                def admit(pod: Pod) -> bool:
                    return pod.scheduler_name not in names or session.queues.of(pod) == queue

            units = self._units[(priority, queue)] = candidates(
                session, below=priority, taken=self.taken, admit=admit
            )
        return units


def _preempt_for(
    session: Session,
    gangs: list[Gang],
    pool: _Pool,
    statement: Statement,
    *,
    priority: int,
    units: list[Victims],
) -> None:
    # The same shapes at the same priority found no victims earlier in this pass: nor now
    # (no eviction happened since, or the memo was cleared).
    shape = (
        priority,
        gangs[0].queue,
        tuple(
            # Its claims too: whether a victim frees a ReadWriteOncePod claim depends on
            # which claim, and on who uses it.
            (session.finder.signature(p), p.requests, p.neighbourly, p.ref.namespace, p.claims)
            for g in gangs
            for p in session.order.ordered(pending(g))
        ),
        # What each gang asks of them: a gang that needs fewer may find victims where one
        # that needs more did not.
        tuple(
            (
                g.need,
                g.min_resources,
                g.subgroup_minimums,
                g.subgroups,
                tuple(sorted(g.constraints.by_level.items())) if g.constraints else None,
                g.network_topology,  # a gang of no tier is not refused for a hard one's
            )
            for g in gangs
        ),
    )
    own = own_holds(session, gangs)
    if shape in pool.hopeless and not own:
        return
    # The room held for the group's own nominated members (a preemption that did not lead to
    # a bind: a member's room was taken meanwhile) is its to use again: not in its way.
    base = session.ledger.scratch()
    for pod, node in own:
        base.set_aside(pod, node)
    chosen, placements = greedy(session, base, units, gangs)
    if placements is None and any(v.breaks_budget for v in units):
        # The budgets' order ran out of tries: the plain order, as if there were no budget.
        # A budget decides which victims go first and are spared first, never whether a
        # gang may preempt at all (kube-scheduler's rule).
        chosen, placements = greedy(session, base, sorted(units, key=Victims.order), gangs)
    if placements is None:
        # Lowest priority and fewest pods first spread the victims over as many nodes as
        # there are units: at 1,000 nodes of small gangs, the 64 tried freed no node for a
        # gang of 16 quarter-node members. Node by node, as kube-scheduler picks a node to
        # preempt on (the dearest victim's priority first).
        members = [p for g in gangs for p in session.order.ordered(pending(g))[: g.need]]
        by_node = freeing_first(
            session, units, weighed=_weighed(minimum_asked(session, gangs)), members=members
        )
        chosen, placements = greedy(session, base, by_node, gangs)
    if placements is None:
        session.finder.restore()
        if not own:
            pool.hopeless.add(shape)
        return
    chosen, placements = reprieve(session, base, chosen, placements, gangs)
    gone = list(pool.taken.values())
    choice = fewest(
        session, base, gangs, units=units, chosen=chosen, placements=placements, gone=gone
    )
    broke = breaks_budgets(session.snapshot.budgets, choice.pods, gone=gone)
    for pod, node in own:
        statement.release(pod, node)
    evict_and_nominate(session, statement, gangs, choice, broke_budgets=broke)
    pool.taken.update((p.ref.uid, p) for p in choice.pods)
    pool.hopeless.clear()  # room changed: what found no victims may now
    pool.reset()


def _weighed(asked: Resources) -> frozenset[str]:
    """What a node's victims cost, in the resources the group asks that are counted, not
    measured in bytes: its extended resources (GPUs) if any, else its cpu."""
    counted = frozenset(asked) - {CPU, MEMORY, EPHEMERAL_STORAGE, PODS}
    return counted or (frozenset({CPU}) if CPU in asked else frozenset(asked))
