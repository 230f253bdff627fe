"""What the scheduler expects of the time ahead: how long a gang runs once bound."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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
