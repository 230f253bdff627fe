"""Placing members, the pieces every solver is built of: each where it fits (packing
order, every filter, the queue's room), or the topology solver's arrangement checked against
the other pods. Each allocation goes on the Statement with the gang's queue, where the turn's
queue room counts it; a part that falls short is undone with ``statement.undo_to``."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.queues import QueueRoom
from scheduler.core.session import Session
from scheduler.core.statement import Statement
from scheduler.model.decisions import Binding
from scheduler.model.gangs import Gang
from scheduler.model.pods import Mode, Pod
from scheduler.model.resources import Resources
from scheduler.model.status import Status
from scheduler.model.topology import Constraints


def pinned_first(session: Session, members: list[Pod]) -> list[Pod]:
    """Members whose bound volumes pin them to few nodes first: placed after the others, one
    could find them packed onto its only node (seeds 11091, 11108, 11595). Members alike keep
    their order (the sort is stable); without claims, the order is kept as it is."""
    if not any(p.claims for p in members):
        return members
    finder = session.finder
    return sorted(members, key=lambda p: len(finder.static_fit(p)))


def place_members(
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
    members = pinned_first(session, members)
    for i, pod in enumerate(members):
        if gang.mode is Mode.STRICT and len(got) + (len(members) - i) < need:
            break  # min_member is out of reach: stop early
        refused = room.refuse(gang.queue, session.queues.amounts(pod)) if room is not None else ""
        node = None if refused else finder.find(pod, statement.ledger)
        if node is None:
            if first_miss is None and len(got) < need:
                if refused:
                    first_miss = Status.unschedulable(refused)
                elif session.explaining:
                    detail = finder.explain(pod, statement.ledger).message
                    first_miss = Status.unschedulable(f"{pod.ref.name}: {detail}")
                else:
                    first_miss = Status.unschedulable(f"{pod.ref.name} does not fit")
            continue
        statement.allocate(pod, node, queue=gang.queue)
        got.append(Binding(pod.ref, node))
    if len(got) >= need:
        return got, Status.success()
    return got, first_miss or Status.unschedulable(f"only {len(got)} of {need} members fit")


def place_each(
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
    for pod in pinned_first(session, pods):
        if limit is not None and len(got) >= limit:
            break
        refused = room.refuse(gang.queue, session.queues.amounts(pod)) if room is not None else ""
        node = None if refused else finder.find(pod, statement.ledger)
        if node is None:
            if not first_miss:
                if refused or not session.explaining:
                    first_miss = refused or f"{pod.ref.name} does not fit"
                else:
                    first_miss = f"{pod.ref.name}: {finder.explain(pod, statement.ledger).message}"
            continue
        statement.allocate(pod, node, queue=gang.queue)
        got.append(Binding(pod.ref, node))
    return got, first_miss


def find_among(
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


def arranged(
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
        wanted = Resources.total(session.queues.amounts(p) for p, _ in arrangement.placements)
        if status.ok and room is not None and (refused := room.refuse(gang.queue, wanted)):
            status = Status.unschedulable(refused)
        if status.ok:
            for pod, node in arrangement.placements:
                statement.allocate(pod, node, queue=gang.queue)
            placed = [Binding(p.ref, node) for p, node in arrangement.placements]
            return placed, status, tuple(arrangement.relaxed)
    return [], status, ()


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
