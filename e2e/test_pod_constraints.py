"""Issue #11 on the real API server: what a pod spec says is honoured for whole gangs, and a
pod that cannot be placed says so where the autoscalers look (PodScheduled=False)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e.fixtures import Cluster, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, stays_unbound, wait_bound

pytestmark = pytest.mark.cluster

GATE = {"schedulingGates": [{"name": "example.com/admission"}]}


def pod_scheduled(cluster: Cluster, name: str) -> dict:
    """The pod's PodScheduled condition ({} if it has none)."""
    conditions = cluster.get("pod", name).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "PodScheduled"), {})


def test_gang_with_a_gated_member_waits_then_binds_once_the_gate_is_removed(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="8")
    open_ = cluster.gang("train", 2, annotations=koord("train", 3))
    cluster.apply(cluster.pod("train-2", annotations=koord("train", 3), spec=GATE))
    wait_for(
        lambda: cluster.events("SchedulingGated"), timeout=BIND_TIMEOUT, what="SchedulingGated"
    )
    assert "train-2 (example.com/admission)" in cluster.events("SchedulingGated")[0]
    stays_unbound(cluster, open_ | {"train-2"}, seconds=2)
    cluster.access.kubectl(
        "patch", "pod", "train-2", "-n", cluster.namespace, "--type=json",
        "-p", json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]),
    )  # fmt: skip
    wait_bound(cluster, open_ | {"train-2"})
    scheduler.assert_alive()


def test_members_of_a_gang_that_does_not_fit_carry_pod_scheduled_false_until_they_bind(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """The cluster autoscaler and Karpenter add nodes for pods with PodScheduled=False,
    reason Unschedulable; a gang waiting for room must show it on every member."""
    cluster.nodes(1, cpu="4")
    members = cluster.gang("wide", 3, annotations=koord("wide", 3), requests={"cpu": "3"})

    def all_marked() -> bool:
        return all(pod_scheduled(cluster, m).get("reason") == "Unschedulable" for m in members)

    wait_for(all_marked, timeout=BIND_TIMEOUT, what="PodScheduled=False on every member")
    condition = pod_scheduled(cluster, "wide-0")
    assert condition["status"] == "False"
    assert "Insufficient cpu" in condition["message"]
    cluster.nodes(2, cpu="4")  # what an autoscaler would do
    wait_bound(cluster, members)
    wait_for(
        lambda: all(pod_scheduled(cluster, m).get("status") == "True" for m in members),
        timeout=BIND_TIMEOUT,
        what="PodScheduled=True once bound",
    )
    scheduler.assert_alive()


def test_gang_with_one_per_node_anti_affinity_spreads_over_nodes(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """The measured bug: all 4 workers landed on one node. The term also names the namespace
    by a label selector, so the scheduler must know namespaces' labels (its namespace watch)."""
    cluster.access.kubectl("label", "namespace", cluster.namespace, f"team={cluster.namespace}")
    cluster.nodes(6, cpu="8")
    term = {
        "labelSelector": {"matchLabels": {"app": "worker"}},
        "namespaceSelector": {"matchLabels": {"team": cluster.namespace}},
        "topologyKey": "kubernetes.io/hostname",
    }
    anti = {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }
    members = cluster.gang(
        "worker", 4, annotations=koord("worker", 4), labels={"app": "worker"}, spec=anti
    )
    wait_bound(cluster, members)
    placements = cluster.placements()
    assert len({placements[m] for m in members}) == 4, placements
    scheduler.assert_alive()


def test_gang_goes_where_its_volumes_are_and_a_missing_claim_is_named(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """Local volumes pin their pods: each member's claim is bound to a volume reachable
    only from one node, and the gang lands there; a pod whose claim does not exist waits
    with an Event naming the claim."""
    nodes = cluster.nodes(3, cpu="8")
    ns = cluster.namespace
    volumes, claims = [], []
    for i, node in enumerate(nodes[:2]):
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                      "values": [node]}]}  # fmt: skip
        volumes.append({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{ns}-pv{i}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "", "local": {"path": "/data"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}},
        })  # fmt: skip
        claims.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{i}", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "volumeName": f"{ns}-pv{i}", "resources": {"requests": {"storage": "1Gi"}}},
        })  # fmt: skip

    def claiming(name: str, claim: str, **pod: Any) -> dict:
        volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
        return cluster.pod(name, spec={"volumes": [volume]}, **pod)

    try:
        cluster.apply(*volumes, *claims)
        cluster.apply(
            *(claiming(f"db-{i}", f"data-{i}", annotations=koord("db", 2)) for i in (0, 1))
        )
        wait_bound(cluster, {"db-0", "db-1"})
        placements = cluster.placements()
        assert (placements["db-0"], placements["db-1"]) == (nodes[0], nodes[1])
        cluster.apply(claiming("orphan", "nowhere"))
        wait_for(
            lambda: any('"nowhere" not found' in m for m in cluster.events("FailedScheduling")),
            timeout=BIND_TIMEOUT,
            what='a FailedScheduling event naming the missing claim "nowhere"',
        )
        stays_unbound(cluster, {"orphan"}, seconds=1)
        scheduler.assert_alive()
    finally:
        names = [v["metadata"]["name"] for v in volumes]
        cluster.access.kubectl("delete", "pv", *names, "--wait=false", check=False)
