"""A gang being bound is no victim: preemption takes no pod whose bind is in flight, nor any
member of its gang (chaos seed 7082: a preemptor evicted two members of a gang of four whose
other two were still being bound, leaving it below its minimum; and members of a NonStrict
gang whose binds were in flight, leaving it bound in part), nor is a gang the same pass
binds members of (chaos seed 11052)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_preemption import evicted, running


def test_no_member_of_a_gang_whose_binds_are_in_flight_is_evicted() -> None:
    nodes = [node("n0", cpu="32"), node("n1", cpu="32")]
    binding = running("binding", 4, on="n0", priority=1, cpu="8", min_available=4, age=50)
    settled = running("settled", 4, on="n1", priority=1, cpu="8", min_available=4)
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="16", created=T0)
    flying = frozenset(p.ref.uid for p in binding[2:])
    snap = replace(snapshot(nodes, [*binding, *settled, *high]), in_flight=flying)
    result = schedule(snap, now=T0)
    assert evicted(result) == [f"settled-{i}" for i in range(4)], "the gang being bound is spared"
    # Once its binds are confirmed, it is a victim like any other: the younger goes.
    result = schedule(snapshot(nodes, [*binding, *settled, *high]), now=T0)
    assert evicted(result) == [f"binding-{i}" for i in range(4)]


def test_a_preemptor_with_only_a_gang_in_flight_to_take_evicts_nothing() -> None:
    nodes = [node("n0", cpu="32")]
    binding = running("binding", 4, on="n0", priority=1, cpu="8", min_available=4)
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="16", created=T0)
    flying = frozenset({binding[3].ref.uid})
    result = schedule(replace(snapshot(nodes, [*binding, *high]), in_flight=flying), now=T0)
    assert evicted(result) == []


def test_a_gang_given_the_member_it_lacks_in_this_pass_is_no_victim_in_it() -> None:
    """Chaos seed 11052 (I10): a running gang below its minimum (its leader lost the Lease
    between two binds) got the member it lacked from allocate; preempt, later in the same
    pass, took the member bound before as a whole-gang victim, and the gang was left with
    the new member alone."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="2")]
    bound = replace(
        pod("g-0", gang="g", min_available=2, priority=1, cpu="3", created=T0 - 500),
        node_name="n0", phase="Running",
    )  # fmt: skip
    lacking = pod("g-1", gang="g", min_available=2, priority=1, cpu="1", created=T0 - 500)
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="3", created=T0)
    result = schedule(snapshot(nodes, [bound, lacking, *high]), now=T0)
    assert list(bind_map(result)) == ["g-1"], "the gang gets the member it lacks"
    assert evicted(result) == [], "not a part of the gang it is binding"
    # Next pass, bound whole, the gang is a victim as any other: whole.
    settled = replace(lacking, node_name=bind_map(result)["g-1"], phase="Running")
    result = schedule(snapshot(nodes, [bound, settled, *high]), now=T0 + 1)
    assert evicted(result) == ["g-0", "g-1"]
