"""Faults a real cluster has every week, against a control plane of this module's own (the
tests kill and restart parts of it): the API server killed and restarted mid-burst.

The promise under test: once the fault is over, scheduling resumes within seconds, every
gang ends whole, and a gang created after the fault binds."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import yaml

from e2e.fixtures import (
    Cluster,
    ClusterAccess,
    SchedulerProcess,
    healthz,
    own_control_plane,
    wait_for,
)
from e2e.test_gang_scheduling import koord as _koord
from e2e.test_gang_scheduling import podgroup
from e2e.test_gang_volumes import (
    BoundBeforeItsClaim,
    _apply_members,
    _claim,
    _claims,
    _class,
    _each_bound_on_its_pods_node,
)
from scheduler.model import names
from testbed import cluster as local_cluster
from testbed.provisioner import SELECTED_NODE, provisioning

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
    plane.kubectl(
        "delete", "pods,podgroups.scheduling.x-k8s.io", "--all", "-n", namespace, "--wait=false"
    )


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


def test_a_gang_waiting_for_its_volumes_binds_whole_after_an_api_server_restart(
    plane: ClusterAccess, cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """The scheduler has asked for the gang's volumes on their nodes and waits for them when
    the API server dies; the provisioner only comes after it is back. The wait goes on
    across the outage (the claims' watch re-lists), and the gang binds whole, each volume on
    its pod's node, no pod before its claim."""
    nodes = cluster.nodes(3, cpu="4")
    wait_for(lambda: "cache synced" in scheduler.log.read_text(), timeout=30, what="a sync")
    made = _class(cluster, "made")
    members = {f"w-{i}": f"data-{i}" for i in range(3)}
    cluster.apply(*(_claim(cluster, claim, made) for claim in members.values()))
    with BoundBeforeItsClaim(cluster, members) as watcher:
        _apply_members(cluster, members, scheduler.name, cpu="3")

        def asked() -> bool:
            claims = _claims(cluster)
            return all(
                SELECTED_NODE in (claims[c]["metadata"].get("annotations") or {})
                for c in members.values()
            )

        wait_for(asked, timeout=30, what="a node selected for every claim of the gang")
        local_cluster.restart(plane.kubeconfig.parent, "kube-apiserver", down_seconds=3)
        assert not cluster.bound() & set(members), "a pod was bound before its volume was made"
        with provisioning(plane.rest, cluster.namespace, {made}) as provisioner:
            # After the restart the provisioner's and the PV controller's connections come
            # back first, then their watches (the controller also resyncs every 15 s): in
            # one make test run (session 59), nothing was bound 30 s after the restart.
            wait_for(
                lambda: cluster.bound() >= set(members),
                timeout=90,
                what=f"the gang bound (made: {provisioner.made}; {provisioner.errors[-3:]})",
            )
        assert watcher.seen == [], "a pod was bound before its claim"
    assert sorted(provisioner.made) == sorted(members.values()), provisioner.errors
    assert sorted(cluster.placements()[pod] for pod in members) == sorted(nodes), "one a node"
    _each_bound_on_its_pods_node(cluster, members)
    scheduler.assert_alive()


def _freeze(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def _thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def _pid_of(plane: ClusterAccess, name: str) -> int:
    state = local_cluster.read_state(plane.kubeconfig.parent)
    assert state is not None
    return next(p.pid for p in state.processes if p.name == name and p.alive())


def test_deletions_hidden_by_an_expired_watch_are_dropped_after_the_relist(
    plane: ClusterAccess, cluster: Cluster
) -> None:
    """The network between the scheduler and the API server breaks; meanwhile a node and a
    pod are deleted, the API server restarts and etcd compacts its history, so no DELETED
    event can ever reach the scheduler: its watches resume into 410 Gone and re-list. The
    re-list must drop both, or a gang lands on a node that is gone and another waits forever
    for capacity a deleted pod held."""
    from e2e.proxy import Proxy  # noqa: PLC0415
    from e2e.test_incarnations import occupy  # noqa: PLC0415

    kept, doomed = cluster.nodes(2, cpu="4")
    blocker = occupy(cluster, kept, cpu="4")
    config = yaml.safe_load(plane.kubeconfig.read_text())
    server = urllib.parse.urlsplit(config["clusters"][0]["cluster"]["server"])
    proxy = Proxy((server.hostname or "127.0.0.1", server.port or 443))
    logs = plane.kubeconfig.parent / "logs"
    name = f"hidden-{uuid.uuid4().hex[:4]}"
    scheduler = SchedulerProcess(
        kubeconfig=proxy.kubeconfig(plane.kubeconfig, logs / f"{name}.kubeconfig"),
        log=logs / f"scheduler-{name}.log",
        name=name,
    ).start()
    try:
        wait_for(lambda: "cache synced" in scheduler.log.read_text(), timeout=30, what="a sync")
        proxy.cut()
        try:
            cluster.access.kubectl("delete", "node", doomed)
            cluster.access.kubectl("delete", "pod", blocker, "-n", cluster.namespace)
            local_cluster.restart(plane.kubeconfig.parent, "kube-apiserver")
            local_cluster.compact_etcd(plane.kubeconfig.parent)  # the history is gone too
        finally:
            proxy.restore()

        def removals() -> list[str]:
            text = scheduler.log.read_text()
            return [line for line in text.splitlines() if "removed what vanished" in line]

        # Each kind re-lists on its own clock: pods may be dropped seconds before nodes.
        wait_for(
            lambda: (
                any("kind=nodes" in line for line in removals())
                and any("kind=pods" in line for line in removals())
            ),
            timeout=60,
            what="the scheduler to drop the node and the pod the re-lists no longer show",
        )
        assert any(doomed in line for line in removals()), removals()
        pair = cluster.gang(
            "pair", 2, scheduler=name, annotations=_koord("pair", 2), requests={"cpu": "3"}
        )
        solo = cluster.gang(
            "solo", 1, scheduler=name, annotations=_koord("solo", 1), requests={"cpu": "4"}
        )
        wait_for(lambda: cluster.bound() >= solo, timeout=30, what="solo bound on the freed node")
        assert cluster.placements()["solo-0"] == kept
        assert not cluster.bound() & pair, "a member of pair was bound to the deleted node"
        scheduler.assert_alive()
    finally:
        scheduler.stop()
        proxy.close()


def test_frozen_leader_binds_nothing_once_the_standby_took_over(
    plane: ClusterAccess, cluster: Cluster
) -> None:
    """Split brain: the leader is frozen (SIGSTOP) until the standby holds the Lease, then
    resumed. Its cache still shows the pods that arrived while it slept as pending, yet it
    must send no bind: it is past its renew deadline the moment it runs again."""
    cluster.nodes(2, cpu="8")
    lease = f"private-{uuid.uuid4().hex[:6]}"
    flags = ("--leader-elect", "--leader-elect-namespace", cluster.namespace,
             "--lease-duration", "4")  # fmt: skip
    logs = plane.kubeconfig.parent / "logs"
    replicas = [
        SchedulerProcess(
            kubeconfig=plane.kubeconfig, log=logs / f"{lease}-{i}.log", name=lease, extra=flags
        ).start()
        for i in range(2)
    ]
    try:
        holder = wait_for(lambda: cluster.lease_holder(lease), timeout=30, what="a leader")
        by_pid = {str(p.process.pid): p for p in replicas if p.process}
        leader = by_pid[str(holder).rsplit("_", 1)[1]]
        standby = next(p for p in replicas if p is not leader)
        first = cluster.gang("first", 2, scheduler=lease, annotations=_koord("first", 2))
        wait_for(lambda: cluster.bound() >= first, timeout=30, what="the first gang bound")

        assert leader.process is not None
        _freeze(leader.process.pid)
        try:
            wait_for(
                lambda: cluster.lease_holder(lease) not in ("", holder),
                timeout=30,
                what="the standby to take the Lease over",
            )
            second = cluster.gang("second", 4, scheduler=lease, annotations=_koord("second", 4))
            wait_for(lambda: cluster.bound() >= second, timeout=30, what="the standby binding")
            placed = {name: node for name, node in cluster.placements().items() if name in second}
            resumed_at = len(leader.log.read_text())
        finally:
            _thaw(leader.process.pid)
        wait_for(
            lambda: leader.process is not None and leader.process.poll() is not None,
            timeout=30,
            what="the old leader to exit",
        )
        after = leader.log.read_text()[resumed_at:]
        assert leader.process.returncode == 1
        assert "lost leadership" in after
        assert "already assigned" not in after, f"the old leader sent binds:\n{after}"
        now = {name: node for name, node in cluster.placements().items() if name in second}
        assert now == placed
        standby.assert_alive()
    finally:
        for replica in replicas:
            replica.stop()


def test_healthz_fails_while_the_api_server_does_not_answer_and_recovers_after(
    plane: ClusterAccess,
) -> None:
    port = local_cluster.free_port()
    process = SchedulerProcess(
        kubeconfig=plane.kubeconfig,
        log=plane.kubeconfig.parent / "logs" / f"scheduler-health-{port}.log",
        name=f"health-{port}",
        extra=("--health-port", str(port), "--unreachable-limit", "3"),
    ).start()
    apiserver = _pid_of(plane, "kube-apiserver")
    try:
        wait_for(lambda: healthz(port) == 200, timeout=30, what="/healthz 200 at first")
        _freeze(apiserver)
        try:
            wait_for(lambda: healthz(port) == 500, timeout=40, what="/healthz 500")
        finally:
            _thaw(apiserver)
        wait_for(lambda: healthz(port) == 200, timeout=40, what="/healthz 200 again")
        process.assert_alive()
    finally:
        _thaw(apiserver)
        process.stop()
