"""Preemption frees GPUs claimed by DRA (#44) on the local control plane: a high-priority
gang whose pods claim GPUs evicts the low-priority gang whose claims hold them, whole, and
binds on those GPUs once the ResourceClaim controller has let go of the victims' claims; no
GPU is ever in two claims."""

from __future__ import annotations

import pytest

from e2e.fixtures import TEST_LABEL, Cluster, SchedulerProcess, wait_for
from e2e.test_dra import claiming_gang, claims_of, gpu_class, template
from e2e.test_gang_scheduling import BIND_TIMEOUT, wait_bound
from e2e.test_preemption import priorities  # noqa: F401 (a fixture)
from testbed.nodes import GPU_DRIVER, gpu_slice

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def _held(cluster: Cluster) -> dict[str, set[tuple[str, str]]]:
    """claim name -> the (pool, device) pairs its allocation holds."""
    return {
        name: {
            (r["pool"], r["device"])
            for r in (c.get("status", {}).get("allocation") or {})
            .get("devices", {})
            .get("results", [])
        }
        for name, c in claims_of(cluster).items()
    }


def test_a_high_priority_gpu_gang_preempts_a_low_one_whole_and_binds_on_its_gpus(
    cluster: Cluster,
    scheduler: SchedulerProcess,
    priorities: tuple[str, str],  # noqa: F811
) -> None:
    low, high = priorities
    nodes = cluster.nodes(2)
    cls = gpu_class(cluster)
    cluster.apply(*(gpu_slice(n, labels={TEST_LABEL: cluster.namespace}) for n in nodes))
    cluster.apply(template(cluster, "eight-gpus", cls, 8))
    claims = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    lows = claiming_gang(cluster, "low", 2, claims, priority_class=low)
    wait_bound(cluster, lows)
    urgent = claiming_gang(cluster, "high", 1, claims, priority_class=high)
    wait_bound(cluster, urgent)
    wait_for(
        lambda: not lows & set(cluster.placements()),
        timeout=BIND_TIMEOUT,
        what="the low gang gone, whole",
    )
    preempted = cluster.events("Preempted")
    assert len(preempted) == 2, preempted
    held = _held(cluster)
    (mine,) = [name for name in held if name.startswith("high-0")]
    node = cluster.placements()["high-0"]
    assert held[mine] == {(node, f"gpu-{i}") for i in range(8)}
    taken = [device for devices in held.values() for device in devices]
    assert len(taken) == len(set(taken)), f"a GPU in two claims: {held}"
    assert all(pool in nodes for pool, _ in taken), (GPU_DRIVER, taken)
    scheduler.assert_alive()
