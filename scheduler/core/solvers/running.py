"""A running gang's pending members (after gang): each placed where it fits and bound on
its own (a new subgroup whole), inside the unit of its tier where the rest of it runs."""

from __future__ import annotations

from scheduler.core.queues import QueueRoom
from scheduler.core.session import Session
from scheduler.core.solvers.members import pinned_first
from scheduler.core.solvers.subgroups import place_subgroups
from scheduler.core.solvers.tiers import Fence, fence_of_running
from scheduler.core.statement import Statement
from scheduler.model.decisions import Binding, GangBinding, GroupBinding
from scheduler.model.gangs import Gang
from scheduler.model.pods import Pod
from scheduler.model.status import Status


def place_pending_members(
    session: Session, statement: Statement, gang: Gang, room: QueueRoom | None, todo: list[Pod]
) -> list[GroupBinding]:
    """A running gang's pending members (after gang): where they fit, each its own commit
    point, inside the unit where the gang runs when it has a tier. The groups to bind;
    why the others did not fit is said."""
    outcome = session.outcomes[gang.key]
    if session.now < outcome.state.retry_at:
        session.wake(outcome.state.retry_at)
        return []
    fence = fence_of_running(session, gang)
    if isinstance(fence, Status):  # its tier names no level: nothing goes, and it says so
        session.reporting.failed_attempt(gang, fence.message, pods=todo)
        return []
    # Below its minimum (raised at run time, members lost, or started by another binder), the
    # members it lacks go together or not at all, as kube-scheduler's Permit lets none go
    # until the minimum can be scheduled: one bound alone would leave it running short.
    running = sum(1 for p in gang.members if p.bound and p.alive) + gang.completed
    lacking = gang.min_member - running
    if lacking > len(todo):
        why = f"only {len(todo)} of them exist and are not gated"
        _below_minimum(session, gang, todo, running=running, why=why)
        return []
    since = statement.mark()
    if gang.subgroup_minimums:
        groups = place_after_subgroups(session, statement, gang, room, todo, fence=fence)
        if 0 < len(outcome.bindings) < lacking:  # none placed: it said why already
            statement.undo_to(since)
            _below_minimum(session, gang, todo, running=running, why="not all of them fit now")
            return []
        return groups
    if fence is None:
        failures = _one_by_one(session, statement, gang, room, todo)
    else:  # inside the unit where the rest of it runs; a soft one anywhere after that
        with session.finder.fenced(fence.nodes):
            failures = _one_by_one(session, statement, gang, room, todo, where=fence.where)
        placed = {b.pod for b in outcome.bindings}
        if failures and not fence.hard:
            left = [p for p in todo if p.ref not in placed]
            failures = _one_by_one(session, statement, gang, room, left)
    if 0 < len(outcome.bindings) < lacking:
        statement.undo_to(since)
        why = "not all of them fit now: " + "; ".join(failures)
        _below_minimum(session, gang, todo, running=running, why=why)
        return []
    if failures:
        placed = {b.pod for b in outcome.bindings}
        unplaced = [p for p in todo if p.ref not in placed]
        session.reporting.failed_attempt(gang, "; ".join(failures), pods=unplaced)
    if not outcome.bindings:
        return []
    placement = (
        session.reporting.refill_ranks(gang, outcome.bindings) if gang.topology_placed else None
    )
    binding = GangBinding(gang.key, tuple(outcome.bindings), placement=placement)
    # Bound one by one even when they bring it to its minimum: the gang is running, and a
    # member's bind that fails for a reason that may pass is retried while it holds its room
    # (``Binder``). An all-or-nothing group would, on a rejected first bind, say of a
    # running gang that nothing of it was bound.
    return [GroupBinding((binding,), all_or_nothing=False)]


def _below_minimum(
    session: Session, gang: Gang, todo: list[Pod], *, running: int, why: str
) -> None:
    lacking = gang.min_member - running
    session.reporting.failed_attempt(
        gang,
        f"gang {gang.key} runs {running} of its minimum {gang.min_member} members: the "
        f"{lacking} more it needs are bound together or not at all, and {why}",
        pods=todo,
    )


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
    for pod in pinned_first(session, todo):
        problem = session.readiness.volume_problem(pod)
        if not problem and room is not None:
            problem = room.refuse(gang.queue, session.queues.amounts(pod))
        node = None if problem else finder.find(pod, statement.ledger)
        if node is None:
            why = problem or finder.explain(pod, statement.ledger).message + inside
            failures.append(f"{pod.ref.name}: {why}")
            continue
        statement.allocate(pod, node, queue=gang.queue)
        outcome.bind(Binding(pod.ref, node))
    return failures


def place_after_subgroups(
    session: Session,
    statement: Statement,
    gang: Gang,
    room: QueueRoom | None,
    todo: list[Pod],
    *,
    fence: Fence | None,
) -> list[GroupBinding]:
    """A running gang of subgroups: a subgroup not started yet goes whole or waits,
    one whole subgroup at a time as room appears (the elastic part); the members a running
    subgroup lost come back together; plain members one by one. Each bound as it is placed:
    the gang runs already."""
    outcome = session.outcomes[gang.key]
    usable = [p for p in todo if not session.readiness.volume_problem(p)]
    if fence is None:
        got, status = place_subgroups(session, statement, gang, room, usable, need=0)
    else:  # inside the unit of the gang's tier where it runs; soft: anywhere after
        with session.finder.fenced(fence.nodes):
            got, status = place_subgroups(session, statement, gang, room, usable, need=0)
        if not fence.hard and len(got) < len(usable):
            placed = {b.pod for b in got}
            left = [p for p in usable if p.ref not in placed]
            more, anywhere = place_subgroups(session, statement, gang, room, left, need=0)
            got += more
            status = anywhere if more or status.ok else status  # why inside its unit, else
    outcome.bind(*got)
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
        session.reporting.failed_attempt(gang, why, pods=unplaced)
    return groups
