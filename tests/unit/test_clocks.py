"""The scheduler's clock is wall time that only moves forward."""

from __future__ import annotations

import time

from scheduler.shell.clocks import SteadyClock


def test_steady_clock_starts_at_the_wall_time_and_never_goes_back() -> None:
    clock = SteadyClock()
    first = clock()
    assert abs(first - time.time()) < 1.0
    readings = [clock() for _ in range(1000)]
    assert all(b >= a for a, b in zip([first, *readings], readings, strict=False))


def test_steady_clock_ignores_a_wall_clock_step() -> None:
    # A clock whose wall reading was taken "an hour ago" keeps counting from there: a step of
    # the system clock after start does not move it.
    clock = SteadyClock(_wall=time.time() - 3600)
    assert 3590 < time.time() - clock() < 3610
