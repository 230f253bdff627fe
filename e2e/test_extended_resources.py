"""Extended resources served by devices (KEP-5004) on the local control plane: a gang whose
pods ask ``<ns>.example.com/gpu: 4`` of nodes that publish no such resource, where a
DeviceClass names it as its ``extendedResourceName``, binds whole on devices of the slices;
each pod gets a ResourceClaim made for it (annotated, owned by the pod, allocated on its
node, reserved for it) and names it in ``status.extendedResourceClaimStatus``, as
kube-scheduler does."""

from __future__ import annotations

import pytest

from e2e.fixtures import TEST_LABEL, Cluster, SchedulerProcess
from e2e.test_dra import claims_of
from e2e.test_gang_scheduling import wait_bound
from scheduler.model import names
from testbed.nodes import GPU_DRIVER, device_class, gpu_slice

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def test_a_gang_asking_gpus_by_resource_name_binds_whole_with_a_claim_made_for_each_pod(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    nodes = cluster.nodes(2)
    resource = f"{cluster.namespace}.example.com/gpu"
    cls = device_class(f"gpu.{cluster.namespace}", labels={TEST_LABEL: cluster.namespace})
    cls["spec"]["extendedResourceName"] = resource
    cluster.apply(cls)
    cluster.apply(*(gpu_slice(n, labels={TEST_LABEL: cluster.namespace}) for n in nodes))
    gang = {names.KOORD_NAME: "train", names.KOORD_MIN_AVAILABLE: "4"}
    members = cluster.gang("train", 4, annotations=gang, requests={"cpu": "1", resource: "4"})
    wait_bound(cluster, members)
    placements = cluster.placements()
    claims = claims_of(cluster)
    assert len(claims) == 4
    seen: set[tuple[str, str]] = set()
    for member in members:
        pod = cluster.get("pod", member)
        status = pod["status"]["extendedResourceClaimStatus"]
        assert status["requestMappings"] == [
            {"containerName": "main", "resourceName": resource,
             "requestName": "container-0-request-1"}
        ]  # fmt: skip
        claim = claims[status["resourceClaimName"]]
        assert claim["metadata"]["annotations"] == {
            "resource.kubernetes.io/extended-resource-claim": "true"
        }
        (owner,) = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "Pod", member, pod["metadata"]["uid"])  # fmt: skip
        assert [r["name"] for r in claim["status"]["reservedFor"]] == [member]
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4
        assert {(r["driver"], r["pool"]) for r in results} == {(GPU_DRIVER, placements[member])}
        seen.update((r["pool"], r["device"]) for r in results)
    assert len(seen) == 16  # no device in two claims


def test_a_claim_an_earlier_attempt_left_is_deleted_and_the_pod_binds_with_a_new_one(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    (node,) = cluster.nodes(1)
    resource = f"{cluster.namespace}.example.com/gpu"
    cls = device_class(f"gpu.{cluster.namespace}", labels={TEST_LABEL: cluster.namespace})
    cls["spec"]["extendedResourceName"] = resource
    cluster.apply(cls, gpu_slice(node, gpus=4, labels={TEST_LABEL: cluster.namespace}))
    # Gated while the leftover is made: an attempt that did not bind, as a stop leaves it.
    gated = cluster.pod("p", requests={"cpu": "1", resource: "2"},
                        spec={"schedulingGates": [{"name": "test/hold"}]})  # fmt: skip
    cluster.apply(gated)
    uid = cluster.get("pod", "p")["metadata"]["uid"]
    cluster.apply({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "p-extended-resources-old", "namespace": cluster.namespace,
                     "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                          "uid": uid, "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
            "deviceClassName": cls["metadata"]["name"], "count": 2}}]}},
    })  # fmt: skip
    cluster.access.kubectl(
        "patch", "pod", "p", "-n", cluster.namespace, "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]',
    )  # fmt: skip
    wait_bound(cluster, {"p"})
    claims = claims_of(cluster)
    assert "p-extended-resources-old" not in claims
    (made,) = claims.values()
    assert cluster.get("pod", "p")["status"]["extendedResourceClaimStatus"][
        "resourceClaimName"] == made["metadata"]["name"]  # fmt: skip
