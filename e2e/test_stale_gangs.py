"""Stale gangs (#23) on the local control plane: a running gang that lost a member and runs
below its minimum past --stale-gang-after has the rest evicted (marked DisruptionTarget
StaleGang, then deleted), with a StaleGang Event; its room goes to a gang that can run."""

from __future__ import annotations

import json

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, podgroup, stays_unbound, wait_bound
from scheduler.model import names

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def live(cluster: Cluster) -> set[str]:
    """The pods of the namespace not being deleted."""
    out = cluster.access.kubectl("get", "pods", "-n", cluster.namespace, "-o", "json").stdout
    return {
        p["metadata"]["name"]
        for p in json.loads(out)["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


def test_a_gang_below_its_minimum_past_the_grace_is_evicted_and_its_room_reused(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """A gang of 3 (minMember 3) fills the 3 one-CPU nodes; another gang of 2 waits. One
    member is deleted and not made again: after 3 s the other two are evicted, and the
    waiting gang binds in their room."""
    cluster.nodes(3, cpu="1")
    scheduler = private_scheduler.start("--stale-gang-after", "3")
    cluster.apply(podgroup("train", cluster.namespace, 3), podgroup("next", cluster.namespace, 2))
    members = cluster.gang(
        "train", 3, scheduler=scheduler.name, labels={names.POD_GROUP_LABEL: "train"}
    )
    wait_bound(cluster, members)
    waiting = cluster.gang(
        "next", 2, scheduler=scheduler.name, labels={names.POD_GROUP_LABEL: "next"}
    )
    cluster.access.kubectl(
        "delete", "pod", "train-0", "-n", cluster.namespace, "--grace-period=0", "--force"
    )
    stays_unbound(cluster, waiting, seconds=2)  # within the grace: the two still run
    assert {"train-1", "train-2"} <= live(cluster)
    wait_for(
        lambda: not ({"train-1", "train-2"} & live(cluster)),
        timeout=BIND_TIMEOUT,
        what="the stale gang's two running members evicted",
    )
    wait_bound(cluster, waiting)
    (message, *_) = cluster.events("StaleGang")
    assert "has run with 2 of its minimum 3 members" in message, message
    scheduler.assert_alive()
