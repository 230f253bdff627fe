"""Queues shared by teams (#22) in a pass: which queue a gang is in, the fair order between
queues, capability and guarantee, and queues that cannot be used. Bind maps, as Volcano's
proportion and capacity tests state their expectations."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduler.codecs.podgroups import volcano_podgroup_from_dict
from scheduler.core.queues import QueueBook, _water_fill, decayed_usage
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.queues import DEFAULT_QUEUE, Queue, QueueUsage
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_preemption import budget
from tests.unit.test_queues import queue

GPU = "nvidia.com/gpu"


def in_queue(name: str) -> dict[str, str]:
    return {names.QUEUE: name}


def with_queues(snap: Snapshot, *queues: Queue) -> Snapshot:
    return replace(snap, queues={q.name: q for q in queues})


def gpu_nodes(count: int, gpus: int = 1) -> list[Any]:
    return [node(f"n{i}", gpu=gpus) for i in range(count)]


def running(name: str, *, queue_name: str, node_name: str, gpu: int = 1) -> Any:
    return pod(name, gpu=gpu, node_name=node_name, phase="Running", labels=in_queue(queue_name))


# -- which queue -------------------------------------------------------------------------------


def test_a_gang_joins_the_queue_its_volcano_podgroup_names() -> None:
    read = volcano_podgroup_from_dict(
        {
            "metadata": {"name": "pg", "namespace": "ml", "labels": {names.QUEUE: "other"}},
            "spec": {"minMember": 2, "queue": "team-a"},
        }
    )
    assert read.queue == "team-a"  # spec.queue first


def test_a_pod_names_its_queue_by_volcanos_annotation_or_our_label() -> None:
    assert pod("a", annotations={names.VOLCANO_QUEUE_NAME: "team-a"}).queue == "team-a"
    assert pod("b", labels={names.QUEUE: "team-b"}).queue == "team-b"
    assert pod("c").queue == ""


def test_without_queue_objects_every_gang_is_in_an_unlimited_default_queue() -> None:
    pods = gang_pods("g", 2, gang="g", min_available=2, gpu=1)
    result = schedule(with_queues(snapshot(gpu_nodes(2), pods)), now=T0)
    assert bind_map(result) == {"g-0": "n0", "g-1": "n1"}


def test_without_the_queue_api_nothing_changes() -> None:
    pods = gang_pods("g", 2, gang="g", min_available=2, gpu=1, labels=in_queue("nowhere"))
    result = schedule(snapshot(gpu_nodes(2), pods), now=T0)  # queues None: not served
    assert bind_map(result) == {"g-0": "n0", "g-1": "n1"}


# -- queues that cannot be used -------------------------------------------------------------------


def test_a_gang_naming_an_unknown_queue_waits_and_says_which() -> None:
    pods = gang_pods("g", 2, gang="g", min_available=2, labels=in_queue("team-z"))
    result = schedule(with_queues(snapshot(gpu_nodes(2), pods)), now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "QueueNotFound"))
    assert "queue 'team-z' does not exist" in message
    status = result.memory[next(iter(result.memory))].condition
    assert status is not None
    assert status[2] == message


def test_a_closed_queue_takes_no_new_gangs_but_others_go_on() -> None:
    shut = gang_pods("shut", 1, gang="shut", min_available=1, labels=in_queue("shut"))
    other = gang_pods("open", 1, gang="open", min_available=1, labels=in_queue("open"))
    snap = with_queues(
        snapshot(gpu_nodes(2), shut + other), queue("shut", state="Closed"), queue("open")
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {"open-0": "n0"}
    (message,) = set(events(result, "QueueClosed"))
    assert "queue 'shut' is Closed: it takes no new gangs" in message


def test_a_cycle_of_parents_holds_back_its_gangs_and_is_said_on_the_queue() -> None:
    pods = gang_pods("g", 1, gang="g", min_available=1, labels=in_queue("a"))
    snap = with_queues(snapshot(gpu_nodes(1), pods), queue("a", parent="b"), queue("b", parent="a"))
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    on_queue = [e for e in result.events if e.regarding.kind == "Queue"]
    assert [e.regarding.name for e in on_queue] == ["a"]
    assert "makes a cycle" in on_queue[0].message
    assert "holds back gang default/g" in on_queue[0].message


# -- capability and guarantee ---------------------------------------------------------------------


def test_capability_holds_a_gang_back_while_room_is_free() -> None:
    pods = [
        running("old", queue_name="team-a", node_name="n0"),
        *gang_pods("g", 2, gang="g", min_available=2, gpu=1, labels=in_queue("team-a")),
    ]
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("team-a", capability={GPU: "2"}))
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert (
        "queue team-a would go over its capability for nvidia.com/gpu: it holds 1 of 2, "
        "and 2 more are asked" in message
    )


def test_capability_lets_in_what_fits_under_it() -> None:
    pods = gang_pods("g", 2, gang="g", min_available=2, gpu=1, labels=in_queue("team-a"))
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("team-a", capability={GPU: "2"}))
    assert len(bind_map(schedule(snap, now=T0))) == 2


def test_capability_counts_the_gangs_placed_earlier_in_the_same_pass() -> None:
    first = gang_pods("a", 2, gang="a", min_available=2, gpu=1, labels=in_queue("team-a"))
    second = gang_pods(
        "b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("team-a"), created=T0 - 50
    )
    snap = with_queues(
        snapshot(gpu_nodes(4), first + second), queue("team-a", capability={GPU: "3"})
    )
    result = schedule(snap, now=T0)
    assert sorted(bind_map(result)) == ["a-0", "a-1"]
    (message,) = set(events(result, "FailedScheduling"))
    assert "it holds 2 of 3, and 2 more are asked" in message


def test_a_parents_capability_bounds_its_children() -> None:
    pods = gang_pods("g", 3, gang="g", min_available=3, gpu=1, labels=in_queue("child"))
    snap = with_queues(
        snapshot(gpu_nodes(4), pods),
        queue("org", capability={GPU: "2"}),
        queue("child", parent="org"),
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "queue org (an ancestor of child) would go over its capability" in message


def test_an_elastic_gang_takes_extras_only_up_to_its_capability() -> None:
    pods = gang_pods("g", 4, gang="g", min_available=2, gpu=1, labels=in_queue("team-a"))
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("team-a", capability={GPU: "3"}))
    assert len(bind_map(schedule(snap, now=T0))) == 3


def test_another_queues_guarantee_is_kept_free() -> None:
    big = gang_pods("big", 3, gang="big", min_available=3, gpu=1, labels=in_queue("team-a"))
    snap = with_queues(
        snapshot(gpu_nodes(4), big),
        queue("team-a"),
        queue("team-g", guarantee={"resource": {GPU: "2"}}),
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "kept for other queues' guarantees: 4 free, 2 of it guaranteed" in message
    assert "team-g" in message


def test_a_guarantee_already_held_keeps_nothing_more() -> None:
    pods = [
        running("g0", queue_name="team-g", node_name="n0"),
        running("g1", queue_name="team-g", node_name="n1"),
        *gang_pods("big", 2, gang="big", min_available=2, gpu=1, labels=in_queue("team-a")),
    ]
    snap = with_queues(
        snapshot(gpu_nodes(4), pods),
        queue("team-a"),
        queue("team-g", guarantee={"resource": {GPU: "2"}}),
    )
    assert sorted(bind_map(schedule(snap, now=T0))) == ["big-0", "big-1"]


def test_a_queue_may_use_its_own_guarantee() -> None:
    pods = gang_pods("g", 4, gang="g", min_available=4, gpu=1, labels=in_queue("team-g"))
    snap = with_queues(
        snapshot(gpu_nodes(4), pods), queue("team-g", guarantee={"resource": {GPU: "2"}})
    )
    assert len(bind_map(schedule(snap, now=T0))) == 4


# -- the fair order ------------------------------------------------------------------------------


def test_a_flood_in_one_queue_does_not_delay_another_queues_gang() -> None:
    """Queue a holds 2 of 4 GPUs and has 6 older gangs waiting; queue b's one gang, younger
    and of the same priority, comes first: b is furthest below its fair share."""
    flood = [
        p
        for i in range(6)
        for p in gang_pods(
            f"a{i}",
            1,
            gang=f"a{i}",
            min_available=1,
            gpu=1,
            labels=in_queue("a"),
            created=T0 - 100 + i,
        )
    ]
    late = gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0)
    pods = [
        running("a-run-0", queue_name="a", node_name="n0"),
        running("a-run-1", queue_name="a", node_name="n1"),
        *flood,
        *late,
    ]
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b"))
    assert sorted(bind_map(schedule(snap, now=T0))) == ["b-0", "b-1"]
    # Without queues the flood, older, takes the room.
    plain = schedule(snapshot(gpu_nodes(4), pods), now=T0)
    assert sorted(bind_map(plain)) == ["a0-0", "a1-0"]


def test_turns_alternate_by_weight_as_the_shares_fill() -> None:
    """Two empty queues, weights 1 and 3, eight one-GPU gangs each, eight GPUs: the shares
    end 2 and 6, the split the weights ask for."""
    pods = [
        p
        for q in ("light", "heavy")
        for i in range(8)
        for p in gang_pods(
            f"{q}{i}",
            1,
            gang=f"{q}{i}",
            min_available=1,
            gpu=1,
            labels=in_queue(q),
            created=T0 - 100 + i,
        )
    ]
    snap = with_queues(
        snapshot(gpu_nodes(8), pods), queue("light", weight=1), queue("heavy", weight=3)
    )
    bound = bind_map(schedule(snap, now=T0))
    assert sum(name.startswith("light") for name in bound) == 2
    assert sum(name.startswith("heavy") for name in bound) == 6


def test_inside_a_queue_priority_then_age_still_decide() -> None:
    pods = [
        *gang_pods(
            "old", 1, gang="old", min_available=1, gpu=1, labels=in_queue("a"), created=T0 - 100
        ),
        *gang_pods(
            "high",
            1,
            gang="high",
            min_available=1,
            gpu=1,
            labels=in_queue("a"),
            priority=100,
            created=T0,
        ),
    ]
    snap = with_queues(snapshot(gpu_nodes(1), pods), queue("a"))
    assert bind_map(schedule(snap, now=T0)) == {"high-0": "n0"}


# -- fair shares -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "amount", "expected"),
    [
        ([Queue(name="a"), Queue(name="b", weight=3)], 8, {"a": 2, "b": 6}),
        ([Queue(name="a"), Queue(name="b")], 8, {"a": 4, "b": 4}),
        (
            [Queue(name="a", weight=2), Queue(name="b"), Queue(name="c")],
            8,
            {"a": 4, "b": 2, "c": 2},
        ),
    ],
)
def test_water_filling_splits_by_weight(queues: list[Queue], amount: int, expected: dict) -> None:
    assert _water_fill(queues, resource=GPU, amount=amount) == pytest.approx(expected)


def test_water_filling_gives_a_capped_queues_rest_to_the_others() -> None:
    capped = queue("a", capability={GPU: "1"})
    got = _water_fill([capped, queue("b"), queue("c")], resource=GPU, amount=9)
    assert got == pytest.approx({"a": 1, "b": 4, "c": 4})


def test_a_stated_deserved_share_is_taken_first_and_weights_split_the_rest() -> None:
    fixed = queue("a", deserved={GPU: "6"})
    got = _water_fill([fixed, queue("b"), queue("c")], resource=GPU, amount=10)
    assert got == pytest.approx({"a": 6, "b": 2, "c": 2})


def test_fair_shares_go_down_the_tree() -> None:
    book = QueueBook(
        {
            "org": queue("org", weight=3),
            "x": queue("x", parent="org"),
            "y": queue("y", parent="org"),
        },
        usage={"x": {GPU: 3}},
        total={GPU: 16},
    )
    # root: default (weight 1) and org (weight 3) split 16 as 4 and 12; org's 12 as 6 and 6.
    assert book.fair["org"][GPU] == pytest.approx(12)
    assert book.fair["x"][GPU] == pytest.approx(6)
    assert book.fair[DEFAULT_QUEUE][GPU] == pytest.approx(4)
    assert book.share("x") == pytest.approx(0.5)
    assert book.share("org") == pytest.approx(0.25)  # what its subtree holds
    assert book.order("y") < book.order("x")


# -- reclaim ------------------------------------------------------------------------------------


def running_gang(
    prefix: str,
    count: int,
    *,
    queue_name: str,
    nodes: list[str],
    minimum: int | None = None,
    priority: int = 0,
    age: float = 0,
) -> list[Any]:
    """A running gang of ours in ``queue_name``, one GPU a member, member i on ``nodes[i]``;
    a larger ``age`` is a younger gang."""
    members = gang_pods(
        prefix, count, gang=prefix, min_available=minimum or count, gpu=1, priority=priority,
        labels=in_queue(queue_name), created=T0 - 500 + age,
    )  # fmt: skip
    return [replace(p, node_name=n, phase="Running") for p, n in zip(members, nodes, strict=True)]


def evicted(result: Any) -> list[str]:
    return sorted(e.pod.name for e in result.evictions)


def test_a_starved_queue_gets_its_half_back_by_reclaim_of_one_whole_gang() -> None:
    """Queues a and b, 1:1; a's two gangs fill the four GPUs; b's gang of two reclaims: one of
    a's gangs goes whole (the younger), and b is nominated where it was."""
    pods = [
        *running_gang("a1", 2, queue_name="a", nodes=["n0", "n1"]),
        *running_gang("a2", 2, queue_name="a", nodes=["n2", "n3"], age=10),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    result = schedule(with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b")), now=T0)
    assert evicted(result) == ["a2-0", "a2-1"]
    assert sorted((n.pod.name, n.node) for n in result.nominations) == [
        ("b-0", "n2"),
        ("b-1", "n3"),
    ]
    assert all("Reclaimed by gang default/b of queue b" in e.message for e in result.evictions)
    assert events(result, "Reclaiming")


def _placed(prefix: str, *, gpu: int, queue_name: str, node_name: str, age: float) -> list[Any]:
    """A running gang of one member of ``gpu`` GPUs (a larger ``age`` is younger)."""
    (member,) = gang_pods(
        prefix, 1, gang=prefix, min_available=1, gpu=gpu, labels=in_queue(queue_name),
        created=T0 - 500 + age,
    )  # fmt: skip
    return [replace(member, node_name=node_name, phase="Running")]


def test_reclaim_frees_a_whole_node_rather_than_spend_the_surplus_on_one_it_cannot_empty() -> None:
    """Fairness bench, 32 nodes: a whole-node member waits; the flood is 8 GPUs above its
    share, in two small gangs beside another queue's pod (that node cannot be emptied: that
    queue is at its share) and one whole-node gang. Reclaim takes the whole-node gang, not
    the small ones first (the younger, which spent the surplus and freed nothing whole)."""
    pods = [
        *_placed("small-0", gpu=2, queue_name="flood", node_name="mixed", age=20),
        *_placed("small-1", gpu=2, queue_name="flood", node_name="mixed", age=30),
        *_placed("steady", gpu=4, queue_name="c", node_name="mixed", age=0),
        *_placed("big", gpu=8, queue_name="flood", node_name="whole", age=10),
        *gang_pods("a", 1, gang="a", min_available=1, gpu=8, labels=in_queue("a"), created=T0),
    ]
    nodes = [node("mixed", gpu=8), node("whole", gpu=8)]
    snap = with_queues(
        snapshot(nodes, pods), queue("a", weight=2), queue("flood"), queue("c")
    )  # fair shares: a 8, flood 4, c 4 (all it wants)
    result = schedule(snap, now=T0)
    assert evicted(result) == ["big-0"]
    assert [(n.pod.name, n.node) for n in result.nominations] == [("a-0", "whole")]


def test_reclaim_empties_one_node_rather_than_spend_the_surplus_halving_two() -> None:
    """Fairness bench, 128 nodes: the flood is 8 GPUs above its share; the youngest of its
    pods are halves of two nodes, an older gang holds a third whole. A whole-node member
    waits. Taken youngest first, the two halves spent the surplus and freed no node whole,
    and nothing was reclaimed; node by node, the whole node's one gang goes."""
    pods = [
        *_placed("young-0", gpu=4, queue_name="flood", node_name="m1", age=40),
        *_placed("old-0", gpu=4, queue_name="flood", node_name="m1", age=0),
        *_placed("young-1", gpu=4, queue_name="flood", node_name="m2", age=30),
        *_placed("old-1", gpu=4, queue_name="flood", node_name="m2", age=5),
        *_placed("big", gpu=8, queue_name="flood", node_name="w", age=20),
        *gang_pods("a", 1, gang="a", min_available=1, gpu=8, labels=in_queue("a"), created=T0),
    ]
    nodes = [node("m1", gpu=8), node("m2", gpu=8), node("w", gpu=8)]
    snap = with_queues(snapshot(nodes, pods), queue("a"), queue("flood"))
    # fair shares: a 8 (all it wants), flood 16 of the 24 it holds
    result = schedule(snap, now=T0)
    assert evicted(result) == ["big-0"]
    assert [(n.pod.name, n.node) for n in result.nominations] == [("a-0", "w")]


def _running(name: str, *, gpu: int, node_name: str, age: float, **kw: Any) -> Any:
    """A running gang of one of queue flood (a larger ``age`` is younger)."""
    kw.setdefault("labels", in_queue("flood"))
    made = pod(name, gang=name, min_available=1, gpu=gpu, created=T0 - 500 + age, **kw)
    return replace(made, node_name=node_name, phase="Running")


def test_reclaim_takes_a_nodes_lower_priority_victims_before_a_bigger_dearer_one() -> None:
    """Review of session 34: node by node, the biggest victim first took a priority-100 pod
    where two priority-0 pods made the same room."""
    pods = [
        _running("high", gpu=4, node_name="n", age=0, priority=100),
        _running("low-0", gpu=2, node_name="n", age=10, priority=0),
        _running("low-1", gpu=2, node_name="n", age=20, priority=0),
        pod("a-0", gang="a", min_available=1, gpu=4, labels=in_queue("a"), created=T0),
    ]
    snap = with_queues(snapshot([node("n", gpu=8)], pods), queue("a"), queue("flood"))
    assert evicted(schedule(snap, now=T0)) == ["low-0", "low-1"]


def test_reclaim_frees_a_whole_node_for_a_gangs_big_member_not_one_gpu_on_each() -> None:
    """Review of session 34: nodes planned for the group's smallest member (a 1-GPU worker)
    spread the flood's surplus over every node and emptied none for the 8-GPU leader, pass
    after pass."""
    pods = [
        _running(f"f{n}-{i}", gpu=1, node_name=f"n{n}", age=n * 10 + i)
        for n in range(4)
        for i in range(8)
    ]
    pods += [
        pod("a-leader", gang="a", min_available=2, gpu=8, labels=in_queue("a"), created=T0),
        pod("a-worker", gang="a", min_available=2, gpu=1, labels=in_queue("a"), created=T0),
    ]
    nodes = [node(f"n{n}", gpu=8) for n in range(4)]
    result = schedule(with_queues(snapshot(nodes, pods), queue("a"), queue("flood")), now=T0)
    nominated = dict((n.pod.name, n.node) for n in result.nominations)
    assert set(nominated) == {"a-leader", "a-worker"}
    leader_node = nominated["a-leader"]
    assert {f"f{leader_node[1]}-{i}" for i in range(8)} <= set(evicted(result))


def test_reclaim_frees_a_node_without_breaking_a_budget_when_another_will_do() -> None:
    """Review of session 34: the younger victim was protected by a PodDisruptionBudget and
    taken first, though an unprotected one on another node made the same room."""
    pods = [
        _running("kept", gpu=8, node_name="n0", age=20, labels={**in_queue("flood"), "app": "p"}),
        _running("free", gpu=8, node_name="n1", age=10),
        pod("a-0", gang="a", min_available=1, gpu=8, labels=in_queue("a"), created=T0),
    ]
    snap = with_queues(
        snapshot([node("n0", gpu=8), node("n1", gpu=8)], pods), queue("a"), queue("flood")
    )
    snap = replace(snap, budgets=(budget("pdb", "p", allowed=0),))
    assert evicted(schedule(snap, now=T0)) == ["free"]


@pytest.mark.parametrize("unusable", ["selector", "cordon"])
def test_reclaim_spends_no_surplus_on_a_node_the_gang_may_not_go_on(unusable: str) -> None:
    """Review of session 34: the younger victim sat on a node the reclaimer may not use (its
    nodeSelector, or a cordon); taken first, it spent the flood's surplus and nothing was
    reclaimed."""
    selector = {"gpu": "h100"} if unusable == "selector" else None
    pods = [
        _running("on-x", gpu=8, node_name="x", age=20),
        _running("on-h", gpu=8, node_name="h", age=10),
        _running("c", gpu=8, node_name="h2", age=0, labels=in_queue("c")),
        pod("a-0", gang="a", min_available=1, gpu=8, labels=in_queue("a"), created=T0,
            node_selector=selector),
    ]  # fmt: skip
    nodes = [
        node("x", gpu=8, labels={"gpu": "a100"}, unschedulable=unusable == "cordon"),
        node("h", gpu=8, labels={"gpu": "h100"}),
        node("h2", gpu=8, labels={"gpu": "h100"}),
    ]
    queues = (queue("a", weight=2), queue("flood"), queue("c"))
    result = schedule(with_queues(snapshot(nodes, pods), *queues), now=T0)
    assert evicted(result) == ["on-h"]
    assert [(n.pod.name, n.node) for n in result.nominations] == [("a-0", "h")]


def test_a_member_chosen_before_its_whole_gang_is_not_counted_twice_against_the_surplus() -> None:
    """Review of session 34: the flood's gang of 3 (minimum 2) is its whole surplus; its
    member above the minimum, then the whole gang, counted that member twice, and the gang
    was refused as taking the flood below its share."""
    pods = [
        replace(
            pod(f"g-{i}", gang="g", min_available=2, gpu=4, labels=in_queue("flood"),
                created=T0 - 500 + i),
            node_name=f"n{i}", phase="Running",
        )
        for i in range(3)
    ]  # fmt: skip
    pods += [
        pod(f"a-{i}", gang="a", min_available=3, gpu=4, labels=in_queue("a"), created=T0)
        for i in range(3)
    ]
    snap = with_queues(
        snapshot([node(f"n{i}", gpu=4) for i in range(3)], pods),
        queue("a", weight=100),
        queue("flood", weight=1),
    )
    assert evicted(schedule(snap, now=T0)) == ["g-0", "g-1", "g-2"]


def test_reclaim_never_takes_a_victim_queue_below_its_share() -> None:
    """a holds 3 of 4 GPUs as one gang of 3; b wants 2 (its share): evicting the gang would
    leave a with 0 of its 2, so nothing is evicted."""
    pods = [
        *running_gang("a1", 3, queue_name="a", nodes=["n0", "n1", "n2"]),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    result = schedule(with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b")), now=T0)
    assert evicted(result) == []


def test_reclaim_takes_members_above_a_minimum_before_any_whole_gang() -> None:
    pods = [
        *running_gang("a1", 3, queue_name="a", nodes=["n0", "n1", "n2"], minimum=2),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    result = schedule(with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b")), now=T0)
    assert len(evicted(result)) == 1  # the extra member; a keeps its minimum and its share


def test_a_queue_that_is_not_reclaimable_keeps_what_it_holds() -> None:
    pods = [
        *running_gang("a1", 2, queue_name="a", nodes=["n0", "n1"]),
        *running_gang("a2", 2, queue_name="a", nodes=["n2", "n3"], age=10),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("a", reclaimable=False), queue("b"))
    assert evicted(schedule(snap, now=T0)) == []


def test_reclaim_keeps_a_victim_queues_guarantee() -> None:
    """a's guarantee of 4 GPUs (above its weighted share of 2) protects all it holds."""
    pods = [
        *running_gang("a1", 2, queue_name="a", nodes=["n0", "n1"]),
        *running_gang("a2", 2, queue_name="a", nodes=["n2", "n3"], age=10),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    snap = with_queues(
        snapshot(gpu_nodes(4), pods), queue("a", guarantee={"resource": {GPU: "4"}}), queue("b")
    )
    assert evicted(schedule(snap, now=T0)) == []


def test_a_queue_at_its_share_does_not_reclaim() -> None:
    """b holds 2 of 4 (its share) and wants 2 more: it waits for a's gangs to end."""
    pods = [
        *running_gang("a1", 2, queue_name="a", nodes=["n0", "n1"]),
        *running_gang("b1", 2, queue_name="b", nodes=["n2", "n3"]),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    result = schedule(with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b")), now=T0)
    assert evicted(result) == []


def test_preemption_stays_inside_a_queue() -> None:
    """b's high-priority gang may not preempt a's low-priority gangs (another queue, at its
    share); inside b, it preempts b's own low-priority gang."""
    pods = [
        *running_gang("a1", 2, queue_name="a", nodes=["n0", "n1"], priority=1),
        *running_gang("b1", 2, queue_name="b", nodes=["n2", "n3"], priority=1),
        *gang_pods(
            "urgent", 2, gang="urgent", min_available=2, gpu=1, labels=in_queue("b"),
            priority=1000, created=T0,
        ),
    ]  # fmt: skip
    result = schedule(with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b")), now=T0)
    assert evicted(result) == ["b1-0", "b1-1"]
    # Without queues, the older-or-not victims are chosen by priority and age alone.
    plain = schedule(snapshot(gpu_nodes(4), pods), now=T0)
    assert len(evicted(plain)) == 2


def test_reclaimed_room_goes_to_the_reclaimer_once_the_victims_have_left() -> None:
    pods = [
        *running_gang("a1", 2, queue_name="a", nodes=["n0", "n1"]),
        *running_gang("a2", 2, queue_name="a", nodes=["n2", "n3"], age=10),
        *gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("a"), queue("b"))
    first = schedule(snap, now=T0)
    gone = {e.pod.name for e in first.evictions}
    after = replace(
        snap, pods=tuple(p for p in snap.pods if p.ref.name not in gone), memory=first.memory
    )
    second = schedule(after, now=T0 + 1)
    assert bind_map(second) == {"b-0": "n2", "b-1": "n3"}
    assert evicted(second) == []


def test_explain_names_the_queue_its_limit_and_the_tree_with_shares() -> None:
    from scheduler.core.explaining import explain  # noqa: PLC0415
    from scheduler.core.scheduling import DEFAULT_CONFIG  # noqa: PLC0415
    from scheduler.model.pods import GangKey  # noqa: PLC0415

    pods = [
        running("old", queue_name="child", node_name="n0"),
        *gang_pods("g", 2, gang="g", min_available=2, gpu=1, labels=in_queue("child")),
    ]
    snap = with_queues(
        snapshot(gpu_nodes(4), pods),
        queue("org", capability={GPU: "2"}),
        queue("child", parent="org"),
        queue("other"),
    )
    lines = explain(snap, GangKey("default", "g"), now=T0, config=DEFAULT_CONFIG)
    text = "\n".join(lines)
    assert "queue child (parent org)" in lines
    assert "    child: {cpu: 1, memory: 1Gi, nvidia.com/gpu: 1} / " in text
    assert "  org: " in text
    assert "capability {nvidia.com/gpu: 2}" in text
    assert "queue org (an ancestor of child) would go over its capability" in text


# -- found in review: what reclaim, preemption and holds must not do to a queue ------------------


def play(snap: Snapshot, passes: int) -> list[Any]:
    """Passes in a row, as the loop runs them: evicted pods gone, binds landed."""
    results = []
    now = T0
    for _ in range(passes):
        result = schedule(snap, now=now)
        results.append(result)
        gone = {e.pod.uid for e in result.evictions}
        bound = {b.pod.uid: b.node for g in result.bindings for b in g.bindings}
        pods = tuple(
            replace(p, node_name=bound[p.ref.uid], phase="Running") if p.ref.uid in bound else p
            for p in snap.pods
            if p.ref.uid not in gone
        )
        snap = replace(snap, pods=pods, memory=result.memory)
        now += 1
    return results


def held_by(results: list[Any], prefix: str) -> int:
    return sum(1 for r in results for name in bind_map(r) if name.startswith(prefix))


def test_two_reclaims_of_one_queue_in_a_pass_stay_within_its_capability() -> None:
    pods = [
        *[
            p
            for i in range(12)
            for p in running_gang(f"a{i}", 1, queue_name="a", nodes=[f"n{i}"], age=i)
        ],
        *gang_pods("b1", 2, gang="b1", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
        *gang_pods("b2", 2, gang="b2", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    snap = with_queues(
        snapshot(gpu_nodes(12), pods), queue("a"), queue("b", capability={GPU: "2"}), queue("c")
    )
    assert held_by(play(snap, 3), "b") == 2


def test_reclaim_does_not_take_again_what_is_already_leaving() -> None:
    pods = [
        *[
            p
            for i in range(4)
            for p in running_gang(
                f"a{i}", 2, queue_name="a", nodes=[f"n{2 * i}", f"n{2 * i + 1}"], age=i
            )
        ],
        *[
            p
            for i in range(3)
            for p in gang_pods(
                f"b{i}",
                2,
                gang=f"b{i}",
                min_available=2,
                gpu=1,
                labels=in_queue("b"),
                created=T0 + i,
            )
        ],
    ]
    snap = with_queues(snapshot(gpu_nodes(8), pods), queue("a"), queue("b"))
    first = schedule(snap, now=T0)
    leaving = {e.pod.uid for e in first.evictions}
    assert len(leaving) == 4  # two of a's gangs: b's half
    # Next pass the victims are still being deleted: nothing more is taken from a.
    still = tuple(replace(p, deleting=True) if p.ref.uid in leaving else p for p in snap.pods)
    second = schedule(replace(snap, pods=still, memory=first.memory), now=T0 + 1)
    assert evicted(second) == []


def test_after_gang_members_and_the_groups_attempt_share_one_capability() -> None:
    group = ["default/s", "default/u"]
    satisfied = [
        pod("s-0", gpu=1, gang="s", min_available=1, groups=group, labels=in_queue("a"),
            node_name="n0", phase="Running"),
        pod("s-1", gpu=1, gang="s", min_available=1, groups=group, labels=in_queue("a")),
        pod("s-2", gpu=1, gang="s", min_available=1, groups=group, labels=in_queue("a")),
    ]  # fmt: skip
    fresh = gang_pods("u", 2, gpu=1, gang="u", min_available=2, groups=group, labels=in_queue("a"))
    snap = with_queues(snapshot(gpu_nodes(8), satisfied + fresh), queue("a", capability={GPU: "3"}))
    assert sorted(bind_map(schedule(snap, now=T0))) == ["s-1", "s-2"]
    # With room for all of them under the capability, all of them: the after-gang members
    # count once in the turn, not once in the turn's room and again in the queue's book.
    roomy = with_queues(
        snapshot(gpu_nodes(8), satisfied + fresh), queue("a", capability={GPU: "5"})
    )
    assert sorted(bind_map(schedule(roomy, now=T0))) == ["s-1", "s-2", "u-0", "u-1"]


def test_a_gang_may_preempt_its_own_queues_gang_to_get_under_its_capability() -> None:
    pods = [
        *running_gang("low", 2, queue_name="a", nodes=["n0", "n1"], priority=1),
        *gang_pods("hi", 2, gang="hi", min_available=2, gpu=1, labels=in_queue("a"),
                   priority=1000, created=T0),
    ]  # fmt: skip
    snap = with_queues(snapshot(gpu_nodes(4), pods), queue("a", capability={GPU: "2"}))
    results = play(snap, 3)
    assert evicted(results[0]) == ["low-0", "low-1"]
    assert held_by(results, "hi") == 2


def test_an_idle_guarantee_elsewhere_does_not_stop_reclaim_it_only_keeps_its_room() -> None:
    pods = [
        *[
            p
            for i in range(8)
            for p in running_gang(f"a{i}", 1, queue_name="a", nodes=[f"n{i}"], age=i)
        ],
        *gang_pods("b1", 2, gang="b1", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
        *gang_pods("b2", 2, gang="b2", min_available=2, gpu=1, labels=in_queue("b"), created=T0),
    ]
    snap = with_queues(
        snapshot(gpu_nodes(8), pods),
        queue("a"),
        queue("b"),
        queue("g", guarantee={"resource": {GPU: "1"}}),
    )
    # b's share is 4 of 8: b1 gets 2, and 1 more is freed and kept for g's guarantee.
    assert len(evicted(schedule(snap, now=T0))) == 3


def test_nonstrict_holds_are_not_counted_twice_against_a_guarantee() -> None:
    holds = gang_pods("b", 3, gang="b", min_available=3, mode="NonStrict", gpu=1,
                      labels=in_queue("b"))  # fmt: skip
    blockers = [
        running("x", queue_name="b", node_name="n2"),
        running("y", queue_name="b", node_name="n3"),
    ]
    snap = with_queues(
        snapshot(gpu_nodes(5), [*holds, *blockers]),
        queue("b"),
        queue("g", guarantee={"resource": {GPU: "1"}}),
    )
    first = schedule(snap, now=T0)
    assert bind_map(first) == {}  # 2 held, 1 GPU free and kept for g
    after = replace(
        snap, pods=tuple(p for p in snap.pods if p.ref.name != "x"), memory=first.memory
    )
    second = schedule(after, now=T0 + 30)
    assert sorted(bind_map(second)) == ["b-0", "b-1", "b-2"]


def test_reclaim_keeps_a_parents_guarantee_across_its_children() -> None:
    pods = [
        *[p for i in range(3) for p in running_gang(f"x{i}", 1, queue_name="x", nodes=[f"n{i}"])],
        *[p for i in range(3) for p in running_gang(f"y{i}", 1, queue_name="y", nodes=[f"m{i}"])],
        *gang_pods("b", 4, gang="b", min_available=4, gpu=1, labels=in_queue("b"), created=T0),
    ]
    nodes = [
        *gpu_nodes(3),
        *(node(f"m{i}", gpu=1) for i in range(3)),
        node("e0", gpu=1),
        node("e1", gpu=1),
    ]
    snap = with_queues(
        snapshot(nodes, pods),
        queue("P", guarantee={"resource": {"cpu": "5"}}),
        queue("x", parent="P"),
        queue("y", parent="P"),
        queue("b"),
    )
    assert evicted(schedule(snap, now=T0)) == []  # P would keep 4 cpu of its 5


def test_pods_of_a_deleted_node_hold_their_queues_capability_until_they_are_gone() -> None:
    """Chaos seed 30084: a node deleted before its pods are; the queue's room is still theirs."""
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("a", capability={GPU: "2"}))
    for n in gpu_nodes(3):
        cache.upsert_node(n)
    cache.upsert_pod(running("old-0", queue_name="a", node_name="n0"))
    cache.upsert_pod(running("old-1", queue_name="a", node_name="n1"))
    cache.remove_node("n0")
    for p in gang_pods("new", 1, gang="new", min_available=1, gpu=1, labels=in_queue("a")):
        cache.upsert_pod(p)
    result = schedule(cache.snapshot(now=T0), now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "queue a is at its capability for nvidia.com/gpu: 2 of 2" in message


def _parked_then(cache: Any, *, gone: str) -> dict[str, str]:
    """A pass that parks the waiting gang, then ``gone`` finishes, then the next pass (well
    before the flush interval): what it binds."""
    first = schedule(cache.snapshot(now=T0), now=T0)
    assert bind_map(first) == {}
    cache.remember(dict(first.memory))
    cache.remove_pod(f"uid-default-{gone}")
    second = schedule(cache.snapshot(now=T0 + 1), now=T0 + 1)
    return bind_map(second)


def test_room_freed_in_a_queue_by_a_deleted_nodes_pods_wakes_its_parked_gang() -> None:
    """Chaos seed 30092: the pods that held the queue's capability were on a node already
    deleted; their going changed no node that is left, and the gang parked by the
    capability waited for the flush, 60 s on."""
    cache = _capped_cache()  # capability 2: old-0 (n0, deleted) and old-1 hold it
    assert _parked_then(cache, gone="old-0") == {"new-0": "n2"}


def test_room_freed_in_a_queue_wakes_its_parked_gang_where_no_node_change_fits_it() -> None:
    # n0 keeps another queue's pod: the node that changed has no room for a 2-GPU member,
    # the queue has (and n2 always had the room).
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("a", capability={GPU: "3"}))
    cache.upsert_queue(queue("b"))
    for n in gpu_nodes(3, gpus=2):
        cache.upsert_node(n)
    cache.upsert_pod(running("old-0", queue_name="a", node_name="n0"))
    cache.upsert_pod(running("other", queue_name="b", node_name="n0"))
    cache.upsert_pod(running("old-1", queue_name="a", node_name="n1"))
    cache.upsert_pod(running("filler", queue_name="b", node_name="n1"))
    for p in gang_pods("new", 1, gang="new", min_available=1, gpu=2, labels=in_queue("a")):
        cache.upsert_pod(p)
    assert _parked_then(cache, gone="old-0") == {"new-0": "n2"}


def test_room_freed_in_a_sibling_queue_wakes_a_gang_its_parents_capability_parked() -> None:
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("org", capability={GPU: "2"}))
    cache.upsert_queue(queue("x", parent="org"))
    cache.upsert_queue(queue("y", parent="org"))
    for n in gpu_nodes(3):
        cache.upsert_node(n)
    cache.upsert_pod(running("old-0", queue_name="x", node_name="n0"))
    cache.upsert_pod(running("old-1", queue_name="x", node_name="n1"))
    cache.remove_node("n0")
    for p in gang_pods("new", 1, gang="new", min_available=1, gpu=1, labels=in_queue("y")):
        cache.upsert_pod(p)
    assert _parked_then(cache, gone="old-0") == {"new-0": "n2"}


def test_a_volcano_podgroup_whose_queue_the_api_server_defaulted_keeps_its_labels_queue() -> None:
    """Volcano's CRD defaults spec.queue to "default": the label is what the user said."""
    read = volcano_podgroup_from_dict(
        {
            "metadata": {"name": "pg", "namespace": "ml", "labels": {names.QUEUE: "team-a"}},
            "spec": {"minMember": 2, "queue": "default"},
        }
    )
    assert read.queue == "team-a"
    plain = volcano_podgroup_from_dict(
        {"metadata": {"name": "pg", "namespace": "ml"}, "spec": {"queue": "default"}}
    )
    assert plain.queue == "default"


def _capped_cache(*, waiting_member: bool = False) -> Any:
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("a", capability={GPU: "2"}))
    for n in gpu_nodes(3):
        cache.upsert_node(n)
    for i, where in enumerate(["n0", "n1"]):
        cache.upsert_pod(
            pod(f"old-{i}", gang="old", min_available=2, gpu=1, node_name=where,
                phase="Running", labels=in_queue("a"))
        )  # fmt: skip
    if waiting_member:  # a member of the running gang that waits for a node nobody has
        cache.upsert_pod(
            pod("old-2", gang="old", min_available=2, gpu=1, labels=in_queue("a"),
                node_selector={"pool": "none"})
        )  # fmt: skip
    cache.remove_node("n0")
    for p in gang_pods("new", 1, gang="new", min_available=1, gpu=1, labels=in_queue("a")):
        cache.upsert_pod(p)
    return cache


def test_room_freed_in_a_queue_while_the_pass_that_parks_a_gang_runs_wakes_it() -> None:
    """Review of #23: the pod goes after the snapshot and before the pass is remembered,
    while nothing was parked yet: the free is kept for the next snapshot."""
    cache = _capped_cache()
    first = schedule(cache.snapshot(now=T0), now=T0)
    cache.remove_pod("uid-default-old-0")  # while the pass runs
    cache.remember(dict(first.memory))
    assert bind_map(schedule(cache.snapshot(now=T0 + 1), now=T0 + 1)) == {"new-0": "n2"}


def test_room_freed_by_a_gang_with_a_member_waiting_wakes_the_gang_its_queue_parked() -> None:
    cache = _capped_cache(waiting_member=True)
    assert _parked_then(cache, gone="old-0") == {"new-0": "n2"}


def test_a_gang_parked_in_a_queue_without_a_capability_is_not_woken_by_its_queue() -> None:
    """Review of #23: a pod of a queue without limits ending frees node room, which the
    node's change says; the queue has nothing to add (no wake-up on every completion)."""
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("a"))
    cache.upsert_node(node("big", gpu=8))
    cache.upsert_node(node("small", gpu=2))
    cache.upsert_pod(running("full", queue_name="a", node_name="big", gpu=8))
    cache.upsert_pod(running("tiny-0", queue_name="a", node_name="small"))
    cache.upsert_pod(running("tiny-1", queue_name="a", node_name="small"))
    for p in gang_pods("wide", 1, gang="wide", min_available=1, gpu=8, labels=in_queue("a")):
        cache.upsert_pod(p)
    first = schedule(cache.snapshot(now=T0), now=T0)
    cache.remember(dict(first.memory))
    cache.remove_pod("uid-default-tiny-0")
    assert "wide-0" not in {p.ref.name for p in cache.snapshot(now=T0 + 1).pods}


# -- time-based fair share (optional, --fair-share-half-life) ---------------------------------


def test_a_queue_that_had_the_cluster_lately_yields_to_one_that_had_nothing() -> None:
    """Two queues 1:1, each with a gang of 2 GPUs waiting, room for one. Both hold nothing
    now; team-a held the whole cluster on average lately. Without time-based fair share
    the tie goes by name (team-a); with it, team-b goes first."""
    a = gang_pods("a", 2, gang="a", min_available=2, gpu=1, labels=in_queue("team-a"), created=T0)
    b = gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("team-b"), created=T0)
    snap = with_queues(snapshot(gpu_nodes(2), [*a, *b]), queue("team-a"), queue("team-b"))
    assert set(bind_map(schedule(snap, now=T0))) == {"a-0", "a-1"}
    lately = QueueUsage(T0 - 60, {"team-a": {GPU: 2.0}}, held={"team-a": {GPU: 2.0}})
    config = Config(fair_share_half_life_seconds=600.0)
    result = schedule(replace(snap, queue_usage=lately), now=T0, config=config)
    assert set(bind_map(result)) == {"b-0", "b-1"}
    # The usage the pass hands on: the gap at what was held then (2 GPUs), now nothing.
    assert result.queue_usage is not None
    assert result.queue_usage.at == T0
    assert result.queue_usage.average["team-a"][GPU] == pytest.approx(2.0)  # held through


def test_a_trace_of_past_usage_of_a_resource_nobody_wants_now_does_not_put_a_queue_last() -> None:
    """n0: 8 CPUs, 1 GPU. team-b holds 4 CPUs; team-a holds nothing. Each waits with a
    gang of one 4-CPU pod: room for one. team-a used one GPU briefly about 100 minutes ago
    (its recent GPU average has decayed to 1/1024 of a GPU). Nobody wants a GPU now, so
    every fair share of GPUs is 0 (capped by demand): that trace does not make team-a's
    standing (0 + 1/1024) / 2 / 0 = inf and put it behind team-b, which holds half the
    cluster. By CPUs (held now and lately) team-a is far below its share, and it goes
    first, as DRF alone puts it."""
    a = pod("a-0", cpu="4", gang="a", min_available=1, labels=in_queue("team-a"), created=T0)
    b = pod("b-0", cpu="4", gang="b", min_available=1, labels=in_queue("team-b"), created=T0)
    held = pod("b-run", cpu="4", node_name="n0", phase="Running", labels=in_queue("team-b"))
    snap = with_queues(
        snapshot([node("n0", cpu="8", gpu=1)], [a, b, held]), queue("team-a"), queue("team-b")
    )
    assert bind_map(schedule(snap, now=T0)) == {"a-0": "n0"}  # DRF
    lately = QueueUsage(T0 - 60, {"team-a": {GPU: 1.0 / 1024}, "team-b": {"cpu": 4000.0}})
    config = Config(fair_share_half_life_seconds=600.0)
    result = schedule(replace(snap, queue_usage=lately), now=T0, config=config)
    assert bind_map(result) == {"a-0": "n0"}, bind_map(result)


def test_the_gap_since_the_last_update_is_counted_at_what_was_held_then_not_now() -> None:
    """Passes run only when something changed, so usage is updated rarely while the cluster
    is quiet, and the pass that comes is the one a change brings. Four one-GPU nodes:
    team-a held three GPUs from the last update (30 min ago, three half-lives) until its job
    finished just now; team-b has held one all along and holds it now. Each waits with a
    gang of 2 GPUs, room for one (3 free). The architecture says the last pass's holdings
    stand for the gap ("the last pass's holdings being all the core knows"): team-a's
    average stays near 3 GPUs (standing 0.75 against b's 0.5), and team-b goes first.
    Counted at what is held now (team-a: 0), team-a's past would shrink to 3/8 of a GPU
    (standing 0.09) and it would go first, as if the half hour of three GPUs had not been."""
    a = gang_pods("a", 2, gang="a", min_available=2, gpu=1, labels=in_queue("team-a"), created=T0)
    b = gang_pods("b", 2, gang="b", min_available=2, gpu=1, labels=in_queue("team-b"), created=T0)
    held = pod("b-run", gpu=1, node_name="n0", phase="Running", labels=in_queue("team-b"))
    snap = with_queues(snapshot(gpu_nodes(4), [*a, *b, held]), queue("team-a"), queue("team-b"))
    then = {"team-a": {GPU: 3.0}, "team-b": {GPU: 1.0}}
    lately = QueueUsage(T0 - 1800, then, held=then)
    config = Config(fair_share_half_life_seconds=600.0)
    result = schedule(replace(snap, queue_usage=lately), now=T0, config=config)
    assert set(bind_map(result)) == {"b-0", "b-1"}, bind_map(result)


def test_recent_usage_halves_every_half_life_toward_what_was_held() -> None:
    """Through the gap what was held at the last update counts (passes run when something
    changed: what is held now has mostly just begun), and what is held now is kept for the
    next update."""
    before = QueueUsage(0.0, {"a": {"cpu": 1000.0}}, held={"a": {"cpu": 3000.0}})
    after = decayed_usage(before, {"a": {"cpu": 0}, "b": {"cpu": 500}}, now=100.0, half_life=100.0)
    assert after.at == 100.0
    assert after.average["a"]["cpu"] == pytest.approx(0.5 * 1000 + 0.5 * 3000)
    assert "b" not in after.average  # it held nothing through the gap
    assert after.held == {"a": {"cpu": 0.0}, "b": {"cpu": 500.0}}
    # Without a history, what is held now is the history: the order is DRF's, unchanged.
    fresh = decayed_usage(None, {"a": {"cpu": 3000}}, now=5.0, half_life=100.0)
    assert fresh.average == {"a": {"cpu": 3000.0}}
    # Long after, with nothing held at the last update, the past is gone.
    idle = QueueUsage(0.0, {"a": {"cpu": 1000.0}}, held={})
    assert decayed_usage(idle, {}, now=100_000.0, half_life=100.0).average == {}


def test_a_gang_reclaim_may_serve_is_tried_again_at_its_backoff_not_parked_till_the_flush() -> None:
    """Fairness bench through the simulator: a gang of a queue below its fair share failed
    while nothing could be reclaimed for it; when the other queue's standing moved (here,
    it became reclaimable), nothing the gang was tried with changed, and parked it waited
    for the flush (the queue below its share went 7 passes unserved)."""
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("a"))
    cache.upsert_queue(queue("b", reclaimable=False))
    for n in gpu_nodes(2):
        cache.upsert_node(n)
    for i in range(2):
        for p in running_gang(f"b{i}", 1, queue_name="b", nodes=[f"n{i}"], age=i):
            cache.upsert_pod(p)
    for p in gang_pods("a", 1, gang="a", min_available=1, gpu=1, labels=in_queue("a")):
        cache.upsert_pod(p)
    first = schedule(cache.snapshot(now=T0), now=T0)
    assert evicted(first) == []  # b may not be reclaimed from
    (state,) = (s for k, s in first.memory.items() if k.name == "a")
    assert state.parked is None
    cache.remember(dict(first.memory))
    cache.upsert_queue(queue("b"))  # now it may: b holds 2, its fair share is 1
    later = state.retry_at + 0.1
    assert evicted(schedule(cache.snapshot(now=later), now=later)) == ["b1-0"]


def test_a_gang_kept_out_by_a_guarantee_is_tried_again_at_its_backoff_once_it_is_met() -> None:
    """Fairness bench through the simulator (time-based, 32 nodes): a gang kept out only by
    room kept for another queue's guarantee was parked; that queue filling its guarantee on
    a node with no room left changed nothing that fits the gang, which waited for the flush
    while GPUs stood idle."""
    from scheduler.cache.cluster import QUEUES, ClusterCache  # noqa: PLC0415

    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("a"))
    cache.upsert_queue(queue("b", guarantee={"resource": {GPU: "1"}}))
    for n in gpu_nodes(2):
        cache.upsert_node(n)
    theirs = pod("theirs", gpu=1, node_name="n1", phase="Running", scheduler="other")
    cache.upsert_pod(theirs)
    for p in gang_pods("a", 1, gang="a", min_available=1, gpu=1, labels=in_queue("a")):
        cache.upsert_pod(p)
    first = schedule(cache.snapshot(now=T0), now=T0)
    assert bind_map(first) == {}  # n0's GPU is kept for b, below its guarantee
    (state,) = (s for k, s in first.memory.items() if k.name == "a")
    assert state.parked is None
    cache.remember(dict(first.memory))
    cache.remove_pod(theirs.ref.uid)
    cache.upsert_pod(running("b-0", queue_name="b", node_name="n1"))  # b meets its guarantee
    later = state.retry_at + 0.1
    assert bind_map(schedule(cache.snapshot(now=later), now=later)) == {"a-0": "n0"}
