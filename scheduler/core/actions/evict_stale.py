"""Evict stale gangs (KAI's stale-gang eviction): a gang that runs with fewer running (and
succeeded) members than its minimum for longer than its grace period cannot work as a gang
and holds room that gangs able to run could use, so its running members are evicted (its
controller may make them again, and the gang then starts whole). Off unless
``--stale-gang-after`` or the gang's ``gang-scheduler.io/stale-after`` says a duration.

It acts in the turns where allocate places a running gang's members (``Verdict.RUNNING``):
staleness is judged with what the pass placed for it, so a replacement that fits when the
grace ends makes the gang whole rather than see it evicted; a gang still short is evicted,
and what was placed for it in the turn is taken back first: nothing binds beside an
eviction.
"""

from __future__ import annotations

import math
from dataclasses import replace

from scheduler.core.session import Session
from scheduler.core.statement import Statement
from scheduler.model.decisions import STALE_GANG, Attempt, Eviction, Verdict
from scheduler.model.gangs import Gang
from scheduler.model.pods import SUCCEEDED
from scheduler.model.snapshot import Staleness

# A stale gang's members evicted and still seen alive this long after are evicted again.
STALE_RETRY_SECONDS = 60.0


class EvictStale:
    """Stale gangs' running members are evicted, as allocate finds them."""

    name = "evict-stale"

    def open(self, session: Session) -> None:
        """Watch allocate's running gangs, where a grace applies to some gang (or one
        remembers being stale): off by default, it costs a pass nothing then."""
        stale = session.config.stale_gang_seconds is not None or any(
            gang.stale_seconds is not None or session.outcomes[key].state.stale is not None
            for key, gang in session.gangs.items()
        )
        if stale:
            session.watch(_attempted, verdicts=(Verdict.RUNNING,))

    def run(self, session: Session) -> None:
        """Nothing of its own: it acts in allocate's turns."""


def _attempted(session: Session, attempt: Attempt, statement: Statement | None, since: int) -> None:
    for key in attempt.gangs:
        gang = session.gangs[key]
        running = sum(1 for p in gang.members if p.bound and p.alive)
        placed = len(session.outcomes[key].bindings)
        if (
            placed
            and statement is not None
            and stale_due(session, gang, running=running, placing=placed)
        ):
            statement.undo_to(since)
            placed = 0
        check_stale(session, gang, running=running, placing=placed)


def _stale_grace(session: Session, gang: Gang, *, running: int, placing: int) -> float | None:
    """The gang's grace period if it is stale now (running with fewer running, placed
    and succeeded members than its minimum, and a grace is set); else None."""
    grace = gang.stale_seconds
    if grace is None:
        grace = session.config.stale_gang_seconds
    succeeded = sum(1 for p in gang.members if p.phase == SUCCEEDED)
    if (
        grace is not None
        and math.isfinite(grace)
        and running > 0
        and running + placing + succeeded < gang.min_member
    ):
        return grace
    return None


def stale_due(session: Session, gang: Gang, *, running: int, placing: int) -> bool:
    """Whether ``check_stale`` would evict the gang now, with ``placing`` members placed
    for it in this pass (nothing changed)."""
    grace = _stale_grace(session, gang, running=running, placing=placing)
    if grace is None:
        return False
    stale = session.outcomes[gang.key].state.stale
    return session.now >= (stale.since if stale is not None else session.now) + grace


def check_stale(session: Session, gang: Gang, *, running: int, placing: int = 0) -> bool:
    """KAI's stale-gang eviction: a gang that runs with fewer running (and
    succeeded) members than its minimum for longer than its grace period cannot work as
    a gang and holds room that gangs able to run could use: its running members are
    evicted (its controller may make them again, and the gang starts whole). Off unless
    --stale-gang-after or the gang's gang-scheduler.io/stale-after says a duration.
    ``placing``: members this pass placed for it (they count as running). True when it
    evicts: nothing of the gang is bound in this pass."""
    grace = _stale_grace(session, gang, running=running, placing=placing)
    outcome = session.outcomes[gang.key]
    state = outcome.state
    if grace is None:
        if state.stale is not None:
            outcome.state = replace(state, stale=None)
        return False
    stale = state.stale
    since = stale.since if stale is not None else session.now
    due = since + grace
    if stale is None:
        stale = Staleness(since=since, due=due)
        outcome.state = state = replace(state, stale=stale)
    elif stale.due != due:
        stale = replace(stale, due=due)
        outcome.state = state = replace(state, stale=stale)
    if session.now < due:
        session.wake(due)
        return False
    # Members evicted and still seen alive are not evicted again (every pass until the
    # delete was seen would evict them again, and count them twice); once
    # STALE_RETRY_SECONDS have passed since, whatever still runs is (and so on).
    last = stale.evicted_at
    retry = last is not None and session.now >= last + STALE_RETRY_SECONDS
    members = [
        p for p in gang.members if p.bound and p.alive and (retry or p.ref.uid not in stale.evicted)
    ]
    if not members:
        assert last is not None  # the first time every running member is evicted
        session.wake(last + STALE_RETRY_SECONDS)
        return True
    outcome.state = replace(
        state,
        stale=replace(
            stale, evicted=stale.evicted | {p.ref.uid for p in members}, evicted_at=session.now
        ),
    )
    session.wake(session.now + STALE_RETRY_SECONDS)
    message = (
        f"gang {gang.key} has run with {running} of its minimum {gang.min_member} members "
        f"for {session.now - since:.0f}s (stale after {grace:g}s): its {len(members)} running "
        "member(s) are evicted so that its room goes to gangs that can run; its controller "
        "may create them again, and the gang then starts whole"
    )
    session.add(
        session.evictions,
        *(
            Eviction(
                p.ref, p.node_name, message, priority=p.priority or 0, stale=True, whole_gang=True
            )
            for p in members
        ),
    )
    session.reporting.say(gang, reason=STALE_GANG, message=message, pods=members)
    return True
