"""The actions a pass may run, by name. A new action is a module of this package with a
class that has a ``name`` and a ``run(session)`` (``scheduler.core.framework.Action``), plus
its line in ``REGISTRY``; ``--actions`` then places it in the order of a pass.

Actions share what they need through ``scheduler.core.solvers`` and the session, never
through each other's modules (an import-linter contract keeps them independent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from scheduler.core.actions.allocate import Allocate
from scheduler.core.actions.consolidate import Consolidate
from scheduler.core.actions.evict_stale import EvictStale
from scheduler.core.actions.finish_evictions import FinishEvictions
from scheduler.core.actions.hold_head import HoldHead
from scheduler.core.actions.preempt import Preempt
from scheduler.core.actions.reclaim import Reclaim
from scheduler.core.actions.reserve import Reserve
from scheduler.core.framework import Action

REGISTRY: Mapping[str, Action] = MappingProxyType(
    {
        action.name: action
        for action in (
            FinishEvictions(),
            Allocate(),
            HoldHead(),
            EvictStale(),
            Preempt(),
            Reclaim(),
            Consolidate(),
            Reserve(),
        )
    }
)


class UnknownActions(ValueError):
    """Configuration named actions that do not exist, or one twice."""


def actions_named(names: Iterable[str]) -> tuple[Action, ...]:
    """The actions ``names`` names, in that order; ``UnknownActions`` says which names are
    wrong and which are known."""
    names = tuple(names)
    unknown = [name for name in names if name not in REGISTRY]
    if unknown:
        raise UnknownActions(
            f"unknown action(s) {', '.join(map(repr, unknown))}; the actions are: "
            f"{', '.join(REGISTRY)}"
        )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UnknownActions(f"action(s) named twice: {', '.join(twice)}; name each once")
    if not names:
        raise UnknownActions(f"no action named; the actions are: {', '.join(REGISTRY)}")
    if "reserve" in names and "hold-head" in names:
        # Both keep one gang's room in its memory (head_target): one keeper at a time.
        raise UnknownActions(
            "reserve and hold-head both hold room for one gang: name one of them (reserve "
            "with --forecast-interval, hold-head without)"
        )
    return tuple(REGISTRY[name] for name in names)
