"""The forecast bench measures a play that estimates every waiting gang: a small tier."""

from __future__ import annotations

from bench.forecast import tier


def test_a_small_tier_estimates_every_waiting_gang_after_the_runs_ahead_of_it() -> None:
    found = tier(60, waiting=3, resolution=60.0, max_passes=200)
    assert found["states"] == {"estimated": 3}
    assert found["passes"] > 2
    assert found["median_wait_minutes"] > 0
