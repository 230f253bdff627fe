"""Queues shared by teams (#22) on the real API server: Volcano's Queue CRD as shipped in
``crds/``, a capability that holds a gang back while room is free, a Closed queue, a parent's
limit over its child, an unknown queue, a queue only some namespaces may use, and the status
``kubectl get queues`` shows."""

from __future__ import annotations

import pytest

from e2e.fixtures import Cluster, Queues, SchedulerProcess, wait_for
from e2e.test_gang_scheduling import BIND_TIMEOUT, koord, stays_unbound, wait_bound
from scheduler.model import names

pytestmark = pytest.mark.cluster


# Shares and guarantees are of the whole cluster's room: other tests' GPU nodes would count.
# The reclaim and guarantee tests count on a device no other test's nodes have.
DEVICE = "queues.e2e.gang-scheduler.io/device"


def in_queue(name: str, gang: str, size: int) -> dict[str, str]:
    return {**koord(gang, size), names.VOLCANO_QUEUE_NAME: name}


def test_capability_holds_a_gang_back_while_room_is_free_and_the_queue_shows_it(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    team = queues.make("team", weight=1, capability={"cpu": "4"})
    cluster.nodes(2, cpu="8")
    cpu2 = {"cpu": "2"}
    first = cluster.gang("first", 2, annotations=in_queue(team, "first", 2), requests=cpu2)
    wait_bound(cluster, first)
    second = cluster.gang("second", 2, annotations=in_queue(team, "second", 2), requests=cpu2)
    wait_for(
        lambda: any(
            f"queue {team} is at its capability for cpu: 4 of 4" in m
            for m in cluster.events("FailedScheduling")
        ),
        timeout=BIND_TIMEOUT,
        what="the capability named in a FailedScheduling event",
    )
    stays_unbound(cluster, second, seconds=2)

    def shown() -> dict:
        return queues.get(team).get("status") or {}

    wait_for(
        lambda: (
            shown().get("allocated", {}).get("cpu") == "4"
            and shown().get("running") == 1
            and shown().get("pending") == 1
            and shown().get("state") == "Open"
        ),
        timeout=BIND_TIMEOUT,
        what=f"the queue's status to show what it holds (it shows {shown()})",
    )
    table = cluster.access.kubectl("get", "queue", team).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:7] == [
        "NAME", "STATE", "WEIGHT", "PARENT", "DESERVED", "ALLOCATED", "PENDING",
    ], header  # fmt: skip
    assert "Open" in row.split(), row
    assert '"cpu":"4"' in row, row
    # Room in the queue again: the waiting gang goes.
    cluster.access.kubectl("delete", "pod", *sorted(first), "-n", cluster.namespace)
    wait_bound(cluster, second)
    scheduler.assert_alive()


def test_a_closed_queue_takes_no_new_gangs_until_opened(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    shut = queues.make("shut")
    queues.set_state(shut, "Closed")
    cluster.nodes(1, cpu="8")
    held = cluster.gang("held", 2, annotations=in_queue(shut, "held", 2))
    wait_for(
        lambda: any(f"queue '{shut}' is Closed" in m for m in cluster.events("QueueClosed")),
        timeout=BIND_TIMEOUT,
        what="a QueueClosed event",
    )
    stays_unbound(cluster, held, seconds=2)
    other = cluster.gang("other", 2, annotations=koord("other", 2))  # the default queue
    wait_bound(cluster, other)
    queues.set_state(shut, "Open")
    wait_bound(cluster, held)
    scheduler.assert_alive()


def test_a_child_queue_is_held_by_its_parents_capability_and_an_unknown_queue_is_named(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    org = queues.make("org", capability={"cpu": "2"})
    child = queues.make("child", parent=org)
    cluster.nodes(1, cpu="8")
    big = cluster.gang("big", 3, annotations=in_queue(child, "big", 3))
    lost = cluster.gang("lost", 1, annotations=in_queue(queues.name("nowhere"), "lost", 1))
    wait_for(
        lambda: any(
            f"queue {org} (an ancestor of {child}) would go over its capability" in m
            for m in cluster.events("FailedScheduling")
        ),
        timeout=BIND_TIMEOUT,
        what="the parent's capability named in a FailedScheduling event",
    )
    wait_for(
        lambda: any("does not exist" in m for m in cluster.events("QueueNotFound")),
        timeout=BIND_TIMEOUT,
        what="a QueueNotFound event",
    )
    stays_unbound(cluster, big | lost, seconds=2)
    # Room in the parent: the child's gang goes.
    cluster.access.kubectl(
        "patch", "queue", org, "--type=merge", "-p", '{"spec":{"capability":{"cpu":"4"}}}'
    )
    wait_bound(cluster, big)
    scheduler.assert_alive()


def test_a_queue_gets_its_half_back_by_reclaim_of_whole_gangs(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    """Queues 1:1 over four GPU nodes: the first queue's two gangs take the cluster while the
    second is idle; the second's gang reclaims its half: one of the first's gangs goes whole,
    the other stays, and the second's gang binds where it was."""
    first, second = queues.make("first", weight=1), queues.make("second", weight=1)
    cluster.nodes(4, cpu="8", extended={DEVICE: "1"})
    gpu = {"cpu": "1", DEVICE: "1"}
    a1 = cluster.gang("a1", 2, annotations=in_queue(first, "a1", 2), requests=gpu)
    wait_bound(cluster, a1)
    a2 = cluster.gang("a2", 2, annotations=in_queue(first, "a2", 2), requests=gpu)
    wait_bound(cluster, a2)
    b = cluster.gang("b", 2, annotations=in_queue(second, "b", 2), requests=gpu)
    wait_bound(cluster, b)
    pods = set(cluster.placements())
    # One of the first queue's gangs was evicted whole, the other untouched.
    assert (a1 <= pods and not a2 & pods) or (a2 <= pods and not a1 & pods), pods
    reclaimed = cluster.events("Preempted")
    assert len(reclaimed) == 2, reclaimed
    assert all(f"of queue {second}, below its fair share" in m for m in reclaimed), reclaimed
    said = cluster.events("Reclaiming")
    assert any("reclaimed 2 pod(s) of other queues above their fair share" in m for m in said), said
    scheduler.assert_alive()


def test_a_guarantee_is_kept_free_for_its_queue(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    kept = queues.make("kept", guarantee={"resource": {DEVICE: "2"}})
    other = queues.make("other")
    cluster.nodes(4, cpu="8", extended={DEVICE: "1"})
    gpu = {"cpu": "1", DEVICE: "1"}
    big = cluster.gang("big", 3, annotations=in_queue(other, "big", 3), requests=gpu)
    wait_for(
        lambda: any(
            "kept for other queues' guarantees" in m and kept in m
            for m in cluster.events("FailedScheduling")
        ),
        timeout=BIND_TIMEOUT,
        what="the guarantee named in a FailedScheduling event",
    )
    stays_unbound(cluster, big, seconds=2)
    small = cluster.gang("small", 2, annotations=in_queue(other, "small", 2), requests=gpu)
    wait_bound(cluster, small)
    mine = cluster.gang("mine", 2, annotations=in_queue(kept, "mine", 2), requests=gpu)
    wait_bound(cluster, mine)
    scheduler.assert_alive()


def test_a_queue_admits_only_the_namespaces_its_selector_matches(
    cluster: Cluster, scheduler: SchedulerProcess, queues: Queues
) -> None:
    label = "queues.e2e.gang-scheduler.io/team"
    team = queues.make("team", annotations={names.QUEUE_NAMESPACE_SELECTOR: f"{label}=a"})
    cluster.nodes(2, cpu="8")
    outside = cluster.gang("outside", 2, annotations=in_queue(team, "outside", 2))
    wait_for(
        lambda: any(
            f"queue '{team}' admits gangs only from namespaces matching '{label}=a'" in m
            and f"namespace '{cluster.namespace}'" in m
            for m in cluster.events("NamespaceNotAllowed")
        ),
        timeout=BIND_TIMEOUT,
        what="a NamespaceNotAllowed event naming the queue and its selector",
    )
    stays_unbound(cluster, outside, seconds=2)
    # The namespace labelled for the queue: its waiting gang goes, no pod touched.
    cluster.access.kubectl("label", "namespace", cluster.namespace, f"{label}=a")
    wait_bound(cluster, outside)
    scheduler.assert_alive()
