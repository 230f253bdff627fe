"""One scheduling pass: a snapshot and the time in, decisions out. No I/O, no clock.

``schedule`` opens a Session over the snapshot, runs the configured actions in order
(``Config.actions``: allocate, preempt, reclaim by default; ``scheduler.core.framework``),
and closes the session into a Result. The pass works on GangGroups in queue
order; each GangGroup's turn is a Statement that is committed whole or discarded whole,
and the whole GangGroup is one commit point for the shell.

A gang has incarnations. It is *satisfied* only while one of its bound members is alive
(not Succeeded or Failed, not being deleted); then its remaining members are placed one by
one like ordinary pods (Koordinator's "after gang"). Once every bound member of an
incarnation has finished or gone, new members are a new incarnation: all or nothing again,
with a fresh clock (a Job that recreates all its pods gets a whole gang, or none). Members
that completed (Succeeded) count toward the minimum (Volcano's ReadyTaskNum counts them too,
by its source; we have not run Volcano on it): a gang of 7 with 4 completed places its 3
pending members together. A Job does not make a
member that succeeded again, so without this a gang cut short (4 bound, the scheduler
killed, the 4 finished before a new leader came) would wait forever for members that will
never exist. They fill only the places of the gang's total that no live member takes, so
pods made anew for the whole of a gang that ran are a whole new gang, and a Job's gang that
its status already shrank is not counted twice; a gang whose completed members reach its
minimum (and that nothing blocks) is satisfied. A gang of one Job's pods counts them by the
Job's status instead (succeeded, and the completions left: ``Gang.completed``), which sees
those deleted since and the pods of a round not made yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from scheduler.core.actions import actions_named
from scheduler.core.framework import run_actions
from scheduler.core.session import REASON_UNSCHEDULABLE, Session, topology_of
from scheduler.model.config import Config
from scheduler.model.decisions import GroupBinding, Result
from scheduler.model.snapshot import GangState, Snapshot

__all__ = ["DEFAULT_CONFIG", "after_failed_bind", "schedule", "topology_of"]

DEFAULT_CONFIG = Config()


def schedule(
    snapshot: Snapshot,
    *,
    now: float,
    config: Config = DEFAULT_CONFIG,
    committed: Callable[[GroupBinding], None] | None = None,
) -> Result:
    """Decide one pass. Same snapshot, same ``now``: same result.

    ``committed``, if given, is told each GangGroup's binds as soon as its turn commits them,
    in the order of ``Result.bindings`` (which still holds them all), so the shell can start
    binding while the rest of the pass is decided: a backlog's first pass decides hundreds of
    gangs, and the first of them waited for the last. Nothing told is taken back later in the
    pass. Passes with ResourceClaims tell nothing: their claim writes are known at the end."""
    actions = actions_named(config.actions)
    session = Session(snapshot, now=now, config=config, committed=committed)
    try:
        run_actions(session, actions)
        return session.result()
    finally:
        session.close()


def after_failed_bind(
    state: GangState, *, message: str, now: float, config: Config = DEFAULT_CONFIG
) -> GangState:
    """The gang's state once the first bind of its not-yet-satisfied GangGroup was rejected.

    Nothing of the group is bound, so it is a gang again: tried whole, after a backoff.
    """
    attempts = state.attempts + 1
    return replace(
        state,
        satisfied=False,
        attempts=attempts,
        retry_at=now + config.backoff(attempts),
        last_message=message,
        condition=("False", REASON_UNSCHEDULABLE, message),
    )
