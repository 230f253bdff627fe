"""ResourceClaim writes against a real API server (#24): a claim allocated by someone else
between the pass and the commit stops the group (nothing bound on stale devices); a group
whose first bind is rejected takes its claims back; claims left reserved for pods that are
not bound (a stop between claims and binds) are released before the first pass."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from e2e.fixtures import TEST_LABEL, Cluster
from e2e.test_upstream_gangs import UPSTREAM, upstream_podgroup
from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.devices import resource_claim_from_dict
from scheduler.codecs.objects import pod_from_dict
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, ClaimWrite, GangBinding, GroupBinding
from scheduler.model.devices import (
    EXTENDED_CLAIM_ANNOTATION,
    Allocation,
    DeviceId,
    DeviceRequest,
    DeviceResult,
    SubRequest,
)
from scheduler.model.pods import GangKey, PodRef
from scheduler.shell.api import ApiClient, load_credentials
from scheduler.shell.binding import Binder
from scheduler.shell.claiming import release_leftover_claims
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder
from testbed.nodes import GPU_DRIVER, device_class, gpu_slice

pytestmark = pytest.mark.cluster
GANG = GangKey("ns", "g")
FINALIZER = "resource.kubernetes.io/delete-protection"


def _setup(cluster: Cluster, pods: list[str]) -> tuple[str, ClusterCache, dict[str, PodRef]]:
    (node,) = cluster.nodes(1)
    label = {TEST_LABEL: cluster.namespace}
    cls = f"gpu.{cluster.namespace}"
    cluster.apply(device_class(cls, labels=label), gpu_slice(node, gpus=4, labels=label))
    claims = []
    for name in pods:
        claims.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-gpu", "namespace": cluster.namespace},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": cls, "count": 1}}]}},
        })  # fmt: skip
    cluster.apply(*claims)
    cluster.apply(
        *(
            cluster.pod(
                name,
                scheduler="nobody",
                spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]},
            )
            for name in pods
        )
    )
    cache = ClusterCache(scheduler_name="nobody")
    items = json.loads(
        cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    )["items"]
    refs = {}
    for item in items:
        pod = pod_from_dict(item)
        cache.upsert_pod(pod)
        refs[pod.ref.name] = pod.ref
    for claim in _claims(cluster).values():
        cache.upsert_resource_claim(resource_claim_from_dict(claim))
    return node, cache, refs


def _claims(cluster: Cluster) -> dict[str, dict[str, Any]]:
    out = cluster.access.kubectl(
        "get", "resourceclaims", "-n", cluster.namespace, "-o", "json"
    ).stdout
    return {c["metadata"]["name"]: c for c in json.loads(out)["items"]}


def _allocation(node: str, device: str) -> Allocation:
    return Allocation(results=(DeviceResult("gpu", DeviceId(GPU_DRIVER, node, device)),))


def _write(
    cluster: Cluster, cache: ClusterCache, ref: PodRef, device: str, node: str
) -> ClaimWrite:
    claim = cache.resource_claim(cluster.namespace, f"{ref.name}-gpu")
    assert claim is not None
    return ClaimWrite(
        namespace=claim.namespace,
        name=claim.name,
        uid=claim.uid,
        resource_version=claim.resource_version,
        allocation=_allocation(node, device),
        pods=(ref,),
    )


async def _apply(cluster: Cluster, cache: ClusterCache, group: GroupBinding) -> Metrics:
    api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
    metrics = Metrics.create()
    try:
        binder = Binder(
            api, cache, EventRecorder(api, component="test"), config=Config(), metrics=metrics
        )
        binder.assume(group)
        await binder.apply(group)
        return metrics
    finally:
        await api.close()


def _release(cluster: Cluster, cache: ClusterCache) -> int:
    """What the scheduler does before its first pass: the claims left behind released."""

    async def release() -> int:
        api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
        try:
            return await release_leftover_claims(api, cache)
        finally:
            await api.close()

    return asyncio.run(release())


def test_a_claim_allocated_elsewhere_after_the_pass_binds_nothing_on_stale_devices(
    cluster: Cluster,
) -> None:
    node, cache, refs = _setup(cluster, ["m-0", "m-1"])
    writes = tuple(_write(cluster, cache, refs[n], f"gpu-{i}", node) for i, n in enumerate(refs))
    # Between the pass and the commit, someone else allocates m-1's claim (gpu-3).
    other = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": GPU_DRIVER, "pool": node, "device": "gpu-3"}]}}}  # fmt: skip
    cluster.access.kubectl(
        "patch", "resourceclaim", "m-1-gpu", "-n", cluster.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": other}),
    )  # fmt: skip
    bindings = tuple(Binding(refs[n], node) for n in sorted(refs))
    group = GroupBinding((GangBinding(GANG, bindings),), claims=writes)
    metrics = asyncio.run(_apply(cluster, cache, group))
    assert cluster.bound() == set()
    claims = _claims(cluster)
    # m-0's claim, written first, was taken back whole: no allocation, no finalizer.
    assert not claims["m-0-gpu"].get("status", {}).get("allocation")
    assert FINALIZER not in claims["m-0-gpu"]["metadata"].get("finalizers", [])
    # m-1's claim keeps the other allocation, untouched.
    (result,) = claims["m-1-gpu"]["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-3"
    assert metrics.registry.get_sample_value("gang_scheduler_claim_conflicts_total") >= 1
    assert "got allocated elsewhere" in cache.memory[GANG].last_message
    assert {p.node_name for p in cache.snapshot().pods} == {""}


def test_a_rejected_first_bind_takes_the_claims_back(cluster: Cluster) -> None:
    node, cache, refs = _setup(cluster, ["m-0", "m-1"])
    writes = tuple(_write(cluster, cache, refs[n], f"gpu-{i}", node) for i, n in enumerate(refs))
    # The first member's bind is rejected (a uid that is not the pod's: a precondition).
    stale = PodRef(cluster.namespace, "m-0", "not-the-uid")
    bindings = (Binding(stale, node), Binding(refs["m-1"], node))
    group = GroupBinding((GangBinding(GANG, bindings),), claims=writes)
    asyncio.run(_apply(cluster, cache, group))
    assert cluster.bound() == set()
    for claim in _claims(cluster).values():
        assert not claim.get("status", {}).get("allocation"), claim["metadata"]["name"]
        assert not claim.get("status", {}).get("reservedFor")
        assert FINALIZER not in claim["metadata"].get("finalizers", [])


def test_a_group_binds_with_its_claims_allocated_and_reserved(cluster: Cluster) -> None:
    node, cache, refs = _setup(cluster, ["m-0", "m-1"])
    writes = tuple(_write(cluster, cache, refs[n], f"gpu-{i}", node) for i, n in enumerate(refs))
    bindings = tuple(Binding(refs[n], node) for n in sorted(refs))
    asyncio.run(_apply(cluster, cache, GroupBinding((GangBinding(GANG, bindings),), claims=writes)))
    assert cluster.bound() == {"m-0", "m-1"}
    for i, name in enumerate(sorted(refs)):
        claim = _claims(cluster)[f"{name}-gpu"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["device"] == f"gpu-{i}"
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [refs[name].uid]
        assert FINALIZER in claim["metadata"]["finalizers"]


def test_claims_left_reserved_for_unbound_pods_are_released_before_the_first_pass(
    cluster: Cluster,
) -> None:
    node, cache, refs = _setup(cluster, ["m-0"])
    # As a stop between the claim writes and the binds leaves it: allocated, reserved for
    # m-0, finalizer on; m-0 never bound.
    cluster.access.kubectl(
        "patch", "resourceclaim", "m-0-gpu", "-n", cluster.namespace, "--type=merge",
        "-p", json.dumps({"metadata": {"finalizers": [FINALIZER]}}),
    )  # fmt: skip
    status = {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": GPU_DRIVER, "pool": node, "device": "gpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "m-0", "uid": refs["m-0"].uid}],
    }  # fmt: skip
    cluster.access.kubectl(
        "patch", "resourceclaim", "m-0-gpu", "-n", cluster.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip
    cache.upsert_resource_claim(resource_claim_from_dict(_claims(cluster)["m-0-gpu"]))

    assert _release(cluster, cache) == 1
    claim = _claims(cluster)["m-0-gpu"]
    assert not claim.get("status", {}).get("allocation")
    assert not claim.get("status", {}).get("reservedFor")
    assert FINALIZER not in claim["metadata"].get("finalizers", [])


GROUPS = ("idle", "busy")


def test_a_claim_left_reserved_for_a_podgroup_none_of_whose_members_bound_is_released(
    cluster: Cluster,
) -> None:
    """1.37's claim for a whole group, as a stop between its write and the first bind leaves
    it: allocated and reserved for the PodGroup, whose members are all unbound. The
    PodGroup's entry and the allocation go; a claim whose group has a member bound stays.
    The PodGroups are real: kube-controller-manager (1.37) drops a reservation for a
    PodGroup that does not exist."""
    (node,) = cluster.nodes(1)
    label = {TEST_LABEL: cluster.namespace}
    cls = f"gpu.{cluster.namespace}"
    cluster.apply(device_class(cls, labels=label), gpu_slice(node, gpus=4, labels=label))
    claims, pods = [], []
    cluster.apply(*(upstream_podgroup(cluster, g, {"gang": {"minCount": 2}}) for g in GROUPS))
    for group in GROUPS:
        claims.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{group}-gpus", "namespace": cluster.namespace},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": cls, "count": 1}}]}},
        })  # fmt: skip
        pods += [
            cluster.pod(
                f"{group}-{i}",
                scheduler="nobody",
                spec={"schedulingGroup": {"podGroupName": group}},
            )
            for i in range(2)
        ]
    cluster.apply(*claims, *pods)
    cache = ClusterCache(scheduler_name="nobody")
    items = json.loads(
        cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    )["items"]
    for item in items:
        pod = pod_from_dict(item)
        if pod.ref.name == "busy-0":
            pod = replace(pod, node_name=node)  # as the watch shows a bound member
        cache.upsert_pod(pod)
    for i, group in enumerate(GROUPS):
        name, uid = f"{group}-gpus", cluster.get(UPSTREAM, group)["metadata"]["uid"]
        cluster.access.kubectl(
            "patch", "resourceclaim", name, "-n", cluster.namespace, "--type=merge",
            "-p", json.dumps({"metadata": {"finalizers": [FINALIZER]}}),
        )  # fmt: skip
        status = {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": GPU_DRIVER, "pool": node, "device": f"gpu-{i}"}]}},
            "reservedFor": [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                             "name": group, "uid": uid}],
        }  # fmt: skip
        cluster.access.kubectl(
            "patch", "resourceclaim", name, "-n", cluster.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip
    for claim in _claims(cluster).values():
        cache.upsert_resource_claim(resource_claim_from_dict(claim))

    assert _release(cluster, cache) == 1
    idle, busy = _claims(cluster)["idle-gpus"], _claims(cluster)["busy-gpus"]
    assert not idle.get("status", {}).get("allocation")
    assert not idle.get("status", {}).get("reservedFor")
    assert FINALIZER not in idle["metadata"].get("finalizers", [])
    assert busy["status"]["reservedFor"][0]["name"] == "busy"
    assert busy["status"]["allocation"]


# -- claims made for pods' extended resources (KEP-5004) --------------------------------------


def _made(cluster: Cluster, ref: PodRef, node: str, device: str) -> ClaimWrite:
    cls = f"gpu.{cluster.namespace}"
    request = DeviceRequest(
        "container-0-request-1", exactly=SubRequest("container-0-request-1", cls, count=1)
    )
    return ClaimWrite(
        namespace=ref.namespace,
        name=f"<extended-resources>{ref.name}",
        uid="",
        resource_version="",
        allocation=Allocation(
            results=(DeviceResult("container-0-request-1", DeviceId(GPU_DRIVER, node, device)),)
        ),
        pods=(ref,),
        requests=(request,),
        mappings=(("main", "example.com/gpu", "container-0-request-1"),),
    )


def _asker(cluster: Cluster) -> tuple[str, ClusterCache, PodRef]:
    """A node with four GPUs and a pod m-0 asking one by resource name."""
    node, cache, _ = _setup(cluster, [])
    cluster.apply(
        cluster.pod("m-0", scheduler="nobody", requests={"cpu": "1", "example.com/gpu": "1"})
    )
    pod = pod_from_dict(json.loads(cluster.access.kubectl(
        "get", "pod", "m-0", "-n", cluster.namespace, "-o", "json").stdout))  # fmt: skip
    cache.upsert_pod(pod)
    return node, cache, pod.ref


def _made_claims(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        c
        for c in _claims(cluster).values()
        if c["metadata"].get("annotations", {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
    ]


def test_a_pod_binds_with_a_claim_made_for_its_extended_resources(cluster: Cluster) -> None:
    node, cache, ref = _asker(cluster)
    group = GroupBinding(
        (GangBinding(GANG, (Binding(ref, node),)),), claims=(_made(cluster, ref, node, "gpu-2"),)
    )
    asyncio.run(_apply(cluster, cache, group))
    assert cluster.bound() == {"m-0"}
    (claim,) = _made_claims(cluster)
    assert claim["metadata"]["name"].startswith("m-0-extended-resources-")
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["name"], owner["uid"], owner["controller"]) == ("m-0", ref.uid, True)
    assert FINALIZER in claim["metadata"]["finalizers"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["request"], result["device"]) == ("container-0-request-1", "gpu-2")
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [ref.uid]
    pod = cluster.get("pod", "m-0")
    assert pod["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": claim["metadata"]["name"],
        "requestMappings": [{"containerName": "main", "resourceName": "example.com/gpu",
                             "requestName": "container-0-request-1"}],
    }  # fmt: skip


def test_a_claim_made_for_a_pod_whose_bind_is_rejected_is_deleted(cluster: Cluster) -> None:
    node, cache, ref = _asker(cluster)
    stale = PodRef(cluster.namespace, "m-0", "not-the-uid")  # the bind's precondition fails
    group = GroupBinding(
        (GangBinding(GANG, (Binding(stale, node),)),), claims=(_made(cluster, ref, node, "gpu-2"),)
    )
    asyncio.run(_apply(cluster, cache, group))
    assert cluster.bound() == set()
    assert _made_claims(cluster) == []


def test_a_claim_made_for_a_pod_that_did_not_bind_is_deleted_before_the_first_pass(
    cluster: Cluster,
) -> None:
    _, cache, ref = _asker(cluster)
    # As a stop between the claim and the bind leaves it: made, allocated, finalizer on.
    left = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "m-0-extended-resources-x", "namespace": cluster.namespace,
                     "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                     "finalizers": [FINALIZER],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "m-0",
                                          "uid": ref.uid, "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
            "deviceClassName": f"gpu.{cluster.namespace}", "count": 1}}]}},
    }  # fmt: skip
    cluster.apply(left)
    (claim,) = _made_claims(cluster)
    cache.upsert_resource_claim(resource_claim_from_dict(claim))

    assert _release(cluster, cache) == 1
    assert _made_claims(cluster) == []
