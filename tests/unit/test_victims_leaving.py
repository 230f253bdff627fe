"""A pass may come before the watch shows the victims of the pass before it marked or
deleted (``Snapshot.leaving``). Those pods are going: no victim again, and no gang runs on
them. Chaos seed 9532: consolidation moved a gang's one spare member (4 pods, minimum 3);
the next pass saw all four still running, moved the same pod again, and reclaim took the
other three as the whole gang; the pass after that bound the moved pod's replacement, and
then the others' one by one, as members of a gang it thought running: 2 of 3 ran for 3 s."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model.pods import Disruption
from tests.unit.builders import SCHEDULER, T0, gang_pods, node, pod, snapshot
from tests.unit.test_owner_gangs import bound
from tests.unit.test_preemption import evicted, running


def _gang_with_a_replacement() -> list:
    """g4: three members running on n0, and a fourth made again (pending)."""
    members = running("g4", 4, on="n0", priority=1, cpu="1", min_available=3)
    made_again = pod("g4-0", gang="g4", min_available=3, priority=1, created=T0 - 1)
    return [replace(made_again, ref=replace(made_again.ref, uid="g4-0-again")), *members[1:]]


def test_a_replacement_binds_beside_members_that_run() -> None:
    assert bound(snapshot([node("n0", cpu="8")], _gang_with_a_replacement())) == {"g4-0"}


def test_a_replacement_binds_nothing_while_the_members_it_would_join_are_leaving() -> None:
    pods = _gang_with_a_replacement()
    going = frozenset(p.ref.uid for p in pods[1:])
    snap = replace(snapshot([node("n0", cpu="8")], pods), leaving=going)
    assert bound(snap) == set(), "3 of its members are going: it waits to start whole"


def test_a_member_chosen_by_the_pass_before_is_no_victim_again() -> None:
    # g has one member above its minimum, chosen by the pass before; the preemptor needs
    # the room of one more. Seen as running, a second spare would be taken (leaving the
    # gang 2 of 3); going, the gang has none to spare and goes whole, or not at all.
    nodes = [node("n0", cpu="4")]
    g = running("g", 4, on="n0", priority=1, cpu="1", min_available=3)
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="1", created=T0)
    assert len(evicted(schedule(snapshot(nodes, [*g, *high]), now=T0))) == 1, "a spare alone"
    snap = replace(snapshot(nodes, [*g, *high]), leaving=frozenset({g[3].ref.uid}))
    assert evicted(schedule(snap, now=T0)) == ["g-0", "g-1", "g-2"]


def test_a_pod_marked_by_a_pass_before_is_no_victim_again() -> None:
    nodes = [node("n0", cpu="4")]
    g = running("g", 4, on="n0", priority=1, cpu="1", min_available=3)
    marked = replace(g[3], disrupted=Disruption("PreemptionByScheduler", SCHEDULER, T0 - 1))
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="1", created=T0)
    result = schedule(snapshot(nodes, [*g[:3], marked, *high]), now=T0)
    assert evicted(result) == ["g-0", "g-1", "g-2"]
