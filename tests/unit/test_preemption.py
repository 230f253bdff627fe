"""Gang preemption and starvation-free backfill (issue #12), as bind maps and eviction
lists: whole gangs are evicted, lowest priority first, never below a victim's minimum, and
only if the preemptor then fits; a gang that waited too long has its room held."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.core.session import NOMINATION_SECONDS
from scheduler.model import names
from scheduler.model.budgets import DisruptionBudget
from scheduler.model.config import Config
from scheduler.model.nodes import Taint
from scheduler.model.pods import GangKey, LabelSelector
from scheduler.model.snapshot import GangState, Pod, Snapshot
from tests.unit.builders import T0, gang_pods, node, pod, snapshot, tree_topology
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_queue import Loop


def running(
    prefix: str,
    count: int,
    *,
    on: str,
    priority: int,
    cpu: str = "16",
    min_available: int | None = None,
    age: float = 0,
) -> list[Pod]:
    """A running gang of ours on node ``on``; a larger ``age`` is a younger gang."""
    members = gang_pods(
        prefix,
        count,
        gang=prefix,
        min_available=min_available or count,
        priority=priority,
        cpu=cpu,
        created=T0 - 500 + age,
    )
    return [replace(p, node_name=on, phase="Running") for p in members]


def evicted(result: object) -> list[str]:
    return sorted(e.pod.name for e in result.evictions)  # type: ignore[attr-defined]


def two_full_nodes() -> tuple[list, list[Pod]]:
    nodes = [node("n0", cpu="32"), node("n1", cpu="32")]
    low = running("low-a", 2, on="n0", priority=1) + running(
        "low-b", 2, on="n1", priority=1, age=10
    )
    return nodes, low


def test_high_priority_gang_evicts_one_low_gang_whole_and_leaves_the_other() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    result = schedule(snapshot(nodes, [*low, *high]), now=T0)
    assert bind_map(result) == {}, "victims must leave before the preemptor binds"
    assert evicted(result) == ["low-b-0", "low-b-1"], "the younger low gang goes, whole"
    assert {n.pod.name: n.node for n in result.nominations} == {"high-0": "n1", "high-1": "n1"}


def test_preemptor_binds_where_it_was_nominated_as_soon_as_the_victims_are_gone() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    survivors = [p for p in low if p.ref.name.startswith("low-a")]
    leaving = [replace(p, deleting=True) for p in low if p.ref.name.startswith("low-b")]
    # Meanwhile a low-priority gang arrives that would fit in the freed room.
    late = gang_pods("late", 2, gang="late", min_available=2, priority=1, cpu="16", created=T0)
    during = schedule(
        snapshot(nodes, [*survivors, *leaving, *high, *late], memory=first.memory), now=T0 + 0.1
    )
    assert bind_map(during) == {}, "nothing binds while the victims are still on the node"
    after = snapshot(nodes, [*survivors, *high, *late], memory=during.memory)
    gone = schedule(after, now=T0 + 0.3)  # well within the failed attempt's backoff
    assert bind_map(gone) == {"high-0": "n1", "high-1": "n1"}, "at once, and the late gang waits"


def test_victim_gang_above_its_minimum_loses_only_its_extra_members() -> None:
    nodes = [node("n0", cpu="32")]
    low = running("low", 4, on="n0", priority=1, cpu="8", min_available=2)
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="8")
    result = schedule(snapshot(nodes, [*low, *high]), now=T0)
    assert len(evicted(result)) == 2
    assert set(evicted(result)) <= {p.ref.name for p in low}


def test_preemption_policy_never_evicts_nothing() -> None:
    nodes, low = two_full_nodes()
    never = [
        pod(f"high-{i}", gang="high", min_available=2, priority=100, cpu="16",
            spec={"preemptionPolicy": "Never"})
        for i in range(2)
    ]  # fmt: skip
    result = schedule(snapshot(nodes, [*low, *never]), now=T0)
    assert result.evictions == ()


def test_pods_of_equal_or_higher_priority_are_never_evicted() -> None:
    nodes = [node("n0", cpu="32")]
    peers = running("peer", 2, on="n0", priority=100)
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    assert schedule(snapshot(nodes, [*peers, *high]), now=T0).evictions == ()


def test_nothing_is_evicted_when_the_preemptor_would_not_fit_anyway() -> None:
    nodes, low = two_full_nodes()
    huge = gang_pods("huge", 3, gang="huge", min_available=3, priority=100, cpu="24")
    assert schedule(snapshot(nodes, [*low, *huge]), now=T0).evictions == ()


def budget(name: str, app: str, *, allowed: int) -> DisruptionBudget:
    return DisruptionBudget(
        namespace="default",
        name=name,
        selector=LabelSelector(match_labels=(("app", app),)),
        disruptions_allowed=allowed,
    )


def labelled(pods: list[Pod], app: str) -> list[Pod]:
    return [replace(p, labels={**p.labels, "app": app}) for p in pods]


def test_a_victim_a_disruption_budget_protects_is_passed_over_for_one_it_does_not() -> None:
    nodes, low = two_full_nodes()  # without a budget the younger low-b goes (test above)
    low = labelled(low[:2], "a") + labelled(low[2:], "b")
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    snap = replace(snapshot(nodes, [*low, *high]), budgets=(budget("keep-b", "b", allowed=0),))
    result = schedule(snap, now=T0)
    assert evicted(result) == ["low-a-0", "low-a-1"], "low-b is kept by its budget"


def test_a_budget_that_allows_the_disruption_changes_nothing() -> None:
    nodes, low = two_full_nodes()
    low = labelled(low[:2], "a") + labelled(low[2:], "b")
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    snap = replace(snapshot(nodes, [*low, *high]), budgets=(budget("b", "b", allowed=2),))
    assert evicted(schedule(snap, now=T0)) == ["low-b-0", "low-b-1"]


def test_budgets_are_broken_only_when_nothing_else_makes_room_and_the_gang_says_so() -> None:
    nodes, low = two_full_nodes()
    low = labelled(low, "all")
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    snap = replace(snapshot(nodes, [*low, *high]), budgets=(budget("all", "all", allowed=1),))
    result = schedule(snap, now=T0)
    assert evicted(result) == ["low-b-0", "low-b-1"], "one gang's room is still needed"
    said = [e.message for e in result.events if e.reason == "Preempting"]
    assert said
    assert all("no choice of victims kept every PodDisruptionBudget" in m for m in said)


def test_an_empty_budget_selector_protects_nothing_as_in_kube_scheduler() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    empty = DisruptionBudget(namespace="default", name="e", selector=LabelSelector())
    snap = replace(snapshot(nodes, [*low, *high]), budgets=(empty,))
    assert evicted(schedule(snap, now=T0)) == ["low-b-0", "low-b-1"]


@st.composite
def contested(draw: st.DrawFn) -> tuple[list, list[Pod], list[Pod]]:
    """Nodes full of running gangs of random priority and minimum, and a waiting gang."""
    nodes = [
        node(f"n{i}", cpu=str(draw(st.sampled_from([8, 16, 32]))))
        for i in range(draw(st.integers(1, 4)))
    ]
    bound: list[Pod] = []
    for g in range(draw(st.integers(2, 8))):
        size = draw(st.integers(1, 4))
        bound += running(
            f"r{g}",
            size,
            on=draw(st.sampled_from([n.name for n in nodes])),
            priority=draw(st.integers(0, 3)),
            cpu=str(draw(st.sampled_from([2, 4, 8]))),
            min_available=draw(st.integers(1, size)),
            age=g,
        )
    size = draw(st.integers(1, 4))
    waiting = gang_pods(
        "w",
        size,
        gang="w",
        min_available=size,
        priority=draw(st.integers(1, 5)),
        cpu=str(draw(st.sampled_from([2, 4, 8, 16]))),
    )
    return nodes, bound, waiting


@settings(max_examples=150, deadline=None)
@given(contested())
def test_preemption_never_evicts_its_peers_nor_halves_a_gang_nor_evicts_in_vain(
    case: tuple[list, list[Pod], list[Pod]],
) -> None:
    nodes, bound, waiting = case
    result = schedule(snapshot(nodes, [*bound, *waiting]), now=T0)
    gone = {e.pod.name for e in result.evictions}
    if not gone:
        return
    preemptor = waiting[0].priority or 0
    by_name = {p.ref.name: p for p in bound}
    assert all((by_name[n].priority or 0) < preemptor for n in gone)
    for prefix in {n.rsplit("-", 1)[0] for n in gone}:
        members = [p for p in bound if p.ref.name.rsplit("-", 1)[0] == prefix]
        left = [p for p in members if p.ref.name not in gone]
        minimum = members[0].gang.min_available  # type: ignore[union-attr]
        assert not left or len(left) >= minimum, (prefix, len(left), minimum)
    survivors = [p for p in bound if p.ref.name not in gone]
    after = schedule(snapshot(nodes, [*survivors, *waiting], memory=result.memory), now=T0 + 60)
    assert set(bind_map(after)) >= {p.ref.name for p in waiting}, "evicted in vain"


def test_two_preemptors_in_one_pass_never_evict_the_same_victim_twice() -> None:
    nodes = [node("n0", cpu="32")]
    low = running("low", 2, on="n0", priority=1)
    first = gang_pods("a", 2, gang="a", min_available=2, priority=100, cpu="16", created=T0 - 20)
    second = gang_pods("b", 2, gang="b", min_available=2, priority=100, cpu="16", created=T0 - 10)
    result = schedule(snapshot(nodes, [*low, *first, *second]), now=T0)
    assert evicted(result) == ["low-0", "low-1"]
    assert {n.pod.name for n in result.nominations} == {"a-0", "a-1"}, "one room, one gang"


def test_explain_says_what_a_gang_would_preempt() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    lines = explain(
        snapshot(nodes, [*low, *high]), GangKey("default", "high"), now=T0, config=Config()
    )
    assert any(
        "would preempt 2 pod(s) for it (the fewest that make room): default/low-b-0, "
        "default/low-b-1" in line
        for line in lines
    ), lines
    peers = running("peer", 2, on="n0", priority=100)
    lows = running("low", 2, on="n1", priority=1)
    three = gang_pods("three", 3, gang="three", min_available=3, priority=100, cpu="16")
    lines = explain(
        snapshot(nodes, [*peers, *lows, *three]),
        GangKey("default", "three"),
        now=T0,
        config=Config(),
    )
    assert any("it would preempt nothing" in line for line in lines), lines


def starving_cluster(waited: float) -> tuple[list, list[Pod], Snapshot]:
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    small = running("small-a", 2, on="n0", priority=0, cpu="1") + running(
        "small-b", 2, on="n1", priority=0, cpu="1", age=1
    )
    big = gang_pods("big", 8, gang="big", min_available=8, cpu="1", created=T0 - 1000)
    memory = {GangKey("default", "big"): GangState(first_attempt=T0 - waited)}
    return nodes, small, snapshot(nodes, [*small, *big], memory=memory)


def test_a_starving_gang_has_its_room_held_so_small_gangs_no_longer_take_it() -> None:
    nodes, small, snap = starving_cluster(waited=400)
    late = gang_pods("late", 2, gang="late", min_available=2, cpu="1", created=T0)
    result = schedule(replace(snap, pods=(*snap.pods, *late)), now=T0)
    assert bind_map(result) == {}, "the room the big gang needs is held for it"
    assert [e for e in result.events if e.reason == "StarvationHold"]
    # One small gang finishes: its node's room stays held; the other finishes: big binds.
    big = [p for p in snap.pods if p.ref.name.startswith("big")]
    rest = [p for p in small if p.ref.name.startswith("small-b")]
    half = schedule(snapshot(nodes, [*rest, *big, *late], memory=result.memory), now=T0 + 30)
    assert not any(name.startswith("late") for name in bind_map(half))
    free = schedule(snapshot(nodes, [*big, *late], memory=half.memory), now=T0 + 60)
    assert sorted(bind_map(free)) == [f"big-{i}" for i in range(8)]


def test_before_the_starvation_bound_small_gangs_backfill_as_before() -> None:
    _, _, snap = starving_cluster(waited=10)
    late = gang_pods("late", 2, gang="late", min_available=2, cpu="1", created=T0)
    result = schedule(replace(snap, pods=(*snap.pods, *late)), now=T0)
    assert sorted(bind_map(result)) == ["late-0", "late-1"]


def test_a_head_gang_holds_its_room_while_it_backs_off_too() -> None:
    nodes, small, snap = starving_cluster(waited=400)
    first = schedule(snap, now=T0)  # the head fails, backs off, and holds its room
    late = gang_pods("late", 2, gang="late", min_available=2, cpu="1", created=T0)
    big = [p for p in snap.pods if p.ref.name.startswith("big")]
    rest = [p for p in small if p.ref.name.startswith("small-b")]
    during = schedule(snapshot(nodes, [*rest, *big, *late], memory=first.memory), now=T0 + 0.5)
    assert bind_map(during) == {}, "backing off, the head still holds n0's freed room"


def two_racks_half_full() -> tuple[list, object, list[Pod], list[Pod]]:
    """Two racks of two nodes, each node half taken by a low pod (n0's the youngest), and a
    gang of two whole nodes that must sit in one rack: (nodes, topology, low, high)."""
    tree = {"rack-0": {"n0": {}, "n1": {}}, "rack-1": {"n2": {}, "n3": {}}}
    topology = tree_topology(tree, ("rack", "node"))
    nodes = [node(f"n{i}", cpu="8") for i in range(4)]
    ages = {"n0": 40, "n2": 30, "n3": 20, "n1": 10}
    low = [
        replace(pod(f"low-{n}", cpu="4", priority=1, created=T0 - 500 + age),
                node_name=n, phase="Running")
        for n, age in ages.items()
    ]  # fmt: skip
    notes = {
        names.TOPOLOGY_CONSTRAINTS: '{"rack": {"type": "pack", "partitions": 1, "isHard": true}}'
    }
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="8",
                     annotations=notes)  # fmt: skip
    return nodes, topology, low, high


def test_a_topology_gang_evicts_inside_one_rack_rather_than_a_pod_in_every_rack() -> None:
    """Each node of two racks runs a low pod on half of it; the youngest victims (those a
    plain gang would take) are in different racks. The gang must sit in one rack, whole
    nodes: it evicts the two pods of one rack, and no pod of the other."""
    nodes, topology, low, high = two_racks_half_full()
    result = schedule(snapshot(nodes, [*low, *high], topology=topology), now=T0)
    assert evicted(result) == ["low-n2", "low-n3"], "both victims in rack-1, none in rack-0"
    assert sorted(n.node for n in result.nominations) == ["n2", "n3"]
    # The victims leave: the gang binds where it was nominated, each member once, and
    # evicts nothing more (its own holds are not in its way).
    rest = [p for p in low if p.node_name in ("n0", "n1")]
    after = snapshot(nodes, [*rest, *high], topology=topology, memory=result.memory)
    bound = schedule(after, now=T0 + 5)
    assert bound.evictions == ()
    assert [
        (b.pod.name, b.node) for g in bound.bindings for gb in g.gangs for b in gb.bindings
    ] == [
        ("high-0", "n2"),
        ("high-1", "n3"),
    ]
    plain = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="8")
    anywhere = schedule(snapshot(nodes, [*low, *plain], topology=topology), now=T0)
    assert evicted(anywhere) == ["low-n0", "low-n2"], "without the constraint: the youngest"


def test_a_gang_s_own_starvation_after_overrides_the_scheduler_s() -> None:
    nodes, small, snap = starving_cluster(waited=60)  # under the default 300 s: no head yet
    eager = gang_pods("big", 8, gang="big", min_available=8, cpu="1", created=T0 - 1000,
                      annotations={names.STARVATION_AFTER: "30s"})  # fmt: skip
    late = gang_pods("late", 2, gang="late", min_available=2, cpu="1", created=T0)
    result = schedule(snapshot(nodes, [*small, *eager, *late], memory=snap.memory), now=T0)
    assert bind_map(result) == {}, "past its own 30 s, the big gang is the head"
    held = [e.message for e in result.events if e.reason == "StarvationHold"]
    assert held
    assert "has waited over 30s" in held[0]
    patient = gang_pods("big", 8, gang="big", min_available=8, cpu="1", created=T0 - 1000,
                        annotations={names.STARVATION_AFTER: "1h"})  # fmt: skip
    _, _, long_ago = starving_cluster(waited=400)  # past the default 300 s
    result = schedule(snapshot(nodes, [*small, *patient, *late], memory=long_ago.memory), now=T0)
    assert sorted(bind_map(result)) == ["late-0", "late-1"], "its own hour: small gangs backfill"


# Found by the review of the first steps: each failed before its fix.


def test_a_preemptor_binds_once_its_nominated_node_is_free_while_other_victims_still_leave() -> (
    None
):
    nodes = [node("n0", cpu="16"), node("n1", cpu="16")]
    v = gang_pods("v", 2, gang="v", min_available=2, priority=1, cpu="16", created=T0 - 500)
    v = [
        replace(v[0], node_name="n0", phase="Running"),
        replace(v[1], node_name="n1", phase="Running"),
    ]
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*v, *high]), now=T0)
    (nominated,) = first.nominations
    leaving = [replace(p, deleting=True) for p in v if p.node_name != nominated.node]
    second = schedule(snapshot(nodes, [*leaving, *high], memory=first.memory), now=T0 + 1)
    assert bind_map(second) == {"high-0": nominated.node}, "kube-scheduler does not wait either"


def test_a_nomination_whose_victims_never_leave_lapses_on_time_even_when_nothing_changes() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    stuck = schedule(snapshot(nodes, [*low, *high], memory=first.memory), now=T0 + 1)
    assert stuck.wake_at is not None
    assert stuck.wake_at <= T0 + NOMINATION_SECONDS + 1, "woken to let the nomination go"
    later = schedule(snapshot(nodes, [*low, *high], memory=stuck.memory), now=stuck.wake_at)
    assert "PreemptionExpired" in {e.reason for e in later.events}


def test_a_budget_never_stops_a_preemption_beyond_the_tries_that_keep_it() -> None:
    nodes = [node("n0", cpu="32")]
    tiny = [
        pod(f"tiny-{i}", cpu="10m", memory="1Mi", scheduler="other", node_name="n0",
            phase="Running", priority=0, created=T0 - 1000)
        for i in range(70)
    ]  # fmt: skip
    db = pod("db", cpu="30", memory="1Gi", scheduler="other", node_name="n0", phase="Running",
             priority=0, created=T0 - 10, labels={"app": "db"})  # fmt: skip
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="31", memory="1Gi")
    snap = replace(snapshot(nodes, [*tiny, db, *high]), budgets=(budget("db", "db", allowed=0),))
    assert evicted(schedule(snap, now=T0)) == ["db"], "the budget is broken, as a last resort"


def test_a_preemptor_whose_nominated_room_was_taken_does_not_evict_around_its_own_holds() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    assert evicted(first) == ["low-b-0", "low-b-1"]
    survivors = [p for p in low if p.ref.name.startswith("low-a")]
    intruder = pod("intruder", scheduler="other", node_name="n1", phase="Running", cpu="16",
                   priority=1, created=T0)  # fmt: skip
    second = schedule(snapshot(nodes, [*survivors, intruder, *high], memory=first.memory),
                      now=T0 + 1)  # fmt: skip
    assert evicted(second) == ["intruder"], "low-a stays: one member still holds room on n1"


def test_the_broken_budget_message_speaks_of_the_victims_that_go_not_those_spared() -> None:
    nodes = [node("n0", cpu="16"), node("n1", cpu="16")]
    b1 = pod("b1", cpu="16", scheduler="other", node_name="n0", phase="Running", priority=1,
             created=T0 - 500, labels={"app": "x"})  # fmt: skip
    k1 = pod("k1", cpu="1", scheduler="other", node_name="n1", phase="Running", priority=1,
             created=T0 - 100, labels={"app": "x"})  # fmt: skip
    filler = pod("filler", cpu="15", scheduler="other", node_name="n1", phase="Running",
                 priority=200, created=T0 - 100)  # fmt: skip
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="16")
    snap = replace(snapshot(nodes, [b1, k1, filler, *high]), budgets=(budget("x", "x", allowed=1),))
    result = schedule(snap, now=T0)
    assert evicted(result) == ["b1"]
    said = [e.message for e in result.events if e.reason == "Preempting"]
    assert said
    assert not any("PodDisruptionBudget" in m for m in said), "one eviction is within budget"


def test_a_parked_gang_becomes_the_head_at_its_own_starvation_bound_not_at_the_flush() -> None:
    busy = pod("busy", scheduler="x", node_name="n0", phase="Running", cpu="1")
    big = gang_pods("big", 1, gang="big", min_available=1, cpu="4",
                    annotations={names.STARVATION_AFTER: "10s"})  # fmt: skip
    loop = Loop(busy, *big, nodes=[node("n0", cpu="4")])
    assert loop.run(T0).attempts, "tried, and parked: nothing that could help it changes"
    assert not [e for e in loop.run(T0 + 5).events if e.reason == "StarvationHold"]
    held = loop.run(T0 + 11)
    assert [e for e in held.events if e.reason == "StarvationHold"], "not only at the 60 s flush"


def test_a_restarted_scheduler_still_holds_the_room_freed_for_a_nominated_preemptor() -> None:
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    where = {n.pod.name: n.node for n in first.nominations}
    # The scheduler restarts (no memory) while the victims are still leaving; the API
    # server shows the nominations it wrote.
    nominated = [replace(p, nominated_node=where[p.ref.name]) for p in high]
    survivors = [p for p in low if p.ref.name.startswith("low-a")]
    leaving = [replace(p, deleting=True) for p in low if p.ref.name.startswith("low-b")]
    late = gang_pods("late", 2, gang="late", min_available=2, priority=1, cpu="16", created=T0)
    during = schedule(snapshot(nodes, [*survivors, *leaving, *nominated, *late]), now=T0 + 5)
    assert bind_map(during) == {}
    gone = snapshot(nodes, [*survivors, *nominated, *late], memory=during.memory)
    after = schedule(gone, now=T0 + 5.3)
    assert bind_map(after) == where, "the late low gang does not take the preemptor's room"


def test_a_preemptor_satisfied_meanwhile_is_not_kept_from_its_room_by_its_own_holds() -> None:
    """Chaos seed 7830 (I4): a rival bound one member of a nominated preemptor, so the gang
    counted as satisfied and its other members were placed one by one; the room held for
    them by their nomination stood in their own way until it lapsed (120 s)."""
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    assert {n.pod.name: n.node for n in first.nominations} == {"high-0": "n1", "high-1": "n1"}
    survivors = [p for p in low if p.ref.name.startswith("low-a")]
    rival = replace(high[0], node_name="n1", phase="Running")  # bound by another scheduler
    after = schedule(snapshot(nodes, [*survivors, rival, high[1]], memory=first.memory),
                     now=T0 + 1)  # fmt: skip
    assert bind_map(after) == {"high-1": "n1"}
    assert {n.pod.name: n.node for n in after.nominations} == {"high-1": ""}, "cleared"


def test_a_head_that_bound_or_went_keeps_no_hold() -> None:
    """The head's nodes are kept in its memory while it waits; bound, it holds none (the
    room it held is given back, which wakes gangs parked for it), and gone, none either."""
    nodes, _, snap = starving_cluster(waited=400)
    first = schedule(snap, now=T0)
    assert first.memory[GangKey("default", "big")].head_target
    big = [p for p in snap.pods if p.ref.name.startswith("big")]
    bound = schedule(snapshot(nodes, big, memory=first.memory), now=T0 + 60)
    assert len(bind_map(bound)) == 8
    assert not bound.memory[GangKey("default", "big")].head_target
    late = gang_pods("late", 2, gang="late", min_available=2, cpu="1", created=T0)
    gone = schedule(snapshot(nodes, late, memory=first.memory), now=T0 + 60)
    assert sorted(bind_map(gone)) == ["late-0", "late-1"]


def test_a_head_whose_node_was_tainted_since_holds_room_elsewhere() -> None:
    """The head's nodes are kept while they exist; one it may no longer go on at all (a
    taint since, a label, a claim bound to a volume elsewhere) would only keep others off
    its room: the target is chosen again."""
    nodes = [node(f"n{i}", cpu="4") for i in range(3)]
    small = [
        *running("small-a", 1, on="n0", priority=0, cpu="3"),
        *running("small-b", 1, on="n1", priority=0, cpu="3", age=1),
    ]
    big = gang_pods("big", 8, gang="big", min_available=8, cpu="1", created=T0 - 1000)
    key = GangKey("default", "big")
    memory = {key: GangState(first_attempt=T0 - 400)}
    first = schedule(snapshot(nodes, [*small, *big], memory=memory), now=T0)
    chosen = set(first.memory[key].head_target.values())
    assert "n0" in chosen
    tainted = "n0"
    later = [replace(n, taints=(Taint("maintenance"),)) if n.name == tainted else n for n in nodes]
    again = schedule(snapshot(later, [*small, *big], memory=first.memory), now=T0 + 30)
    held = set(again.memory[key].head_target.values())
    assert held, "still the head"
    assert tainted not in held


def test_a_preemptor_left_short_of_its_minimum_lets_the_room_its_victims_freed_go() -> None:
    """Chaos seed 11625 (I4): a preemptor's pending member was deleted after its victims
    were evicted; the gang could no longer bind, yet the room they freed stayed held for it
    (until the nomination lapsed, 120 s) and a later gang that fitted there waited."""
    nodes, low = two_full_nodes()
    high = gang_pods("high", 2, gang="high", min_available=2, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    assert evicted(first) == ["low-b-0", "low-b-1"]
    survivors = [p for p in low if p.ref.name.startswith("low-a")]
    short = [p for p in high if p.ref.name == "high-0"]  # high-1 deleted while pending
    late = gang_pods("late", 2, gang="late", min_available=2, priority=1, cpu="16", created=T0)
    second = schedule(snapshot(nodes, [*survivors, *short, *late], memory=first.memory), now=T0 + 5)
    assert bind_map(second) == {"late-0": "n1", "late-1": "n1"}
    assert any("has 1 of its 2 members" in m for m in events(second, "HoldReleased"))
    # After a restart, with only the pod's nominatedNodeName left, the same.
    nominated = [replace(short[0], nominated_node="n1")]
    after = schedule(snapshot(nodes, [*survivors, *nominated, *late]), now=T0 + 5)
    assert bind_map(after) == {"late-0": "n1", "late-1": "n1"}


def test_a_preemptor_short_of_its_declared_total_lets_the_room_go_though_above_its_minimum() -> (
    None
):
    """A gang of 3 with a minimum of 2 is not tried until all 3 exist: with one deleted after
    its victims went, room held for it would stand idle though it has its minimum."""
    nodes, low = two_full_nodes()
    high = gang_pods("high", 3, gang="high", min_available=2, total=3, priority=100, cpu="16")
    first = schedule(snapshot(nodes, [*low, *high]), now=T0)
    nominated = sorted(n.pod.name for n in first.nominations if n.node)
    assert nominated
    short = [p for p in high if p.ref.name != nominated[0]]
    late = gang_pods("late", 2, gang="late", min_available=2, priority=1, cpu="16", created=T0)
    survivors = [p for p in low if p.ref.name.startswith("low-a")]
    second = schedule(snapshot(nodes, [*survivors, *short, *late], memory=first.memory), now=T0 + 5)
    assert bind_map(second) == {"late-0": "n1", "late-1": "n1"}
    assert any("has 2 of its 3 members" in m for m in events(second, "HoldReleased"))
    assert not second.memory[GangKey("default", "high")].nominated
