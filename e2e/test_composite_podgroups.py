"""Kubernetes 1.37's CompositePodGroups (scheduling.k8s.io/v1alpha3, behind the alpha
CompositePodGroup gate) on a 1.37 control plane: the PodGroups under one bind at its
quorum, each whole, and a PodGroup waits for the CompositePodGroup it names. 1.36 serves
none, so ``make test-release`` (RELEASE=1.36) leaves this file out."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, stays_unbound, wait_bound
from e2e.test_upstream_gangs import UPSTREAM, members, scheduled_type

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

COMPOSITE_API = "scheduling.k8s.io/v1alpha3"
COMPOSITES = "compositepodgroups.scheduling.k8s.io"


@pytest.fixture
def served(cluster: Cluster) -> str:
    """The version serving PodGroups, where CompositePodGroups are served too."""
    try:
        composites = cluster.access.rest.version_serving("scheduling.k8s.io", "compositepodgroups")
    except KeyError as missing:
        pytest.fail(
            f"this API server serves no CompositePodGroups ({missing}): they need Kubernetes "
            "1.37 with the CompositePodGroup gate; run make test-release (RELEASE=1.37)"
        )
    assert composites == COMPOSITE_API
    return cluster.access.rest.version_serving("scheduling.k8s.io", "podgroups")


def composite(cluster: Cluster, name: str, min_groups: int) -> dict:
    return {
        "apiVersion": COMPOSITE_API,
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "workloadRef": {"workloadName": name, "templateName": name},
            "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        },
    }


def child(cluster: Cluster, version: str, name: str, min_count: int, parent: str) -> dict:
    return {
        "apiVersion": version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            # The API server asks a child for the Workload it was made from (a Job controller
            # would make one); nothing reads it here.
            "workloadRef": {"workloadName": parent, "templateName": name},
            "parentCompositePodGroupName": parent,
            "schedulingPolicy": {"gang": {"minCount": min_count}},
        },
    }


def condition(cluster: Cluster, name: str) -> dict:
    status = cluster.get(UPSTREAM, name).get("status", {})
    found = [c for c in status.get("conditions", []) if c["type"] == scheduled_type(cluster)]
    return found[0] if found else {}


def groups_bound(
    cluster: Cluster, groups: dict[str, set[str]], *, settled: bool = True
) -> set[str]:
    """The groups all of whose pods are bound; a group bound in part fails the test once the
    binds have settled (while they are being made, a gang's pods are bound one call each)."""
    bound = cluster.bound()
    for name, pods in groups.items():
        assert not settled or not (bound & pods) or pods <= bound, (
            f"{name} bound in part: {sorted(bound & pods)}"
        )
    return {name for name, pods in groups.items() if pods <= bound}


def test_two_of_three_podgroups_of_a_composite_bind_whole_and_the_third_waits_for_room(
    cluster: Cluster, scheduler: SchedulerProcess, served: str
) -> None:
    cluster.nodes(2, cpu="4")
    cluster.apply(composite(cluster, "train", 2))
    cluster.apply(*(child(cluster, served, name, 2, "train") for name in ("a", "b", "c")))
    groups = {name: members(cluster, name, 2, requests={"cpu": "2"}) for name in ("a", "b", "c")}
    wait_for(
        lambda: len(groups_bound(cluster, groups, settled=False)) == 2,
        timeout=BIND_TIMEOUT,
        what="two of the three PodGroups bound whole",
    )
    (waiting,) = set(groups) - groups_bound(cluster, groups)
    stays_unbound(cluster, groups[waiting], seconds=2)
    groups_bound(cluster, groups)
    wait_for(
        lambda: condition(cluster, waiting).get("reason") == "Unschedulable",
        timeout=BIND_TIMEOUT,
        what=f"{waiting}'s condition Unschedulable",
    )
    assert "Insufficient cpu" in condition(cluster, waiting)["message"]
    cluster.nodes(1, cpu="4")
    wait_bound(cluster, groups[waiting])
    assert groups_bound(cluster, groups) == set(groups)
    scheduler.assert_alive()


def test_podgroups_wait_for_the_composite_they_name_and_bind_once_it_exists(
    cluster: Cluster, scheduler: SchedulerProcess, served: str
) -> None:
    cluster.nodes(1, cpu="8")
    cluster.apply(*(child(cluster, served, name, 2, "later") for name in ("a", "b")))
    pods = members(cluster, "a", 2) | members(cluster, "b", 2)
    wait_for(
        lambda: any("CompositePodGroup" in m for m in cluster.events("PodGroupNotFound")),
        timeout=BIND_TIMEOUT,
        what="PodGroupNotFound naming the CompositePodGroup",
    )
    stays_unbound(cluster, pods, seconds=2)
    cluster.apply(composite(cluster, "later", 2))
    wait_bound(cluster, pods)
    assert cluster.get(COMPOSITES, "later")["spec"]["schedulingPolicy"]["gang"] == {
        "minGroupCount": 2
    }
    scheduler.assert_alive()
