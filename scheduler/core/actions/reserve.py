"""Reserve room for the first gang that does not fit (EASY backfill's reservation): where and
when it is expected to start comes from the latest forward play (``--forecast-interval``,
``Snapshot.forecast``), and from then on the room its members get there is held for it as
it frees, negative where it is still taken, so that no gang behind it in the queue starts on
it and pushes its start back. What the reservation does not need stays free for others
(backfill), and gangs ahead of it in the queue have had their turn already. One reservation
per pass; its nodes, once chosen, are kept while they still name a node for every member.

Unlike ``hold-head``, which waits for a gang to starve and then picks the emptiest nodes, it
reserves at once, on the nodes the play saw freeing first. It needs the forecasts: without
one it does nothing. It acts in the turns of the other actions whose GangGroup was not
placed (``Verdict.UNSCHEDULABLE``, ``BACKING_OFF``, ``PARKED``).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.session import Session, pending
from scheduler.core.statement import Statement
from scheduler.model.decisions import Attempt, Verdict
from scheduler.model.forecasts import EtaState
from scheduler.model.gangs import Gang
from scheduler.model.pods import Mode, PodRef
from scheduler.model.times import format_time

NOT_PLACED = frozenset({Verdict.UNSCHEDULABLE, Verdict.BACKING_OFF, Verdict.PARKED})


class Reserve:
    """The first gang that does not fit gets the room the forecast gave it, held as it
    frees."""

    name = "reserve"

    def open(self, session: Session) -> None:
        if session.snapshot.forecast is None:
            return  # no play yet: nothing says where, or when
        done = _Done()
        session.watch(
            lambda session, attempt, statement, since: _attempted(
                session, attempt, statement, done
            ),
            verdicts=NOT_PLACED,
        )

    def run(self, session: Session) -> None:
        """Nothing of its own: it acts in other actions' turns."""


class _Done:
    """Whether this pass reserved already (one reservation per pass)."""

    def __init__(self) -> None:
        self.done = False


def _attempted(
    session: Session, attempt: Attempt, statement: Statement | None, done: _Done
) -> None:
    if statement is None or done.done:
        return
    gangs = [session.gangs[key] for key in attempt.gangs]
    if _reserve(session, statement, gangs):
        done.done = True
        statement.changed(undo=lambda: setattr(done, "done", False))


def _reserve(session: Session, statement: Statement, gangs: list[Gang]) -> bool:
    """Hold the room the group is expected to start on, if the forecast says where; whether
    it did."""
    if any(g.mode is not Mode.STRICT for g in gangs):
        return False
    targets = {gang.key: _target(session, gang) for gang in gangs}
    if not all(targets.values()):
        return False  # the play found no start for it: nothing to keep
    etas = session.snapshot.forecast.etas if session.snapshot.forecast is not None else {}
    for gang in gangs:
        target = targets[gang.key]
        for pod in pending(gang):
            statement.hold(pod, target[pod.ref])
        outcome = session.outcomes[gang.key]
        outcome.state = replace(outcome.state, head_target=target)
        nodes = sorted(set(target.values()))
        eta = etas.get(gang.key)
        when = (
            f"expected to start at {format_time(eta.p50)}"
            if eta is not None and eta.p50 is not None
            else "expected to start"
        )
        session.reporting.say(
            gang,
            reason="Reserved",
            message=(
                f"gang {gang.key} is {when}: the room it needs is held for it on "
                f"{', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''} as it frees; "
                "other gangs use the rest"
            ),
            pods=pending(gang),
            warning=False,
        )
    return True


def _target(session: Session, gang: Gang) -> dict[PodRef, str]:
    """Where the gang's pending members are reserved: the nodes kept from an earlier pass
    while they name one for each, else where the forecast's play started it; {} if
    neither does."""
    todo = pending(gang)
    nodes = session.snapshot.nodes
    known = session.outcomes[gang.key].state.head_target
    if todo and all(known.get(p.ref) in nodes for p in todo):
        return {p.ref: known[p.ref] for p in todo}
    forecast = session.snapshot.forecast
    eta = forecast.etas.get(gang.key) if forecast is not None else None
    if eta is None or eta.state is not EtaState.ESTIMATED:
        return {}
    if not todo or not all(eta.placement.get(p.ref) in nodes for p in todo):
        return {}
    return {p.ref: eta.placement[p.ref] for p in todo}
