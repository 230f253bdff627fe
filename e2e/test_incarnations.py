"""Gangs the way real controllers produce them: recreated pods, GangGroups whose binds are
rejected or cut short by a crash, PodGroups deleted and created again, members that fail.
Against the real API server, with the scheduler as its own process."""

from __future__ import annotations

import json
import time

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, podgroup, stays_unbound, wait_bound
from scheduler.model import names

pytestmark = pytest.mark.cluster


def set_phase(cluster: Cluster, pods: set[str], phase: str) -> None:
    """What a kubelet reports when the containers end (KWOK runs none)."""
    for name in sorted(pods):
        cluster.access.kubectl(
            "patch", "pod", name, "-n", cluster.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {"phase": phase}}),
        )  # fmt: skip


def occupy(cluster: Cluster, node: str, *, cpu: str) -> str:
    """A pod of another scheduler bound to ``node``, holding ``cpu``; its name."""
    from e2e.objects import bind  # noqa: PLC0415

    name = f"blocker-{node[-3:]}-{time.monotonic_ns() % 10_000}"
    cluster.apply(cluster.pod(name, scheduler="default-scheduler", requests={"cpu": cpu}))
    bind(cluster.access.api(), namespace=cluster.namespace, pod=name, node=node)
    return name


def deny_binds(cluster: Cluster, *, prefix: str) -> str:
    """A ValidatingAdmissionPolicy that rejects binds of this namespace's pods whose name
    starts with ``prefix``, as a webhook or a rival would; its name (delete it to lift)."""
    name = f"deny-bind-{cluster.namespace}"
    cluster.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": cluster.namespace}
                    },
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ],
                },
                "validations": [
                    {
                        "expression": f"!object.metadata.name.startsWith('{prefix}')",
                        "message": f"test policy: binds of {prefix}* are rejected",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    )
    # The policy takes effect once the API server's informer has it: probe with pods of our
    # own until a bind is rejected.
    from e2e.objects import bind  # noqa: PLC0415

    node = cluster.node_names()[0]
    probes = iter(range(1000))

    def rejected() -> bool:
        probe = f"{prefix}probe-{next(probes)}"
        cluster.apply(cluster.pod(probe, scheduler="nobody"))
        try:
            bind(cluster.access.api(), namespace=cluster.namespace, pod=probe, node=node)
        except Exception:  # the HTTP error of the rejection
            return True
        finally:
            cluster.access.kubectl("delete", "pod", probe, "-n", cluster.namespace, "--wait=false")
        return False

    wait_for(rejected, timeout=30, what="the deny-bind policy to take effect", interval=0.5)
    return name


def lift(cluster: Cluster, policy: str) -> None:
    cluster.access.kubectl(
        "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy,
        "--ignore-not-found",
    )  # fmt: skip


def gang_group_of_two(cluster: Cluster, **pod: str) -> tuple[set[str], set[str]]:
    """Gangs a and b of two members each, naming each other as one GangGroup."""
    group = json.dumps([f"{cluster.namespace}/a", f"{cluster.namespace}/b"])
    return tuple(  # type: ignore[return-value]
        cluster.gang(name, 2, annotations=koord(name, 2, groups=group), **pod) for name in "ab"
    )


def test_job_that_recreates_all_its_pods_gets_a_whole_gang_or_none(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    (node,) = cluster.nodes(1, cpu="4")
    cluster.apply(podgroup("train", cluster.namespace, 4))
    first = cluster.gang("first", 4, labels={names.POD_GROUP_LABEL: "train"})
    wait_bound(cluster, first)
    set_phase(cluster, first, "Failed")  # every member of the first incarnation fails
    blocker = occupy(cluster, node, cpu="2")  # only 2 of 4 cpu left
    second = cluster.gang("second", 4, labels={names.POD_GROUP_LABEL: "train"})
    wait_for(
        lambda: any("nothing was bound" in m for m in cluster.events("FailedScheduling")),
        timeout=BIND_TIMEOUT,
        what="the new incarnation to be tried and fail whole",
    )
    stays_unbound(cluster, second, seconds=3)
    cluster.access.kubectl("delete", "pod", blocker, "-n", cluster.namespace, "--wait=false")
    wait_bound(cluster, second)
    scheduler.assert_alive()


def test_podgroup_whose_members_all_fail_shows_failed(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1)
    cluster.apply(podgroup("train", cluster.namespace, 2))
    members = cluster.gang("m", 2, labels={names.POD_GROUP_LABEL: "train"})
    wait_bound(cluster, members)
    set_phase(cluster, members, "Failed")
    wait_for(
        lambda: (
            cluster.get("podgroups.scheduling.x-k8s.io", "train").get("status", {}).get("phase")
            == "Failed"
        ),
        timeout=BIND_TIMEOUT,
        what="PodGroup train in phase Failed",
    )


def test_describe_podgroup_of_a_backing_off_gang_says_why_it_waits(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="2")
    cluster.apply(podgroup("big", cluster.namespace, 3))
    cluster.gang("big", 3, labels={names.POD_GROUP_LABEL: "big"})

    def described() -> str:
        return cluster.access.kubectl(
            "describe", "podgroups.scheduling.x-k8s.io", "big", "-n", cluster.namespace
        ).stdout

    wait_for(
        lambda: "Insufficient cpu" in described(), timeout=BIND_TIMEOUT, what="the reason shown"
    )
    # Through several backoffs (the session's scheduler backs off at most 2 s), it says why.
    for _ in range(8):
        text = described()
        assert "Insufficient cpu" in text, text
        assert "not tried yet" not in text, text
        time.sleep(0.5)


def test_podgroup_deleted_and_created_anew_does_not_inherit_the_old_timeout(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="2")
    cluster.apply(podgroup("pg", cluster.namespace, 2, scheduleTimeoutSeconds=3))
    members = cluster.gang("m", 2, labels={names.POD_GROUP_LABEL: "pg"}, requests={"cpu": "2"})
    wait_for(lambda: cluster.events("GangTimeout"), timeout=BIND_TIMEOUT, what="GangTimeout")
    cluster.access.kubectl(
        "delete", "pods,podgroups.scheduling.x-k8s.io", "--all", "-n", cluster.namespace,
        "--wait=true",
        timeout=60,
    )  # fmt: skip
    cluster.apply(podgroup("pg", cluster.namespace, 2, scheduleTimeoutSeconds=60))
    cluster.gang("m", 2, labels={names.POD_GROUP_LABEL: "pg"}, requests={"cpu": "1"})
    wait_bound(cluster, members)
    pods = json.loads(
        cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    )
    marked = [
        p["metadata"]["name"]
        for p in pods["items"]
        if names.KOORD_TIMEOUT in (p["metadata"].get("annotations") or {})
    ]
    assert marked == []


def test_gang_group_whose_second_gang_is_rejected_ends_whole(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(1, cpu="8")
    policy = deny_binds(cluster, prefix="b-")
    try:
        a, b = gang_group_of_two(cluster)
        wait_bound(cluster, a)  # the commit point (a's first member) was accepted
        stays_unbound(cluster, b, seconds=2)  # b's binds are rejected: none of b is bound
    finally:
        lift(cluster, policy)
    wait_bound(cluster, a | b)


def test_gang_group_cut_short_by_a_crash_is_completed_after_restart(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    cluster.nodes(1, cpu="8")
    policy = deny_binds(cluster, prefix="b-")
    try:
        a, b = gang_group_of_two(cluster, scheduler=private_scheduler.name)
        first = private_scheduler.start()
        wait_bound(cluster, a)
        first.kill()  # between the group's two gangs: a bound, b not
        assert not (cluster.bound() & b)
    finally:
        lift(cluster, policy)
    private_scheduler.start()
    wait_bound(cluster, a | b)
