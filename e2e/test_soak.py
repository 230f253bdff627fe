"""The soak's short form (``make soak`` runs two hours at 1,000 nodes): a minute of churn on
a control plane of its own (gangs arriving, finishing, preempted, nodes going and coming),
every invariant kept, the scheduler alive and sampled throughout, preemptors evicting and
the backlog held level."""

from __future__ import annotations

import asyncio

import pytest

from bench import soak

pytestmark = pytest.mark.local_control_plane


def test_a_short_soak_keeps_every_invariant_and_the_scheduler_binds_throughout() -> None:
    churn = soak.Churn(nodes=16, minutes=1.0, seed=3, sample=8.0, lifetime=15.0,
                       node_every=15.0, give_up=45.0, preempt_every=10.0)  # fmt: skip
    results = asyncio.run(soak.main_async(churn))
    assert results["broken"] == [], results["broken"]
    samples = results["samples"]
    assert len(samples) >= 6, "sampled every 8 s for 60 s"
    assert samples[-1]["pods_bound"] > samples[0]["pods_bound"] > 0, "binds throughout"
    assert results["tally"]["nodes_replaced"] >= 2
    assert results["tally"]["deleted_finished"] > 0, "gangs ran to the end and were cleared"
    assert all(s["rss_mib"] > 0 for s in samples)
    assert any(s["passes"] for s in samples)
    assert results["tally"]["preemptors"] >= 4
    assert samples[-1]["evicted"] > 0, "a preemptor in a full cluster evicts"
    # The scheduler's own count of waiting gangs stays within what the bench lets wait
    # (plus the preemptors, never held back, and deletions on their way).
    assert max(s["pending_gangs"] for s in samples) <= churn.most_waiting + 2, samples
    table = soak.markdown(results, "soak-short")
    assert "none broken" in table
