"""Extended resources served by devices (KEP-5004, beta in Kubernetes 1.36): a pod asking
``nvidia.com/gpu: 2`` of a node that publishes no such resource gets two devices of the
DeviceClass whose ``extendedResourceName`` is ``nvidia.com/gpu`` (or of the class its implicit
name ``deviceclass.resource.kubernetes.io/<class>`` names), through a claim the scheduler
makes for it; a node whose device plugin publishes the resource serves it as before. The
requests and mappings are kube-scheduler's (``createRequestsAndMappings``, its test cases)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler.codecs.devices import device_class_from_dict
from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.core.extending import extended_requests
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.devices import DEVICE_CLASS_RESOURCE, extended_classes
from scheduler.model.pods import GangKey
from tests.unit.builders import T0, gang_pods, group, node, node_manifest, pod
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_dra import DRIVER, claim, device_class, dra_snapshot, exactly, gpu_slice
from tests.unit.test_preemption import evicted
from tests.unit.test_topology_devices import PACKED
from tests.unit.test_topology_scheduling import SEED

GPU = "nvidia.com/gpu"


def gpu_class(name: str = "gpu", *, extended: str = GPU, created: str = "") -> dict[str, Any]:
    body = device_class(name, f'device.driver == "{DRIVER}"')
    if extended:
        body["spec"]["extendedResourceName"] = extended
    if created:
        body["metadata"]["creationTimestamp"] = created
    return body


def asks(spec: dict[str, Any]) -> Any:
    return pod_from_dict({"metadata": {"name": "p", "uid": "u"}, "spec": spec}).extended


def container(name: str, requests: dict[str, str], *, sidecar: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


def made(result: Any) -> list[Any]:
    return [w for g in result.bindings for w in g.claims if w.made_here]


# -- the requests and mappings, as kube-scheduler makes them -----------------------------------


def requests_of(spec: dict[str, Any], classes: dict[str, str]) -> list[tuple[str, str, int]]:
    requests, _ = extended_requests(asks(spec), classes)
    return [(r.name, r.exactly.device_class, r.exactly.count) for r in requests]


def test_one_container_asking_two_resources_gets_a_request_per_resource_it_has_a_class_for() -> (
    None
):
    spec = {"containers": [container("c", {"example.com/gpu": "1", "example.com/gpu1": "2"})]}
    assert requests_of(spec, {"example.com/gpu": "class"}) == [
        ("container-0-request-0", "class", 1)
    ]
    assert requests_of(spec, {"example.com/gpu": "class", "example.com/gpu1": "class1"}) == [
        ("container-0-request-0", "class", 1),
        ("container-0-request-1", "class1", 2),
    ]


def test_two_containers_get_a_request_each() -> None:
    spec = {
        "containers": [
            container("a", {"example.com/gpu": "1"}),
            container("b", {"example.com/gpu1": "2"}),
        ]
    }
    assert requests_of(spec, {"example.com/gpu": "class", "example.com/gpu1": "class1"}) == [
        ("container-0-request-0", "class", 1),
        ("container-1-request-0", "class1", 2),
    ]


def test_init_containers_share_their_largest_request_and_reuse_a_later_sidecars() -> None:
    classes = {"example.com/gpu": "class", "example.com/gpuinit": "classInit"}
    one_init = {
        "initContainers": [container("i0", {"example.com/gpuinit": "2"})],
        "containers": [container("c", {"example.com/gpu": "1"})],
    }
    assert requests_of(one_init, classes) == [
        ("container-0-request-0", "classInit", 2),
        ("container-1-request-0", "class", 1),
    ]
    two_inits = {
        "initContainers": [
            container("i0", {"example.com/gpuinit": "1"}),
            container("i1", {"example.com/gpuinit": "2"}),
        ],
        "containers": [container("c", {"example.com/gpu": "1"})],
    }
    assert requests_of(two_inits, classes) == [
        ("container-1-request-0", "classInit", 2),
        ("container-2-request-0", "class", 1),
    ]
    _, mappings = extended_requests(asks(two_inits), classes)
    assert ("i0", "example.com/gpuinit", "container-1-request-0") in mappings
    with_sidecar = {
        "initContainers": [
            container("i0", {"example.com/gpuinit": "1"}),
            container("s", {"example.com/gpuinit": "1"}, sidecar=True),
            container("i2", {"example.com/gpuinit": "2"}),
        ],
        "containers": [container("c", {"example.com/gpu": "1"})],
    }
    assert requests_of(with_sidecar, classes) == [
        ("container-1-request-0", "classInit", 1),
        ("container-2-request-0", "classInit", 2),
        ("container-3-request-0", "class", 1),
    ]
    _, mappings = extended_requests(asks(with_sidecar), classes)
    assert ("i0", "example.com/gpuinit", "container-1-request-0") in mappings


def test_a_newer_class_serves_an_extended_resource_two_classes_name() -> None:
    old = device_class_from_dict(gpu_class("old", created="2026-01-01T00:00:00Z"))
    new = device_class_from_dict(gpu_class("new", created="2026-06-01T00:00:00Z"))
    served = extended_classes({"old": old, "new": new})
    assert served[GPU] == "new"
    assert served[DEVICE_CLASS_RESOURCE + "old"] == "old"


# -- placing ------------------------------------------------------------------------------------


def test_a_pod_asking_gpus_no_node_publishes_gets_devices_through_a_claim_made_for_it() -> None:
    asker = pod("p", gpu=2)
    result = schedule(
        dra_snapshot(
            [node("n0")], [asker], slices=[gpu_slice("n0", 4)], claims=[], classes=[gpu_class()]
        ),
        now=T0,
    )
    assert bind_map(result) == {"p": "n0"}
    (write,) = made(result)
    assert [str(d) for d in write.allocation.devices] == [
        f"{DRIVER}/n0/gpu-0",
        f"{DRIVER}/n0/gpu-1",
    ]
    assert [r.name for r in write.pods] == ["p"]
    assert write.mappings == (("main", GPU, "container-0-request-2"),)
    assert [(r.name, r.exactly.device_class, r.exactly.count) for r in write.requests] == [
        ("container-0-request-2", "gpu", 2)
    ]


def test_a_node_whose_device_plugin_publishes_the_resource_serves_it_without_a_claim() -> None:
    result = schedule(
        dra_snapshot(
            [node("n0", gpu=4)], [pod("p", gpu=2)], slices=[], claims=[], classes=[gpu_class()]
        ),
        now=T0,
    )
    assert bind_map(result) == {"p": "n0"}
    assert made(result) == []


def test_without_a_class_for_it_the_resource_is_insufficient_as_kube_scheduler_says() -> None:
    result = schedule(
        dra_snapshot([node("n0")], [pod("p", gpu=2)], slices=[gpu_slice("n0", 4)], claims=[]),
        now=T0,
    )
    assert bind_map(result) == {}
    assert any(f"Insufficient {GPU}" in m for m in events(result, "FailedScheduling"))


def test_the_implicit_name_of_a_class_asks_its_devices() -> None:
    asker = pod("p", spec={"containers": [container("c", {
        "cpu": "1", DEVICE_CLASS_RESOURCE + "gpu": "3"})]})  # fmt: skip
    result = schedule(
        dra_snapshot(
            [node("n0")],
            [asker],
            slices=[gpu_slice("n0", 4)],
            claims=[],
            classes=[gpu_class(extended="")],
        ),
        now=T0,
    )
    assert bind_map(result) == {"p": "n0"}
    (write,) = made(result)
    assert len(write.allocation.devices) == 3


def test_two_pods_never_get_the_same_device_and_the_second_waits_when_too_few_are_left() -> None:
    pods = [pod("a", gpu=2), pod("b", gpu=2)]
    result = schedule(
        dra_snapshot(
            [node("n0")], pods, slices=[gpu_slice("n0", 3)], claims=[], classes=[gpu_class()]
        ),
        now=T0,
    )
    assert len(bind_map(result)) == 1
    assert any("cannot allocate all claims" in m for m in events(result, "FailedScheduling"))


def test_a_gang_asking_gpus_by_name_binds_whole_on_distinct_devices() -> None:
    members = gang_pods("g", 4, gang="g", min_available=4, gpu=2)
    nodes = [node("n0"), node("n1")]
    result = schedule(
        dra_snapshot(
            nodes,
            members,
            slices=[gpu_slice("n0", 4), gpu_slice("n1", 4)],
            claims=[],
            classes=[gpu_class()],
        ),
        now=T0,
    )
    assert len(bind_map(result)) == 4
    devices = [d for w in made(result) for d in w.allocation.devices]
    assert len(devices) == 8 == len(set(devices))


def test_a_gang_asking_more_gpus_than_the_devices_binds_nothing() -> None:
    members = gang_pods("g", 3, gang="g", min_available=3, gpu=2)
    result = schedule(
        dra_snapshot(
            [node("n0")], members, slices=[gpu_slice("n0", 5)], claims=[], classes=[gpu_class()]
        ),
        now=T0,
    )
    assert bind_map(result) == {}
    assert made(result) == []


def test_a_bound_pods_claim_keeps_its_devices_and_its_gpus_are_not_counted_twice() -> None:
    running = pod_from_dict({
        "metadata": {"name": "r", "namespace": "default", "uid": "uid-default-r"},
        "spec": {"nodeName": "n0", "containers": [container("main", {"cpu": "1", GPU: "2"})]},
        "status": {"phase": "Running", "extendedResourceClaimStatus": {
            "resourceClaimName": "r-extended-resources-abc",
            "requestMappings": [{"containerName": "main", "resourceName": GPU,
                                 "requestName": "container-0-request-1"}]}},
    })  # fmt: skip
    assert GPU not in running.requests
    held = claim(
        "r-extended-resources-abc",
        exactly("container-0-request-1", 2, cls="gpu"),
        owner="r",
        status={"allocation": {"devices": {"results": [
            {"request": "container-0-request-1", "driver": DRIVER, "pool": "n0", "device": d}
            for d in ("gpu-0", "gpu-1")]}},
            "reservedFor": [{"resource": "pods", "name": "r", "uid": "uid-default-r"}]},
    )  # fmt: skip
    held["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    result = schedule(
        dra_snapshot(
            [node("n0")],
            [running, pod("p", gpu=2)],
            slices=[gpu_slice("n0", 4)],
            claims=[held],
            classes=[gpu_class()],
        ),
        now=T0,
    )
    assert bind_map(result) == {"p": "n0"}
    (write,) = made(result)
    assert [d.device for d in write.allocation.devices] == ["gpu-2", "gpu-3"]


def test_a_pending_pods_status_from_an_attempt_that_did_not_bind_is_not_its_claim() -> None:
    pending = pod_from_dict({
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"containers": [container("main", {GPU: "2"})]},
        "status": {"extendedResourceClaimStatus": {"resourceClaimName": "gone",
                   "requestMappings": [{"containerName": "main", "resourceName": GPU,
                                        "requestName": "container-0-request-0"}]}},
    })  # fmt: skip
    assert pending.requests[GPU] == 2
    assert pending.resource_claims == ()
    assert pending.extended


def _running_by_name(name: str, *, on: str, priority: int) -> tuple[Any, dict[str, Any]]:
    """A pod bound on ``on`` whose four GPUs asked by name are held by the claim made for it."""
    running = pod_from_dict({
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-default-{name}",
                     "creationTimestamp": "2026-11-29T00:00:00Z"},
        "spec": {"nodeName": on, "schedulerName": "gang-scheduler", "priority": priority,
                 "containers": [container("main", {"cpu": "1", GPU: "4"})]},
        "status": {"phase": "Running", "extendedResourceClaimStatus": {
            "resourceClaimName": f"{name}-extended-resources-x",
            "requestMappings": [{"containerName": "main", "resourceName": GPU,
                                 "requestName": "container-0-request-1"}]}},
    })  # fmt: skip
    held = claim(
        f"{name}-extended-resources-x",
        exactly("container-0-request-1", 4, cls="gpu"),
        owner=name,
        status={"allocation": {"devices": {"results": [
            {"request": "container-0-request-1", "driver": DRIVER, "pool": on,
             "device": f"gpu-{i}"} for i in range(4)]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-default-{name}"}]},
    )  # fmt: skip
    held["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    return running, held


def test_a_high_priority_pod_asking_gpus_by_name_preempts_the_pod_whose_claim_holds_them() -> None:
    low, held = _running_by_name("low", on="n0", priority=10)
    high = pod("high", gpu=4, gang="high", min_available=1, priority=100, created=T0)
    result = schedule(
        dra_snapshot(
            [node("n0")],
            [low, high],
            slices=[gpu_slice("n0", 4)],
            claims=[held],
            classes=[gpu_class()],
        ),
        now=T0,
    )
    assert evicted(result) == ["low"]
    assert bind_map(result) == {}  # nominated: its devices are the victim's until let go
    assert made(result) == []


# -- any mix of pods, classes and nodes ------------------------------------------------------

NAMES = ("example.com/gpu", "example.com/tpu", DEVICE_CLASS_RESOURCE + "gpu")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list, list[Any], list[dict], list[dict]]:
    classes = [gpu_class("gpu", extended=draw(st.sampled_from(["example.com/gpu", ""])))]
    if draw(st.booleans()):
        classes.append(gpu_class("tpu", extended="example.com/tpu"))
    nodes, slices = [], []
    for i in range(draw(st.integers(1, 3))):
        published = draw(st.sampled_from([0, 0, 2]))
        manifest = node_manifest(f"n{i}")
        if published:  # a device plugin's
            manifest["status"]["allocatable"]["example.com/gpu"] = str(published)
        nodes.append(node_from_dict(manifest))
        if (count := draw(st.integers(0, 6))) > 0:
            slices.append(gpu_slice(f"n{i}", count))
    asked = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 4).map(str), max_size=2)
    pods = []
    for p in range(draw(st.integers(1, 4))):
        inits = [
            container(f"i{j}", {"cpu": "100m", **draw(asked)}, sidecar=draw(st.booleans()))
            for j in range(draw(st.integers(0, 2)))
        ]
        mains = [container(f"c{j}", {"cpu": "100m", **draw(asked)})
                 for j in range(draw(st.integers(1, 2)))]  # fmt: skip
        pods.append(pod(f"p{p}", spec={"initContainers": inits, "containers": mains}))
    return nodes, pods, slices, classes


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_any_mix_binds_each_pod_with_its_named_devices_and_never_one_device_twice(
    cluster: tuple[list, list[Any], list[dict], list[dict]],
) -> None:
    nodes, pods, slices, classes = cluster
    result = schedule(dra_snapshot(nodes, pods, slices=slices, claims=[], classes=classes),
                      now=T0)  # fmt: skip
    assert not [m for m in events(result, "FailedScheduling") if "internal error" in m]
    devices = [d for w in made(result) for d in w.allocation.devices]
    assert len(devices) == len(set(devices)), "a device in two claims"
    event(f"claims made: {min(len(made(result)), 2)}{'+' if len(made(result)) > 2 else ''}")
    for write in made(result):
        asked = sum(r.exactly.count for r in write.requests)
        assert len(write.allocation.devices) == asked
        assert {r.name for r in write.requests} == {q for _, _, q in write.mappings}


# -- what earlier attempts left, and topologies --------------------------------------------------


def _left_claim(owner: str, *, allocated: bool) -> dict[str, Any]:
    """A claim made for ``owner``'s extended resources by an attempt that did not bind."""
    status = {"allocation": {"devices": {"results": [
        {"request": "container-0-request-2", "driver": DRIVER, "pool": "n0", "device": d}
        for d in ("gpu-0", "gpu-1")]}}} if allocated else None  # fmt: skip
    left = claim(f"{owner}-extended-resources-old", exactly("container-0-request-2", 2,
                 cls="gpu"), owner=owner, status=status)  # fmt: skip
    left["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    return left


def test_a_claim_left_by_an_attempt_that_did_not_bind_is_deleted_before_the_pod_goes_again() -> (
    None
):
    left = _left_claim("p", allocated=True)
    snap = dra_snapshot([node("n0")], [pod("p", gpu=2)], slices=[gpu_slice("n0", 4)],
                        claims=[left], classes=[gpu_class()])  # fmt: skip
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    assert result.stale_claims == (("default", "p-extended-resources-old"),)
    (message,) = set(events(result, "FailedScheduling"))
    assert "cannot schedule extended resource claim" in message
    gone = replace(snap, resource_claims={})
    again = schedule(gone, now=T0 + 1)
    assert bind_map(again) == {"p": "n0"}
    assert again.stale_claims == ()


def test_a_packed_gang_asking_a_classs_implicit_name_finds_the_devices_of_a_rack() -> None:
    """Class gpu counts as nvidia.com/gpu; members asking deviceclass.resource.kubernetes.io/gpu
    are weighed against the free devices of each rack all the same."""
    main = {
        "name": "main",
        "resources": {"requests": {"cpu": "1", DEVICE_CLASS_RESOURCE + "gpu": "8"}},
    }
    members = [
        pod(f"g-{i}", labels={names.SAKKARA_GROUP_NAME: "g"}, created=T0,
            spec={"containers": [main]})
        for i in range(2)
    ]  # fmt: skip
    nodes = [node(f"node-{i}") for i in range(6)]
    snap = dra_snapshot(nodes, members, slices=[gpu_slice(n.name, 8) for n in nodes], claims=[],
                        classes=[gpu_class()])  # fmt: skip
    snap = replace(
        snap,
        topology=SEED,
        groups={GangKey("default", "g"): group("g", size=2, constraints=PACKED)},
    )
    result = schedule(snap, now=T0)
    assert len(bind_map(result)) == 2, [e.message for e in result.events]
