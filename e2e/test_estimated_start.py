"""Expected starts and reservations (#47) on the local control plane: with
--forecast-interval, a waiting gang's PodGroup says when it is expected to start (condition
EstimatedStart), from the expected duration of the gang that holds its room; with the
reserve action, the first gang that does not fit keeps that room, and only a job that ends
before it starts backfills onto it."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, PrivateSchedulers, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, podgroup, stays_unbound, wait_bound
from e2e.test_upstream_gangs import UPSTREAM, members, scheduled_condition, upstream_podgroup
from scheduler.model import names

pytestmark = [pytest.mark.cluster, pytest.mark.local_control_plane]


def _estimate(cluster: Cluster, name: str) -> dict | None:
    group = cluster.get("podgroups.scheduling.x-k8s.io", name)
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "EstimatedStart"), None)


def _ten_minute_run(cluster: Cluster, scheduler: str) -> set[str]:
    """r: a PodGroup of 2 pods expected to run 10 minutes, bound."""
    cluster.apply(podgroup("r", cluster.namespace, 2))
    running = cluster.gang(
        "r", 2, scheduler=scheduler,
        labels={names.POD_GROUP_LABEL: "r"},
        annotations={names.EXPECTED_DURATION: "10m"},
    )  # fmt: skip
    wait_bound(cluster, running)
    return running


def test_a_waiting_gang_says_when_the_gang_ahead_of_it_will_have_ended(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """r (2 pods, expected to run 10 minutes) fills the node; next waits for its room."""
    cluster.nodes(1, cpu="2")
    # A timeout past r's end: with the default 600 s, next would time out before r ends.
    scheduler = private_scheduler.start("--forecast-interval", "1", "--default-timeout", "3600")
    cluster.apply(podgroup("next", cluster.namespace, 2))
    _ten_minute_run(cluster, scheduler.name)
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


def _upstream_estimate(cluster: Cluster, name: str) -> dict | None:
    group = cluster.get(UPSTREAM, name)
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == names.FOREIGN_ESTIMATED_START), None)


def test_an_upstream_podgroup_says_the_estimate_in_a_condition_of_ours_until_it_is_placed(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """As above, next being an upstream (scheduling.k8s.io) PodGroup: the API server takes a
    condition type of ours beside kube-scheduler's, and the strategic merge's delete
    directive takes it off once next binds."""
    cluster.nodes(1, cpu="2")
    scheduler = private_scheduler.start("--forecast-interval", "1", "--default-timeout", "3600")
    cluster.apply(upstream_podgroup(cluster, "next", {"gang": {"minCount": 2}}))
    running = _ten_minute_run(cluster, scheduler.name)
    waiting = members(cluster, "next", 2, scheduler=scheduler.name)
    wait_for(
        lambda: _upstream_estimate(cluster, "next") is not None,
        timeout=BIND_TIMEOUT,
        what=f"a {names.FOREIGN_ESTIMATED_START} condition on upstream PodGroup next",
    )
    said = _upstream_estimate(cluster, "next")
    assert (said["status"], said["reason"]) == ("True", "Estimated"), said
    assert f"once {cluster.namespace}/r ended" in said["message"], said
    assert scheduled_condition(cluster, "next").get("status") == "False", "kube-scheduler's too"
    cluster.access.kubectl("delete", "pod", *sorted(running), "-n", cluster.namespace)
    wait_bound(cluster, waiting)
    wait_for(
        lambda: _upstream_estimate(cluster, "next") is None,
        timeout=BIND_TIMEOUT,
        what="the estimate taken off upstream PodGroup next once it is placed",
    )
    assert scheduled_condition(cluster, "next").get("status") == "True"
    scheduler.assert_alive()


def test_a_short_job_backfills_onto_a_reservation_and_a_long_one_does_not(
    cluster: Cluster, private_scheduler: PrivateSchedulers
) -> None:
    """One node of 4 cpu; r (2 cpu, 10 minutes) runs; big (4 cpu) waits for it and is
    reserved the node; long (2 cpu, an hour) would still run when big starts, short (2
    cpu, 2 minutes) would not: short binds beside r, long waits."""
    cluster.nodes(1, cpu="4")
    scheduler = private_scheduler.start(
        "--forecast-interval", "1", "--default-timeout", "3600",
        "--actions", "finish-evictions,allocate,reserve,evict-stale,preempt,reclaim",
    )  # fmt: skip

    def lasts(name: str, duration: str) -> dict[str, str]:
        """A gang of one (Koordinator's annotations) expected to run ``duration``."""
        return {
            names.KOORD_NAME: name,
            names.KOORD_MIN_AVAILABLE: "1",
            names.EXPECTED_DURATION: duration,
        }

    cluster.apply(podgroup("big", cluster.namespace, 1))
    running = cluster.gang(
        "r", 1, scheduler=scheduler.name, annotations=lasts("r", "10m"), requests={"cpu": "2"}
    )
    wait_bound(cluster, running)
    cluster.gang(
        "big", 1, scheduler=scheduler.name, labels={names.POD_GROUP_LABEL: "big"},
        requests={"cpu": "4"},
    )  # fmt: skip
    wait_for(
        lambda: bool(cluster.events("Reserved")),
        timeout=BIND_TIMEOUT,
        what="a Reserved Event for big",
    )
    long = cluster.gang(
        "long", 1, scheduler=scheduler.name, annotations=lasts("long", "1h"), requests={"cpu": "2"}
    )
    short = cluster.gang(
        "short",
        1,
        scheduler=scheduler.name,
        annotations=lasts("short", "2m"),
        requests={"cpu": "2"},
    )
    wait_bound(cluster, short)
    stays_unbound(cluster, long | {"big-0"}, seconds=3)
    scheduler.assert_alive()
