"""Reserve room for the first gang that does not fit (EASY backfill's reservation): where and
when it is expected to start comes from the latest forward play (``--forecast-interval``,
``Snapshot.forecast``), and from then on the room its members get there is held for it as
it frees, negative where it is still taken, so that no gang behind it in the queue starts on
it and pushes its start back, unless it is expected to end before the reservation starts
(its 90th percentile or deadline, ``BACKFILL_MARGIN`` ahead): such a gang's turn sees the
reserved room (EASY backfill). What the reservation does not need stays free for others,
and gangs ahead of it in the queue have had their turn already. ``--reservations`` gangs
(one by default), the first left unplaced in queue order, are reserved for in a pass, each
where the play started it (a later one after the earlier ones, as the play ran them); a
gang backfills onto reserved room only if it ends before the earliest of them starts. A
reservation's nodes, once chosen, are kept while they still name a node for every member.

Unlike ``hold-head``, which waits for a gang to starve and then picks the emptiest nodes, it
reserves at once, on the nodes the play saw freeing first. It needs the forecasts: without
one it does nothing. It acts in the turns of the other actions whose GangGroup was not
placed (``Verdict.UNSCHEDULABLE``, ``BACKING_OFF``, ``PARKED``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from scheduler.core.durations import expected_duration, history
from scheduler.core.session import Session, pending
from scheduler.core.solvers.heads import still_fits, take_back_targets
from scheduler.core.statement import Statement
from scheduler.model.decisions import Attempt, Verdict
from scheduler.model.forecasts import EtaState
from scheduler.model.gangs import Gang
from scheduler.model.pods import GangKey, Mode, Pod, PodRef
from scheduler.model.times import format_time

NOT_PLACED = frozenset({Verdict.UNSCHEDULABLE, Verdict.BACKING_OFF, Verdict.PARKED})
# A gang backfills onto reserved room only if it is expected to end this long before the
# reservation starts (at its 90th percentile, or its deadline).
BACKFILL_MARGIN = 60.0


class Reserve:
    """The first gang that does not fit gets the room the forecast gave it, held as it
    frees."""

    name = "reserve"

    def open(self, session: Session) -> None:
        # Last pass's reservation is this pass's to make again (or another's): held only
        # where its gang is still the first left unplaced, and given back (which wakes the
        # gangs parked for that room) otherwise. Its nodes are kept for it meanwhile.
        done = _Done()
        done.kept = take_back_targets(session)
        if session.snapshot.forecast is None:
            return  # no play yet: nothing says where, or when
        session.watch(
            lambda session, attempt, statement, since: _attempted(
                session, attempt, statement, done
            ),
            verdicts=NOT_PLACED,
        )
        session.around_turns(
            lambda session, statement, gangs: _backfill(session, done, statement, gangs)
        )

    def run(self, session: Session) -> None:
        """Nothing of its own: it acts in other actions' turns."""


class _Done:
    """What this pass reserved so far: how many groups (``count``), the room held (pod,
    node), from when the earliest starts (``start``), and the gangs it is for."""

    def __init__(self) -> None:
        self.count = 0
        self.held: list[tuple[Pod, str]] = []
        self.start: float | None = None
        self.gangs: frozenset[GangKey] = frozenset()
        self.runs: dict[str, tuple[float, ...]] | None = None
        # The nodes reserved for each gang by the passes before (its head_target).
        self.kept: dict[GangKey, Mapping[PodRef, str]] = {}


def _backfill(
    session: Session, done: _Done, statement: Statement, gangs: list[Gang]
) -> Callable[[], None] | None:
    """In an allocate turn after the reservation: a GangGroup whose every gang is expected to
    end ``BACKFILL_MARGIN`` before the reservation starts may use its room (EASY backfill);
    the room is held again once the turn has placed it, negative where it took some."""
    if (
        not done.held
        or done.start is None
        or session.action != "allocate"
        or any(g.key in done.gangs for g in gangs)
    ):
        return None
    if done.runs is None:
        done.runs = history(session.gangs.values())
    ends = []
    for gang in gangs:
        lasts = expected_duration(gang, runs=done.runs)
        longest = lasts.bound if lasts.bound is not None else lasts.p90
        if longest is None or session.now + longest > done.start - BACKFILL_MARGIN:
            return None  # it could still run when the reservation starts
        ends.append(session.now + longest)
    held = list(done.held)
    for pod, node in held:
        statement.release(pod, node)
    start = done.start
    reserved = ", ".join(str(key) for key in sorted(done.gangs, key=str))

    def hold_again() -> None:
        for pod, node in held:
            statement.hold(pod, node)
        nodes = {node for _, node in held}
        for gang in gangs:  # said when it took room on the reserved nodes
            if any(b.node in nodes for b in session.outcomes[gang.key].bindings):
                session.reporting.say(
                    gang,
                    reason="Backfilled",
                    message=(
                        f"gang {gang.key} runs on nodes reserved for {reserved} from "
                        f"{format_time(start)}: it is expected to end by "
                        f"{format_time(max(ends))}, {BACKFILL_MARGIN:g}s or more before"
                    ),
                    pods=gang.members,
                    warning=False,
                )

    return hold_again


def _attempted(
    session: Session, attempt: Attempt, statement: Statement | None, done: _Done
) -> None:
    if statement is None or done.count >= session.config.reservations:
        return
    gangs = [session.gangs[key] for key in attempt.gangs]
    before = (done.count, list(done.held), done.start, done.gangs)
    if _reserve(session, statement, gangs, done):
        done.count += 1
        done.gangs = done.gangs | {g.key for g in gangs}

        def undo() -> None:
            done.count, done.held, done.start, done.gangs = before

        statement.changed(undo=undo)


def _reserve(session: Session, statement: Statement, gangs: list[Gang], done: _Done) -> bool:
    """Hold the room the group is expected to start on, if the forecast says where; whether
    it did."""
    if any(g.mode is not Mode.STRICT or session.outcomes[g.key].state.nominated for g in gangs):
        return False  # a preemptor holds its nominated room already
    targets = {gang.key: _target(session, gang, done.kept.get(gang.key, {})) for gang in gangs}
    if not all(targets.values()):
        return False  # the play found no start for it: nothing to keep
    etas = session.snapshot.forecast.etas if session.snapshot.forecast is not None else {}
    for gang in gangs:
        target = targets[gang.key]
        for pod in pending(gang):
            statement.hold(pod, target[pod.ref])
            done.held.append((pod, target[pod.ref]))
        eta = etas.get(gang.key)
        if eta is not None and eta.p50 is not None:
            done.start = eta.p50 if done.start is None else min(done.start, eta.p50)
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


def _target(session: Session, gang: Gang, known: Mapping[PodRef, str]) -> dict[PodRef, str]:
    """Where the gang's pending members are reserved: the nodes kept from an earlier pass
    while they name, for each, one it may go on at all, else where the forecast's play
    started it; {} if neither does."""
    todo = pending(gang)
    if todo and all(still_fits(session, p, known.get(p.ref)) for p in todo):
        return {p.ref: known[p.ref] for p in todo}
    forecast = session.snapshot.forecast
    eta = forecast.etas.get(gang.key) if forecast is not None else None
    if eta is None or eta.state is not EtaState.ESTIMATED:
        return {}
    if not todo or not all(still_fits(session, p, eta.placement.get(p.ref)) for p in todo):
        return {}  # a play older than the change that took the node from it
    return {p.ref: eta.placement[p.ref] for p in todo}
