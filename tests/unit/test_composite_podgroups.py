"""Kubernetes 1.37's CompositePodGroups (scheduling.k8s.io/v1alpha3): the PodGroups under one
root are one GangGroup that binds once the root's quorum can be (``minGroupCount`` of its
children, each at its own ``minCount``), as kube-scheduler's GangScheduling counts it; a part
that falls short is taken back alone, and binds later whole, by its own minimum."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.codecs.podgroups import composite_podgroup_from_dict, workload_podgroup_from_dict
from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.composites import hierarchy_of
from scheduler.model.config import Config
from scheduler.model.gangs import CompositePodGroup, PodGroup, Quorum
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_preemption import evicted

V1BETA1 = "scheduling.k8s.io/v1beta1"


def child(name: str, min_count: int, *, parent: str = "root", **meta: Any) -> PodGroup:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return workload_podgroup_from_dict(
        {
            "apiVersion": V1BETA1,
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", **meta},
            "spec": spec,
        }
    )


def composite(name: str, min_groups: int | None, *, parent: str = "") -> CompositePodGroup:
    policy = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return composite_podgroup_from_dict(
        {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec}
    )


def members(group: str, count: int, **kw: Any) -> list:
    return gang_pods(group, count, spec={"schedulingGroup": {"podGroupName": group}}, **kw)


def cluster(
    nodes: int, pods: list, podgroups: list[PodGroup], composites: list[CompositePodGroup]
) -> Snapshot:
    """``nodes`` nodes of 4 cpu."""
    return replace(
        snapshot([node(f"n{i}", cpu="4") for i in range(nodes)], pods, podgroups=podgroups),
        composites={c.key: c for c in composites},
    )


def bound_groups(result: Any) -> set[str]:
    return {name.rsplit("-", 1)[0] for name in bind_map(result)}


# -- reading ---------------------------------------------------------------------------------


def test_a_composite_reads_its_min_group_count_and_a_basic_one_needs_one_child() -> None:
    assert composite("root", 2).min_groups == 2
    basic = composite("root", None)
    assert (basic.min_groups, basic.basic, basic.errors) == (1, True, ())
    assert composite("mid", 1, parent="root").parent == "root"


def test_a_composite_without_a_policy_or_with_a_bad_count_is_invalid_and_says_why() -> None:
    none = composite_podgroup_from_dict({"metadata": {"name": "r"}, "spec": {}})
    assert "exactly one of gang (with minGroupCount" in none.errors[0]
    zero = composite_podgroup_from_dict(
        {"metadata": {"name": "r"}, "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 0}}}}
    )
    assert "spec.schedulingPolicy.gang.minGroupCount" in zero.errors[0]


def test_a_podgroup_reads_its_parent_and_refuses_a_name_that_is_no_object_name() -> None:
    assert child("a", 2).parent == "root"
    bad = child("a", 2, parent="Not_A_Name")
    assert bad.parent == ""
    assert "spec.parentCompositePodGroupName must name a CompositePodGroup" in bad.errors[0]


def test_a_parent_and_the_gang_groups_annotation_together_are_refused() -> None:
    both = child("a", 2, annotations={names.KOORD_GROUPS: '["default/a", "default/b"]'})
    assert any("keep one" in e for e in both.errors)


# -- the hierarchy ---------------------------------------------------------------------------


def test_the_hierarchy_of_a_podgroup_is_its_roots_quorum_over_every_podgroup_under_it() -> None:
    podgroups = [child("a", 2), child("b", 2, parent="mid"), child("c", 2, parent="mid")]
    composites = [composite("root", 2), composite("mid", 1, parent="root")]
    found = hierarchy_of(
        GangKey("default", "b"),
        podgroups={pg.key: pg for pg in podgroups},
        composites={c.key: c for c in composites},
    )
    key = lambda name: GangKey("default", name)  # noqa: E731
    assert found.quorum == Quorum(
        name="root",
        minimum=2,
        parts=(key("a"), Quorum(name="mid", minimum=1, parts=(key("b"), key("c")))),
    )
    assert found.quorum.met({key("a"), key("c")})
    assert not found.quorum.met({key("b"), key("c")})


def test_a_cycle_or_a_tree_deeper_than_four_levels_is_an_error_and_a_missing_parent_waits() -> None:
    podgroups = {pg.key: pg for pg in [child("a", 1, parent="x")]}
    key = GangKey("default", "a")
    cycle = {c.key: c for c in [composite("x", 1, parent="y"), composite("y", 1, parent="x")]}
    assert (
        "form a cycle (x -> y -> x)"
        in hierarchy_of(key, podgroups=podgroups, composites=cycle).error
    )
    deep = {
        c.key: c
        for c in [
            composite("x", 1, parent="y"),
            composite("y", 1, parent="z"),
            composite("z", 1, parent="w"),
            composite("w", 1),
        ]
    }
    assert "at most 4 levels deep" in hierarchy_of(key, podgroups=podgroups, composites=deep).error
    assert hierarchy_of(key, podgroups=podgroups, composites={}).missing == "x"


# -- placing ---------------------------------------------------------------------------------


def test_two_of_three_children_bind_whole_when_only_two_fit_and_the_third_waits() -> None:
    """Three PodGroups of 2 pods of 2 cpu under a root that needs 2 of them; 2 nodes of 4
    cpu: two children bind whole, the third binds none and says so."""
    pods = members("a", 2, cpu="2") + members("b", 2, cpu="2") + members("c", 2, cpu="2")
    snap = cluster(2, pods, [child("a", 2), child("b", 2), child("c", 2)], [composite("root", 2)])
    result = schedule(snap, now=T0)
    assert bound_groups(result) == {"a", "b"}
    assert len(bind_map(result)) == 4
    said = " ".join(events(result, "FailedScheduling"))
    assert "gang default/c does not fit, nothing of it was bound" in said


def test_nothing_binds_when_fewer_children_than_the_quorum_fit() -> None:
    pods = members("a", 2, cpu="2") + members("b", 2, cpu="2") + members("c", 2, cpu="2")
    snap = cluster(1, pods, [child("a", 2), child("b", 2), child("c", 2)], [composite("root", 2)])
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    said = " ".join(events(result, "FailedScheduling"))
    assert "nothing was bound" in said


def test_a_child_without_pods_does_not_hold_back_a_quorum_the_others_make() -> None:
    pods = members("a", 2, cpu="2") + members("b", 2, cpu="2")
    snap = cluster(3, pods, [child("a", 2), child("b", 2), child("c", 2)], [composite("root", 2)])
    assert bound_groups(schedule(snap, now=T0)) == {"a", "b"}


def test_a_quorum_only_children_not_yet_complete_could_make_waits_and_says_so() -> None:
    """Root needs 2; child b has 1 of its 2 pods: only a is ready, so nothing binds."""
    pods = members("a", 2, cpu="2") + members("b", 1, cpu="2")
    snap = cluster(3, pods, [child("a", 2), child("b", 2)], [composite("root", 2)])
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    said = " ".join(events(result, "GangWaiting"))
    assert "CompositePodGroup root waits until enough of its PodGroups have all" in said


def test_a_child_left_out_of_the_quorum_binds_alone_once_room_comes() -> None:
    """a and b run (bound); c needs its own minimum only: it binds whole when it fits."""
    bound = [
        replace(p, node_name=f"n{i}", phase="Running", bound_by="gang-scheduler")
        for i, p in enumerate(members("a", 2, cpu="2") + members("b", 2, cpu="2"))
    ]
    pods = bound + members("c", 2, cpu="2")
    snap = cluster(5, pods, [child("a", 2), child("b", 2), child("c", 2)], [composite("root", 3)])
    result = schedule(snap, now=T0)
    assert bound_groups(result) == {"c"}


def test_a_nested_composite_counts_as_one_child_placed_only_at_its_own_quorum() -> None:
    """root needs a and mid; mid needs b and c. Room for a and b only: nothing binds; room
    for all three: all bind."""
    pods = members("a", 2, cpu="2") + members("b", 2, cpu="2") + members("c", 2, cpu="2")
    podgroups = [child("a", 2), child("b", 2, parent="mid"), child("c", 2, parent="mid")]
    composites = [composite("root", 2), composite("mid", 2, parent="root")]
    assert bind_map(schedule(cluster(2, pods, podgroups, composites), now=T0)) == {}
    result = schedule(cluster(3, pods, podgroups, composites), now=T0)
    assert bound_groups(result) == {"a", "b", "c"}


def test_a_missing_composite_is_waited_for_with_an_event_that_names_it() -> None:
    pods = members("a", 2, cpu="2")
    result = schedule(cluster(2, pods, [child("a", 2)], []), now=T0)
    assert bind_map(result) == {}
    said = " ".join(events(result, "PodGroupNotFound"))
    assert "waits for CompositePodGroup default/root (scheduling.k8s.io/v1alpha3)" in said
    assert "ClusterRole must let it list and watch compositepodgroups" in said


def test_an_invalid_tree_is_an_invalid_gang_spec_naming_the_cycle() -> None:
    pods = members("a", 1)
    composites = [composite("root", 1, parent="top"), composite("top", 1, parent="root")]
    result = schedule(cluster(1, pods, [child("a", 1)], composites), now=T0)
    assert bind_map(result) == {}
    assert "form a cycle (root -> top -> root)" in " ".join(events(result, "InvalidGangSpec"))


def test_explain_says_what_the_root_needs() -> None:
    pods = members("a", 2, cpu="2") + members("b", 2, cpu="2")
    podgroups = [child("a", 2), child("b", 2, parent="mid")]
    composites = [composite("root", 2), composite("mid", 1, parent="root")]
    lines = explain(
        cluster(2, pods, podgroups, composites), GangKey("default", "a"), now=T0, config=Config()
    )
    text = "\n".join(lines)
    assert "CompositePodGroup root: 2 of [a, 1 of [b]] placed together" in text


# -- preemption ------------------------------------------------------------------------------


def _preempted_under(mode: dict | None) -> list[str]:
    """PodGroups a and b (2 pods of 2 cpu, minimum 2) run low on n0 and n1 under a root
    CompositePodGroup; a high pod of 4 cpu waits."""
    root = composite("root", 2)
    if mode is not None:
        root = replace(root, disruption_mode=next(iter(mode)))
    low = [
        replace(p, node_name=f"n{i // 2}", phase="Running", priority=0)
        for i, p in enumerate(members("a", 2, cpu="2") + members("b", 2, cpu="2"))
    ]
    high = gang_pods("high", 1, gang="high", min_available=1, cpu="4", priority=1000)
    return evicted(
        schedule(cluster(2, [*low, *high], [child("a", 2), child("b", 2)], [root]), now=T0)
    )


def test_a_composite_disrupted_whole_makes_every_pod_under_it_one_victim() -> None:
    assert _preempted_under({"all": {}}) == ["a-0", "a-1", "b-0", "b-1"]


def test_a_composite_disrupted_singly_leaves_each_podgroup_its_own_victim() -> None:
    assert _preempted_under({"single": {}}) in (["a-0", "a-1"], ["b-0", "b-1"])
    assert len(_preempted_under(None)) == 2


def test_a_composites_disruption_mode_is_read_and_checked() -> None:
    body = {
        "metadata": {"name": "r"},
        "spec": {"schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}},
    }
    assert composite_podgroup_from_dict(body).disruption_mode == "all"
    body["spec"]["disruptionMode"] = {"most": {}}
    assert "spec.disruptionMode must be" in composite_podgroup_from_dict(body).errors[0]


def test_a_child_that_timed_out_times_out_alone_not_the_siblings_the_quorum_needs() -> None:
    """root needs 2 of [a, b, c]: a runs; c timed out (its pods marked); b's pods fit. b
    binds: a spare child's timeout is its own."""
    running = [
        replace(p, node_name=f"n{i}", phase="Running", bound_by="gang-scheduler")
        for i, p in enumerate(members("a", 2, cpu="2"))
    ]
    timed_out = members("c", 2, cpu="64", annotations={names.KOORD_TIMEOUT: "true"})
    pods = running + members("b", 2, cpu="2") + timed_out
    snap = cluster(4, pods, [child("a", 2), child("b", 2), child("c", 2)], [composite("root", 2)])
    result = schedule(snap, now=T0)
    assert bound_groups(result) == {"b"}


def test_a_composite_disrupted_whole_is_not_a_victim_if_a_part_of_it_may_not_go() -> None:
    """a (priority 0) and b (priority 2000) run under a root disrupted whole; a pod of
    priority 1000 needs a whole node: b may not go, so neither may a (never a alone)."""
    root = replace(composite("root", 2), disruption_mode="all")
    a = [replace(p, node_name="n0", phase="Running", priority=0) for p in members("a", 2, cpu="2")]
    b = [
        replace(p, node_name="n1", phase="Running", priority=2000) for p in members("b", 2, cpu="2")
    ]
    high = gang_pods("high", 1, gang="high", min_available=1, cpu="4", priority=1000)
    snap = cluster(2, [*a, *b, *high], [child("a", 2), child("b", 2)], [root])
    assert evicted(schedule(snap, now=T0)) == []
