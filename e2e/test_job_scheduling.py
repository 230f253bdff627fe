"""Kubernetes 1.37's Jobs that ask for gang scheduling (``spec.scheduling``, behind the alpha
WorkloadWithJob gate): the Job controller makes the Job's Workload and PodGroup and names the
PodGroup in every pod's ``spec.schedulingGroup``; we bind the pods as that gang, unchanged
from the Job's side. 1.36 has no such field, so ``make test-release`` (RELEASE=1.36) leaves
this file out."""

from __future__ import annotations

import json

import pytest

from e2e.fixtures import Cluster, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, stays_unbound, wait_bound
from e2e.test_owner_gangs import RUNS_AN_HOUR
from e2e.test_upstream_gangs import UPSTREAM, scheduled_type

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def gang_job(cluster: Cluster, name: str, pods: int, *, min_count: int, cpu: str) -> dict:
    """A NonIndexed Job of ``pods`` pods that asks for a gang of ``min_count``: without it,
    each of its pods would be placed on its own."""
    spec = cluster.pod("unused", requests={"cpu": cpu})["spec"]
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 10,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
            "template": {
                "metadata": {"labels": {"job": name}, "annotations": dict(RUNS_AN_HOUR)},
                "spec": spec,
            },
        },
    }


def job_pods(cluster: Cluster, job: str) -> list[dict]:
    out = cluster.access.kubectl(
        "get", "pods", "-n", cluster.namespace, "-l", f"job={job}", "-o", "json"
    ).stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def test_a_job_asking_for_a_gang_binds_its_pods_together_through_the_podgroup_it_gets(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="3")
    job = gang_job(cluster, "train", 4, min_count=4, cpu="1")
    cluster.apply(job)
    pods = wait_for(
        lambda: len(found := job_pods(cluster, "train")) == 4 and found,
        timeout=BIND_TIMEOUT,
        what="the Job's 4 pods",
    )
    groups = {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods}
    assert None not in groups, (
        "the Job controller named no PodGroup in its pods: it does only with the "
        "WorkloadWithJob gate on (Kubernetes 1.37, make test-release), on the API server "
        "and on kube-controller-manager"
    )
    assert len(groups) == 1, groups
    (podgroup,) = groups
    assert cluster.get(UPSTREAM, podgroup)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    names = {p["metadata"]["name"] for p in pods}
    # Room for three of the four: none is bound (each alone would be, were it not a gang).
    stays_unbound(cluster, names, seconds=3)
    cluster.nodes(1, cpu="1")
    wait_bound(cluster, names)

    def scheduled() -> dict:
        conditions = cluster.get(UPSTREAM, podgroup).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == scheduled_type(cluster)), {})

    wait_for(
        lambda: scheduled().get("status") == "True",
        timeout=BIND_TIMEOUT,
        what=f"{scheduled_type(cluster)}=True on the Job's PodGroup",
    )
    scheduler.assert_alive()
