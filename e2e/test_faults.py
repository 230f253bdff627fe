"""Faults a real cluster has every week, against a control plane of this module's own (the
tests kill and restart parts of it): the API server killed and restarted mid-burst.

The promise under test: once the fault is over, scheduling resumes within seconds, every
gang ends whole, and a gang created after the fault binds."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from e2e import cluster as local_cluster
from e2e.fixtures import Cluster, ClusterAccess, SchedulerProcess, own_control_plane, wait_for
from e2e.test_gang_scheduling import podgroup
from scheduler.model import names

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

FAULTS = "faults"
RECOVERY_SECONDS = 60


@pytest.fixture(scope="module")
def plane() -> Iterator[ClusterAccess]:
    with own_control_plane(FAULTS) as access:
        yield access


@pytest.fixture
def cluster(plane: ClusterAccess) -> Iterator[Cluster]:
    namespace = f"faults-{uuid.uuid4().hex[:5]}"
    plane.kubectl("create", "namespace", namespace)
    yield Cluster(access=plane, namespace=namespace)
    plane.kubectl("delete", "pods,podgroups", "--all", "-n", namespace, "--wait=false")


@pytest.fixture
def scheduler(plane: ClusterAccess) -> Iterator[SchedulerProcess]:
    process = SchedulerProcess(
        kubeconfig=plane.kubeconfig,
        log=plane.kubeconfig.parent / "logs" / f"scheduler-{uuid.uuid4().hex[:4]}.log",
    ).start()
    try:
        yield process
    finally:
        process.stop()


def podgroup_gangs(cluster: Cluster, *, count: int, size: int, prefix: str) -> dict[str, set]:
    """``count`` PodGroups of ``size`` pods (1 CPU each), applied in one go; gang -> pods."""
    gangs = {f"{prefix}{i}": {f"{prefix}{i}-{j}" for j in range(size)} for i in range(count)}
    manifests = []
    for gang, members in gangs.items():
        manifests.append(podgroup(gang, cluster.namespace, size))
        labels = {names.POD_GROUP_LABEL: gang}
        manifests.extend(cluster.pod(m, labels=labels) for m in sorted(members))
    cluster.apply(*manifests)
    return gangs


def partially_bound(cluster: Cluster, gangs: dict[str, set]) -> dict[str, int]:
    bound = cluster.bound()
    return {
        gang: len(members & bound)
        for gang, members in gangs.items()
        if 0 < len(members & bound) < len(members)
    }


def no_node_over_allocatable(cluster: Cluster, *, cpus_per_node: int) -> None:
    per_node = Counter(node for node in cluster.placements().values() if node)
    over = {node: n for node, n in per_node.items() if n > cpus_per_node}
    assert not over, f"nodes holding more 1-CPU pods than their {cpus_per_node} CPUs: {over}"


def test_api_server_killed_mid_burst_then_every_gang_ends_whole_and_a_new_one_binds(
    plane: ClusterAccess, cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    cluster.nodes(25, cpu="16")
    wait_for(lambda: "cache synced" in scheduler.log.read_text(), timeout=30, what="a sync")
    gangs = podgroup_gangs(cluster, count=100, size=4, prefix="g")
    wait_for(cluster.bound, timeout=30, what="the first pods bound")

    local_cluster.restart(plane.kubeconfig.parent, "kube-apiserver", down_seconds=5)
    ready_at = time.monotonic()

    everything = set().union(*gangs.values())
    wait_for(
        lambda: cluster.bound() >= everything,
        timeout=RECOVERY_SECONDS,
        what=f"all 400 pods bound after the restart (partial gangs: "
        f"{partially_bound(cluster, gangs)}, bound {len(cluster.bound())})",
    )
    recovered = time.monotonic() - ready_at

    canary = podgroup_gangs(cluster, count=1, size=4, prefix="canary")
    cluster.nodes(1, cpu="4")
    wait_for(
        lambda: cluster.bound() >= canary["canary0"],
        timeout=30,
        what="the canary gang created after the restart to bind",
    )
    assert partially_bound(cluster, gangs) == {}
    no_node_over_allocatable(cluster, cpus_per_node=16)
    assert recovered < RECOVERY_SECONDS
    scheduler.assert_alive()
    print(json.dumps({"recovered_seconds": round(recovered, 1)}))
