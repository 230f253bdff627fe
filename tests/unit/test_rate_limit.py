"""The client-side rate limit (``--kube-api-qps``/``--kube-api-burst``) behaves as
client-go's token bucket, so that ``make bench`` holds us to the same limit as the peers."""

from __future__ import annotations

import pytest

from scheduler.shell.api import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_requests_are_spaced_by_one_over_qps() -> None:
    clock = Clock()
    limiter = RateLimiter(qps=10, burst=3, clock=clock)
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.reserve() == pytest.approx(0.1)
    assert limiter.reserve() == pytest.approx(0.2)  # reserved behind the one before


def test_the_bucket_refills_at_qps_up_to_burst() -> None:
    clock = Clock()
    limiter = RateLimiter(qps=10, burst=2, clock=clock)
    limiter.reserve()
    limiter.reserve()
    clock.now += 60  # a long quiet spell refills no more than burst
    assert [limiter.reserve() for _ in range(2)] == [0.0, 0.0]
    assert limiter.reserve() == pytest.approx(0.1)


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="qps must be positive"):
        RateLimiter(qps=0, burst=1)
