"""Consolidation (the consolidate action): a gang that does not fit has movable pods moved,
through the Eviction API, where each fits elsewhere in the same what-if; never a pod not
marked movable or without a controller, never a gang below its minimum, never against a
PodDisruptionBudget, at most so many moves a pass."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.budgets import DisruptionBudget
from scheduler.model.config import Config
from scheduler.model.pods import GangKey, LabelSelector, Pod
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map

CONSOLIDATING = Config(actions=("allocate", "consolidate", "preempt"))
MOVABLE = {names.MOVABLE: "true"}


def on(p: Pod, node_name: str) -> Pod:
    return replace(p, node_name=node_name, phase="Running")


def movable(name: str, *, cpu: str, node_name: str, **kw: object) -> Pod:
    return on(pod(name, cpu=cpu, annotations=MOVABLE, owner=f"rs-{name}", **kw), node_name)


def three_nodes_with_room_scattered() -> tuple[list, list[Pod]]:
    """Three nodes of 8 cpu: 6 free on n0 (a movable 2-cpu pod), 4 on n1 and n2 (a fixed
    4-cpu pod each): 14 cpu free in all, no node with 8."""
    nodes = [node(f"n{i}", cpu="8") for i in range(3)]
    running = [
        movable("web", cpu="2", node_name="n0"),
        on(pod("db-1", cpu="4", owner="db"), "n1"),
        on(pod("db-2", cpu="4", owner="db"), "n2"),
    ]
    return nodes, running


def whole_node_gang() -> list[Pod]:
    return gang_pods("train", 1, gang="train", min_available=1, cpu="8", created=T0)


def moves(result: object) -> dict[str, str]:
    return {e.pod.name: e.moved_to for e in result.evictions}  # type: ignore[attr-defined]


def test_a_whole_node_gang_fits_once_one_movable_pod_moves() -> None:
    nodes, running = three_nodes_with_room_scattered()
    result = schedule(snapshot(nodes, [*running, *whole_node_gang()]), now=T0, config=CONSOLIDATING)
    assert moves(result) == {"web": "n1"}, "web fits on n1 beside db-1"
    assert {n.pod.name: n.node for n in result.nominations} == {"train-0": "n0"}
    assert bind_map(result) == {}, "the gang binds once web has left"
    said = [e for e in result.events if e.reason == "Consolidating"]
    assert said, "the gang is told what moves for it"
    assert "default/web to n1" in said[0].message


def test_the_gang_binds_where_it_was_nominated_once_the_moved_pod_has_left() -> None:
    nodes, running = three_nodes_with_room_scattered()
    gang = whole_node_gang()
    first = schedule(snapshot(nodes, [*running, *gang]), now=T0, config=CONSOLIDATING)
    # The ReplicaSet made web again: pending, ours; the gang's room is held for it.
    again = pod("web-2", cpu="2", annotations=MOVABLE, owner="rs-web", created=T0 + 1)
    after = snapshot(nodes, [*running[1:], *gang, again], memory=first.memory)
    second = schedule(after, now=T0 + 1, config=CONSOLIDATING)
    assert bind_map(second) == {"train-0": "n0", "web-2": "n1"}


def test_nothing_moves_unless_the_action_is_configured() -> None:
    nodes, running = three_nodes_with_room_scattered()
    result = schedule(snapshot(nodes, [*running, *whole_node_gang()]), now=T0)
    assert result.evictions == ()


def test_a_pod_not_marked_movable_or_owned_by_no_controller_never_moves() -> None:
    nodes, running = three_nodes_with_room_scattered()
    unmarked = on(pod("web", cpu="2", owner="rs-web"), "n0")
    bare = on(pod("web", cpu="2", annotations=MOVABLE), "n0")  # nothing would make it again
    for web in (unmarked, bare):
        pods = [web, *running[1:], *whole_node_gang()]
        result = schedule(snapshot(nodes, pods), now=T0, config=CONSOLIDATING)
        assert result.evictions == ()


def test_nothing_moves_when_a_moved_pod_would_fit_nowhere_else() -> None:
    nodes = [node(f"n{i}", cpu="8") for i in range(3)]
    running = [
        movable("web", cpu="2", node_name="n0"),
        on(pod("db-1", cpu="7", owner="db"), "n1"),
        on(pod("db-2", cpu="7", owner="db"), "n2"),
    ]
    result = schedule(snapshot(nodes, [*running, *whole_node_gang()]), now=T0, config=CONSOLIDATING)
    assert result.evictions == ()


def test_a_movable_gang_is_never_taken_below_its_minimum() -> None:
    nodes = [node(f"n{i}", cpu="8") for i in range(3)]
    members = gang_pods(
        "web", 2, gang="web", min_available=2, cpu="2", annotations=MOVABLE, owner="rs-web"
    )
    running = [
        on(members[0], "n0"),
        on(members[1], "n0"),
        on(pod("db-1", cpu="4"), "n1"),
        on(pod("db-2", cpu="4"), "n2"),
    ]
    result = schedule(snapshot(nodes, [*running, *whole_node_gang()]), now=T0, config=CONSOLIDATING)
    assert result.evictions == (), "moving either member would leave web below its minimum"
    # With a minimum of 1 one member may go, but both had to: still nothing.
    loose = [replace(p, gang=replace(p.gang, min_available=1)) if p.gang else p for p in running]
    result = schedule(snapshot(nodes, [*loose, *whole_node_gang()]), now=T0, config=CONSOLIDATING)
    assert result.evictions == ()


def test_a_budget_that_forbids_the_move_stops_it() -> None:
    nodes, running = three_nodes_with_room_scattered()
    running[0] = replace(running[0], labels={"app": "web"})
    budget = DisruptionBudget(
        namespace="default",
        name="web",
        selector=LabelSelector(match_labels=(("app", "web"),)),
        disruptions_allowed=0,
    )
    shot = replace(snapshot(nodes, [*running, *whole_node_gang()]), budgets=(budget,))
    assert schedule(shot, now=T0, config=CONSOLIDATING).evictions == ()
    allowed = replace(shot, budgets=(replace(budget, disruptions_allowed=1),))
    assert moves(schedule(allowed, now=T0, config=CONSOLIDATING)) == {"web": "n1"}


def test_no_more_pods_move_in_a_pass_than_allowed() -> None:
    nodes = [node(f"n{i}", cpu="8") for i in range(3)]
    running = [
        movable("web-a", cpu="2", node_name="n0"),
        movable("web-b", cpu="2", node_name="n0"),
        on(pod("db-1", cpu="2", owner="db"), "n1"),
        on(pod("db-2", cpu="4", owner="db"), "n2"),
    ]
    pods = [*running, *whole_node_gang()]
    two = schedule(snapshot(nodes, pods), now=T0, config=CONSOLIDATING)
    assert sorted(moves(two)) == ["web-a", "web-b"]
    one = replace(CONSOLIDATING, max_moves_per_pass=1)
    assert schedule(snapshot(nodes, pods), now=T0, config=one).evictions == ()


def test_a_pod_at_or_above_the_priority_limit_never_moves() -> None:
    nodes, running = three_nodes_with_room_scattered()
    running[0] = replace(running[0], priority=500)
    pods = [*running, *whole_node_gang()]
    limited = replace(CONSOLIDATING, movable_below_priority=500)
    assert schedule(snapshot(nodes, pods), now=T0, config=limited).evictions == ()
    assert moves(schedule(snapshot(nodes, pods), now=T0, config=CONSOLIDATING)) == {"web": "n1"}


def test_explain_says_what_a_pass_would_move_for_the_gang() -> None:
    nodes, running = three_nodes_with_room_scattered()
    shot = snapshot(nodes, [*running, *whole_node_gang()])
    lines = explain(shot, GangKey("default", "train"), now=T0, config=CONSOLIDATING)
    assert "a pass now would move 1 pod(s) for it (consolidation): default/web to n1" in lines
    plain = explain(shot, GangKey("default", "train"), now=T0, config=Config())
    assert not any("would move" in line for line in plain), "not without the action"
