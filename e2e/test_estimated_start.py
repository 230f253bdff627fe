"""Expected starts (#47) on the local control plane: with --forecast-interval, a waiting
gang's PodGroup says when it is expected to start (condition EstimatedStart), from the
expected duration of the gang that holds its room."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, podgroup, wait_bound
from scheduler.model import names

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def _estimate(cluster: Cluster, name: str) -> dict | None:
    group = cluster.get("podgroups.scheduling.x-k8s.io", name)
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "EstimatedStart"), None)


def test_a_waiting_gang_says_when_the_gang_ahead_of_it_will_have_ended(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """r (2 pods, expected to run 10 minutes) fills the node; next waits for its room."""
    cluster.nodes(1, cpu="2")
    # A timeout past r's end: with the default 600 s, next would time out before r ends.
    scheduler = private_scheduler.start("--forecast-interval", "1", "--default-timeout", "3600")
    cluster.apply(podgroup("r", cluster.namespace, 2), podgroup("next", cluster.namespace, 2))
    running = cluster.gang(
        "r", 2, scheduler=scheduler.name,
        labels={names.POD_GROUP_LABEL: "r"},
        annotations={names.EXPECTED_DURATION: "10m"},
    )  # fmt: skip
    wait_bound(cluster, running)
    cluster.gang("next", 2, scheduler=scheduler.name, labels={names.POD_GROUP_LABEL: "next"})
    wait_for(
        lambda: _estimate(cluster, "next") is not None,
        timeout=BIND_TIMEOUT,
        what="an EstimatedStart condition on PodGroup next",
    )
    said = _estimate(cluster, "next")
    assert (said["status"], said["reason"]) == ("True", "Estimated"), said
    assert said["message"].startswith("expected to start at "), said
    assert f"once {cluster.namespace}/r ended" in said["message"], said
    scheduler.assert_alive()
