"""Gangs of gangs (#23) on the local control plane: a Volcano PodGroup with
``spec.subGroupPolicy`` (Volcano's own CRD schema, generated from volcano.sh/apis v1.14.0)
binds whole subgroups only, as many as fit once it has its minSubGroups, and takes a further
subgroup whole when room appears."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, SchedulerProcess
from e2e.test_gang_scheduling import stays_unbound, wait_bound
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
