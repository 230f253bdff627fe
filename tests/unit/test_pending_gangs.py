"""What the pass counts as a pending gang (``gang_scheduler_pending_gangs``): a gang with
members still to place, neither satisfied nor timed out. A Job's finished pods may stay for
days: a gang whose pods all finished waits for nothing and is not counted."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import GangState, Parked
from tests.unit.builders import T0, gang_pods, node, podgroup, snapshot
from tests.unit.test_allocation import bind_map, run_passes


def test_a_gang_whose_pods_all_finished_is_not_pending_however_many_passes_see_it() -> None:
    done = gang_pods("w", 2, pod_group="train", node_name="n0", phase="Succeeded")
    snap = snapshot([node("n0")], done, podgroups=[podgroup("train", min_member=2)])
    results = run_passes(snap, times=[T0, T0 + 1, T0 + 2])
    assert [r.pending_gangs for r in results] == [0, 0, 0]


def test_a_gang_that_does_not_fit_is_pending_and_one_that_binds_is_not() -> None:
    fits = gang_pods("small", 2, gang="small", min_available=2, cpu="1")
    too_big = gang_pods("big", 2, gang="big", min_available=2, cpu="6")
    result = schedule(snapshot([node("n0", cpu="8")], [*fits, *too_big]), now=T0)
    assert sorted(bind_map(result)) == ["small-0", "small-1"]
    assert result.pending_gangs == 1


def test_a_parked_gang_the_snapshot_left_out_is_still_pending() -> None:
    parked = GangState(parked=Parked(generation=1, since=T0 - 5, due_at=T0 + 60))
    finished = GangState()  # a gang the cache still remembers, with nothing parked
    snap = replace(
        snapshot([node("n0")], []),
        memory={GangKey("default", "waiting"): parked, GangKey("default", "done"): finished},
    )
    assert schedule(snap, now=T0).pending_gangs == 1


def test_a_timed_out_gang_is_not_pending() -> None:
    too_big = gang_pods("big", 2, gang="big", min_available=2, cpu="6")
    key = GangKey("default", "big")
    timed_out = GangState(timed_out=True, timed_out_at=T0 - 1, first_attempt=T0 - 700)
    snap = replace(snapshot([node("n0", cpu="8")], too_big), memory={key: timed_out})
    result = schedule(snap, now=T0)
    assert result.memory[key].timed_out
    assert result.pending_gangs == 0
