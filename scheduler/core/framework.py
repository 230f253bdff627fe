"""The action framework: what an action is, and how a pass runs the configured ones.

An action is a name and a ``run`` on the session. It walks the session's queue
(``session.order.units()``) and does its work on each GangGroup inside ``session.turn``: the
turn's Statement is committed when the work returns and discarded when it raises, so an
action that fails on one GangGroup takes back that turn alone (recorded as an
``ActionError``) and the pass goes on. Actions tell each other what came of a turn as typed
``Attempt`` records (``session.attempted``), never as strings; an action may also watch
them as they happen, in the turn (``open`` and ``session.watch``): the starvation hold and
stale-gang eviction act in allocate's turns so. Which actions run, and in
which order, is configuration (``Config.actions``, ``--actions``): the registry in
``scheduler.core.actions`` maps names to actions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from scheduler.core.session import Session


class Action(Protocol):
    """One step of a pass (Volcano's ``framework.Action``)."""

    @property
    def name(self) -> str:
        """How configuration names it."""
        ...

    def run(self, session: Session) -> None:
        """Do its work on the session, GangGroup by GangGroup, each in a turn."""
        ...


def run_actions(session: Session, actions: Iterable[Action]) -> None:
    """Open every action on the session (one that has an ``open(session)`` may subscribe to
    what comes of the others' turns: ``session.watch``), then run them in order; each turn
    knows which action it is in."""
    actions = tuple(actions)
    for action in actions:
        opening = getattr(action, "open", None)
        if opening is not None:
            opening(session)
    for action in actions:
        session.action = action.name
        action.run(session)
    session.action = ""
