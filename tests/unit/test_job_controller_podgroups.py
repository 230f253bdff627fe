"""Kubernetes 1.37's Job controller (WorkloadWithJob) makes a Workload and a PodGroup for every
Job with no owner, and names that PodGroup in each pod's spec.schedulingGroup: ``basic``
unless the Job's spec.scheduling asks for a gang. Such a basic PodGroup is the controller's
default and says nothing of gangs, so the Job's pods are ganged as they are without it; a
PodGroup someone chose, or one the Job asked to be a gang, is the gang."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.codecs.objects import pod_from_dict
from scheduler.codecs.podgroups import workload_podgroup_from_dict
from scheduler.core.gangs import resolve
from scheduler.model.gangs import PodGroup
from scheduler.model.pods import GangKey, GangSource, Pod
from scheduler.model.snapshot import Snapshot
from tests.unit.test_owner_gangs import CONFIG, bound, cluster, events, indexed_job, job_pods

GROUP = "train-x7f2-train-pgt-0-9c4d"


def podgroup(policy: dict[str, Any], *, made_by: str = "train") -> PodGroup:
    meta: dict[str, Any] = {"name": GROUP, "namespace": "ml", "uid": "uid-pg"}
    if made_by:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": made_by, "uid": f"uid-{made_by}",
             "controller": True, "blockOwnerDeletion": True},
            {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": "train-x7f2",
             "uid": "uid-wl"},
        ]  # fmt: skip
    return workload_podgroup_from_dict(
        {"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": meta,
         "spec": {"schedulingPolicy": policy, "podGroupTemplateRef": {"name": "train-pgt-0"}}}
    )  # fmt: skip


def in_group(pods: list[Pod]) -> list[Pod]:
    """The Job's pods as the 1.37 Job controller makes them: in its PodGroup."""
    return [
        pod_from_dict(
            {
                "metadata": {
                    "name": p.ref.name,
                    "namespace": p.ref.namespace,
                    "uid": p.ref.uid,
                    "labels": dict(p.labels),
                    "annotations": {},
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "ownerReferences": [
                        {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                         "uid": "uid-train", "controller": True}
                    ],
                },
                "spec": {
                    "schedulerName": p.scheduler_name,
                    "schedulingGroup": {"podGroupName": GROUP},
                    "containers": [{"name": "main", "resources": {"requests": {"cpu": "4"}}}],
                },
                "status": {"phase": "Pending"},
            }
        )
        for p in pods
    ]  # fmt: skip


def with_podgroup(pods: list[Pod], group: PodGroup) -> Snapshot:
    """One node of 8 CPUs (room for 2 of the 4 pods), the Indexed Job and its PodGroup."""
    return replace(
        cluster(pods, [indexed_job("train", 4)], nodes=1, cpu="8"), podgroups={group.key: group}
    )


def test_an_indexed_jobs_pods_in_its_controllers_basic_podgroup_are_still_one_gang() -> None:
    pods = in_group(job_pods("train", 4))
    assert pods[0].gang is not None
    assert pods[0].gang.source is GangSource.WORKLOAD
    snapshot = with_podgroup(pods, podgroup({"basic": {}}))
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", GROUP)]
    assert (gang.min_member, gang.total, gang.group) == (4, 4, (GangKey("ml", GROUP),))
    assert gang.origin == "gang from Job ml/train: Indexed Job of 4 pods"
    # Room for 2 of 4 (one node of 8 CPUs, 4 a pod): nothing binds, and the wait names the
    # gang by its PodGroup, the object kubectl shows.
    assert bound(snapshot) == set()
    assert events(snapshot, "FailedScheduling")[0].startswith(
        f"gang ml/{GROUP} does not fit, nothing was bound"
    )


def test_pods_in_a_basic_podgroup_someone_else_made_bind_one_by_one() -> None:
    pods = in_group(job_pods("train", 4))
    snapshot = with_podgroup(pods, podgroup({"basic": {}}, made_by=""))
    assert resolve(snapshot, CONFIG).gangs[GangKey("ml", GROUP)].min_member == 1
    assert len(bound(snapshot)) == 2


def test_a_jobs_podgroup_that_asks_for_a_gang_is_the_gang() -> None:
    """The Job's spec.scheduling asked for a gang of 2: its PodGroup's minCount counts."""
    pods = in_group(job_pods("train", 4))
    snapshot = with_podgroup(pods, podgroup({"gang": {"minCount": 2}}))
    assert resolve(snapshot, CONFIG).gangs[GangKey("ml", GROUP)].min_member == 2
    assert len(bound(snapshot)) == 2


def test_a_work_queues_pods_in_its_controllers_basic_podgroup_bind_one_by_one() -> None:
    pods = in_group(job_pods("train", 4, indexed=False))
    assert pods[0].gang is not None
    assert pods[0].gang.fallback is None
    snapshot = with_podgroup(pods, podgroup({"basic": {}}))
    assert len(bound(snapshot)) == 2
