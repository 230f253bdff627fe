"""Moves, for consolidation: the pods that may be moved to make room, and where each of
them would fit instead once a GangGroup is placed on the room they leave."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.core.gangs import priority_of
from scheduler.core.placing import Ledger, PlacementConflict
from scheduler.core.session import Session
from scheduler.core.solvers.victims import Choice, Victims, candidates, evicted, pods_of
from scheduler.model.pods import Pod
from scheduler.model.resources import CPU, MEMORY


def movable_units(session: Session, *, taken: Mapping[str, Pod]) -> list[Victims]:
    """The victim units consolidation may move, best first: pods of ours marked movable
    (their controller makes them again), below the priority moves are limited to, with no
    device claims (a claim stays with the pod it was made for), taken one by one or as a
    gang's members above its minimum, never a gang whole (it would stop running) and never
    against a PodDisruptionBudget."""
    names = session.config.scheduler_names

    def admit(pod: Pod) -> bool:
        return pod.movable and pod.scheduler_name in names and not pod.resource_claims

    below = session.config.movable_below_priority
    return [
        replace(unit, moving=True)
        for unit in candidates(session, below=below, taken=taken, admit=admit)
        if not unit.whole_gang and not unit.breaks_budget
    ]


def rehome(session: Session, base: Ledger, choice: Choice) -> dict[str, str] | None:
    """By pod uid, a node other than its own where each of ``choice``'s victims fits once
    they have left ``base`` and the group is placed where ``choice`` places it (every
    filter, what the other pods allow, each moved pod counting for the next); None if one
    fits nowhere else. The largest first, then by name."""
    trial = evicted(base, choice.victims)
    try:
        for pod, node in choice.placements:
            trial.place(pod, node)
    except PlacementConflict:
        return None
    finder = session.finder
    own = {pod.ref.uid: node for unit in choice.victims for pod, node in unit.pods}
    homes: dict[str, str] = {}
    classes = session.snapshot.priority_classes
    moving = sorted(
        pods_of(choice.victims),
        key=lambda p: (
            -priority_of(p, classes),
            -p.requests.get(CPU, 0),
            -p.requests.get(MEMORY, 0),
            p.ref,
        ),
    )
    for pod in moving:
        check = finder.check(pod, trial)
        home = next(
            (
                node
                for node in sorted(finder.static_fit(pod))
                if node != own[pod.ref.uid]
                and trial.admits(pod, node)
                and (check is None or not check.reason(node))
            ),
            None,
        )
        if home is None:
            return None
        trial.place(pod, home)
        homes[pod.ref.uid] = home
    return homes
