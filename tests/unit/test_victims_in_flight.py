"""A gang being bound is no victim: preemption takes no pod whose bind is in flight, nor any
member of its gang (chaos seed 7082: a preemptor evicted two members of a gang of four whose
other two were still being bound, leaving it below its minimum; and members of a NonStrict
gang whose binds were in flight, leaving it bound in part)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from tests.unit.builders import T0, gang_pods, node, snapshot
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
