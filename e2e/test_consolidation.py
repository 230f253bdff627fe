"""Consolidation on the real API server: a whole-node gang fits once a movable pod of a
StatefulSet is moved (evicted through the Eviction API, made again by its controller, placed
on another node); a PodDisruptionBudget that forbids the move stops it."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, stays_unbound, wait_bound
from scheduler.model import names

pytestmark = pytest.mark.cluster


def scattered(cluster: Cluster, private_scheduler: PrivateSchedulers) -> tuple[
    list[str], SchedulerProcess, str
]:  # fmt: skip
    """Three nodes of 8 cpu: a StatefulSet's movable 2-cpu pod (web-0) on the first, 4 cpu
    taken on each of the others: 14 cpu free, no node with 8. The scheduler consolidates.
    The movable pod's uid."""
    nodes = sorted(cluster.nodes(3, cpu="8"))
    scheduler = private_scheduler.start(
        "--actions", "finish-evictions,allocate,consolidate,preempt"
    )
    # Fill the others while the StatefulSet's pod is placed, so that it goes on the first.
    fixed = [
        cluster.pod(f"{role}-{i}", requests={"cpu": "4"}, spec={"nodeName": node})
        for i, node in enumerate(nodes[1:], start=1)
        for role in ("db", "filler")
    ]
    cluster.apply(*fixed)
    template = cluster.pod(
        "web",
        scheduler=private_scheduler.name,
        labels={"app": "web"},
        annotations={names.MOVABLE: "true"},
        requests={"cpu": "2"},
    )
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": cluster.namespace},
            "spec": {
                "replicas": 1,
                "serviceName": "web",
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {k: template["metadata"][k] for k in ("labels", "annotations")},
                    "spec": template["spec"],
                },
            },
        }
    )
    first = wait_for(
        lambda: cluster.placements().get("web-0"),
        timeout=BIND_TIMEOUT,
        what="the StatefulSet's pod bound",
    )
    assert first == nodes[0], f"web went to {first}, not {nodes[0]}"
    for i in range(1, 3):
        cluster.access.kubectl(
            "delete", "pod", f"filler-{i}", "-n", cluster.namespace, "--grace-period=0",
            "--force", "--wait=true",
        )  # fmt: skip
    return nodes, scheduler, uid_of(cluster, "web-0")


def uid_of(cluster: Cluster, pod: str) -> str:
    return str(cluster.get("pod", pod)["metadata"]["uid"])


def test_a_whole_node_gang_binds_once_a_movable_pod_moves_to_another_node(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes, scheduler, moved = scattered(cluster, private_scheduler)
    gang = cluster.gang(
        "train", 1, scheduler=private_scheduler.name, annotations=koord("train", 1),
        requests={"cpu": "8"},
    )  # fmt: skip
    wait_bound(cluster, gang)
    assert cluster.placements()["train-0"] == nodes[0]
    again = wait_for(
        lambda: uid_of(cluster, "web-0") != moved and cluster.placements().get("web-0"),
        timeout=BIND_TIMEOUT,
        what="the StatefulSet's pod made again and bound",
    )
    assert again in nodes[1:], f"web-0 made again on {again}"
    said = cluster.events("Descheduled")
    assert len(said) == 1, said
    assert f"Moved by consolidation from node {nodes[0]}" in said[0]
    assert cluster.events("Consolidating"), "the gang is told what moved for it"
    scheduler.assert_alive()


def test_a_disruption_budget_that_forbids_the_move_keeps_the_pod_and_the_gang_waits(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes, scheduler, kept = scattered(cluster, private_scheduler)
    cluster.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": cluster.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
    )

    def observed() -> bool:
        status = cluster.get("pdb", "web").get("status", {})
        return status.get("observedGeneration", 0) >= 1 and status.get("disruptionsAllowed") == 0

    wait_for(observed, timeout=BIND_TIMEOUT, what="the disruption controller's status")
    gang = cluster.gang(
        "train", 1, scheduler=private_scheduler.name, annotations=koord("train", 1),
        requests={"cpu": "8"},
    )  # fmt: skip
    wait_for(
        lambda: cluster.events("FailedScheduling"),
        timeout=BIND_TIMEOUT,
        what="the gang tried and found no room",
    )
    stays_unbound(cluster, gang, seconds=5.0)
    assert uid_of(cluster, "web-0") == kept, "the budget's pod stays"
    assert cluster.placements()["web-0"] == nodes[0]
    assert cluster.events("Descheduled") == []
    scheduler.assert_alive()
