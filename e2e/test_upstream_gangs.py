"""Gangs declared the upstream way (the Workload API's scheduling.k8s.io PodGroup, v1beta1
from Kubernetes 1.37 and v1alpha2 in 1.36, named by the pod's spec.schedulingGroup) and the
Volcano way (the scheduling.k8s.io/group-name annotation and a scheduling.volcano.sh/v1beta1
PodGroup): the same objects kube-scheduler's and Volcano's gang scheduling take, scheduled by
us whole, with the status their APIs define. The local control plane serves the Workload API
at its release's version; Volcano's CRD, generated from its Go module, is in e2e/crds/."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from e2e.fixtures import Cluster, ClusterAccess, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, stays_unbound, wait_bound
from scheduler.model import names

# The local control plane: it serves the Workload API (kind does not without feature gates), and
# these tests install and delete a stand-in for Volcano's CRD, which must never replace or
# remove a real Volcano's.
pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

UPSTREAM = "podgroups.scheduling.k8s.io"
VOLCANO = "podgroups.scheduling.volcano.sh"
VOLCANO_CRD = Path(__file__).parent / "crds" / "volcano-podgroups.yaml"


def workload_version(cluster: Cluster) -> str:
    """The scheduling.k8s.io version that serves PodGroups: v1beta1 in 1.37, v1alpha2 in
    1.36."""
    return cluster.access.rest.version_serving("scheduling.k8s.io", "podgroups")


def scheduled_type(cluster: Cluster) -> str:
    """kube-scheduler's condition, by the served version's name for it."""
    if workload_version(cluster) == names.WORKLOAD_V1ALPHA2:
        return names.UPSTREAM_SCHEDULED
    return names.UPSTREAM_INITIALLY_SCHEDULED


def upstream_podgroup(cluster: Cluster, name: str, policy: dict) -> dict:
    return {
        "apiVersion": workload_version(cluster),
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {"schedulingPolicy": policy},
    }


def members(
    cluster: Cluster, group: str, count: int, *, prefix: str = "", **pod: object
) -> set[str]:
    """Pods that name upstream PodGroup ``group`` in spec.schedulingGroup, as the Job
    controller makes them when it creates a Workload's PodGroups."""
    spec = {"schedulingGroup": {"podGroupName": group}}
    return cluster.gang(prefix or group, count, spec=spec, **pod)


def scheduled_condition(cluster: Cluster, name: str) -> dict:
    status = cluster.get(UPSTREAM, name).get("status", {})
    kind = scheduled_type(cluster)
    found = [c for c in status.get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def printed_status(cluster: Cluster, name: str) -> str:
    """What `kubectl get podgroups` shows in its STATUS column (the built-in printer reads
    kube-scheduler's condition)."""
    out = cluster.access.kubectl("get", UPSTREAM, name, "-n", cluster.namespace).stdout
    header, row = out.splitlines()[:2]
    return row.split()[header.split().index("STATUS")]


def test_upstream_gang_of_four_binds_whole(cluster: Cluster, scheduler: SchedulerProcess) -> None:
    cluster.nodes(1, cpu="3")
    cluster.apply(upstream_podgroup(cluster, "train", {"gang": {"minCount": 4}}))
    gang = members(cluster, "train", 4, requests={"cpu": "1"})
    # Room for three: none of the four is bound, and the PodGroup says why.
    wait_for(
        lambda: scheduled_condition(cluster, "train").get("reason") == "Unschedulable",
        timeout=BIND_TIMEOUT,
        what="PodGroupScheduled=False (Unschedulable)",
    )
    condition = scheduled_condition(cluster, "train")
    assert condition["status"] == "False"
    assert "Insufficient cpu" in condition["message"]
    assert printed_status(cluster, "train") == "Unschedulable"
    stays_unbound(cluster, gang, seconds=1)
    # Room for all four: all four, at once.
    cluster.nodes(1, cpu="1")
    wait_bound(cluster, gang)
    wait_for(
        lambda: scheduled_condition(cluster, "train").get("status") == "True",
        timeout=BIND_TIMEOUT,
        what="PodGroupScheduled=True",
    )
    condition = scheduled_condition(cluster, "train")
    assert condition["reason"] == "Scheduled"
    # The API server sets no metadata.generation on v1alpha2 PodGroups: then none.
    generation = cluster.get(UPSTREAM, "train")["metadata"].get("generation", 0)
    assert condition.get("observedGeneration", 0) == generation
    assert printed_status(cluster, "train") == "Scheduled"
    scheduler.assert_alive()


def test_upstream_min_count_larger_than_the_pods_waits(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="8")
    cluster.apply(upstream_podgroup(cluster, "wide", {"gang": {"minCount": 5}}))
    first = members(cluster, "wide", 3)
    wait_for(lambda: cluster.events("GangWaiting"), timeout=BIND_TIMEOUT, what="GangWaiting")
    assert "waits until all 5 members exist" in cluster.events("GangWaiting")[0]
    stays_unbound(cluster, first, seconds=2)
    rest = {f"wide-{i}" for i in (3, 4)}
    cluster.apply(
        *(cluster.pod(n, spec={"schedulingGroup": {"podGroupName": "wide"}}) for n in rest)
    )
    wait_bound(cluster, first | rest)


def test_upstream_basic_group_schedules_pod_by_pod(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="2")
    cluster.apply(upstream_podgroup(cluster, "web", {"basic": {}}))
    pods = members(cluster, "web", 3, requests={"cpu": "1"})
    # No gang: the two that fit are bound although the third does not fit.
    wait_for(lambda: len(cluster.bound() & pods) == 2, timeout=BIND_TIMEOUT, what="two bound")
    time.sleep(1)
    assert len(cluster.bound() & pods) == 2
    wait_for(
        lambda: scheduled_condition(cluster, "web").get("status") == "True",
        timeout=BIND_TIMEOUT,
        what="PodGroupScheduled=True",
    )
    # Room for the third: it follows on its own.
    cluster.nodes(1, cpu="1")
    wait_bound(cluster, pods)


def test_pod_naming_an_upstream_podgroup_that_does_not_exist_waits_and_says_so(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1)
    pods = members(cluster, "ghost", 2)
    wait_for(
        lambda: cluster.events("PodGroupNotFound"), timeout=BIND_TIMEOUT, what="PodGroupNotFound"
    )
    message = cluster.events("PodGroupNotFound")[0]
    assert f"PodGroup {cluster.namespace}/ghost (scheduling.k8s.io)" in message
    stays_unbound(cluster, pods, seconds=1)
    cluster.apply(upstream_podgroup(cluster, "ghost", {"gang": {"minCount": 2}}))
    wait_bound(cluster, pods)


def _without_volcano_crd(access: ClusterAccess) -> None:
    access.kubectl(
        "delete", "-f", str(VOLCANO_CRD), "--ignore-not-found", "--wait=true", timeout=60
    )


def _with_volcano_crd(access: ClusterAccess) -> None:
    access.kubectl("apply", "-f", str(VOLCANO_CRD))
    access.kubectl(
        "wait", "--for=condition=Established", f"crd/{VOLCANO}", "--timeout=60s", timeout=90
    )
    deadline = time.monotonic() + 30
    while access.kubectl("get", VOLCANO, "-A", check=False).returncode != 0:
        assert time.monotonic() < deadline, f"{VOLCANO} not served"
        time.sleep(0.2)


def test_volcano_annotation_gang_waits_for_its_crd_then_binds_whole(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """Volcano's annotation with Volcano's CRD absent: a member whose PodGroup has not
    arrived. The CRD installed while the scheduler runs, and the PodGroup created: the gang
    binds whole, and the PodGroup shows Volcano's phase, counts and conditions."""
    access = cluster.access
    _without_volcano_crd(access)
    cluster.nodes(2, cpu="2")
    job = cluster.gang(
        "vc", 4, annotations={names.VOLCANO_GROUP_NAME: "vc-job"}, requests={"cpu": "1"}
    )
    wait_for(
        lambda: cluster.events("PodGroupNotFound"), timeout=BIND_TIMEOUT, what="PodGroupNotFound"
    )
    assert "scheduling.volcano.sh/v1beta1" in cluster.events("PodGroupNotFound")[0]
    stays_unbound(cluster, job, seconds=1)
    scheduler.assert_alive()

    _with_volcano_crd(access)
    cluster.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "vc-job", "namespace": cluster.namespace},
            "spec": {"minMember": 4, "queue": "default"},
        }
    )
    wait_bound(cluster, job)

    def status() -> dict:
        return cluster.get(VOLCANO, "vc-job").get("status", {})

    wait_for(lambda: status().get("phase") == "Running", timeout=BIND_TIMEOUT, what="Running")
    wait_for(lambda: status().get("running") == 4, timeout=BIND_TIMEOUT, what="4 running")
    scheduled = [c for c in status()["conditions"] if c["type"] == "Scheduled"]
    assert [c["status"] for c in scheduled] == ["True"], status()
    assert scheduled[0]["reason"] == "tasks in gang are ready to be scheduled"
    scheduler.assert_alive()


def test_volcano_gang_that_does_not_fit_binds_none_and_says_why(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    _with_volcano_crd(cluster.access)
    cluster.nodes(1, cpu="2")
    cluster.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "big", "namespace": cluster.namespace},
            "spec": {"minMember": 3},
        }
    )
    job = cluster.gang(
        "big", 3, annotations={names.VOLCANO_GROUP_NAME: "big"}, requests={"cpu": "1"}
    )

    def unschedulable() -> dict:
        conditions = cluster.get(VOLCANO, "big").get("status", {}).get("conditions", [])
        found = [c for c in conditions if c["type"] == "Unschedulable"]
        return found[0] if found else {}

    wait_for(
        lambda: unschedulable().get("reason") == "NotEnoughResources",
        timeout=BIND_TIMEOUT,
        what="Unschedulable condition",
    )
    assert "Insufficient cpu" in unschedulable()["message"]
    assert cluster.get(VOLCANO, "big")["status"]["phase"] in ("Pending", "Inqueue")
    stays_unbound(cluster, job, seconds=1)


def test_volcano_podgroup_with_a_bad_min_resources_is_an_event_that_names_the_field(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """Volcano's CRD checks a quantity's form only (its webhook, absent here, would refuse
    a negative one): the gang is not scheduled, and the event says which field and what is
    allowed."""
    _with_volcano_crd(cluster.access)
    cluster.nodes(1)
    cluster.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "odd", "namespace": cluster.namespace},
            "spec": {"minMember": 2, "minResources": {"cpu": "-1"}},
        }
    )
    job = cluster.gang("odd", 2, annotations={names.VOLCANO_GROUP_NAME: "odd"})
    wait_for(
        lambda: cluster.events("InvalidGangSpec"), timeout=BIND_TIMEOUT, what="InvalidGangSpec"
    )
    message = cluster.events("InvalidGangSpec")[0]
    assert "spec.minResources.cpu must be" in message
    assert "got '-1'" in message
    stays_unbound(cluster, job, seconds=1)
    scheduler.assert_alive()


def test_upstream_podgroups_print_for_kubectl(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """`kubectl get podgroups` names the built-in kind where it is served; ours answers to
    pg and its full name."""
    cluster.apply(upstream_podgroup(cluster, "shown", {"gang": {"minCount": 2}}))
    out = cluster.access.kubectl("get", "podgroups", "-n", cluster.namespace, "-o", "json").stdout
    assert [i["apiVersion"] for i in json.loads(out)["items"]] == [workload_version(cluster)]


def test_volcanos_crd_keeps_a_podgroups_subgroup_policy_and_defaults_its_queue(
    cluster: Cluster,
) -> None:
    """The CRD the tests install is Volcano's own schema (#23): subGroupPolicy and its
    networkTopology come back as written (not pruned), with Volcano's defaults filled in."""
    _with_volcano_crd(cluster.access)
    policy = {
        "name": "replica",
        "subGroupSize": 8,
        "minSubGroups": 6,
        "matchLabelKeys": ["volcano.sh/partition-id"],
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }
    cluster.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "replicas", "namespace": cluster.namespace},
            "spec": {"minMember": 48, "subGroupPolicy": [policy, {"name": "leader"}]},
        }
    )
    spec = cluster.get(VOLCANO, "replicas")["spec"]
    assert spec["subGroupPolicy"] == [
        policy,
        {"name": "leader", "subGroupSize": 1, "minSubGroups": 0},
    ]
    assert spec["queue"] == "default"
