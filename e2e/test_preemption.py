"""Gang preemption (issue #12) on the real API server: a high-priority gang evicts one
low-priority gang whole, leaves the other alone, and binds whole once the victims are gone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, wait_bound
from scheduler.model import names

pytestmark = pytest.mark.cluster


@pytest.fixture
def priorities(cluster: Cluster) -> Iterator[tuple[str, str]]:
    low, high = f"{cluster.namespace}-low", f"{cluster.namespace}-high"
    cluster.apply(
        *(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value}
            for name, value in ((low, 1), (high, 1000))
        )
    )  # fmt: skip
    try:
        yield low, high
    finally:
        cluster.access.kubectl("delete", "priorityclass", low, high, check=False)


def test_high_priority_gang_evicts_one_low_gang_whole_and_binds_whole(
    cluster: Cluster, scheduler: SchedulerProcess, priorities: tuple[str, str]
) -> None:
    low, high = priorities
    cluster.nodes(2, cpu="32")
    cpu16 = {"cpu": "16"}
    first = cluster.gang(
        "low-a", 2, annotations=koord("low-a", 2), requests=cpu16, priority_class=low
    )
    wait_bound(cluster, first)
    second = cluster.gang(
        "low-b", 2, annotations=koord("low-b", 2), requests=cpu16, priority_class=low
    )
    wait_bound(cluster, second)
    urgent = cluster.gang(
        "high", 2, annotations=koord("high", 2), requests=cpu16, priority_class=high
    )
    wait_bound(cluster, urgent)
    pods = set(cluster.placements())
    # One low gang is evicted whole, the other untouched (which one: the younger, but
    # creation times have one-second resolution here).
    assert (first <= pods and not second & pods) or (second <= pods and not first & pods), pods
    preempted = cluster.events("Preempted")
    assert len(preempted) == 2, preempted
    assert all("Preempted by gang" in m for m in preempted)
    scheduler.assert_alive()


def test_preemption_policy_never_waits_instead(
    cluster: Cluster, scheduler: SchedulerProcess, priorities: tuple[str, str]
) -> None:
    low, _ = priorities
    cluster.nodes(1, cpu="32")
    cpu16 = {"cpu": "16"}
    lows = cluster.gang("low", 2, annotations=koord("low", 2), requests=cpu16, priority_class=low)
    wait_bound(cluster, lows)
    polite = f"{cluster.namespace}-polite"  # the API server takes the policy from the class
    cluster.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": polite},
            "value": 1000,
            "preemptionPolicy": "Never",
        }
    )
    try:
        cluster.gang("polite", 2, annotations=koord("polite", 2), requests=cpu16,
                     priority_class=polite)  # fmt: skip
        wait_for(lambda: cluster.events("FailedScheduling"), timeout=BIND_TIMEOUT, what="a failure")
        assert set(cluster.bound()) == lows
        assert not cluster.events("Preempted")
    finally:
        cluster.access.kubectl("delete", "priorityclass", polite, check=False)


def test_a_victim_gang_above_its_minimum_loses_only_its_extra_members(
    cluster: Cluster, scheduler: SchedulerProcess, priorities: tuple[str, str]
) -> None:
    low, high = priorities
    cluster.nodes(1, cpu="32")
    cpu8 = {"cpu": "8"}
    workers = cluster.gang("w", 4, annotations=koord("w", 2), requests=cpu8, priority_class=low)
    wait_bound(cluster, workers)
    urgent = cluster.gang(
        "high", 2, annotations=koord("high", 2), requests=cpu8, priority_class=high
    )
    wait_bound(cluster, urgent)
    left = workers & set(cluster.placements())
    assert len(left) == 2, f"the low gang keeps its minimum of 2: {sorted(left)}"
    assert len(cluster.events("Preempted")) == 2


def test_nonstrict_holds_yield_to_a_higher_priority_gang(
    cluster: Cluster, scheduler: SchedulerProcess, priorities: tuple[str, str]
) -> None:
    """#12's NonStrict case: a low-priority NonStrict gang holds the room left on a node; a
    high-priority NonStrict gang arrives and takes that room at its turn (the low one lets
    go, HoldReleased); when more room frees, the high one completes, not the low one."""
    low, high = priorities
    (node,) = cluster.nodes(1, cpu="6")
    blocker = cluster.pod("blocker", requests={"cpu": "3"}, priority_class=high)
    blocker["spec"]["nodeName"] = node  # bound by hand: nobody preempts it
    cluster.apply(blocker)
    nonstrict = {"mode": "NonStrict"}
    cpu1 = {"cpu": "1"}
    cluster.gang("low", 4, annotations=koord("low", 4, **nonstrict), requests=cpu1,
                 priority_class=low)  # fmt: skip
    wait_for(
        lambda: any("holds 3 of 4" in m for m in cluster.events("FailedScheduling")),
        timeout=BIND_TIMEOUT,
        what="the low gang holding 3 of 4",
    )
    # The high gang comes while the room is still short: it takes it first, at its turn.
    urgent = cluster.gang("high", 4, annotations=koord("high", 4, **nonstrict), requests=cpu1,
                          priority_class=high)  # fmt: skip
    wait_for(lambda: cluster.events("HoldReleased"), timeout=BIND_TIMEOUT, what="HoldReleased")
    cluster.access.kubectl("delete", "pod", "blocker", "-n", cluster.namespace)
    wait_bound(cluster, urgent)
    assert not {p for p in cluster.bound() if p.startswith("low")}


def test_a_gang_a_disruption_budget_protects_is_passed_over_for_one_it_does_not(
    cluster: Cluster, scheduler: SchedulerProcess, priorities: tuple[str, str]
) -> None:
    """Two low gangs alike; without a budget "a-kept" would go (younger, or the same second
    and first by name). Its PodDisruptionBudget, as the disruption controller reports it
    (nothing may be disrupted), sends the preemption to the other gang instead."""
    low, high = priorities
    cluster.nodes(2, cpu="32")
    cpu16 = {"cpu": "16"}
    other = cluster.gang("other", 2, annotations=koord("other", 2), requests=cpu16,
                         priority_class=low, labels={"app": "other"})  # fmt: skip
    wait_bound(cluster, other)
    kept = cluster.gang("a-kept", 2, annotations=koord("a-kept", 2), requests=cpu16,
                        priority_class=low, labels={"app": "kept"})  # fmt: skip
    wait_bound(cluster, kept)
    cluster.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "kept", "namespace": cluster.namespace},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "kept"}}},
        }
    )

    def observed() -> bool:
        out = cluster.access.kubectl(
            "get", "pdb", "kept", "-n", cluster.namespace, "-o", "json"
        ).stdout
        status = json.loads(out).get("status", {})
        return status.get("observedGeneration", 0) >= 1 and status.get("disruptionsAllowed") == 0

    wait_for(observed, timeout=BIND_TIMEOUT, what="the disruption controller's status")
    urgent = cluster.gang(
        "high", 2, annotations=koord("high", 2), requests=cpu16, priority_class=high
    )
    wait_bound(cluster, urgent)
    pods = set(cluster.placements())
    assert kept <= pods, f"the budget's gang stays: {sorted(pods)}"
    assert not other & pods, f"the other gang was evicted: {sorted(pods)}"
    scheduler.assert_alive()


def test_a_topology_gang_preempts_inside_one_rack(
    cluster: Cluster, private_scheduler: PrivateSchedulers, priorities: tuple[str, str]
) -> None:
    """Two racks of two nodes, each node half taken by a low pod of another scheduler. The
    first victims by order (youngest, then by name: a, b) are in different racks; the gang
    must sit whole nodes of one rack, so it evicts b and c (rack r1) and leaves a and d."""
    low, high = priorities
    rack = "topology.example.com/rack"
    r0 = cluster.nodes(2, cpu="8", labels={rack: "r0"})
    r1 = cluster.nodes(2, cpu="8", labels={rack: "r1"})
    scheduler = private_scheduler.start(
        "--topology-namespace", cluster.namespace, "--topology-from-labels", f"rack={rack}"
    )
    where = {"d": r0[1], "c": r1[1], "b": r1[0], "a": r0[0]}  # created oldest first
    for name, node in where.items():
        victim = cluster.pod(name, scheduler="someone-else", requests={"cpu": "4"},
                             priority_class=low)  # fmt: skip
        victim["spec"]["nodeName"] = node
        cluster.apply(victim)
    one_rack = json.dumps({"rack": {"type": "pack", "partitions": 1, "isHard": True}})
    urgent = cluster.gang(
        "high", 2, scheduler=scheduler.name, requests={"cpu": "8"}, priority_class=high,
        annotations={**koord("high", 2), names.TOPOLOGY_CONSTRAINTS: one_rack},
    )  # fmt: skip
    wait_bound(cluster, urgent)
    placed = cluster.placements()
    assert {placed[p] for p in urgent} == set(r1), placed
    assert {"a", "d"} <= set(placed), f"rack r0's pods stay: {placed}"
    assert not {"b", "c"} & set(placed), f"rack r1's pods were evicted: {placed}"
    scheduler.assert_alive()
