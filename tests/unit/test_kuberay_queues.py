"""A RayCluster in a team's Volcano Queue (#22), as KubeRay v1.5.0 writes it in volcano mode:
the RayCluster's label ``volcano.sh/queue-name`` copied into its PodGroup's ``spec.queue``
(``ray-<name>-pg``, minMember and minResources of the whole cluster) and onto every pod as a
label. The PodGroup's status says why it waits with Volcano's reasons: ``NotEnoughTasks`` only
while members are missing, ``NotEnoughResources`` when its queue holds it back (a Closed queue
found by e2e/test_clients.py with the real operator said ``NotEnoughTasks``)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.podgroups import volcano_podgroup_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.decisions import Result
from scheduler.model.gangs import PodGroup
from scheduler.model.pods import Pod
from scheduler.model.queues import Queue
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, node, pod, snapshot
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_queues import queue

CPU = 4  # each pod's request, and each node's room


def kuberay_podgroup(cluster: str, pods: int, queue_name: str) -> PodGroup:
    """The PodGroup KubeRay's volcano plugin creates for RayCluster ``cluster``."""
    return volcano_podgroup_from_dict(
        {
            "metadata": {"name": f"ray-{cluster}-pg", "namespace": "default", "uid": "uid-pg"},
            "spec": {
                "minMember": pods,
                "minResources": {"cpu": str(pods * CPU)},
                "queue": queue_name,
            },
            "status": {"phase": "Pending"},
        }
    )


def kuberay_pods(cluster: str, count: int, queue_name: str) -> list[Pod]:
    """A head and count - 1 workers, with what KubeRay's volcano plugin adds to each."""
    names_ = [f"{cluster}-head", *(f"{cluster}-worker-{i}" for i in range(count - 1))]
    return [
        pod(
            name,
            cpu=str(CPU),
            annotations={
                names.VOLCANO_GROUP_NAME: f"ray-{cluster}-pg",
                "volcano.sh/task-spec": "headgroup" if name.endswith("head") else "worker",
            },
            labels={names.VOLCANO_QUEUE_LABEL: queue_name, "ray.io/cluster": cluster},
        )
        for name in names_
    ]


def with_queues(snap: Snapshot, *queues: Queue) -> Snapshot:
    return replace(snap, queues={q.name: q for q in queues})


def cluster_of(pods: list[Pod], group: PodGroup, *queues: Queue, nodes: int = 3) -> Snapshot:
    room = [node(f"n{i}", cpu=str(CPU)) for i in range(nodes)]
    return with_queues(snapshot(room, pods, podgroups=[group]), *queues)


def unschedulable(result: Result) -> tuple[str, str, str]:
    (update,) = result.status_updates
    (condition,) = [c for c in update.status.conditions if c.type == "Unschedulable"]
    return condition.status, condition.reason, condition.message


def test_a_raycluster_over_its_queues_capability_waits_with_the_capability_named() -> None:
    pods = kuberay_pods("a", 3, "team-a")
    group = kuberay_podgroup("a", 3, "team-a")
    held = schedule(cluster_of(pods, group, queue("team-a", capability={"cpu": "8"})), now=T0)
    assert bind_map(held) == {}
    why = (
        "queue team-a would go over its capability for cpu: it holds 0 of 8, and 12 more are asked"
    )
    assert any(why in m for m in events(held, "FailedScheduling")), events(held, "FailedScheduling")
    status, reason, message = unschedulable(held)
    assert (status, reason) == ("True", "NotEnoughResources")
    assert why in message
    raised = queue("team-a", capability={"cpu": "12"})
    assert len(bind_map(schedule(cluster_of(pods, group, raised), now=T0))) == 3


def test_a_raycluster_in_a_closed_queue_is_held_for_want_of_room_not_of_members() -> None:
    """All its members exist: Volcano's NotEnoughTasks (fewer tasks than minMember) would
    send its owner looking for pods that are there."""
    pods = kuberay_pods("c", 3, "shut")
    group = kuberay_podgroup("c", 3, "shut")
    result = schedule(cluster_of(pods, group, queue("shut", state="Closed")), now=T0)
    assert bind_map(result) == {}
    (said,) = set(events(result, "QueueClosed"))
    assert "queue 'shut' is Closed" in said
    assert unschedulable(result) == ("True", "NotEnoughResources", said)


def test_a_raycluster_in_an_unknown_queue_is_held_for_want_of_room_too() -> None:
    pods = kuberay_pods("u", 3, "nowhere")
    group = kuberay_podgroup("u", 3, "nowhere")
    result = schedule(cluster_of(pods, group, queue("team-a")), now=T0)
    assert bind_map(result) == {}
    (said,) = set(events(result, "QueueNotFound"))
    assert unschedulable(result) == ("True", "NotEnoughResources", said)


def test_a_raycluster_with_members_missing_still_says_not_enough_tasks() -> None:
    pods = kuberay_pods("m", 3, "team-a")[:2]  # KubeRay has made two of three so far
    group = kuberay_podgroup("m", 3, "team-a")
    result = schedule(cluster_of(pods, group, queue("team-a")), now=T0)
    assert bind_map(result) == {}
    status, reason, _ = unschedulable(result)
    assert (status, reason) == ("True", "NotEnoughTasks")


def phase(result: Result) -> str:
    (update,) = result.status_updates
    return update.status.phase


def test_a_raycluster_its_queue_holds_back_stays_pending_and_one_it_lets_in_is_inqueue() -> None:
    """Volcano's Inqueue means the queue let the PodGroup in (its enqueue action): a gang
    held by its queue's capability or a Closed queue stays Pending (the e2e test with the
    real KubeRay saw Inqueue); one the queue lets in that waits for nodes is Inqueue."""
    pods = kuberay_pods("a", 3, "team-a")
    group = kuberay_podgroup("a", 3, "team-a")
    over = schedule(cluster_of(pods, group, queue("team-a", capability={"cpu": "8"})), now=T0)
    assert phase(over) == "Pending"
    shut = schedule(cluster_of(pods, group, queue("team-a", state="Closed")), now=T0)
    assert phase(shut) == "Pending"
    no_room = schedule(cluster_of(pods, group, queue("team-a"), nodes=2), now=T0)
    assert bind_map(no_room) == {}
    assert phase(no_room) == "Inqueue"
