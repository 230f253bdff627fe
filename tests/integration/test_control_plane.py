"""Smoke tests of the local control plane: the CRD, the fake nodes, KWOK and binding."""

from __future__ import annotations

import json
import subprocess
import sys

import pykube
import pytest

from e2e.fixtures import ClusterAccess, wait_for
from e2e.objects import PodGroup, bind

pytestmark = pytest.mark.cluster


def _podgroup(namespace: str, name: str, min_member: int) -> dict:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "minMember": min_member,
            "minResources": {"cpu": "2", "nvidia.com/gpu": "4"},
            "scheduleTimeoutSeconds": 30,
        },
    }


def _make_nodes(control_plane: ClusterAccess, prefix: str, *extra: str) -> list[str]:
    """Create fake nodes through the tool's own command line, as a user would."""
    result = subprocess.run(
        [
            sys.executable, "-m", "testbed.nodes", "--kubeconfig", str(control_plane.kubeconfig),
            "--racks", "1", "--nodes-per-rack", "2", "--cpu", "8", "--memory", "16Gi",
            "--gpu", "4", "--prefix", prefix, *extra,
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [f"{prefix}0", f"{prefix}1"]


def _node_ready(api: pykube.HTTPClient, name: str) -> bool:
    node = pykube.Node.objects(api).get(name=name)
    conditions = node.obj.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_podgroup_spec_and_status_round_trip_through_the_api_server(
    control_plane: ClusterAccess, namespace: str
) -> None:
    api = control_plane.api()
    PodGroup(api, _podgroup(namespace, "trainer", 3)).create()
    stored = PodGroup.objects(api, namespace=namespace).get(name="trainer")
    assert stored.obj["spec"] == _podgroup(namespace, "trainer", 3)["spec"]

    status = {
        "phase": "Scheduled",
        "scheduled": 3,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "occupiedBy": "0f6b5b9e-1111-2222-3333-444455556666",
        "scheduleStartTime": "2026-11-21T10:00:00Z",
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "AllMembersBound",
                "message": "3 of 3 members bound",
                "lastTransitionTime": "2026-11-21T10:00:01Z",
            }
        ],
    }
    stored.obj["status"] = status
    stored.update(subresource="status")
    assert PodGroup.objects(api, namespace=namespace).get(name="trainer").obj["status"] == status


def test_status_is_a_subresource_so_a_spec_update_cannot_change_it(
    control_plane: ClusterAccess, namespace: str
) -> None:
    api = control_plane.api()
    PodGroup(api, _podgroup(namespace, "trainer", 2)).create()
    stored = PodGroup.objects(api, namespace=namespace).get(name="trainer")
    stored.obj["status"] = {"phase": "Running"}
    stored.update()
    assert "status" not in PodGroup.objects(api, namespace=namespace).get(name="trainer").obj


def test_kubectl_get_pg_prints_the_gang_columns(
    control_plane: ClusterAccess, namespace: str
) -> None:
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(_podgroup(namespace, "mpi", 8)))
    control_plane.kubectl(
        "patch", "pg", "mpi", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Running", "scheduled": 8, "running": 7,
                                     "succeeded": 0, "failed": 1}}),
    )  # fmt: skip
    lines = control_plane.kubectl("get", "pg", "-n", namespace).stdout.splitlines()
    assert lines[0].split() == [
        "NAME", "PHASE", "MINMEMBER", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "AGE",
    ]  # fmt: skip
    assert lines[1].split()[:7] == ["mpi", "Running", "8", "8", "7", "0", "1"]


def test_podgroups_answer_to_their_short_name(control_plane: ClusterAccess, namespace: str) -> None:
    """Plain ``podgroups`` and ``podgroup`` name the built-in scheduling.k8s.io PodGroup
    where the API server serves it (kubectl prefers built-in groups), so ours answers to
    its short names and its full name."""
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(_podgroup(namespace, "spark", 2)))
    for alias in ("pg", "pgs", "podgroups.scheduling.x-k8s.io", "podgroup.scheduling.x-k8s.io"):
        names = control_plane.kubectl("get", alias, "-n", namespace, "-o", "name").stdout
        assert names.split() == ["podgroup.scheduling.x-k8s.io/spark"], alias
    # Where the upstream Workload API is served (as here), plain "podgroups" is the built-in
    # scheduling.k8s.io kind, which has no short names: the README says to use "pg".
    plain = control_plane.kubectl("get", "podgroups", "-n", namespace, "-o", "name").stdout
    assert plain.split() == []


def test_negative_min_member_is_rejected_with_the_field_named(
    control_plane: ClusterAccess, namespace: str
) -> None:
    result = control_plane.kubectl(
        "apply", "-f", "-", stdin=json.dumps(_podgroup(namespace, "bad", -1)), check=False
    )
    assert result.returncode != 0
    assert "spec.minMember" in result.stderr
    assert "greater than or equal to 0" in result.stderr


def test_fake_node_from_the_tool_becomes_ready(control_plane: ClusterAccess) -> None:
    api = control_plane.api()
    names = _make_nodes(control_plane, "smoke-ready-")
    for name in names:
        wait_for(lambda n=name: _node_ready(api, n), timeout=30, what=f"node {name} Ready")
    node = pykube.Node.objects(api).get(name=names[0])
    assert node.obj["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node.labels["gang-scheduler.io/rack"] == "rack-0"


def test_topology_configmap_written_by_the_tool_names_the_nodes(
    control_plane: ClusterAccess, namespace: str
) -> None:
    # In the test's own namespace: a topology in the scheduler's would steer other tests.
    names = _make_nodes(control_plane, "smoke-topo-", "--topology", f"{namespace}/smoke-topology")
    cm = pykube.ConfigMap.objects(control_plane.api(), namespace=namespace).get(
        name="smoke-topology"
    )
    try:
        assert "sakkara.topology" in cm.labels
        assert json.loads(cm.obj["data"]["tree"]) == {"rack-0": {n: {} for n in names}}
        assert json.loads(cm.obj["data"]["resource-names"]) == ["cpu", "memory", "nvidia.com/gpu"]
    finally:
        cm.delete()


def test_pod_bound_by_hand_to_a_kwok_node_reaches_running(
    control_plane: ClusterAccess, namespace: str
) -> None:
    api = control_plane.api()
    node = _make_nodes(control_plane, "smoke-bind-")[0]
    wait_for(lambda: _node_ready(api, node), timeout=30, what=f"node {node} Ready")
    pykube.Pod(
        api,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "worker-0", "namespace": namespace},
            "spec": {
                # No scheduler answers to this name: the pod waits for our hand-made binding.
                "schedulerName": "nobody",
                "containers": [
                    {"name": "main", "image": "busybox",
                     "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                   "limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    ).create()  # fmt: skip
    bind(api, namespace=namespace, pod="worker-0", node=node)

    def phase() -> str:
        return (
            pykube.Pod.objects(api, namespace=namespace)
            .get(name="worker-0")
            .obj["status"]
            .get("phase", "")
        )

    wait_for(lambda: phase() == "Running", timeout=30, what="worker-0 Running")
    pod = pykube.Pod.objects(api, namespace=namespace).get(name="worker-0")
    assert pod.obj["spec"]["nodeName"] == node
