"""What hold-head and reserve share: one gang's room kept for it (its ``head_target``),
given back as every pass opens and held again only at that gang's own turn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.core.session import Session
from scheduler.model.pods import GangKey, Pod, PodRef


def take_back_targets(session: Session) -> dict[GangKey, Mapping[PodRef, str]]:
    """Take the last pass's target off every gang, and return them: a gang that bound,
    went, or is no longer the one held for gives its room back (which wakes the gangs
    parked for it), and the one still held for keeps its nodes."""
    kept: dict[GangKey, Mapping[PodRef, str]] = {}
    for key, outcome in session.outcomes.items():
        if outcome.state.head_target:
            kept[key] = outcome.state.head_target
            outcome.state = replace(outcome.state, head_target={})
    return kept


def still_fits(session: Session, pod: Pod, node: str | None) -> bool:
    """Whether a node kept for ``pod`` is still one it may go on at all (it exists, and its
    taints, labels and the volumes of the pod's bound claims allow it): room held where the
    pod can never go would only keep others off it."""
    return (
        node is not None
        and node in session.snapshot.nodes
        and (node in session.finder.static_fit(pod))
    )
