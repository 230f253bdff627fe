"""Never more victims than needed: the peers' over-eviction reports, exactly as reported,
take one victim here; and over random clusters no chosen victim (a whole gang where the gang
must go whole, a member above its gang's minimum) could have been left running."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler.core.scheduling import schedule
from scheduler.model.pods import Pod
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_preemption import evicted, running
from tests.unit.test_queue_sharing import in_queue, with_queues
from tests.unit.test_queues import queue


def test_volcano_5984_a_one_pod_preemptor_evicts_one_of_eleven_not_ten() -> None:
    """volcano-sh/volcano#5984: one idle node of 11 cpu; a victim gang (priority 10) of
    eleven 1-cpu pods, minimum 1, fills it; a preemptor (priority 100) of one 1-cpu pod,
    minimum 1. Volcano 1.15's gangpreempt evicted 10."""
    victim = running("victim", 11, on="n0", priority=10, cpu="1", min_available=1)
    preemptor = gang_pods("preemptor", 1, gang="preemptor", min_available=1, priority=100,
                          cpu="1", created=T0)  # fmt: skip
    result = schedule(snapshot([node("n0", cpu="11")], [*victim, *preemptor]), now=T0)
    assert len(evicted(result)) == 1
    assert {n.pod.name for n in result.nominations} == {"preemptor-0"}


def test_volcano_5994_a_one_pod_reclaimer_reclaims_one_of_eleven_not_ten() -> None:
    """volcano-sh/volcano#5994: queues qa (weight 1) and qb (weight 10), both reclaimable; a
    gang of eleven 1-cpu pods, minimum 1, in qa fills the 11-cpu node while qb is idle; a
    gang of one 1-cpu pod in qb. Volcano 1.15's gangreclaim reclaimed 10."""
    victim = [
        replace(p, labels={**p.labels, **in_queue("qa")})
        for p in running("victim", 11, on="n0", priority=0, cpu="1", min_available=1)
    ]
    reclaimer = gang_pods("reclaimer", 1, gang="reclaimer", min_available=1, cpu="1",
                          labels=in_queue("qb"), created=T0)  # fmt: skip
    snap = with_queues(
        snapshot([node("n0", cpu="11")], [*victim, *reclaimer]),
        queue("qa", weight=1, reclaimable=True),
        queue("qb", weight=10, reclaimable=True),
    )
    result = schedule(snap, now=T0)
    assert len(evicted(result)) == 1
    assert {n.pod.name for n in result.nominations} == {"reclaimer-0"}


@st.composite
def crowded(draw: st.DrawFn) -> tuple[list, list[Pod], list[Pod]]:
    """Nodes filled (never beyond their cpu) by running gangs of random priority, size,
    member size and minimum, and a waiting gang of higher priority than some of them."""
    nodes = [
        node(f"n{i}", cpu=str(draw(st.sampled_from([8, 12, 16]))))
        for i in range(draw(st.integers(1, 3)))
    ]
    bound: list[Pod] = []
    for n in nodes:
        room = n.allocatable["cpu"] // 1000
        for _ in range(draw(st.integers(1, 4))):
            cpu = draw(st.sampled_from([1, 2, 4]))
            size = min(draw(st.integers(1, 6)), room // cpu)
            if size == 0:
                break
            room -= size * cpu
            bound += running(
                f"r{len(bound)}", size, on=n.name, priority=draw(st.integers(0, 3)),
                cpu=str(cpu), min_available=draw(st.integers(1, size)), age=len(bound),
            )  # fmt: skip
    size = draw(st.integers(1, 3))
    waiting = gang_pods("w", size, gang="w", min_available=size, priority=draw(st.integers(1, 4)),
                        cpu=str(draw(st.sampled_from([1, 2, 4, 8]))), created=T0)  # fmt: skip
    return nodes, bound, waiting


def _units(gone: set[str], bound: list[Pod]) -> list[set[str]]:
    """The chosen victims as the smallest sets that may be left running on their own: a gang
    that lost members down to below its minimum went whole and stays a unit; a member of a
    gang left at or above its minimum is a unit of its own."""
    units: list[set[str]] = []
    for prefix in sorted({n.rsplit("-", 1)[0] for n in gone}):
        members = [p for p in bound if p.ref.name.rsplit("-", 1)[0] == prefix]
        lost = {p.ref.name for p in members} & gone
        if len(members) - len(lost) >= members[0].gang.min_available:  # type: ignore[union-attr]
            units += [{name} for name in sorted(lost)]  # members above the minimum
        else:
            units.append(lost)  # the gang went whole
    return units


@settings(max_examples=300, deadline=None)
@given(crowded())
def test_no_chosen_victim_could_have_been_left_running(
    case: tuple[list, list[Pod], list[Pod]],
) -> None:
    nodes, bound, waiting = case
    result = schedule(snapshot(nodes, [*bound, *waiting]), now=T0)
    gone = {e.pod.name for e in result.evictions}
    event(f"victim units: {min(len(_units(gone, bound)), 3)}")
    for unit in _units(gone, bound):
        # Every victim but this unit gone: would the waiting gang have bound anyway?
        spared = [p for p in bound if p.ref.name not in gone or p.ref.name in unit]
        after = schedule(snapshot(nodes, [*spared, *waiting]), now=T0)
        assert not set(bind_map(after)) >= {p.ref.name for p in waiting}, (
            f"{sorted(unit)} were evicted for nothing: the gang fits without it"
        )
