"""How long a gang is expected to run once bound, from what it says of itself: the duration
it declares (``gang-scheduler.io/expected-duration`` on its pods, PodGroup or owner), else
its members' ``activeDeadlineSeconds``, the latest it can end (an upper bound, never a
guess). Otherwise unknown, and said so: no default is made up."""

from __future__ import annotations

from scheduler.model import names
from scheduler.model.forecasts import Duration, DurationSource
from scheduler.model.gangs import Gang


def expected_duration(gang: Gang) -> Duration:
    deadlines = [p.deadline_seconds for p in gang.members if p.deadline_seconds is not None]
    # A member without a deadline may run for ever: only a deadline on every one bounds it.
    bound = float(max(deadlines)) if deadlines and len(deadlines) == len(gang.members) else None
    if gang.expected_seconds is not None:
        declared = gang.expected_seconds if bound is None else min(gang.expected_seconds, bound)
        return Duration(
            p50=declared,
            p90=declared,
            bound=bound,
            source=DurationSource.DECLARED,
            basis=f"declared by {names.EXPECTED_DURATION}",
        )
    if bound is not None:
        return Duration(
            p50=bound,
            p90=bound,
            bound=bound,
            source=DurationSource.DEADLINE,
            basis="at the latest: its members' activeDeadlineSeconds",
        )
    return Duration(
        basis=f"unknown: no {names.EXPECTED_DURATION} on its pods, PodGroup or owner, and no "
        "activeDeadlineSeconds on every member"
    )
