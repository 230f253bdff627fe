"""Gangs of gangs (#23) on the local control plane: a Volcano PodGroup with
``spec.subGroupPolicy`` (Volcano's own CRD schema, generated from volcano.sh/apis v1.14.0)
binds whole subgroups only, as many as fit once it has its minSubGroups, and takes a further
subgroup whole when room appears."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, stays_unbound, wait_bound
from e2e.test_owner_gangs import indexed_job, job_pods
from e2e.test_upstream_gangs import _with_volcano_crd
from scheduler.model import names

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]

PARTITION = "volcano.sh/partition-id"


def replicas(cluster: Cluster, gang: str, count: int, size: int) -> dict[int, set[str]]:
    """``count`` replicas of ``size`` one-CPU pods of Volcano gang ``gang``, labelled with
    their replica index: the pods of each replica, by index."""
    made: dict[int, set[str]] = {}
    for r in range(count):
        made[r] = {f"{gang}-{r}-{m}" for m in range(size)}
        cluster.apply(
            *(
                cluster.pod(
                    name,
                    labels={PARTITION: str(r)},
                    annotations={names.VOLCANO_GROUP_NAME: gang},
                    requests={"cpu": "1"},
                )
                for name in sorted(made[r])
            )
        )
    return made


def test_replicas_bind_whole_at_least_the_minimum_and_one_more_when_room_appears(
    cluster: Cluster, scheduler: SchedulerProcess
) -> None:
    """3 replicas of 2 pods, minSubGroups 2, room for 5 pods: two whole replicas bind and
    the third waits (never one pod of it); a node more and it binds whole."""
    _with_volcano_crd(cluster.access)
    cluster.nodes(1, cpu="5")
    cluster.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "dp", "namespace": cluster.namespace},
            "spec": {
                "minMember": 4,
                "subGroupPolicy": [
                    {
                        "name": "replica",
                        "subGroupSize": 2,
                        "minSubGroups": 2,
                        "matchLabelKeys": [PARTITION],
                    }
                ],
            },
        }
    )
    made = replicas(cluster, "dp", 3, 2)
    wait_bound(cluster, made[0] | made[1])
    stays_unbound(cluster, made[2], seconds=2)
    cluster.nodes(1, cpu="2")
    wait_bound(cluster, made[2])
    scheduler.assert_alive()


RACK = "topology.example.com/rack"


def _racks_and_scheduler(
    cluster: Cluster, private_scheduler: PrivateSchedulers, *, per_rack: int
) -> tuple[dict[str, str], SchedulerProcess]:
    """Volcano's CRD, racks r0 and r1 of ``per_rack`` one-CPU nodes (labelled), and a
    scheduler that reads the racks from the labels: each node's rack, and the scheduler."""
    _with_volcano_crd(cluster.access)
    rack_of = {
        node: rack
        for rack in ("r0", "r1")
        for node in cluster.nodes(per_rack, cpu="1", labels={RACK: rack})
    }
    scheduler = private_scheduler.start(
        "--topology-namespace", cluster.namespace, "--topology-from-labels", f"rack={RACK}"
    )
    return rack_of, scheduler


def _volcano_podgroup(cluster: Cluster, **spec: object) -> dict:
    """Volcano PodGroup dp, minMember 2, with ``spec`` besides."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "dp", "namespace": cluster.namespace},
        "spec": {"minMember": 2, **spec},
    }


def test_a_lost_member_of_a_rack_bound_replica_comes_back_into_its_rack(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """A replica of 2 with networkTopology hard, tier 1 (the racks, from node labels) binds
    in one rack; one of its pods is lost (its node cordoned, the pod deleted and made
    again): it comes back into the same rack, not onto the other rack's free nodes."""
    rack_of, scheduler = _racks_and_scheduler(cluster, private_scheduler, per_rack=3)
    cluster.apply(
        _volcano_podgroup(
            cluster,
            subGroupPolicy=[
                {
                    "name": "replica",
                    "subGroupSize": 2,
                    "minSubGroups": 1,
                    "matchLabelKeys": [PARTITION],
                    "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
                }
            ],
        )
    )

    def member(name: str) -> dict:
        return cluster.pod(
            name,
            scheduler=scheduler.name,
            labels={PARTITION: "0"},
            annotations={names.VOLCANO_GROUP_NAME: "dp"},
            requests={"cpu": "1"},
        )

    cluster.apply(member("dp-0-0"), member("dp-0-1"))
    wait_bound(cluster, {"dp-0-0", "dp-0-1"})
    placed = cluster.placements()
    home = rack_of[placed["dp-0-0"]]
    assert rack_of[placed["dp-0-1"]] == home
    lost = placed["dp-0-1"]
    cluster.access.kubectl("cordon", lost)
    cluster.access.kubectl(
        "delete", "pod", "dp-0-1", "-n", cluster.namespace, "--grace-period=0", "--force"
    )
    cluster.apply(member("dp-0-1"))
    wait_bound(cluster, {"dp-0-1"})
    again = cluster.placements()["dp-0-1"]
    assert again != lost
    assert rack_of[again] == home, (again, home)


def test_a_jobs_gang_kept_to_one_rack_heals_into_it_after_its_node_is_deleted(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """An Indexed Job of 2 in a Volcano PodGroup with networkTopology hard, tier 1 (racks
    from node labels, 2 one-CPU nodes each): it binds in one rack. A node of it is deleted
    and its pod with it (as the pod GC does): the Job makes the pod again, and it waits
    while only the other rack has room, then binds in its own rack once a node joins it."""
    rack_of, scheduler = _racks_and_scheduler(cluster, private_scheduler, per_rack=2)
    cluster.apply(
        _volcano_podgroup(cluster, networkTopology={"mode": "hard", "highestTierAllowed": 1})
    )
    job = indexed_job(cluster, "dp", 2, cpu="1")
    template = job["spec"]["template"]
    template["spec"]["schedulerName"] = scheduler.name
    template["metadata"]["annotations"][names.VOLCANO_GROUP_NAME] = "dp"
    cluster.apply(job)
    first = wait_for(
        lambda: len(job_pods(cluster, "dp")) == 2 and job_pods(cluster, "dp"),
        timeout=BIND_TIMEOUT,
        what="the Job's 2 pods",
    )
    wait_bound(cluster, first)
    placed = cluster.placements()
    (home,) = {rack_of[placed[p]] for p in first}
    lost_pod = min(first)
    lost_node = placed[lost_pod]
    cluster.access.kubectl("delete", "node", lost_node)
    cluster.access.kubectl(
        "delete", "pod", lost_pod, "-n", cluster.namespace, "--grace-period=0", "--force"
    )
    again = wait_for(
        lambda: (job_pods(cluster, "dp") - first) or None,
        timeout=BIND_TIMEOUT,
        what="the Job's pod made again",
    )
    stays_unbound(cluster, again, seconds=3)  # the other rack has two free nodes
    (spare,) = cluster.nodes(1, cpu="1", labels={RACK: home})
    wait_bound(cluster, again)
    (new,) = again
    assert cluster.placements()[new] == spare
    (message,) = set(cluster.events("FailedScheduling"))
    assert f"kept to rack {home}, where the gang runs" in message, message
    scheduler.assert_alive()
