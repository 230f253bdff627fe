"""GPUs by dynamic resource allocation (#24) on the local control plane: the ResourceClaim
controller makes each pod's claim from its template, the scheduler allocates every member's
devices (ResourceSlices the test publishes, as NVIDIA's driver would), writes each claim's
allocation and reservation before the first bind, and binds the gang whole."""

from __future__ import annotations

import json

import pytest

from e2e.fixtures import TEST_LABEL, Cluster, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, stays_unbound, wait_bound
from scheduler.model import names
from testbed.nodes import DOMAIN_DRIVER, GPU_DRIVER, device_class, domain_slice, gpu_slice

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def gpu_class(cluster: Cluster) -> str:
    """A DeviceClass of this test's own (classes are cluster-wide)."""
    name = f"gpu.{cluster.namespace}"
    cluster.apply(device_class(name, labels={TEST_LABEL: cluster.namespace}))
    return name


def template(cluster: Cluster, name: str, device_class_name: str, count: int) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": device_class_name, "count": count},
                        }
                    ]
                }
            }
        },
    }


def claiming_gang(
    cluster: Cluster,
    gang: str,
    size: int,
    claims: list[dict],
    *,
    priority_class: str = "",
    annotations: dict[str, str] | None = None,
) -> set[str]:
    """``size`` pods of Koordinator gang ``gang``, each with ``claims`` (pod resourceClaims)."""
    members = {f"{gang}-{i}" for i in range(size)}
    annotations = {
        names.KOORD_NAME: gang,
        names.KOORD_MIN_AVAILABLE: str(size),
        **(annotations or {}),
    }
    cluster.apply(
        *(
            cluster.pod(
                name,
                annotations=annotations,
                priority_class=priority_class or None,
                spec={
                    "resourceClaims": claims,
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {
                                "requests": {"cpu": "1"},
                                "claims": [{"name": c["name"]} for c in claims],
                            },
                        }
                    ],
                },
            )
            for name in sorted(members)
        )
    )
    return members


def claims_of(cluster: Cluster) -> dict[str, dict]:
    """claim name -> the claim, in this test's namespace."""
    out = cluster.access.kubectl(
        "get", "resourceclaims", "-n", cluster.namespace, "-o", "json"
    ).stdout
    return {c["metadata"]["name"]: c for c in json.loads(out)["items"]}


def test_a_gang_of_four_each_claiming_eight_gpus_binds_whole_with_claims_allocated(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    nodes = cluster.nodes(4)
    cls = gpu_class(cluster)
    cluster.apply(*(gpu_slice(n, labels={TEST_LABEL: cluster.namespace}) for n in nodes))
    cluster.apply(template(cluster, "eight-gpus", cls, 8))
    members = claiming_gang(
        cluster, "train", 4, [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    )
    wait_bound(cluster, members)
    placements = cluster.placements()
    assert len({placements[m] for m in members}) == 4
    claims = claims_of(cluster)
    assert len(claims) == 4
    for claim in claims.values():
        owner = claim["metadata"]["ownerReferences"][0]["name"]
        status = claim["status"]
        assert [r["name"] for r in status["reservedFor"]] == [owner]
        results = status["allocation"]["devices"]["results"]
        assert sorted(r["device"] for r in results) == sorted(f"gpu-{i}" for i in range(8))
        assert {(r["driver"], r["pool"]) for r in results} == {(GPU_DRIVER, placements[owner])}
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]


def test_a_gang_that_shares_an_nvlink_domain_claim_lands_inside_one_domain(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """Two racks of three nodes, one NVLink domain each, one node's GPUs taken: a gang of
    three sharing one claim for a domain's channel goes whole to the rack that still has
    three nodes free (the first node tried may well be in the other)."""
    rack_a = cluster.nodes(3, labels={"rack": "a"})
    rack_b = cluster.nodes(3, labels={"rack": "b"})
    label = {TEST_LABEL: cluster.namespace}
    cls = gpu_class(cluster)
    domain_cls = f"domain.{cluster.namespace}"
    cluster.apply(device_class(domain_cls, DOMAIN_DRIVER, labels=label))
    cluster.apply(
        *(gpu_slice(n, gpus=2, nvlink_domain="a", labels=label) for n in rack_a),
        *(gpu_slice(n, gpus=2, nvlink_domain="b", labels=label) for n in rack_b),
        domain_slice(f"{cluster.namespace}-a", node_labels={"rack": "a"}, labels=label),
        domain_slice(f"{cluster.namespace}-b", node_labels={"rack": "b"}, labels=label),
    )
    cluster.apply(template(cluster, "two-gpus", cls, 2))
    # Something else holds one rack-a node's GPUs.
    blocker = claiming_gang(
        cluster, "blocker", 1, [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    )
    wait_bound(cluster, blocker)
    cluster.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "domain", "namespace": cluster.namespace},
            "spec": {
                "devices": {
                    "requests": [{"name": "channel", "exactly": {"deviceClassName": domain_cls}}]
                }
            },
        }
    )
    members = claiming_gang(
        cluster,
        "train",
        3,
        [
            {"name": "domain", "resourceClaimName": "domain"},
            {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
        ],
    )
    wait_bound(cluster, members)
    placements = cluster.placements()
    racks = {"a" if placements[m] in rack_a else "b" for m in members}
    blocked = "a" if placements["blocker-0"] in rack_a else "b"
    assert racks == {"b" if blocked == "a" else "a"}, placements
    domain = claims_of(cluster)["domain"]["status"]
    assert sorted(r["name"] for r in domain["reservedFor"]) == sorted(members)
    (result,) = domain["allocation"]["devices"]["results"]
    assert result["pool"] == f"{cluster.namespace}-{racks.pop()}"


def test_two_gangs_for_room_for_one_bind_one_whole_and_the_other_allocates_nothing(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    nodes = cluster.nodes(3)
    cls = gpu_class(cluster)
    cluster.apply(*(gpu_slice(n, labels={TEST_LABEL: cluster.namespace}) for n in nodes))
    cluster.apply(template(cluster, "eight-gpus", cls, 8))
    claims = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    first = claiming_gang(cluster, "a", 2, claims)
    second = claiming_gang(cluster, "b", 2, claims)
    wait_for(
        lambda: cluster.bound() in (first, second),
        timeout=BIND_TIMEOUT,
        what=f"one gang bound whole (bound: {sorted(cluster.bound())})",
    )
    loser = second if cluster.bound() == first else first
    stays_unbound(cluster, loser)
    allocated = {
        c["metadata"]["ownerReferences"][0]["name"]
        for c in claims_of(cluster).values()
        if c.get("status", {}).get("allocation")
    }
    assert allocated == cluster.bound()
    assert any("cannot allocate all claims" in m for m in cluster.events("FailedScheduling"))
