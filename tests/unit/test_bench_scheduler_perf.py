"""The replay of scheduler_perf's gang workloads (bench/scheduler_perf.py): the workloads as
v1.37.2 defines them, the objects both schedulers are given, and the page of results."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.scheduler_perf import (
    WORKLOADS,
    base_node,
    markdown,
    on_upstream_podgroups,
    parse,
    percentile,
)
from bench.schedulers import Contender, upstream_version


def test_the_workloads_are_scheduler_perfs_gang_grid() -> None:
    """podgroup/gangscheduling/performance-config.yaml at v1.37.2: 1,000 to 3,000 gangs of 3
    and 3 to 9 gangs of 1,000 on 5,000 nodes, and the two integration-test sizes."""
    assert WORKLOADS["5000Nodes_1000Gangs_3000Pods"].pods == 3000
    assert WORKLOADS["5000Nodes_9Gangs_9000Pods_1000PerGroup"].per_group == 1000
    for name, workload in WORKLOADS.items():
        assert name.startswith(f"{workload.nodes}Nodes_{workload.groups}Gangs")
        if "Pods" in name:
            assert f"_{workload.pods}Pods" in name


def test_a_base_node_is_scheduler_perfs_make_base_node() -> None:
    allocatable = base_node(7)["status"]["allocatable"]
    assert (allocatable["cpu"], allocatable["memory"], allocatable["pods"]) == ("4", "32Gi", "110")


def test_both_schedulers_get_the_same_v1beta1_podgroups_and_pods_but_for_the_scheduler_name() -> (
    None
):
    ours = Contender(
        key="gang_scheduler", label="us", scheduler_name="gang-scheduler", version="0",
        argv=(), gang_api="ours", settings={"gangs": "scheduling.x-k8s.io/v1alpha1 PodGroup"},
    )  # fmt: skip
    theirs = Contender(
        key="kube_scheduler", label="them", scheduler_name="kube-scheduler-gang", version="0",
        argv=(), gang_api="upstream", upstream_api=upstream_version((1, 37)),
    )  # fmt: skip
    bodies = []
    for given in (ours, theirs):
        contender = on_upstream_podgroups(given, upstream_version((1, 37)))
        path, podgroup = contender.podgroup(namespace="ns", name="g0", size=3)
        pod = contender.pod("g0-0", gang="g0", requests={"cpu": "100m"})
        assert path == "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups"
        pod["spec"].pop("schedulerName")
        bodies.append((podgroup, pod))
    assert bodies[0] == bodies[1]
    assert bodies[0][0]["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}
    assert bodies[0][1]["spec"]["schedulingGroup"] == {"podGroupName": "g0"}
    assert upstream_version((1, 36)) == "scheduling.k8s.io/v1alpha2"
    # What the results say of each scheduler's gangs is what it was given.
    said = on_upstream_podgroups(ours, upstream_version((1, 37))).describe()["gangs"]
    assert said.startswith("scheduling.k8s.io/v1beta1 PodGroup")


def test_the_p99_of_a_hundred_waits_is_the_99th() -> None:
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert percentile([5.0], 0.99) == 5.0


def test_the_page_gives_each_scheduler_its_medians_and_ranges() -> None:
    results = {
        "settings": {
            "machine": "2 cores", "control_plane": "v1.37.2", "nodes": 100,
            "pods": {"cpu": "100m", "memory": "100Mi"},
        },
        "schedulers": {"a": {"label": "A"}},
        "workloads": {"100Nodes_10Gangs": {"a": [
            {"pods_per_second": 10.0, "bind_p99_ms": 5.0},
            {"pods_per_second": 30.0, "bind_p99_ms": 7.0},
            {"pods_per_second": 20.0, "bind_p99_ms": 6.0},
        ]}},
    }  # fmt: skip
    page = markdown(results)
    assert "## GangScheduling/100Nodes_10Gangs" in page
    assert "| A | 20 (10-30) |" in page


def test_an_unknown_workload_is_refused_with_the_names_allowed() -> None:
    with pytest.raises(SystemExit):
        parse(["--workloads", "5000Nodes_1Gang"])


def test_the_tuned_coschedulings_permit_wait_grows_with_the_gang() -> None:
    """10 s as the README's tuning says, for gangs of up to 100; 0.1 s a member beyond, so
    that the members of a gang of 256 are not let go while the rest are still placed."""
    tuned = Contender(
        key="coscheduling_tuned", label="tuned", scheduler_name="cos", version="0",
        argv=(), gang_api="ours", min_resources=True, timeout_by_size=True,
    )  # fmt: skip
    waits = {
        size: tuned.podgroup(namespace="ns", name="g", size=size, requests={"cpu": "1"})[1]["spec"][
            "scheduleTimeoutSeconds"
        ]
        for size in (8, 100, 101, 256)
    }
    assert waits == {8: 10, 100: 10, 101: 11, 256: 26}
    example = replace(tuned, timeout_by_size=False, min_resources=False)
    assert example.podgroup(namespace="ns", name="g", size=256)[1]["spec"] == {"minMember": 256}
