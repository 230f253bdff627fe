"""The manifests' RBAC, proven: the scheduler runs as their ServiceAccount and schedules
gangs, writes status, marks timeouts and posts events, and never hears a 403."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.fixtures import TEST_LABEL, Cluster, ClusterAccess, SchedulerProcess, wait_for
from e2e.test_upstream_gangs import upstream_podgroup
from scheduler.model import names
from testbed import cluster as local_cluster
from testbed.nodes import device_class, gpu_slice

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

MANIFESTS = local_cluster.REPO / "manifests"
NAMESPACE = "gang-scheduler-system"


def test_manifests_pass_server_side_validation(control_plane: ClusterAccess) -> None:
    # A server-side dry run cannot create the namespace its other objects go in.
    control_plane.kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml"))
    result = control_plane.kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS))
    assert "clusterrole.rbac.authorization.k8s.io/gang-scheduler" in result.stdout
    assert "deployment.apps/gang-scheduler created (server dry run)" in result.stdout


@pytest.fixture(scope="module")
def service_account_kubeconfig(control_plane: ClusterAccess, tmp_path_factory) -> Path:
    """A kubeconfig that authenticates as the manifests' ServiceAccount, with a real token."""
    control_plane.kubectl("apply", "-k", str(MANIFESTS))
    token = control_plane.kubectl(
        "create", "token", "gang-scheduler", "-n", NAMESPACE, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "gang-scheduler", "user": {"token": token}}],
        "contexts": [
            {"name": "sa", "context": {"cluster": cluster["name"], "user": "gang-scheduler"}}
        ],
        "current-context": "sa",
    }
    path = tmp_path_factory.mktemp("rbac") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def sa_scheduler(
    control_plane: ClusterAccess, service_account_kubeconfig: Path
) -> Iterator[SchedulerProcess]:
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    process = SchedulerProcess(
        kubeconfig=service_account_kubeconfig,
        log=control_plane.kubeconfig.parent / "logs" / f"scheduler-{name}.log",
        name=name,
        # As the Deployment runs it: the Lease is in the scheduler's own namespace.
        extra=("--leader-elect", "--leader-elect-namespace", NAMESPACE),
    ).start()
    try:
        yield process
    finally:
        process.stop()


def test_scheduler_as_its_service_account_schedules_and_writes_without_a_403(
    cluster: Cluster, sa_scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, gpu=8)
    # A PodGroup gang that fits: binding, PodGroup status, Scheduled events.
    cluster.apply(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "fits", "namespace": cluster.namespace},
            "spec": {"minMember": 2},
        },
        *(
            cluster.pod(
                f"fits-{i}",
                scheduler=sa_scheduler.name,
                labels={names.POD_GROUP_LABEL: "fits"},
                requests={"nvidia.com/gpu": "2"},
            )
            for i in range(2)
        ),
    )
    # An upstream (Workload API) PodGroup gang, at the version the server serves: its
    # scheduled condition is written.
    cluster.apply(
        upstream_podgroup(cluster, "upstream", {"gang": {"minCount": 2}}),
        *(
            cluster.pod(
                f"upstream-{i}",
                scheduler=sa_scheduler.name,
                spec={"schedulingGroup": {"podGroupName": "upstream"}},
            )
            for i in range(2)
        ),
    )
    # A gang that times out: the timeout annotation is a pod patch.
    late = {names.KOORD_NAME: "late", names.KOORD_MIN_AVAILABLE: "2"}
    late[names.KOORD_WAITING_TIME] = "2s"
    cluster.apply(
        *(
            cluster.pod(f"late-{i}", scheduler=sa_scheduler.name, annotations=late,
                        requests={"nvidia.com/gpu": "6"})
            for i in range(2)
        )
    )  # fmt: skip

    # An Indexed Job with no gang declared: a gang from its owner, read with the Job RBAC.
    template = cluster.pod("x", scheduler=sa_scheduler.name, requests={"nvidia.com/gpu": "1"})
    template["spec"]["restartPolicy"] = "Never"
    cluster.apply(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "indexed", "namespace": cluster.namespace},
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "completionMode": "Indexed",
                "template": {"metadata": {"labels": {"app": "indexed"}}, "spec": template["spec"]},
            },
        }
    )
    # A Sakkara group (flat topology): rank labels on pods, the group ConfigMap written back.
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "group-s",
                "namespace": cluster.namespace,
                "labels": {names.SAKKARA_GROUP: ""},
            },
            "data": {"name": "group-s", "size": "2"},
        },
        *(
            cluster.pod(
                f"sakkara-{i}",
                scheduler=sa_scheduler.name,
                labels={names.SAKKARA_GROUP_NAME: "group-s"},
            )
            for i in range(2)
        ),
    )

    # A gang whose pods claim GPUs (DRA): slices, classes and claims read; each claim's
    # finalizer, allocation and reservation written before the binds.
    (node,) = cluster.node_names()
    label = {TEST_LABEL: cluster.namespace}
    device_class_name = f"gpu.{cluster.namespace}"
    cluster.apply(
        device_class(device_class_name, labels=label), gpu_slice(node, gpus=2, labels=label)
    )
    for i in range(2):
        cluster.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"dra-{i}-gpu", "namespace": cluster.namespace},
                "spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": device_class_name}}]}},
            },
            cluster.pod(
                f"dra-{i}",
                scheduler=sa_scheduler.name,
                annotations={names.KOORD_NAME: "dra", names.KOORD_MIN_AVAILABLE: "2"},
                spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": f"dra-{i}-gpu"}]},
            ),
        )  # fmt: skip

    wait_for(lambda: {"fits-0", "fits-1"} <= cluster.bound(), timeout=30, what="gang bound")
    wait_for(lambda: {"dra-0", "dra-1"} <= cluster.bound(), timeout=30, what="DRA gang bound")
    for i in range(2):
        status = cluster.get("resourceclaim", f"dra-{i}-gpu")["status"]
        assert status["allocation"]["devices"]["results"], status
        assert [r["name"] for r in status["reservedFor"]] == [f"dra-{i}"]
    wait_for(
        lambda: cluster.get("configmap", "group-s")["data"].get("status") == "Bound",
        timeout=30,
        what="group ConfigMap written back",
    )
    wait_for(
        lambda: cluster.get("pod", "sakkara-1")["metadata"]["labels"].get(names.SAKKARA_RANK),
        timeout=30,
        what="rank label written",
    )
    wait_for(
        lambda: (
            cluster.get("podgroups.scheduling.x-k8s.io", "fits").get("status", {}).get("scheduled")
            == 2
        ),
        timeout=30,
        what="PodGroup status written",
    )
    wait_for(
        lambda: (
            [
                c["status"]
                for c in cluster.get("podgroups.scheduling.k8s.io", "upstream")
                .get("status", {})
                .get("conditions", [])
            ]
            == ["True"]
        ),
        timeout=30,
        what="upstream PodGroup condition written",
    )
    wait_for(lambda: cluster.events("Scheduled"), timeout=30, what="Scheduled events")
    wait_for(
        lambda: len([p for p in cluster.bound() if p.startswith("indexed-")]) == 2,
        timeout=30,
        what="the Indexed Job's pods bound as a gang from their owner",
    )
    wait_for(
        lambda: cluster.get("pod", "late-0")["metadata"]["annotations"].get(names.KOORD_TIMEOUT),
        timeout=30,
        what="timeout annotation written",
    )
    sa_scheduler.assert_alive()
    log = sa_scheduler.log.read_text(errors="replace")
    # A 403 as a status, not as digits of a timestamp ("04:13:43.403619Z" once matched).
    status_403 = re.compile(r"(?<![\d.:])403(?!\d)")
    forbidden = [line for line in log.splitlines() if status_403.search(line) or "orbidden" in line]
    assert forbidden == [], "\n".join(forbidden[:5])
    as_scheduler = ClusterAccess(
        kubeconfig=sa_scheduler.kubeconfig, kubectl_path=cluster.access.kubectl_path
    )
    whoami = json.loads(as_scheduler.kubectl("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{NAMESPACE}:gang-scheduler"
    )


def test_service_account_may_read_and_write_volcano_podgroups(
    control_plane: ClusterAccess, service_account_kubeconfig: Path
) -> None:
    """Volcano's PodGroups are read and patched (status lives in the object). kubectl
    cannot ask about a resource the API server does not serve, so its stand-in CRD first."""
    control_plane.kubectl(
        "apply", "-f", str(local_cluster.REPO / "e2e/crds/volcano-podgroups.yaml")
    )
    control_plane.kubectl(
        "wait", "--for=condition=Established", "crd/podgroups.scheduling.volcano.sh",
        "--timeout=60s", timeout=90,
    )  # fmt: skip
    as_scheduler = ClusterAccess(
        kubeconfig=service_account_kubeconfig, kubectl_path=control_plane.kubectl_path
    )
    for verb in ("get", "list", "watch", "patch"):
        # Retried: discovery may serve the new kind a moment after Established.
        wait_for(
            lambda verb=verb: (
                as_scheduler.kubectl(
                    "auth", "can-i", verb, "podgroups.scheduling.volcano.sh", "-A", check=False
                ).stdout.strip()
                == "yes"
            ),
            timeout=30,
            what=f"the ServiceAccount may {verb} Volcano PodGroups",
        )


def test_service_account_may_read_every_owner_kind_that_makes_gangs(
    control_plane: ClusterAccess, service_account_kubeconfig: Path
) -> None:
    """Gangs from owners read these kinds. Asked with a SelfSubjectAccessReview by group and
    resource: kubectl's can-i answers no for a kind the API server does not serve (these
    CRDs are not installed here), whatever RBAC says."""
    as_scheduler = ClusterAccess(
        kubeconfig=service_account_kubeconfig, kubectl_path=control_plane.kubectl_path
    )

    def may(verb: str, group: str, resource: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}},
        }
        out = as_scheduler.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(review))
        return bool(json.loads(out.stdout)["status"].get("allowed"))

    kinds = [
        ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("ray.io", "rayclusters"),
        ("kubeflow.org", "mpijobs"),
        ("kubeflow.org", "pytorchjobs"),
        ("sparkoperator.k8s.io", "sparkapplications"),
    ]
    for group, resource in kinds:
        for verb in ("list", "watch"):
            assert may(verb, group, resource), f"may not {verb} {resource}.{group}"
        assert not may("patch", group, resource), f"may patch {resource}.{group}: read only"
