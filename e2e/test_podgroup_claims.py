"""1.37's claims for a whole PodGroup (spec.resourceClaims, behind DRAWorkloadResourceClaims)
on a 1.37 control plane: kube-controller-manager makes one claim from the group's template,
for the group; we allocate it once and reserve it for the PodGroup, and the members bind
where its devices are. 1.36 has no such field, so ``make test-release`` (RELEASE=1.36) leaves
this file out."""

from __future__ import annotations

import pytest

from e2e.fixtures import TEST_LABEL, Cluster, SchedulerProcess, wait_for
from e2e.test_dra import claims_of, gpu_class, template
from e2e.test_gang_scheduling import BIND_TIMEOUT, wait_bound
from e2e.test_upstream_gangs import UPSTREAM
from testbed.nodes import gpu_slice

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

ENTRY = {"name": "gpus", "resourceClaimTemplateName": "two-gpus"}


def test_a_podgroups_claim_is_made_once_reserved_for_the_group_and_its_members_bind_by_it(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    version = cluster.access.rest.version_serving("scheduling.k8s.io", "podgroups")
    nodes = cluster.nodes(2)
    cls = gpu_class(cluster)
    cluster.apply(*(gpu_slice(n, labels={TEST_LABEL: cluster.namespace}) for n in nodes))
    cluster.apply(template(cluster, "two-gpus", cls, 2))
    cluster.apply(
        {
            "apiVersion": version,
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": cluster.namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}, "resourceClaims": [ENTRY]},
        }
    )
    podgroup = cluster.get(UPSTREAM, "train")
    assert podgroup["spec"].get("resourceClaims") == [ENTRY], (
        "the API server dropped the PodGroup's resourceClaims: they need the "
        "DRAWorkloadResourceClaims gate (Kubernetes 1.37, make test-release)"
    )
    members = {f"train-{i}" for i in range(3)}
    cluster.apply(
        *(
            cluster.pod(
                name,
                spec={
                    "schedulingGroup": {"podGroupName": "train"},
                    "resourceClaims": [ENTRY],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            )
            for name in sorted(members)
        )
    )
    wait_bound(cluster, members)
    placements = cluster.placements()
    assert len({placements[m] for m in members}) == 1, "all where the one claim's devices are"
    (claim,) = wait_for(
        lambda: list(claims_of(cluster).values()) or None,
        timeout=BIND_TIMEOUT,
        what="the PodGroup's claim",
    )
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("PodGroup", "train")
    assert claim["status"]["reservedFor"] == [
        {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": "train",
            "uid": podgroup["metadata"]["uid"],
        }
    ]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {placements["train-0"]}
    assert len(results) == 2
    scheduler.assert_alive()
