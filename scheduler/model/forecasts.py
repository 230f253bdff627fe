"""What the scheduler expects of the time ahead: how long a gang runs once bound, and when
a waiting one is expected to start."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from scheduler.model.pods import GangKey, PodRef


class DurationSource(Enum):
    """Where a gang's expected run time comes from, the most trusted first."""

    DECLARED = "declared"  # gang-scheduler.io/expected-duration
    HISTORY = "history"  # how long gangs like it ran
    DEADLINE = "deadline"  # activeDeadlineSeconds: an upper bound, never a guess
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Duration:
    """A gang's expected run time once bound, in seconds: ``p50`` and ``p90`` (None:
    unknown); ``bound``: it ends by then whatever they say (its members' deadline);
    ``basis``: where it comes from, in words."""

    p50: float | None = None
    p90: float | None = None
    bound: float | None = None
    source: DurationSource = DurationSource.UNKNOWN
    basis: str = ""

    @property
    def known(self) -> bool:
        return self.p50 is not None


class EtaState(Enum):
    """What the forward play found for a waiting gang."""

    FITS_NOW = "fits-now"  # the pass at the snapshot's own time places it
    ESTIMATED = "estimated"  # placed later in the play, once gangs ahead of it ended
    NOT_READY = "not-ready"  # invalid, or waits for something that is not there yet
    TIMES_OUT = "times-out"  # its timeout comes before the room does
    BEHIND_UNKNOWN = "behind-unknown"  # what holds its room has no known end
    NEVER_FITS = "never-fits"  # not even once every run with a known end has ended
    BEYOND_WINDOW = "beyond-window"  # not placed within the play's window
    OVER_BUDGET = "over-budget"  # the play stopped at its budget of passes first


@dataclass(frozen=True, slots=True)
class Eta:
    """When a waiting gang is expected to start: ``p50`` if every run takes its median,
    ``p90`` if every run takes its 90th percentile (not a quantile of the start: "if runs go
    badly"), seconds since the epoch; ``behind``: the gangs whose ends in the play freed the
    room it got, earliest first; ``reason``: why there is no estimate, in words."""

    gang: GangKey
    state: EtaState
    p50: float | None = None
    p90: float | None = None
    behind: tuple[GangKey, ...] = ()
    reason: str = ""
    # Where the median play placed its members when it started (``reserve`` holds it).
    placement: Mapping[PodRef, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Forecast:
    """One forward play from a snapshot: each waiting gang's ``Eta``; ``passes``: virtual
    passes played (the budget counts these); ``horizon``: the virtual time it reached."""

    at: float
    etas: Mapping[GangKey, Eta]
    passes: int
    horizon: float


def shown_minute(epoch: float | None) -> float | None:
    """An estimate as statuses say it: the minute, rounded up (so that a play that moves it
    by seconds writes nothing)."""
    return None if epoch is None else float(math.ceil(epoch / 60) * 60)
