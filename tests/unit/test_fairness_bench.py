"""The fairness benchmark (#22, ``bench/fairness.py``) on a short trace: the pure core over a
simulated GPU cluster, queues on and off. What must hold at any size: with queues the flood
takes less than its fill without them and every other queue more, reclaim happens, and no
GPU is idle while a gang that fits on it is ready to be tried."""

from __future__ import annotations

from bench.fairness import bench, markdown, targets


def test_queues_give_the_other_teams_their_share_back_from_a_flood() -> None:
    results = bench(nodes=16, seconds=1500, step=5, seed=3, flood=6)
    on, off = results["queues"], results["no_queues"]
    assert on["queues"]["b-flood"]["share_mean"] < off["queues"]["b-flood"]["share_mean"]
    for leaf in ("a-train", "a-serve", "b-batch"):
        assert on["queues"][leaf]["deviation_mean"] < off["queues"][leaf]["deviation_mean"], leaf
    assert on["reclaimed_pods"] > 0
    assert off["reclaimed_pods"] == 0
    assert on["passes_with_idle_gpus_while_a_gang_fits"] == 0
    assert on["starved_streak_passes"] < off["starved_streak_passes"]
    assert on["unserved_streak_passes"] < off["unserved_streak_passes"]
    # Time-based fair share (--fair-share-half-life): the flood, the heaviest user lately,
    # gets less again, and nothing is left idle for it.
    timed = results["time_based"]
    assert timed["queues"]["b-flood"]["share_mean"] < on["queues"]["b-flood"]["share_mean"]
    assert timed["passes_with_idle_gpus_while_a_gang_fits"] == 0
    table = markdown(results)
    assert "| b-flood | on |" in table
    assert "| b-flood | time-based |" in table
    assert isinstance(targets(results), list)
