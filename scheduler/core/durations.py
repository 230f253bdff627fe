"""How long a gang is expected to run once bound: the duration it declares
(``gang-scheduler.io/expected-duration`` on its pods, PodGroup or owner); else how long gangs
like it ran (its duration class, else its name without a generated tail, in its namespace:
the median and the 90th percentile of their last runs, once there are a few); else its
members' ``activeDeadlineSeconds``, the latest it can end (an upper bound, never a guess);
the deadlines cap the others. Otherwise unknown, and said so: no default is made up.

The runs counted are those the pods still show: gangs whose every member Succeeded, from the
first start to the last end. Pods deleted take their runs with them."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from scheduler.model import names
from scheduler.model.forecasts import Duration, DurationSource
from scheduler.model.gangs import Gang
from scheduler.model.pods import SUCCEEDED

# Runs of gangs like it needed before they tell its duration: fewer is a guess.
MIN_RUNS = 3
# The most recent runs of a kind of gang that count: a job changes over time.
LAST_RUNS = 64
# What controllers add to the names of what they make: generateName's five characters (from
# apimachinery's alphabet, which has no vowels: "-large" is a word, "-x7k2p" is not), a
# CronJob's schedule time, an index.
_GENERATED = re.compile(r"(-[bcdfghjklmnpqrstvwxz2456789]{5}|-[0-9]+)+$")


def kind_of(gang: Gang) -> str:
    """The gangs it is one of: its duration class, else its name without a generated tail."""
    said = next(
        (p.labels[names.DURATION_CLASS] for p in gang.members if names.DURATION_CLASS in p.labels),
        None,
    )
    name = said if said is not None else (_GENERATED.sub("", gang.key.name) or gang.key.name)
    return f"{gang.key.namespace}/{name}"


def history(gangs: Iterable[Gang]) -> dict[str, tuple[float, ...]]:
    """How long the gangs that ran to their end took, by kind (``kind_of``), the last
    ``LAST_RUNS`` of each, in the order they ended."""
    runs: dict[str, list[tuple[float, float]]] = {}
    for gang in gangs:
        members = gang.members
        if not members or any(
            p.phase != SUCCEEDED or p.started is None or p.finished is None for p in members
        ):
            continue
        start = min(p.started for p in members if p.started is not None)
        end = max(p.finished for p in members if p.finished is not None)
        runs.setdefault(kind_of(gang), []).append((end, max(end - start, 0.0)))
    return {kind: tuple(d for _, d in sorted(r)[-LAST_RUNS:]) for kind, r in runs.items()}


def _rank(ordered: list[float], share: float) -> float:
    """The nearest-rank quantile: the smallest value with ``share`` of them at or below."""
    return ordered[max(math.ceil(len(ordered) * share) - 1, 0)]


def expected_duration(
    gang: Gang, *, runs: Mapping[str, tuple[float, ...]] | None = None
) -> Duration:
    """``runs``: ``history`` of the gangs the caller sees."""
    deadlines = [p.deadline_seconds for p in gang.members if p.deadline_seconds is not None]
    # A member without a deadline may run for ever: only a deadline on every one bounds it.
    bound = float(max(deadlines)) if deadlines and len(deadlines) == len(gang.members) else None

    def capped(value: float) -> float:
        return value if bound is None else min(value, bound)

    if gang.expected_seconds is not None:
        declared = capped(gang.expected_seconds)
        return Duration(
            p50=declared,
            p90=declared,
            bound=bound,
            source=DurationSource.DECLARED,
            basis=f"declared by {names.EXPECTED_DURATION}",
        )
    kind = kind_of(gang)
    past = sorted((runs or {}).get(kind, ()))
    if len(past) >= MIN_RUNS:
        return Duration(
            p50=capped(_rank(past, 0.5)),
            p90=capped(_rank(past, 0.9)),
            bound=bound,
            source=DurationSource.HISTORY,
            basis=f"the last {len(past)} runs of {kind}",
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
        basis=f"unknown: no {names.EXPECTED_DURATION} on its pods, PodGroup or owner, fewer "
        f"than {MIN_RUNS} finished runs of {kind}, and no activeDeadlineSeconds on every member"
    )
