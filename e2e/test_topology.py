"""Topology-aware placement as seed 004's users see it: a topology ConfigMap, a Sakkara group
ConfigMap and a Job, PodGroups with the constraint annotation, node labels as topology.

Each test runs its own scheduler whose --topology-namespace is the test's namespace, so the
tests' topologies never meet.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, wait_for
from scheduler.model import names

pytestmark = pytest.mark.cluster

TIMEOUT = 45
GROUP_A = {"rack": {"type": "pack"}, "node": {"type": "spread"}}


def topology(cluster: Cluster, tree: dict[str, list[str]]) -> dict:
    """Seed 004's topology ConfigMap: racks of this test's nodes."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "cluster-topology",
            "namespace": cluster.namespace,
            "labels": {names.SAKKARA_TOPOLOGY: ""},
        },
        "data": {
            "name": "cluster-tree",
            "resource-names": json.dumps(["cpu", "memory"]),
            "level-names": json.dumps(["rack", "node"]),
            "tree": json.dumps({rack: {n: {} for n in nodes} for rack, nodes in tree.items()}),
        },
    }


def group(cluster: Cluster, name: str, size: int, constraints: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {names.SAKKARA_GROUP: ""},
        },
        "data": {
            "name": name,
            "size": str(size),
            "priority": "0",
            "constraints": json.dumps(constraints),
        },
    }


def pods(cluster: Cluster) -> list[dict]:
    out = cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    return json.loads(out)["items"]


def bound_count(cluster: Cluster, prefix: str) -> int:
    return sum(
        1
        for p in pods(cluster)
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    )


def test_sakkara_group_job_is_placed_ranked_and_written_back(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes = cluster.nodes(6, cpu="4")
    racks = {"rack-0": nodes[:3], "rack-1": nodes[3:]}
    cluster.apply(topology(cluster, racks), group(cluster, "group-a", 8, GROUP_A))
    scheduler = private_scheduler.start("--topology-namespace", cluster.namespace)
    spec = cluster.pod("unused", scheduler=scheduler.name, requests={"cpu": "1"})["spec"]
    spec["restartPolicy"] = "OnFailure"
    template = {"metadata": {"labels": {names.SAKKARA_GROUP_NAME: "group-a"}}, "spec": spec}
    cluster.apply(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job-a", "namespace": cluster.namespace},
            "spec": {"parallelism": 8, "completions": 8, "template": template},
        }
    )
    wait_for(lambda: bound_count(cluster, "job-a") == 8, timeout=TIMEOUT, what="8 Job pods bound")
    members = [p for p in pods(cluster) if p["metadata"]["name"].startswith("job-a")]
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in members}
    rack_of = {n: rack for rack, ns in racks.items() for n in ns}
    assert len({rack_of[n] for n in where.values()}) == 1, where  # packed on one rack
    assert sorted(Counter(where.values()).values()) == [2, 3, 3]  # spread over its nodes

    def written_back() -> dict | None:
        data = cluster.get("configmap", "group-a")["data"]
        return data if data.get("status") == "Bound" else None

    data = wait_for(written_back, timeout=TIMEOUT, what="group ConfigMap status Bound")
    placement = json.loads(data["placement"])
    placed = {pod for rack in placement["root"].values() for ps in rack.values() for pod in ps}
    assert placed == set(where)
    assert sorted(rank for _, rank in json.loads(data["rank"])) == list(range(8))
    for key in ("schedBeginTime", "schedEndTime", "schedSolverTimeMilli", "schedTotalTimeMilli"):
        assert data[key], key
    assert int(data["schedTotalTimeMilli"]) >= int(data["schedSolverTimeMilli"]) >= 0

    def ranks() -> list[str]:
        return [
            p["metadata"].get("labels", {}).get(names.SAKKARA_RANK, "")
            for p in pods(cluster)
            if p["metadata"]["name"].startswith("job-a")
        ]

    wait_for(lambda: all(ranks()), timeout=TIMEOUT, what="rank labels on every pod")
    assert sorted(int(r) for r in ranks()) == list(range(8))
    labels = cluster.get("pod", members[0]["metadata"]["name"])["metadata"]["labels"]
    assert labels[names.SAKKARA_STATUS] == "Bound"
    assert labels[names.SAKKARA_RETRIES] == "1"
    scheduler.assert_alive()


def test_podgroup_with_constraint_annotation_partitions_and_gets_its_placement(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes = cluster.nodes(4, cpu="4")
    racks = {"rack-0": nodes[:2], "rack-1": nodes[2:]}
    constraints = {"rack": {"type": "spread", "partitions": 2, "isHard": True}}
    cluster.apply(
        topology(cluster, racks),
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {
                "name": "train",
                "namespace": cluster.namespace,
                "annotations": {names.TOPOLOGY_CONSTRAINTS: json.dumps(constraints)},
            },
            "spec": {"minMember": 4},
        },
    )
    scheduler = private_scheduler.start("--topology-namespace", cluster.namespace)
    cluster.gang("train", 4, scheduler=scheduler.name, labels={names.POD_GROUP_LABEL: "train"})
    wait_for(lambda: bound_count(cluster, "train") == 4, timeout=TIMEOUT, what="gang bound")
    rack_of = {n: rack for rack, ns in racks.items() for n in ns}
    assert Counter(rack_of[n] for n in cluster.placements().values()) == {
        "rack-0": 2,
        "rack-1": 2,
    }

    def annotation() -> str:
        meta = cluster.get("podgroups.scheduling.x-k8s.io", "train")["metadata"]
        return (meta.get("annotations") or {}).get(names.PLACEMENT, "")

    tree = json.loads(wait_for(annotation, timeout=TIMEOUT, what="placement annotation"))
    assert set(tree["root"]) == {"rack-0", "rack-1"}


def test_topology_update_between_two_gangs_changes_where_the_second_lands(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    nodes = cluster.nodes(4, cpu="4")
    cluster.apply(topology(cluster, {"rack-0": nodes[:1], "rack-1": nodes[1:2]}))
    scheduler = private_scheduler.start("--topology-namespace", cluster.namespace)
    split = {"rack": {"type": "spread", "partitions": 2, "isHard": True}}
    cluster.apply(group(cluster, "first", 2, split), group(cluster, "second", 2, split))
    first = cluster.gang(
        "first", 2, scheduler=scheduler.name, labels={names.SAKKARA_GROUP_NAME: "first"}
    )
    wait_for(lambda: bound_count(cluster, "first") == 2, timeout=TIMEOUT, what="first bound")
    assert {cluster.placements()[p] for p in first} == set(nodes[:2])

    cluster.apply(topology(cluster, {"rack-0": nodes[2:3], "rack-1": nodes[3:]}))
    time.sleep(1)  # the ConfigMap's watch event reaches the scheduler (bounded, not polled)
    second = cluster.gang(
        "second", 2, scheduler=scheduler.name, labels={names.SAKKARA_GROUP_NAME: "second"}
    )
    wait_for(lambda: bound_count(cluster, "second") == 2, timeout=TIMEOUT, what="second bound")
    assert {cluster.placements()[p] for p in second} == set(nodes[2:])


def test_topology_from_node_labels_needs_no_configmap(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    rack_label = "topology.example.com/rack"
    left = cluster.nodes(2, cpu="4", labels={rack_label: "r0"})
    right = cluster.nodes(2, cpu="4", labels={rack_label: "r1"})
    scheduler = private_scheduler.start(
        "--topology-namespace",
        cluster.namespace,  # holds no topology ConfigMap
        "--topology-from-labels",
        f"rack={rack_label}",
    )
    split = {"rack": {"type": "spread", "partitions": 2, "isHard": True}}
    cluster.apply(group(cluster, "pair", 2, split))
    cluster.gang("pair", 2, scheduler=scheduler.name, labels={names.SAKKARA_GROUP_NAME: "pair"})
    wait_for(lambda: bound_count(cluster, "pair") == 2, timeout=TIMEOUT, what="pair bound")
    placed = set(cluster.placements().values())
    assert len(placed & set(left)) == 1
    assert len(placed & set(right)) == 1
