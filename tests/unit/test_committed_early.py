"""``schedule``'s ``committed``: each GangGroup's binds told as its turn commits them, so the
shell binds the first gangs of a backlog while the pass decides the rest."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model.decisions import GroupBinding
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_dra import dra_snapshot, gang_of_claimers, gpu_slice


def test_every_group_bound_is_told_once_in_the_order_of_the_result() -> None:
    nodes = [node(f"n{i}", gpu=8) for i in range(2)]
    pods = [
        p
        for name, created in (("a", T0 - 30), ("b", T0 - 20), ("c", T0 - 10))
        for p in gang_pods(name, 4, gang=name, min_available=4, gpu=2, created=created)
    ]
    told: list[GroupBinding] = []
    result = schedule(snapshot(nodes, pods), now=T0, committed=told.append)
    assert [g.keys for g in told] == [g.keys for g in result.bindings]
    assert all(a is b for a, b in zip(told, result.bindings, strict=True))
    assert len(told) == 2  # the third gang does not fit: nothing of it is told


def test_the_result_is_the_same_whether_or_not_anyone_is_told() -> None:
    nodes = [node(f"n{i}", gpu=8) for i in range(3)]
    pods = [
        *gang_pods("a", 4, gang="a", min_available=4, gpu=2, created=T0 - 20),
        *gang_pods("b", 12, gang="b", min_available=12, gpu=2, created=T0 - 10),
        pod("single", gpu=1),
    ]
    snap = snapshot(nodes, pods)
    assert schedule(snap, now=T0, committed=lambda _: None) == schedule(snap, now=T0)


def test_a_gang_that_breaks_its_turn_is_not_told_and_the_others_are() -> None:
    broken = replace(pod("broken"), requests=None)  # no codec makes this: a stand-in for a bug
    told: list[GroupBinding] = []
    result = schedule(snapshot([node("n0")], [broken, pod("fine")]), now=T0, committed=told.append)
    assert bind_map(result) == {"fine": "n0"}
    assert [b.pod.name for g in told for b in g.bindings] == ["fine"]


def test_a_pass_with_claims_tells_nothing_since_its_claim_writes_come_at_the_end() -> None:
    pods, claims = gang_of_claimers("g", 2)
    nodes = [node(f"n{i}") for i in range(2)]
    snap = dra_snapshot(nodes, pods, slices=[gpu_slice(f"n{i}") for i in range(2)], claims=claims)
    told: list[GroupBinding] = []
    result = schedule(snap, now=T0, committed=told.append)
    assert sorted(bind_map(result)) == ["g-0", "g-1"]
    assert result.bindings[0].claims  # the writes the binder makes first
    assert told == []
