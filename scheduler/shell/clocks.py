"""The scheduler's clock: wall time that never goes backwards.

Timeouts and backoff must not jump when NTP steps the system clock, yet the first attempt of
a gang is persisted (PodGroup status, pod annotation) as wall time and read back after a
restart. So the clock is the wall time read once at start, advanced by the monotonic clock:
comparable with persisted timestamps, immune to steps while the process lives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SteadyClock:
    """Call it for the time in seconds since the epoch, advanced monotonically."""

    _wall: float = field(default_factory=time.time)
    _steady: float = field(default_factory=time.monotonic)

    def __call__(self) -> float:
        return self._wall + (time.monotonic() - self._steady)
