"""Devices count in queues (#44) on the local control plane: a Queue's capability of a
DeviceClass's devices (``deviceclass.resource.kubernetes.io/<class>``) holds back a gang
whose claims would take it over, with GPUs free; the Queue's status shows the devices its
gangs hold; and the gang goes once room is freed."""

from __future__ import annotations

import pytest

from e2e.fixtures import TEST_LABEL, Cluster, Queues, SchedulerProcess, wait_for
from e2e.test_dra import claiming_gang, gpu_class, template
from e2e.test_gang_scheduling import BIND_TIMEOUT, stays_unbound, wait_bound
from scheduler.model import names
from testbed.nodes import gpu_slice

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def test_a_queues_capability_of_gpus_holds_back_a_gang_whose_claims_would_go_over_it(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    nodes = cluster.nodes(2)
    cls = gpu_class(cluster)
    gpus = f"deviceclass.resource.kubernetes.io/{cls}"
    team = queues.make("gpu-team", weight=1, capability={gpus: "8"})
    cluster.apply(*(gpu_slice(n, labels={TEST_LABEL: cluster.namespace}) for n in nodes))
    cluster.apply(template(cluster, "eight-gpus", cls, 8))
    claims = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    in_team = {names.VOLCANO_QUEUE_NAME: team}
    first = claiming_gang(cluster, "first", 1, claims, annotations=in_team)
    wait_bound(cluster, first)
    second = claiming_gang(cluster, "second", 1, claims, annotations=in_team)
    wait_for(
        lambda: any(
            f"queue {team} is at its capability for {gpus}: 8 of 8" in m
            for m in cluster.events("FailedScheduling")
        ),
        timeout=BIND_TIMEOUT,
        what="the capability of GPUs named in a FailedScheduling event",
    )
    stays_unbound(cluster, second, seconds=2)

    def shown() -> dict:
        return queues.get(team).get("status") or {}

    wait_for(
        lambda: shown().get("allocated", {}).get(gpus) == "8",
        timeout=BIND_TIMEOUT,
        what=f"the queue's status to show the 8 GPUs it holds (it shows {shown()})",
    )
    cluster.access.kubectl("delete", "pod", *sorted(first), "-n", cluster.namespace)
    wait_bound(cluster, second)
    scheduler.assert_alive()
