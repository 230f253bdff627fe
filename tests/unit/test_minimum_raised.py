"""A running gang below its minimum (the minimum raised at run time, as a v1beta1 PodGroup's
minCount may be; or members lost or bound by another binder) grows to it whole or not at
all: kube-scheduler 1.37's Permit lets none of its pods go until minCount can be scheduled,
and one member bound alone would leave it running short for good."""

from __future__ import annotations

from scheduler.core.scheduling import schedule
from scheduler.model import names
from tests.unit.builders import T0, node, pod, snapshot
from tests.unit.test_allocation import bind_map

OURS = {names.BOUND_BY: "gang-scheduler"}


def _running(name: str, *, bound: int, pending: int, minimum: int) -> list:
    """A gang of ``bound`` members running on n0 and ``pending`` waiting, its minimum now
    ``minimum``."""
    return [
        pod(
            f"{name}-{i}",
            gang=name,
            min_available=minimum,
            cpu="2",
            node_name="n0" if i < bound else "",
            phase="Running" if i < bound else "Pending",
            annotations=OURS if i < bound else None,
        )
        for i in range(bound + pending)
    ]


def test_a_minimum_raised_past_the_room_binds_no_member_alone() -> None:
    """Raised from 2 to 4 with room for one more: before, that one was bound, leaving 3
    running under a minimum of 4."""
    pods = _running("g", bound=2, pending=2, minimum=4)
    result = schedule(snapshot([node("n0", cpu="4"), node("n1", cpu="2")], pods), now=T0)
    assert bind_map(result) == {}
    said = " ".join(e.message for e in result.events)
    assert "runs 2 of its minimum 4 members: the 2 more it needs are bound together" in said


def test_a_minimum_raised_within_the_room_binds_the_missing_members_together() -> None:
    pods = _running("g", bound=2, pending=2, minimum=4)
    result = schedule(snapshot([node("n0", cpu="4"), node("n1", cpu="4")], pods), now=T0)
    assert bind_map(result) == {"g-2": "n1", "g-3": "n1"}


def test_members_above_a_reached_minimum_still_go_one_by_one() -> None:
    pods = _running("g", bound=2, pending=2, minimum=2)
    result = schedule(snapshot([node("n0", cpu="4"), node("n1", cpu="2")], pods), now=T0)
    assert bind_map(result) == {"g-2": "n1"}


def test_a_gang_short_of_pods_to_reach_its_minimum_binds_none_of_them() -> None:
    """Two members lost, one made again so far: one bound now would still run short."""
    pods = _running("g", bound=2, pending=1, minimum=4)
    result = schedule(snapshot([node("n0", cpu="4"), node("n1", cpu="8")], pods), now=T0)
    assert bind_map(result) == {}
