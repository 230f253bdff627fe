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
    # The teams are nearer their ideal shares on the whole. Not each of them: at 16 nodes a
    # gang is up to half the cluster, and a queue holding one big gang sits above its
    # share whatever reclaim does (it may not take a queue below its own share).
    others = ("a-train", "a-serve", "b-batch")
    assert sum(on["queues"][leaf]["deviation_mean"] for leaf in others) < sum(
        off["queues"][leaf]["deviation_mean"] for leaf in others
    )
    assert on["queues"]["b-flood"]["deviation_mean"] < off["queues"]["b-flood"]["deviation_mean"]
    assert on["reclaimed_pods"] > 0
    assert off["reclaimed_pods"] == 0
    assert on["passes_with_idle_gpus_while_a_gang_fits"] == 0
    assert on["starved_streak_passes"] < off["starved_streak_passes"]
    # Reclaim's bound (the target: no longer than 2 passes).
    assert on["unserved_streak_passes"] <= 2 < off["unserved_streak_passes"]
    # Time-based fair share (--fair-share-half-life) keeps the promises of queues: the flood
    # gets less than without queues, no queue below its share goes unserved longer, and
    # nothing is left idle for it. (Whether it gets less than with plain queues depends on
    # the seed over 25 minutes: 1 of 5 seeds at 16 nodes, 3 of 5 at 32 nodes, session 34;
    # the hour at 128 nodes in ``make bench`` is where that is read.)
    timed = results["time_based"]
    assert timed["queues"]["b-flood"]["share_mean"] < off["queues"]["b-flood"]["share_mean"]
    assert timed["unserved_streak_passes"] < off["unserved_streak_passes"]
    assert timed["passes_with_idle_gpus_while_a_gang_fits"] == 0
    table = markdown(results)
    assert "| b-flood | on |" in table
    assert "| b-flood | time-based |" in table
    assert isinstance(targets(results), list)
