"""Gangs from owners, with the real Job controller (the local kube-controller-manager): an
Indexed Job that declares no gang binds whole or not at all, and so does a JobSet's or a
training operator's Job. The operators themselves run in `make clients`."""

from __future__ import annotations

import json

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, stays_unbound, wait_bound
from scheduler.model import names

pytestmark = pytest.mark.cluster

# KWOK moves a Job's pods to Succeeded at once; with this they run for an hour.
# Copied into each manifest (dict(RUNS_AN_HOUR)): tests add their own annotations to it.
RUNS_AN_HOUR = {"pod-complete.stage.kwok.x-k8s.io/delay": "1h"}


def indexed_job(cluster: Cluster, name: str, pods: int, *, cpu: str, **meta: object) -> dict:
    spec = cluster.pod("unused", requests={"cpu": cpu})["spec"]
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": cluster.namespace, **meta},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 10,
            "template": {
                "metadata": {"labels": {"job": name}, "annotations": dict(RUNS_AN_HOUR)},
                "spec": spec,
            },
        },
    }


def job_pods(cluster: Cluster, job: str, *, bound_only: bool = False) -> set[str]:
    out = cluster.access.kubectl(
        "get", "pods", "-n", cluster.namespace, "-l", f"job={job}", "-o", "json"
    ).stdout
    return {
        p["metadata"]["name"]
        for p in json.loads(out)["items"]
        if not p["metadata"].get("deletionTimestamp")
        and (p["spec"].get("nodeName") or not bound_only)
    }


def _gang_name(cluster: Cluster, pod: str, *, job: str) -> str:
    """The gang a Job's pod is in, as messages name it: the PodGroup the Job controller put it
    in (1.37, WorkloadWithJob), else the Job's own."""
    joined = cluster.get("pods", pod)["spec"].get("schedulingGroup")
    return f"{cluster.namespace}/{joined['podGroupName'] if joined else f'Job/{job}'}"


def test_an_indexed_job_binds_whole_and_a_competing_one_waits_with_nothing_bound(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """Room for the first of two Indexed Jobs and half of the second: the first binds whole,
    the second binds nothing; once the first is deleted, the second binds whole. No
    PodGroup, no annotation: the Jobs make the gangs. On 1.37 the Job controller also puts
    each Job's pods in a basic PodGroup of its own (WorkloadWithJob): the gang is the Job's
    still, under that PodGroup's name."""
    cluster.nodes(4, cpu="8")
    cluster.apply(indexed_job(cluster, "first", 3, cpu="8"))
    first = wait_for(lambda: len(job_pods(cluster, "first")) == 3 and job_pods(cluster, "first"),
                     timeout=BIND_TIMEOUT, what="the first Job's 3 pods")  # fmt: skip
    wait_bound(cluster, first)
    cluster.apply(indexed_job(cluster, "second", 4, cpu="4"))
    second = wait_for(
        lambda: len(job_pods(cluster, "second")) == 4 and job_pods(cluster, "second"),
        timeout=BIND_TIMEOUT,
        what="the second Job's 4 pods",
    )
    stays_unbound(cluster, second)
    gang = _gang_name(cluster, min(second), job="second")
    waiting = wait_for(
        lambda: [m for m in cluster.events("FailedScheduling") if f"gang {gang} " in m],
        timeout=BIND_TIMEOUT,
        what=f"a FailedScheduling event naming the second Job's gang ({gang})",
    )
    assert "nothing was bound" in waiting[0]

    cluster.access.kubectl("delete", "job", "first", "-n", cluster.namespace,
                           "--cascade=foreground", "--wait=false")  # fmt: skip
    wait_for(
        lambda: job_pods(cluster, "second", bound_only=True) == second,
        timeout=BIND_TIMEOUT * 2,
        what="the second Job bound whole once the first was deleted",
    )
    scheduler.assert_alive()


def test_a_deleted_pod_of_a_running_indexed_job_is_recreated_and_placed_again(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """Node loss, as the Job controller sees it: a running member deleted is recreated
    (same index) and placed on its own, its gang being satisfied by the others."""
    cluster.nodes(2, cpu="8")
    cluster.apply(indexed_job(cluster, "train", 3, cpu="4"))
    members = wait_for(
        lambda: (
            len(job_pods(cluster, "train", bound_only=True)) == 3 and job_pods(cluster, "train")
        ),
        timeout=BIND_TIMEOUT,
        what="the Job bound whole",
    )
    lost = sorted(members)[0]
    cluster.access.kubectl("delete", "pod", lost, "-n", cluster.namespace, "--wait=true",
                           "--grace-period=0", "--force")  # fmt: skip
    wait_for(
        lambda: (
            len(job_pods(cluster, "train", bound_only=True) - members) == 1
            and len(job_pods(cluster, "train", bound_only=True)) == 3
        ),
        timeout=BIND_TIMEOUT,
        what="the replacement pod bound",
    )
    scheduler.assert_alive()


def test_a_nonindexed_job_binds_its_pods_as_they_fit_unless_it_asks_for_a_gang(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(2, cpu="8")
    queue = indexed_job(cluster, "queue", 3, cpu="8")
    queue["spec"]["completionMode"] = "NonIndexed"
    cluster.apply(queue)
    wait_for(
        lambda: len(job_pods(cluster, "queue", bound_only=True)) == 2,
        timeout=BIND_TIMEOUT,
        what="two of the work queue's three pods bound (room for two)",
    )
    whole = indexed_job(cluster, "whole", 3, cpu="8")
    whole["spec"]["completionMode"] = "NonIndexed"
    # The pods say it (the pod template): a NonIndexed Job's pods are alone otherwise.
    whole["spec"]["template"]["metadata"]["annotations"][names.OWNER_GANG] = "whole"
    cluster.nodes(2, cpu="8")
    cluster.apply(whole)
    pods = wait_for(
        lambda: len(job_pods(cluster, "whole")) == 3 and job_pods(cluster, "whole"),
        timeout=BIND_TIMEOUT,
        what="the whole Job's pods",
    )
    # Two nodes free, one left by the queue: room for 2 of 3 (the queue's third takes one).
    stays_unbound(cluster, pods)
    scheduler.assert_alive()


def _completing_job(
    cluster: Cluster, scheduler: PrivateSchedulers, name: str, pods: int, *, completions: int = 0
) -> tuple[str, set[str]]:
    """An Indexed Job of ``pods`` pods at once (``completions`` in all, ``pods`` if not
    said) with a Koordinator gang of ``pods`` on its template, for ``scheduler``; KWOK runs
    each bound pod to Succeeded in 1 s. Its node and its first pods."""
    (node,) = cluster.nodes(1, cpu="8")
    job = indexed_job(cluster, name, pods, cpu="1")
    job["spec"]["completions"] = completions or pods
    template = job["spec"]["template"]
    template["spec"]["schedulerName"] = scheduler.name
    template["metadata"]["annotations"] = {
        "pod-complete.stage.kwok.x-k8s.io/delay": "1s",
        **koord(name, pods),
    }
    cluster.apply(job)
    made = wait_for(lambda: len(job_pods(cluster, name)) == pods and job_pods(cluster, name),
                    timeout=BIND_TIMEOUT, what=f"the Job's {pods} pods")  # fmt: skip
    return node, made


def _job_status(cluster: Cluster, name: str) -> dict:
    return cluster.access.rest.read("jobs.batch", name, namespace=cluster.namespace).get(
        "status", {}
    )


def _wait_complete(cluster: Cluster, name: str) -> None:
    wait_for(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in _job_status(cluster, name).get("conditions", [])
        ),
        timeout=BIND_TIMEOUT,
        what="the Job to complete",
    )


def test_a_job_gang_cut_short_whose_bound_pods_succeeded_is_completed_by_the_next_leader(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """Chaos seed 5035, staged: a leader bound 2 of a Job's 4 pods (a Koordinator gang of 4
    on its template) and died; the 2 ran and Succeeded before any scheduler led again. The
    Job controller makes no pod that succeeded again, so the 2 pending ones are all the gang
    will ever have: the next scheduler counts the 2 toward the minimum, binds the rest
    together, and the Job completes. (A Job that states no gang was fine before: its gang's
    size follows the Job's status, completions not yet succeeded.)"""
    from e2e.objects import bind  # noqa: PLC0415

    node, pods = _completing_job(cluster, private_scheduler, "cut", 4)
    early = sorted(pods)[:2]
    for name in early:  # what the killed leader bound
        bind(cluster.access.api(), namespace=cluster.namespace, pod=name, node=node)
    rest = cluster.access.rest

    def phase(name: str) -> str:
        return rest.read("pods", name, namespace=cluster.namespace)["status"].get("phase", "")

    wait_for(lambda: all(phase(n) == "Succeeded" for n in early), timeout=BIND_TIMEOUT,
             what="the 2 bound pods to run and succeed (KWOK)")  # fmt: skip
    private_scheduler.start()
    wait_bound(cluster, pods - set(early))
    _wait_complete(cluster, "cut")
    assert len(job_pods(cluster, "cut")) == 4, "the Job made no pod again"


def test_a_job_gang_whose_succeeded_pod_was_deleted_counts_it_by_the_jobs_status(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """Chaos seed 6067, staged: a Job of 2 pods with a Koordinator gang of 2 on its template;
    one pod was bound (by a scheduler gone since), ran, Succeeded, and was then deleted (its
    node went: the pod garbage collector). The Job counts it in status.succeeded and makes no
    pod for it again, so the pending pod is all the gang will ever have: the scheduler counts
    the deleted one by the Job's status, binds the other, and the Job completes."""
    from e2e.objects import bind  # noqa: PLC0415

    node, pods = _completing_job(cluster, private_scheduler, "went", 2)
    first, second = sorted(pods)
    bind(cluster.access.api(), namespace=cluster.namespace, pod=first, node=node)
    rest = cluster.access.rest
    wait_for(lambda: _job_status(cluster, "went").get("succeeded") == 1, timeout=BIND_TIMEOUT,
             what="the bound pod to succeed and the Job to count it")  # fmt: skip
    rest.remove("pods", first, namespace=cluster.namespace, gracePeriodSeconds="0")

    def gone() -> bool:
        names = {
            p["metadata"]["name"] for p in rest.read("pods", namespace=cluster.namespace)["items"]
        }
        return first not in names

    wait_for(gone, timeout=BIND_TIMEOUT, what=f"{first} to be gone from the API server")
    private_scheduler.start()
    wait_bound(cluster, {second})
    _wait_complete(cluster, "went")
    assert job_pods(cluster, "went") == {second}, "the Job made no pod again"


def test_a_job_gang_runs_round_after_round_as_the_job_controller_makes_them(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """The Job rule against the real Job controller: 6 completions 2 at a time, a gang of 2
    on the template. Each round's pods come as the controller makes them, beside the last
    round's Succeeded ones; the Job's status (succeeded, and the completions left) makes
    each round a whole gang of 2, and the Job completes with no pod made twice. This shows
    the rule reads the real controller's counts so that every round binds; the race it
    closes (a round's first pod seen alone) is too short to stage here and is shown by
    test_the_first_pod_of_a_jobs_next_round_does_not_bind_alone_beside_the_last_rounds."""
    private_scheduler.start()
    _completing_job(cluster, private_scheduler, "rounds", 2, completions=6)
    _wait_complete(cluster, "rounds")
    assert _job_status(cluster, "rounds").get("succeeded") == 6
    assert len(job_pods(cluster, "rounds")) == 6, "a pod was made again"
