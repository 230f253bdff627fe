"""Hold room for the head gang (starvation-free backfill): a Strict GangGroup that has
waited past ``--starvation-after`` (or its own ``gang-scheduler.io/starvation-after``) is the
head. The nodes it will go to are chosen once (emptiest first, as if they were empty: the
room frees there first) and kept; at its turn, after it failed (or while it backs off or is
parked), the room its members need there is held, negative where it is still taken, so that
no gang behind it in the queue places on what the head needs. What the head does not need on
a node stays free for others (backfill), and gangs ahead of it in the queue have had their
turn already. One head per pass.

It acts in the turns of the other actions whose GangGroup was not placed
(``Verdict.UNSCHEDULABLE``, ``BACKING_OFF``, ``PARKED``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.core.filtering import volume_terms
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.core.session import Session, pending
from scheduler.core.solvers.heads import still_fits, take_back_targets
from scheduler.core.statement import Statement
from scheduler.model.decisions import Attempt, Verdict
from scheduler.model.gangs import Gang
from scheduler.model.pods import GangKey, Mode, PodRef

NOT_PLACED = frozenset({Verdict.UNSCHEDULABLE, Verdict.BACKING_OFF, Verdict.PARKED})


class HoldHead:
    """The room a starving gang needs is held for it as it frees."""

    name = "hold-head"

    def open(self, session: Session) -> None:
        # Last pass's head holds again only if it is still the head at its turn; a head that
        # bound, went, or is no longer first gives its room back (which wakes the gangs
        # parked for it). Its nodes are kept for it meanwhile.
        held = _Held()
        held.kept = take_back_targets(session)
        session.watch(
            lambda session, attempt, statement, since: _attempted(
                session, attempt, statement, held
            ),
            verdicts=NOT_PLACED,
        )

    def run(self, session: Session) -> None:
        """Nothing of its own: it acts in other actions' turns."""


class _Held:
    """Whether this pass held a head's room already (one head per pass)."""

    def __init__(self) -> None:
        self.done = False
        # The nodes chosen for each head by the passes before (its head_target).
        self.kept: dict[GangKey, Mapping[PodRef, str]] = {}


def _attempted(
    session: Session, attempt: Attempt, statement: Statement | None, held: _Held
) -> None:
    if statement is None or held.done:
        return
    gangs = [session.gangs[key] for key in attempt.gangs]
    if _hold_for_head(session, statement, gangs, held.kept):
        held.done = True
        statement.changed(undo=lambda: setattr(held, "done", False))


def _hold_for_head(
    session: Session,
    statement: Statement,
    gangs: list[Gang],
    kept: Mapping[GangKey, Mapping[PodRef, str]],
) -> bool:
    """Hold the room the group needs where its target is, if it is the head; whether it
    did."""
    if any(g.mode is not Mode.STRICT for g in gangs):
        return False
    for gang in gangs:
        first = session.outcomes[gang.key].state.first_attempt
        if first is None or session.now - first < session.readiness.starvation_after(gang):
            session.wake(
                first + session.readiness.starvation_after(gang) if first is not None else 0
            )
            return False
    targets = {gang.key: _head_target(session, gang, kept.get(gang.key, {})) for gang in gangs}
    if not all(targets.values()):
        return False  # it would not fit even on empty nodes: nothing to wait for
    for gang in gangs:
        target = targets[gang.key]
        for pod in pending(gang):
            if pod.ref in target:
                statement.hold(pod, target[pod.ref])
        outcome = session.outcomes[gang.key]
        outcome.state = replace(outcome.state, head_target=target)
        nodes = sorted(set(target.values()))
        waited = session.readiness.starvation_after(gang)
        session.reporting.say(
            gang,
            reason="StarvationHold",
            message=(
                f"gang {gang.key} has waited over {waited:g}s: the "
                f"room it needs is held for it on {', '.join(nodes[:5])}"
                f"{', ...' if len(nodes) > 5 else ''} as it frees; other gangs use the rest"
            ),
            pods=pending(gang),
            warning=False,
        )
    return True


def _head_target(session: Session, gang: Gang, known: Mapping[PodRef, str]) -> dict:
    """Where the head's pending members go: the remembered target while it still names,
    for each, a node it may go on at all, else a placement on the nodes as if empty,
    emptiest now first."""
    todo = session.order.ordered(pending(gang))
    if todo and all(still_fits(session, p, known.get(p.ref)) for p in todo):
        return {p.ref: known[p.ref] for p in todo}
    snapshot = session.snapshot
    nodes = snapshot.nodes
    empty = Ledger.over(nodes, {})
    finder = NodeFinder(
        nodes,
        empty,
        infos=session.infos,
        scoring="spread",
        # Where its bound claims' volumes can be reached, as its own placement will ask.
        volumes=lambda pod: volume_terms(pod, claims=snapshot.claims, volumes=snapshot.volumes),
    )
    target = {}
    for pod in todo:
        node = finder.find(replace(pod, scoring="spread"), empty)
        if node is None:
            return {}
        empty.place(pod, node)
        target[pod.ref] = node
    return target
