"""Devices count in queues: a queue's capability, guarantee and holdings say DRA devices by
their class's resource name (``deviceclass.resource.kubernetes.io/<class>``, as a
ResourceQuota counts them), the devices a bound pod's claims hold count against its queue,
and preemption frees them there. Bind maps on plain snapshots."""

from __future__ import annotations

from typing import Any

from scheduler.codecs.devices import device_class_from_dict, resource_claim_from_dict
from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.devices import claim_devices, pod_devices, served_by
from scheduler.model.holdings import census
from scheduler.model.pods import GangKey, Pod
from scheduler.model.queues import Queue
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, node, pod
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_device_preemption import _held
from tests.unit.test_dra import (
    DRIVER,
    claim,
    claiming_pod,
    device_class,
    dra_snapshot,
    exactly,
    gpu_slice,
)
from tests.unit.test_preemption import evicted
from tests.unit.test_queue_sharing import in_queue, with_queues
from tests.unit.test_queues import queue

GPUS = f"deviceclass.resource.kubernetes.io/{DRIVER}"


def _running(name: str, *, on: str, queue_name: str, priority: int = 10) -> Pod:
    """A bound pod of ``queue_name`` whose own claim holds the 8 GPUs of ``on``."""
    return claiming_pod(name, f"{name}-gpus", template=False, node_name=on, phase="Running",
                        priority=priority, created=T0 - 100, cpu="1",
                        labels=in_queue(queue_name))  # fmt: skip


def _waiting(name: str, *, queue_name: str, gpus: int = 8, **kw: Any) -> tuple[Pod, dict]:
    """A gang of one in ``queue_name`` whose claim (from its template) asks ``gpus``."""
    p = claiming_pod(name, f"{name}-gpus", gang=name, min_available=1, cpu="1",
                     labels=in_queue(queue_name), **kw)  # fmt: skip
    return p, claim(f"{name}-gpus", exactly(count=gpus), owner=name)


def _cluster(
    held: dict[str, str],
    waiting: list[tuple[Pod, dict]],
    *queues: Queue,
    priority: int = 10,
    classes: list[dict] | None = None,
) -> Snapshot:
    """Nodes n0 and n1 of 8 GPUs each; on each node named in ``held`` (node -> queue), a
    running pod of that queue (named after the node) whose claim holds all its GPUs; the
    ``waiting`` gangs; ``queues``."""
    running = [
        _running(f"{queue_name}-{on}", on=on, queue_name=queue_name, priority=priority)
        for on, queue_name in held.items()
    ]
    claims = [
        claim(f"{p.ref.name}-gpus", exactly(count=8), status=_held(p.node_name, p.ref.name))
        for p in running
    ]
    snap = dra_snapshot(
        [node("n0"), node("n1")],
        [*running, *(p for p, _ in waiting)],
        slices=[gpu_slice("n0"), gpu_slice("n1")],
        claims=[*claims, *(c for _, c in waiting)],
        classes=classes,
    )
    return with_queues(snap, *queues)


def test_a_queue_at_its_device_capability_holds_back_a_gang_while_gpus_are_free() -> None:
    snap = _cluster(
        {"n0": "team-a"},
        [_waiting("new", queue_name="team-a")],
        queue("team-a", capability={GPUS: "8"}),
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}, "n1's 8 GPUs are free, but team-a holds its 8 already"
    (message,) = set(events(result, "FailedScheduling"))
    assert f"queue team-a is at its capability for {GPUS}: 8 of 8" in message


def test_devices_under_the_capability_are_let_in() -> None:
    snap = _cluster(
        {"n0": "team-a"},
        [_waiting("new", queue_name="team-a")],
        queue("team-a", capability={GPUS: "16"}),
    )
    assert bind_map(schedule(snap, now=T0)) == {"new": "n1"}


def test_another_queues_devices_do_not_count_against_a_capability() -> None:
    snap = _cluster(
        {"n0": "team-b"},
        [_waiting("new", queue_name="team-a")],
        queue("team-a", capability={GPUS: "8"}),
        queue("team-b"),
    )
    assert bind_map(schedule(snap, now=T0)) == {"new": "n1"}


def test_the_device_capability_counts_gangs_placed_earlier_in_the_same_pass() -> None:
    snap = _cluster(
        {},
        [_waiting(name, queue_name="team-a", gpus=4) for name in ("first", "second")],
        queue("team-a", capability={GPUS: "6"}),
    )
    result = schedule(snap, now=T0)
    assert len(bind_map(result)) == 1, bind_map(result)
    (message,) = set(events(result, "FailedScheduling"))
    assert f"would go over its capability for {GPUS}: it holds 4 of 6, and 4 more" in message


def test_preemption_frees_the_victims_devices_under_the_queues_capability() -> None:
    snap = _cluster(
        {"n0": "team-a"},
        [_waiting("high", queue_name="team-a", priority=100, created=T0)],
        queue("team-a", capability={GPUS: "8"}),
    )
    result = schedule(snap, now=T0)
    assert evicted(result) == ["team-a-n0"], "n1 is free: only the capability needed it"
    assert [n.pod.name for n in result.nominations] == ["high"]


def test_a_guarantee_of_devices_keeps_free_gpus_for_the_queue_below_it() -> None:
    hungry, hungry_claim = _waiting("hungry", queue_name="team-b", gpus=8)
    snap = dra_snapshot(
        [node("n0")],
        [hungry],
        slices=[gpu_slice("n0")],
        claims=[hungry_claim],
    )
    snap = with_queues(snap, queue("team-a", guarantee={"resource": {GPUS: "4"}}), queue("team-b"))
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert f"the free {GPUS} is kept for other queues' guarantees: 8 free, 4 of it" in message


def test_a_claim_counts_what_it_was_given_or_else_what_it_asks() -> None:
    asked = resource_claim_from_dict(
        claim("c", exactly(count=3), {"name": "alt", "firstAvailable": [
            {"name": "big", "deviceClassName": "big.example.com", "count": 2},
            {"name": "small", "deviceClassName": DRIVER, "count": 4},
        ]}, exactly("every", mode="All"))
    )  # fmt: skip
    big = "deviceclass.resource.kubernetes.io/big.example.com"
    # 3 exactly; of the alternatives, the most each class could be given (2 big, 4 GPUs);
    # All: as many as it is given, once it is.
    assert claim_devices(asked) == {GPUS: 3 + 4, big: 2}
    given = resource_claim_from_dict(claim("c", exactly(count=2), status=_held("n0", "p", count=2)))
    assert claim_devices(given) == {GPUS: 2}


def test_a_queue_below_its_share_of_gpus_reclaims_them_from_one_above_it() -> None:
    snap = _cluster(
        {"n0": "team-b", "n1": "team-b"},
        [_waiting("a", queue_name="team-a", priority=10)],
        queue("team-a"),
        queue("team-b"),
    )
    result = schedule(snap, now=T0)
    assert len(evicted(result)) == 1, "team-b holds all 16 GPUs; team-a deserves half"
    assert [n.pod.name for n in result.nominations] == ["a"]


def test_a_queue_holding_its_share_of_gpus_reclaims_none_for_more() -> None:
    snap = _cluster(
        {"n0": "team-a", "n1": "team-b"},
        [_waiting("a", queue_name="team-a", priority=10)],
        queue("team-a"),
        queue("team-b"),
    )
    result = schedule(snap, now=T0)
    assert evicted(result) == [], "team-a holds 8 of 16 GPUs, its share: more is team-b's"


def test_the_queues_status_counts_the_devices_its_bound_pods_hold() -> None:
    old = _running("old", on="n0", queue_name="team-a")
    shared = _running("shared", on="n1", queue_name="team-a")
    claims = {
        c.key: c
        for c in (
            resource_claim_from_dict(
                claim("old-gpus", exactly(count=8), status=_held("n0", "old"))
            ),
            resource_claim_from_dict(
                claim("shared-gpus", exactly(count=8), status=_held("n1", "shared", "other"))
            ),
        )
    }
    counted = census([old, shared], {}, claims)
    assert counted.held["team-a"].get(GPUS) == 8, "a claim shared with another pod is no one's"
    assert counted.held["team-a"].get("cpu") == 2000


def _serving(resource: str) -> dict:
    """The test's GPU DeviceClass, serving ``resource`` (spec.extendedResourceName)."""
    body = device_class()
    body["spec"]["extendedResourceName"] = resource
    return body


def test_devices_of_a_class_with_an_extended_resource_name_count_as_that_resource() -> None:
    """The class says its GPUs are nvidia.com/gpu: a claim's 8 and a device plugin's GPU
    on another node count against one capability of nvidia.com/gpu."""
    old = _running("old", on="n0", queue_name="team-a")
    plugin = pod("plugin", gpu=1, node_name="n2", phase="Running", labels=in_queue("team-a"))
    new, new_claim = _waiting("new", queue_name="team-a", gpus=4)
    snap = dra_snapshot(
        [node("n0"), node("n1"), node("n2", gpu=1)],
        [old, plugin, new],
        slices=[gpu_slice("n0"), gpu_slice("n1")],
        claims=[claim("old-gpus", exactly(count=8), status=_held("n0", "old")), new_claim],
        classes=[_serving("nvidia.com/gpu")],
    )
    held = with_queues(snap, queue("team-a", capability={"nvidia.com/gpu": "12"}))
    result = schedule(held, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert (
        "queue team-a would go over its capability for nvidia.com/gpu: it holds 9 of 12, "
        "and 4 more are asked" in message
    )
    roomy = with_queues(snap, queue("team-a", capability={"nvidia.com/gpu": "13"}))
    assert bind_map(schedule(roomy, now=T0)) == {"new": "n1"}
    lines = explain(held, GangKey("default", "new"), now=T0, config=Config())
    (team,) = [line for line in lines if line.strip().startswith("team-a:")]
    assert "nvidia.com/gpu: 9" in team, team


def test_a_claim_the_pod_names_itself_counts_before_it_is_reserved() -> None:
    """Not made from a template, not reserved yet, named by no other pod: the pod's own."""
    new = claiming_pod("new", "new-gpus", template=False, gang="new", min_available=1,
                       cpu="1", labels=in_queue("team-a"))  # fmt: skip
    snap = _cluster(
        {"n0": "team-a"},
        [(new, claim("new-gpus", exactly(count=8)))],
        queue("team-a", capability={GPUS: "8"}),
    )
    assert bind_map(schedule(snap, now=T0)) == {}


def test_first_available_counts_the_most_each_class_could_be_given() -> None:
    """Counted as its first alternative (1 device of a class no node has), it would be given
    8 GPUs past the capability."""
    new = claiming_pod("new", "new-gpus", gang="new", min_available=1, cpu="1",
                       labels=in_queue("team-a"))  # fmt: skip
    alternatives = claim("new-gpus", {"name": "alt", "firstAvailable": [
        {"name": "big", "deviceClassName": "big.example.com", "count": 1},
        {"name": "small", "deviceClassName": DRIVER, "count": 8},
    ]}, owner="new")  # fmt: skip
    snap = _cluster(
        {"n0": "team-a"},
        [(new, alternatives)],
        queue("team-a", capability={GPUS: "8"}),
        classes=[device_class(), device_class("big.example.com")],
    )
    assert bind_map(schedule(snap, now=T0)) == {}


def test_a_claim_a_job_owns_counts_for_the_one_pod_it_is_reserved_for() -> None:
    body = claim("job-gpus", exactly(count=8), status=_held("n0", "p"))
    body["metadata"]["ownerReferences"] = [
        {"kind": "Job", "name": "j", "uid": "job-uid", "controller": True}
    ]
    p = claiming_pod("p", "job-gpus", template=False, node_name="n0", phase="Running")
    assert pod_devices(p, {("default", "job-gpus"): resource_claim_from_dict(body)}) == {GPUS: 8}


def test_a_limit_naming_no_class_or_a_class_by_its_other_name_counts_no_device() -> None:
    classes = {c.name: c for c in (device_class_from_dict(_serving("nvidia.com/gpu")),)}
    assert served_by("deviceclass.resource.kubernetes.io/typo", classes) == ()
    assert served_by(GPUS, classes) == (), "its devices count as nvidia.com/gpu"
    assert served_by("nvidia.com/gpu", classes) == (DRIVER,)


def test_the_gpus_of_a_cordoned_node_are_no_free_room_for_a_guarantee() -> None:
    """n0 is cordoned: 8 GPUs are free, 4 of them kept for team-a, so team-b's 8 wait."""
    hungry, hungry_claim = _waiting("hungry", queue_name="team-b", gpus=8)
    snap = dra_snapshot(
        [node("n0", unschedulable=True), node("n1")],
        [hungry],
        slices=[gpu_slice("n0"), gpu_slice("n1")],
        claims=[hungry_claim],
    )
    snap = with_queues(snap, queue("team-a", guarantee={"resource": {GPUS: "4"}}), queue("team-b"))
    assert bind_map(schedule(snap, now=T0)) == {}


def test_gpus_asked_by_a_classs_implicit_name_count_by_its_extended_resource_name() -> None:
    """The class counts as nvidia.com/gpu; a pod asking its devices by the implicit name
    counts there too (as it will once the claim made for it holds them)."""
    named = device_class()
    named["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    main = {"name": "main", "resources": {"requests": {"cpu": "1", GPUS: "8"}}}
    asker = pod("new", gang="new", min_available=1, labels=in_queue("team-a"),
                spec={"containers": [main]})  # fmt: skip
    snap = _cluster(
        {"n0": "team-a"},
        [(asker, claim("unused", exactly(count=1)))],
        queue("team-a", capability={"nvidia.com/gpu": "8"}),
        classes=[named],
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}, "n1's 8 GPUs are free, but team-a holds its 8 already"
    (message,) = set(events(result, "FailedScheduling"))
    assert "queue team-a is at its capability for nvidia.com/gpu: 8 of 8" in message
