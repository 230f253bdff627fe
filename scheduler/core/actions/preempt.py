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
their nodes: the room is held for them as it frees (``Session._hold_nominations``), and the
group evicts nothing more while its victims are leaving. If it does not fit even with every
candidate gone, nothing is evicted and it says so.

A group with a member whose ``preemptionPolicy`` is ``Never`` does not preempt.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from scheduler.core.actions.allocate import place_group
from scheduler.core.filtering import selector_matches
from scheduler.core.gangs import priority_of, subgroups_of
from scheduler.core.placing import DeviceConflict, Ledger
from scheduler.core.session import Session, pending
from scheduler.core.statement import Statement
from scheduler.model.budgets import DisruptionBudget
from scheduler.model.decisions import Eviction, Nomination, Verdict
from scheduler.model.gangs import Gang, PodGroup
from scheduler.model.pods import SINGLE_PREFIX, Pod, gang_key_of

# Placements tried per GangGroup in one pass: a bound on the work a hopeless group costs.
MAX_TRIES = 64


@dataclass(frozen=True, slots=True)
class Victims:
    """Pods evicted together: one pod, or a gang's members beyond or including its min."""

    pods: tuple[tuple[Pod, str], ...]  # with their nodes
    priority: int
    newest: float  # creation time of the youngest: younger goes first
    # Evicting it, after the units before it, would take a PodDisruptionBudget below zero.
    breaks_budget: bool = False

    def order(self) -> tuple:
        """Lowest priority, fewest pods, youngest first; then by name, so the same cluster
        gives the same victims whatever order its pods came in."""
        return (self.priority, len(self.pods), -self.newest, sorted(p.ref for p, _ in self.pods))


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
    for unit in session.units():
        gangs = [session.gangs[k] for k in unit if k in session.gangs]
        if not gangs or not all(g.key in failed for g in gangs):
            continue
        if any(session.victims_present(session.outcomes[g.key].state) for g in gangs):
            continue  # its victims are still leaving: no more evictions for it
        if any(not p.preempts for g in gangs for p in pending(g)):
            continue
        with session.turn(unit, gangs) as statement:
            _preempt_for(session, gangs, pool, statement)


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
            if session.book is not None:
                # With queues, preemption stays inside the preemptor's queue (as Volcano's
                # and KAI's do): taking from another queue is reclaim's, by shares.
                names = session.config.scheduler_names

                def admit(pod: Pod) -> bool:
                    return pod.scheduler_name not in names or session.queue_of(pod) == queue

            units = self._units[(priority, queue)] = candidates(
                session, below=priority, taken=self.taken, admit=admit
            )
        return units


def _priority(session: Session, gangs: list[Gang]) -> int:
    classes = session.snapshot.priority_classes
    pods = [p for g in gangs for p in pending(g)]
    return max(priority_of(p, classes) for p in pods) if pods else 0


def candidates(
    session: Session,
    *,
    below: int | None,
    taken: Mapping[str, Pod] = MappingProxyType({}),
    admit: Callable[[Pod], bool] | None = None,
) -> list[Victims]:
    """The victim units whose priority is below ``below`` (any priority: None) and whose
    pods ``admit`` lets in, best first; pods in ``taken`` (evicted earlier in this pass) are
    gone already."""
    classes = session.snapshot.priority_classes
    nodes = session.snapshot.nodes
    ours = session.config.scheduler_names
    by_gang: dict[object, list[tuple[Pod, str]]] = defaultdict(list)
    for name, info in session.infos.items():
        if name not in nodes:
            continue
        for pod in info.pods:
            if pod.deleting or not pod.alive or pod.ref.uid in taken:
                continue
            if below is not None and priority_of(pod, classes) >= below:
                continue
            if admit is not None and not admit(pod):
                continue
            key = gang_key_of(pod)
            single = pod.scheduler_name not in ours or key.name.startswith(SINGLE_PREFIX)
            by_gang[pod.ref.uid if single else key].append((pod, name))
    units: list[Victims] = []
    for key, members in by_gang.items():
        priority = min(priority_of(p, classes) for p, _ in members)
        youngest_first = sorted(members, key=lambda m: (-m[0].created, m[0].ref))
        if isinstance(key, str):  # a pod on its own
            units.append(Victims(tuple(members), priority, members[0][0].created))
            continue
        minimum = _min_member(session, members[0][0])
        podgroup = _podgroup_of(session, members[0][0])
        if podgroup is not None and podgroup.subgroup_policy:
            units.extend(_extra_subgroups(podgroup, members, priority, minimum=minimum))
        else:
            for extra in youngest_first[: max(len(members) - minimum, 0)]:
                units.append(Victims((extra,), priority, extra[0].created))
        newest = max(p.created for p, _ in members)
        units.append(Victims(tuple(youngest_first), priority, newest))
    units.sort(key=Victims.order)
    budgets = session.snapshot.budgets
    if not budgets:
        return units
    gone = list(taken.values())
    return _keeping_budgets(units, budgets, gone=gone)


def _keeping_budgets(
    units: list[Victims], budgets: tuple[DisruptionBudget, ...], *, gone: list[Pod]
) -> list[Victims]:
    """``units`` with those that keep every budget first, in their order, then the rest,
    marked. Taken in order, any first few of the result break no budget that the units
    before them did not break already (kube-scheduler's violating / non-violating victims,
    across nodes). ``gone`` were evicted earlier in this pass: their share is spent."""
    left = [b.disruptions_allowed for b in budgets]
    counted: set[str] = set()

    def cost(pods: Iterable[Pod]) -> Counter:
        hits: Counter = Counter()
        for pod in pods:
            if pod.ref.uid in counted:
                continue
            for i, budget in enumerate(budgets):
                if _counts_against(budget, pod):
                    hits[i] += 1
        return hits

    for i, n in cost(gone).items():
        left[i] -= n
    counted.update(p.ref.uid for p in gone)
    keeping: list[Victims] = []
    breaking: list[Victims] = []
    for unit in units:
        hits = cost(p for p, _ in unit.pods)
        if all(left[i] >= n for i, n in hits.items()):
            for i, n in hits.items():
                left[i] -= n
            counted.update(p.ref.uid for p, _ in unit.pods)
            keeping.append(unit)
        else:
            breaking.append(replace(unit, breaks_budget=True))
    return keeping + breaking


def _counts_against(budget: DisruptionBudget, pod: Pod) -> bool:
    """Whether evicting ``pod`` uses up some of ``budget`` (kube-scheduler's
    filterPodsWithPDBViolation: same namespace, a non-empty selector that matches, and not
    counted as disrupted already)."""
    selector = budget.selector
    return (
        budget.namespace == pod.ref.namespace
        and selector is not None
        and bool(selector.match_labels or selector.match_expressions)
        and pod.ref.name not in budget.disrupted
        and selector_matches(selector, pod.labels)
    )


def _podgroup_of(session: Session, pod: Pod) -> PodGroup | None:
    key = gang_key_of(pod)
    gang = session.gangs.get(key)
    return gang.podgroup if gang is not None else session.snapshot.podgroups.get(key)


def _extra_subgroups(
    podgroup: PodGroup, members: list[tuple[Pod, str]], priority: int, *, minimum: int
) -> list[Victims]:
    """A running gang of subgroups (#23) gives up whole subgroups beyond each policy's
    minSubGroups, never a member of one alone, and never below its minMember: which ones is
    chosen here (a subgroup already short of its size, then the highest index, as a
    scale-down takes them); when, by preemption's order among all units."""
    where = {pod.ref: (pod, node) for pod, node in members}
    groups = subgroups_of(podgroup.subgroup_policy, [pod for pod, _ in members])
    least = {p.name: p.min_subgroups for p in podgroup.subgroup_policy}
    whole = Counter(g.policy for g in groups if len(g.members) >= g.size)
    left = len(members)
    extras = []
    for group in sorted(groups, key=lambda g: (len(g.members) >= g.size, -g.index, g.name)):
        complete = len(group.members) >= group.size
        if (complete and whole[group.policy] <= least[group.policy]) or (
            left - len(group.members) < minimum
        ):
            continue
        pods = tuple(where[ref] for ref in group.members)
        extras.append(Victims(pods, priority, max(pod.created for pod, _ in pods)))
        whole[group.policy] -= complete
        left -= len(pods)
    return extras


def _min_member(session: Session, pod: Pod) -> int:
    """A victim gang's minimum: its PodGroup's minMember, else its pods' min-available, else
    what its owner says (a running JobSet replica is not broken up below its Job's size)."""
    key = gang_key_of(pod)
    gang = session.gangs.get(key)
    if gang is not None:
        return gang.min_member
    podgroup = session.snapshot.podgroups.get(key)
    if podgroup is not None:
        return podgroup.min_member
    claim = pod.gang
    if claim is not None and claim.min_available:
        return claim.min_available
    owner = session.snapshot.owners.get(claim.owner) if claim and claim.owner else None
    if claim is not None and owner is not None:  # a running gang from its owner
        return owner.size(claim.part) or 1
    return 1


def _evicted(ledger: Ledger, chosen: Iterable[Victims]) -> Ledger:
    """A scratch of ``ledger`` with the chosen victims' room given back."""
    trial = ledger.scratch()
    seen: set[str] = set()
    for victims in chosen:
        for pod, node in victims.pods:
            if pod.ref.uid not in seen:
                seen.add(pod.ref.uid)
                trial.give(node, pod.requests)
    return trial


def _fits(session: Session, base: Ledger, gangs: list[Gang], chosen: list[Victims]) -> list | None:
    """The group's placements with the ``chosen`` victims gone from ``base`` (their room
    given back, on the nodes and in their queues) if it fits whole, else None. The finder's
    cursors assume room only shrinks: after evictions they start over."""
    session.finder.restore({})
    session.failed_shapes.clear()
    ledger = _evicted(base, chosen)
    statement = Statement(ledger)
    room = session.queue_room(ledger)
    if room is not None:
        names = session.config.scheduler_names
        seen: set[str] = set()
        for victims in chosen:
            for pod, _ in victims.pods:
                if pod.scheduler_name in names and pod.ref.uid not in seen:
                    seen.add(pod.ref.uid)
                    room.give(session.queue_of(pod), pod.requests)
    try:
        placed = place_group(session, statement, gangs, room)
    except DeviceConflict:  # a what-if: a placement its devices would not allow is no plan
        return None
    if placed is None:
        return None
    return [(op.pod, op.node) for op in statement.operations if op.pod is not None]


def _preempt_for(session: Session, gangs: list[Gang], pool: _Pool, statement: Statement) -> None:
    priority = _priority(session, gangs)
    book = session.book
    units = pool.below(priority, book.name_of(gangs[0].queue) if book is not None else "")
    if not units:
        return
    # The same shapes at the same priority found no victims earlier in this pass: nor now
    # (no eviction happened since, or the memo was cleared).
    shape = (
        priority,
        gangs[0].queue,
        tuple(
            (session.finder.signature(p), p.requests, p.neighbourly)
            for g in gangs
            for p in session.ordered(pending(g))
        ),
        # What each gang asks of them: a gang that needs fewer may find victims where one
        # that needs more did not (review of #23).
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
    own = _own_holds(session, gangs)
    if shape in pool.hopeless and not own:
        return
    # The room held for the group's own nominated members (a preemption that did not lead to
    # a bind: a member's room was taken meanwhile) is its to use again: not in its way.
    base = session.ledger.scratch()
    for pod, node in own:
        base.give(node, pod.requests)
    chosen, placements = _greedy(session, base, units, gangs)
    if placements is None and any(v.breaks_budget for v in units):
        # The budgets' order ran out of tries: the plain order, as if there were no budget.
        # A budget decides which victims go first and are spared first, never whether a
        # gang may preempt at all (kube-scheduler's rule).
        chosen, placements = _greedy(session, base, sorted(units, key=Victims.order), gangs)
    if placements is None:
        session.finder.restore({})
        if not own:
            pool.hopeless.add(shape)
        return
    chosen, placements = reprieve(session, base, chosen, placements, gangs)
    gone = list(pool.taken.values())
    evicted = list({p.ref.uid: p for v in chosen for p, _ in v.pods}.values())
    broke = _breaks_budgets(session.snapshot.budgets, evicted, gone=gone)
    for pod, node in own:
        session.ledger.unplace(pod, node)
    _commit(session, statement, gangs, chosen, placements, broke_budgets=broke)
    pool.taken.update((p.ref.uid, p) for victims in chosen for p, _ in victims.pods)
    pool.hopeless.clear()  # room changed: what found no victims may now
    pool.reset()


def reprieve(
    session: Session, base: Ledger, chosen: list[Victims], placements: list, gangs: list[Gang]
) -> tuple[list[Victims], list]:
    """Give back each victim unit, those that break a budget first, then highest priority
    first, if the group still fits without it (kube-scheduler's reprieve): the victims left
    and the group's placements without the others."""
    for victims in sorted(chosen, key=lambda v: (v.breaks_budget, v.order()), reverse=True):
        rest = [v for v in chosen if v is not victims]
        without = _fits(session, base, gangs, rest)
        if without is not None:
            chosen, placements = rest, without
    session.finder.restore({})
    return chosen, placements


def _greedy(
    session: Session, base: Ledger, units: list[Victims], gangs: list[Gang]
) -> tuple[list[Victims], list | None]:
    """Units taken in order, at most ``MAX_TRIES``, until the group fits: the units taken
    and the group's placements, or None for the placements if it never did."""
    chosen: list[Victims] = []
    for victims in units[:MAX_TRIES]:
        chosen.append(victims)
        placements = _fits(session, base, gangs, chosen)
        if placements is not None:
            return chosen, placements
    return chosen, None


def _own_holds(session: Session, gangs: list[Gang]) -> list[tuple[Pod, str]]:
    """The room this pass holds for the group's nominated members, with their pods."""
    pods = {p.ref: p for g in gangs for p in pending(g)}
    return [
        (pods[ref], node)
        for g in gangs
        for ref, node in session.nominated_holds.get(g.key, {}).items()
        if ref in pods
    ]


def _breaks_budgets(
    budgets: tuple[DisruptionBudget, ...], evicted: list[Pod], *, gone: list[Pod]
) -> bool:
    """Whether evicting ``evicted``, after ``gone``, takes some budget below zero."""
    for budget in budgets:
        spent = sum(1 for p in (*gone, *evicted) if _counts_against(budget, p))
        if spent > budget.disruptions_allowed:
            return True
    return False


def _commit(
    session: Session,
    statement: Statement,
    gangs: list[Gang],
    chosen: list[Victims],
    placements: list,
    *,
    broke_budgets: bool = False,
    why: str = "",
) -> None:
    """Evict on the pass's ledger, hold the room for the group, and say so."""
    evicted: dict[str, tuple[Pod, str]] = {}
    for victims in chosen:
        for pod, node in victims.pods:
            evicted.setdefault(pod.ref.uid, (pod, node))
    for pod, node in evicted.values():
        statement.evict(pod, node)
    for pod, node in placements:
        statement.hold(pod, node)
    names_ = ", ".join(str(g.key) for g in gangs)
    by_gang = {g.key: g for g in gangs}
    nominated: dict = defaultdict(dict)
    for pod, node in placements:
        nominated[gang_key_of(pod)][pod.ref] = node
        session.nominations.append(Nomination(pod.ref, node))
    for key, refs in nominated.items():
        if key in by_gang:
            session.count_nominated(by_gang[key], refs)
    book = session.book
    if book is not None:  # the victims leave their queues' shares (#22)
        ours = session.config.scheduler_names
        for pod, _ in evicted.values():
            if pod.scheduler_name in ours:
                book.leave(session.queue_of(pod), pod.requests)
    for pod, node in evicted.values():
        session.evictions.append(
            Eviction(
                pod.ref,
                node,
                f"{why} on node {node}"
                if why
                else f"Preempted by gang {names_} (priority {_priority(session, gangs)}) on node "
                f"{node}",
                priority=priority_of(pod, session.snapshot.priority_classes),
                reclaimed_from=session.queue_of(pod) if why else "",
            )
        )
    victims = frozenset(evicted)
    for key, gang in by_gang.items():
        session.unpark(gang)  # its victims leaving is the change it waits for
        outcome = session.outcomes[key]
        outcome.state = replace(
            outcome.state,
            nominated=nominated.get(key, {}),
            victims=victims,
            nominated_at=session.now,
            reservations={},
            # Tried again as soon as its victims have left (their deletion is the change it
            # waits for), not after the backoff of the attempt that led to the preemption.
            retry_at=0.0,
        )
        what = "of other queues above their fair share" if why else "of lower priority"
        message = (
            f"gang {key} {'reclaimed' if why else 'preempted'} {len(evicted)} pod(s) {what} "
            f"({', '.join(sorted(str(p.ref) for p, _ in evicted.values())[:5])}"
            f"{', ...' if len(evicted) > 5 else ''}); it binds once they have left"
        )
        if broke_budgets:
            message += "; no choice of victims kept every PodDisruptionBudget"
        reason = "Reclaiming" if why else "Preempting"
        outcome.condition = ("False", reason, message)
        session.say(gang, reason=reason, message=message, pods=pending(gang), warning=False)
