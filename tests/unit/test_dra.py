"""Dynamic resource allocation in the pure core: the structured allocator (cases re-derived
from kube-scheduler's ``structured`` allocator tests) and whole gangs whose members claim
devices. Objects are written as the API server sends them and go through the codecs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.codecs.cel import Selectors
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.core.claiming import CANNOT_ALLOCATE, DeviceWorld
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.core.scheduling import schedule
from scheduler.model.pods import Pod, PodClaim
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map, events

DRIVER = "gpu.example.com"
SELECTORS = Selectors()


def gpu_slice(
    node_name: str,
    count: int = 8,
    *,
    product: str = "H100",
    domain: str = "",
    pool: str = "",
    generation: int = 0,
    slices: int = 1,
    taints: list[dict[str, str]] | None = None,
    name: str = "",
) -> dict[str, Any]:
    devices = []
    for i in range(count):
        attributes: dict[str, Any] = {
            "index": {"int": i},
            "productName": {"string": product},
            "uuid": {"string": f"GPU-{node_name}-{i}"},
        }
        if domain:
            attributes["nvlinkDomain"] = {"string": domain}
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": attributes,
            "capacity": {"memory": {"value": "80Gi"}},
        }
        if taints:
            device["taints"] = taints
        devices.append(device)
    return {
        "metadata": {"name": name or f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {
                "name": pool or node_name,
                "generation": generation,
                "resourceSliceCount": slices,
            },
            "devices": devices,
        },
    }


def channel_slice(rack: str) -> dict[str, Any]:
    """One network-attached device reachable from the nodes of a rack (a ComputeDomain-like
    channel): a claim for it ties every pod sharing the claim to the rack."""
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": [rack]}]}
        ]
    }
    return {
        "metadata": {"name": f"channel-{rack}"},
        "spec": {
            "driver": "domain.example.com",
            "nodeSelector": selector,
            "pool": {"name": f"rack-{rack}", "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": "channel", "attributes": {"rack": {"string": rack}}}],
        },
    }


def device_class(name: str = DRIVER, *selectors: str) -> dict[str, Any]:
    exprs = selectors or (f'device.driver == "{name}"',)
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
    }


def claim(
    name: str,
    *requests: dict[str, Any],
    namespace: str = "default",
    owner: str = "",
    constraints: list[dict[str, Any]] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"claim-{name}",
        "resourceVersion": "1",
    }
    if owner:
        meta["ownerReferences"] = [
            {"kind": "Pod", "name": owner, "uid": f"uid-{namespace}-{owner}", "controller": True}
        ]
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": meta, "spec": {"devices": devices}, "status": status or {}}


def exactly(
    name: str = "gpu",
    count: int = 1,
    *,
    cls: str = DRIVER,
    selectors: tuple[str, ...] = (),
    mode: str = "",
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if mode:
        body = {"deviceClassName": cls, "allocationMode": mode}
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": body}


def world(
    slices: list[dict], claims: list[dict] = (), classes: list[dict] | None = None
) -> DeviceWorld:
    decoded = [resource_claim_from_dict(c) for c in claims]
    return DeviceWorld(
        slices=[slice_from_dict(s) for s in slices],
        classes={
            c.name: c
            for c in (
                device_class_from_dict(d)
                for d in (classes if classes is not None else [device_class()])
            )
        },
        claims={c.key: c for c in decoded},
        evaluate=SELECTORS.evaluate,
    )


def allocate(
    w: DeviceWorld, *claims: dict, on: str = "n0", labels: dict[str, str] | None = None
) -> Any:
    return w.allocate([resource_claim_from_dict(c) for c in claims], node(on, labels=labels or {}))


def devices_of(result: Any) -> list[str]:
    assert not isinstance(result, str), result
    return [str(r.device) for a in result for r in a.results]


# -- the allocator ----------------------------------------------------------------------------


def test_a_claim_gets_the_first_devices_that_match() -> None:
    result = allocate(world([gpu_slice("n0", 4)]), claim("c", exactly(count=2)))
    assert devices_of(result) == [f"{DRIVER}/n0/gpu-0", f"{DRIVER}/n0/gpu-1"]
    assert result[0].results[0].request == "gpu"


def test_a_claim_for_more_devices_than_the_node_has_cannot_be_allocated() -> None:
    assert allocate(world([gpu_slice("n0", 4)]), claim("c", exactly(count=5))) == CANNOT_ALLOCATE


def test_devices_of_another_node_are_not_offered() -> None:
    assert allocate(world([gpu_slice("n1", 8)]), claim("c", exactly())) == CANNOT_ALLOCATE


def test_a_device_allocated_to_another_claim_is_not_given_again() -> None:
    taken = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0"}]
            }
        }
    }
    w = world([gpu_slice("n0", 2)], [claim("other", exactly(), status=taken)])
    assert devices_of(allocate(w, claim("c", exactly()))) == [f"{DRIVER}/n0/gpu-1"]
    assert allocate(w, claim("c", exactly(count=2))) == CANNOT_ALLOCATE


def test_the_class_and_the_request_selectors_must_both_hold() -> None:
    slices = [
        gpu_slice("n0", 2, product="A100", pool="a"),
        gpu_slice("n0", 2, product="H100", pool="h", name="h"),
    ]
    h100 = 'device.attributes["gpu.example.com"].productName == "H100"'
    result = allocate(world(slices), claim("c", exactly(count=2, selectors=(h100,))))
    assert devices_of(result) == [f"{DRIVER}/h/gpu-0", f"{DRIVER}/h/gpu-1"]
    other_class = [device_class(DRIVER, 'device.driver == "nic.example.com"')]
    assert allocate(world(slices, classes=other_class), claim("c", exactly())) == CANNOT_ALLOCATE


def test_a_selector_on_a_missing_attribute_says_the_cel_runtime_error() -> None:
    missing = 'device.attributes["gpu.example.com"].nosuch == "x"'
    result = allocate(world([gpu_slice("n0", 1)]), claim("c", exactly(selectors=(missing,))))
    assert isinstance(result, str)
    assert "CEL runtime error" in result
    assert "request gpu" in result


def test_allocation_mode_all_takes_every_matching_device_or_none() -> None:
    w = world([gpu_slice("n0", 3)])
    assert len(devices_of(allocate(w, claim("c", exactly(mode="All"))))) == 3
    taken = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-2"}]
            }
        }
    }
    busy = world([gpu_slice("n0", 3)], [claim("other", exactly(), status=taken)])
    assert allocate(busy, claim("c", exactly(mode="All"))) == CANNOT_ALLOCATE


def test_first_available_takes_the_first_alternative_that_can_be_had() -> None:
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "eight", "deviceClassName": DRIVER, "count": 8},
            {"name": "four", "deviceClassName": DRIVER, "count": 4},
        ],
    }
    result = allocate(world([gpu_slice("n0", 6)]), claim("c", request))
    assert not isinstance(result, str)
    assert {r.request for r in result[0].results} == {"gpu/four"}
    assert len(result[0].results) == 4


def test_match_attribute_keeps_every_device_in_one_domain() -> None:
    slices = [
        gpu_slice("n0", 2, domain="a", pool="a"),
        gpu_slice("n0", 3, domain="b", pool="b", name="b"),
    ]
    same = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    result = allocate(world(slices), claim("c", exactly(count=3), constraints=same))
    assert devices_of(result) == [f"{DRIVER}/b/gpu-0", f"{DRIVER}/b/gpu-1", f"{DRIVER}/b/gpu-2"]
    assert (
        allocate(world(slices), claim("c", exactly(count=4), constraints=same)) == CANNOT_ALLOCATE
    )


def test_match_attribute_across_two_requests() -> None:
    slices = [
        gpu_slice("n0", 1, domain="a", pool="a"),
        gpu_slice("n0", 2, domain="b", pool="b", name="b"),
    ]
    same = [{"matchAttribute": f"{DRIVER}/nvlinkDomain", "requests": ["one", "two"]}]
    result = allocate(world(slices), claim("c", exactly("one"), exactly("two"), constraints=same))
    assert devices_of(result) == [
        f"{DRIVER}/b/gpu-0",
        f"{DRIVER}/b/gpu-1",
    ]  # a's one GPU backtracked


def test_a_network_attached_device_is_allocated_with_the_nodes_that_reach_it() -> None:
    classes = [device_class("domain.example.com")]
    w = world([channel_slice("r1")], classes=classes)
    request = exactly("channel", cls="domain.example.com")
    assert allocate(w, claim("c", request), labels={"rack": "r2"}) == CANNOT_ALLOCATE
    result = allocate(w, claim("c", request), on="n1", labels={"rack": "r1"})
    assert not isinstance(result, str)
    (term,) = result[0].node_selector
    assert (term.match_expressions[0].key, term.match_expressions[0].values) == ("rack", ("r1",))


def test_a_local_device_ties_the_claim_to_its_node() -> None:
    result = allocate(world([gpu_slice("n0", 1)]), claim("c", exactly()))
    (term,) = result[0].node_selector
    assert (term.match_fields[0].key, term.match_fields[0].values) == ("metadata.name", ("n0",))


def test_a_pool_being_published_is_skipped_and_all_of_it_cannot_be_asked() -> None:
    half = [gpu_slice("n0", 2, slices=2)]  # one of two slices published so far
    assert allocate(world(half), claim("c", exactly())) == CANNOT_ALLOCATE
    result = allocate(world(half), claim("c", exactly(mode="All")))
    assert isinstance(result, str)
    assert "is currently being updated" in result


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = gpu_slice("n0", 8, generation=1, name="old")
    new = gpu_slice("n0", 2, generation=2, name="new")
    assert allocate(world([old, new]), claim("c", exactly(count=3))) == CANNOT_ALLOCATE
    assert len(devices_of(allocate(world([old, new]), claim("c", exactly(count=2))))) == 2


def test_a_tainted_device_is_given_only_to_a_request_that_tolerates_it() -> None:
    taint = [{"key": "broken", "value": "ecc", "effect": "NoSchedule"}]
    w = world([gpu_slice("n0", 1, taints=taint)])
    assert allocate(w, claim("c", exactly())) == CANNOT_ALLOCATE
    tolerant = exactly()
    tolerant["exactly"]["tolerations"] = [{"key": "broken", "operator": "Exists"}]
    assert len(devices_of(allocate(w, claim("c", tolerant)))) == 1


def test_an_unknown_device_class_is_said_in_kube_schedulers_words() -> None:
    result = allocate(world([gpu_slice("n0")]), claim("c", exactly(cls="nosuch")))
    assert result == "request gpu: device class nosuch does not exist"


def test_more_than_32_devices_in_one_claim_is_refused() -> None:
    result = allocate(world([gpu_slice("n0", 40)]), claim("c", exactly(count=33)))
    assert isinstance(result, str)
    assert "exceeds the claim limit of 32" in result


def test_two_claims_allocated_together_never_share_a_device() -> None:
    result = allocate(world([gpu_slice("n0", 2)]), claim("a", exactly()), claim("b", exactly()))
    assert devices_of(result) == [f"{DRIVER}/n0/gpu-0", f"{DRIVER}/n0/gpu-1"]


# -- gangs ------------------------------------------------------------------------------------


def claiming_pod(name: str, claim_name: str, *, template: bool = True, **kw: Any) -> Pod:
    entry = (
        {"name": "gpus", "resourceClaimTemplateName": "gpus"}
        if template
        else {"name": "gpus", "resourceClaimName": claim_name}
    )
    p = pod(name, spec={"resourceClaims": [entry]}, **kw)
    if template:
        p = replace(p, resource_claims=(PodClaim("gpus", claim_name, "gpus"),))
    return p


def dra_snapshot(
    nodes: list,
    pods: list[Pod],
    *,
    slices: list[dict],
    claims: list[dict],
    classes: list[dict] | None = None,
) -> Snapshot:
    decoded = [resource_claim_from_dict(c) for c in claims]
    return replace(
        snapshot(nodes, pods),
        resource_slices=tuple(slice_from_dict(s) for s in slices),
        device_classes={
            c.name: c for c in (device_class_from_dict(d) for d in (classes or [device_class()]))
        },
        resource_claims={c.key: c for c in decoded},
        selectors=SELECTORS.evaluate,
    )


def gang_of_claimers(name: str, count: int, *, gpus: int = 8) -> tuple[list[Pod], list[dict]]:
    pods, claims = [], []
    for p in gang_pods(name, count, gang=name, min_available=count):
        claim_name = f"{p.ref.name}-gpus"
        pods.append(
            replace(p, resource_claims=claiming_pod(p.ref.name, claim_name).resource_claims)
        )
        claims.append(claim(claim_name, exactly(count=gpus), owner=p.ref.name))
    return pods, claims


def written(result: Any) -> dict[str, tuple[list[str], list[str]]]:
    """claim name -> (devices allocated, pods reserved)."""
    return {
        w.name: (
            [str(d) for d in w.allocation.devices] if w.allocation else [],
            [r.name for r in w.pods],
        )
        for g in result.bindings
        for w in g.claims
    }


def test_a_gang_of_four_each_claiming_eight_gpus_binds_whole_with_its_claims_written() -> None:
    pods, claims = gang_of_claimers("g", 4)
    nodes = [node(f"n{i}") for i in range(4)]
    result = schedule(
        dra_snapshot(nodes, pods, slices=[gpu_slice(f"n{i}") for i in range(4)], claims=claims),
        now=T0,
    )
    binds = bind_map(result)
    assert sorted(binds) == ["g-0", "g-1", "g-2", "g-3"]
    assert len(set(binds.values())) == 4
    writes = written(result)
    assert sorted(writes) == [f"g-{i}-gpus" for i in range(4)]
    for pod_name, node_name in binds.items():
        devices, reserved = writes[f"{pod_name}-gpus"]
        assert reserved == [pod_name]
        assert devices == [f"{DRIVER}/{node_name}/gpu-{i}" for i in range(8)]


def test_two_gangs_for_room_for_one_bind_one_whole_and_allocate_nothing_for_the_other() -> None:
    first, first_claims = gang_of_claimers("a", 2)
    second, second_claims = gang_of_claimers("b", 2)
    nodes = [node(f"n{i}") for i in range(3)]
    snap = dra_snapshot(
        nodes,
        first + second,
        slices=[gpu_slice(f"n{i}") for i in range(3)],
        claims=first_claims + second_claims,
    )
    result = schedule(snap, now=T0)
    binds = bind_map(result)
    assert sorted(binds) in (["a-0", "a-1"], ["b-0", "b-1"])
    loser = "b" if "a-0" in binds else "a"
    assert not any(name.startswith(loser) for name in written(result))
    assert any(CANNOT_ALLOCATE in m for m in events(result, "FailedScheduling"))


def test_members_sharing_a_claim_for_a_rack_channel_land_in_that_rack() -> None:
    nodes = [node(f"r1-{i}", labels={"rack": "r1"}) for i in range(2)] + [
        node(f"r2-{i}", labels={"rack": "r2"}) for i in range(4)
    ]
    # Rack r1 has one node with GPUs left: the gang of three fits only in r2.
    slices = [gpu_slice(n.name, 1) for n in nodes[1:]] + [channel_slice("r1"), channel_slice("r2")]
    shared = claim("domain", exactly("channel", cls="domain.example.com"))
    pods, claims = [], [shared]
    for p in gang_pods("g", 3, gang="g", min_available=3):
        own = f"{p.ref.name}-gpus"
        pods.append(
            replace(p, resource_claims=(PodClaim("domain", "domain"), PodClaim("gpus", own)))
        )
        claims.append(claim(own, exactly()))
    classes = [device_class(), device_class("domain.example.com")]
    result = schedule(
        dra_snapshot(nodes, pods, slices=slices, claims=claims, classes=classes), now=T0
    )
    binds = bind_map(result)
    assert len(binds) == 3, events(result, "FailedScheduling")
    assert all(n.startswith("r2-") for n in binds.values()), binds
    devices, reserved = written(result)["domain"]
    assert devices == ["domain.example.com/rack-r2/channel"]
    assert sorted(reserved) == ["g-0", "g-1", "g-2"]


def test_a_pod_whose_claim_is_not_made_yet_waits_and_says_so() -> None:
    p = pod("p", spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]})
    result = schedule(dra_snapshot([node("n0")], [p], slices=[gpu_slice("n0")], claims=[]), now=T0)
    assert bind_map(result) == {}
    assert any("ResourceClaim not created yet" in m for m in events(result, "FailedScheduling"))


def test_a_pod_whose_claim_is_allocated_goes_where_its_devices_are() -> None:
    allocated = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                ]
            },
        }
    }
    p = claiming_pod("p", "c", template=False)
    snap = dra_snapshot(
        [node(f"n{i}") for i in range(3)],
        [p],
        slices=[gpu_slice(f"n{i}") for i in range(3)],
        claims=[claim("c", exactly(), status=allocated)],
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {"p": "n2"}
    # The allocation it relies on, and the pod to reserve it for (the writer writes only the
    # reservation where the claim shows that allocation).
    assert written(result) == {"c": ([f"{DRIVER}/n2/gpu-0"], ["p"])}


def test_a_claim_made_for_another_pod_is_not_used() -> None:
    p = claiming_pod("p", "c")
    snap = dra_snapshot(
        [node("n0")],
        [p],
        slices=[gpu_slice("n0")],
        claims=[claim("c", exactly(), owner="someone-else")],
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    assert any("was not created for Pod default/p" in m for m in events(result, "FailedScheduling"))


def test_failed_scheduling_counts_nodes_without_the_devices_in_kube_schedulers_words() -> None:
    p = claiming_pod("p", "c", template=False)
    snap = dra_snapshot(
        [node("n0"), node("n1")],
        [p],
        slices=[gpu_slice("n0", 2)],
        claims=[claim("c", exactly(count=4))],
    )
    (message,) = events(schedule(snap, now=T0), "FailedScheduling")
    assert "0/2 nodes are available: 2 cannot allocate all claims." in message


def test_all_devices_that_break_a_constraint_stop_the_node_with_upstreams_error() -> None:
    slices = [
        gpu_slice("n0", 1, domain="a", pool="a"),
        gpu_slice("n0", 1, domain="b", pool="b", name="b"),
    ]
    same = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    result = allocate(world(slices), claim("c", exactly(mode="All"), constraints=same))
    assert result == (
        f"claim default/c, request gpu: cannot add device {DRIVER}/b/gpu-0 because a claim "
        "constraint would not be satisfied"
    )


# -- from the review of #24 -------------------------------------------------------------------


def test_a_device_watched_with_admin_access_is_still_free_for_others() -> None:
    watched = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0",
         "adminAccess": True}]}}}  # fmt: skip
    w = world([gpu_slice("n0", 1)], [claim("monitor", exactly(), status=watched)])
    assert devices_of(allocate(w, claim("c", exactly()))) == [f"{DRIVER}/n0/gpu-0"]


def test_a_selector_is_not_evaluated_on_devices_past_the_first_solution_or_in_use() -> None:
    product = 'device.attributes["gpu.example.com"].productName == "H100"'
    odd = gpu_slice("n0", 2)
    del odd["spec"]["devices"][1]["attributes"]["productName"]
    result = allocate(world([odd]), claim("c", exactly(selectors=(product,))))
    assert devices_of(result) == [f"{DRIVER}/n0/gpu-0"]
    odd_in_use = gpu_slice("n0", 2)
    del odd_in_use["spec"]["devices"][0]["attributes"]["productName"]
    taken = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0"}]}}}  # fmt: skip
    w = world([odd_in_use], [claim("other", exactly(), status=taken)])
    assert devices_of(allocate(w, claim("c", exactly(selectors=(product,))))) == [
        f"{DRIVER}/n0/gpu-1"
    ]


def test_a_shared_claim_finds_the_empty_node_behind_many_full_ones() -> None:
    full = [node(f"a{i:02d}", cpu="8") for i in range(17)]
    fillers = [
        pod(f"fill-{i}", cpu="7", node_name=f"a{i:02d}", phase="Running", scheduler="other")
        for i in range(17)
    ]
    members = [
        replace(p, resource_claims=(PodClaim("gpu", "shared"),))
        for p in gang_pods("g", 2, gang="g", min_available=2, cpu="2")
    ]
    nodes = [*full, node("z", cpu="8")]
    snap = dra_snapshot(
        nodes,
        fillers + members,
        slices=[gpu_slice(n.name, 1) for n in nodes],
        claims=[claim("shared", exactly())],
    )
    assert bind_map(schedule(snap, now=T0)) == {"g-0": "z", "g-1": "z"}


def test_a_what_if_ledger_without_devices_places_pods_with_claims_by_room() -> None:
    nodes = {n.name: n for n in [node("n0"), node("n1")]}
    empty = Ledger.over(nodes, {})
    finder = NodeFinder(nodes, empty, infos={}, scoring="spread")
    claimer = replace(pod("p"), resource_claims=(PodClaim("gpu", "c"),))
    assert finder.find(claimer, empty) in nodes


def test_a_pod_made_again_under_the_same_name_binds_by_its_own_claims_not_the_old_ones() -> None:
    """Fuzzed (make fuzz): two pods default/p0 in one snapshot, the one made again beside the
    one it replaced. The old one claims devices and waits for its PodGroup; the new one
    claims none. Looked up by name, the new one's bind found the old one's claims without a
    plan, and its group was held back as an internal error."""
    old = replace(
        pod("p0", pod_group="pg"), resource_claims=(PodClaim("gpu", "gpu"),)
    )  # fmt: skip
    new = pod("p0", gang="g", min_available=1)
    new = replace(new, ref=replace(new.ref, uid="uid-p0-again"))
    result = schedule(snapshot([node("n0")], [old, new]), now=T0)
    assert not [e for e in events(result, "FailedScheduling") if "internal error" in e]
    assert [b.pod.uid for g in result.bindings for b in g.bindings] == ["uid-p0-again"]
