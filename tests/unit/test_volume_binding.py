"""Which volume a claim binds to on a node, and a pod's storage plan on a node, as
kube-scheduler v1.36 decides them: the cases of component-helpers' TestFindMatchVolumeWithNode
and of volumebinding's TestFindPodVolumesWithoutProvisioning and WithProvisioning, by their
names there (the VolumeAttributesClass gate on, as it is by default)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.volume_binding import (
    BIND_CONFLICT,
    EMPTY,
    NODE_CONFLICT,
    VOLUME_MISSING,
    VolumeLayer,
    VolumePlan,
    VolumeWorld,
    matching_volume,
    plan_volumes,
    pod_claims,
)
from scheduler.model.pods import LabelSelector, NodeSelectorTerm, Requirement
from scheduler.model.volumes import (
    IMMEDIATE,
    NO_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    ClaimRef,
    StorageClass,
    TopologyTerm,
    Volume,
)
from tests.unit.builders import node, pod

G = 1000**3
RWO, ROX, RWX = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"


def _on(key: str, value: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm((Requirement(key, "In", (value,)),)),)


# -- FindMatchingVolume ----------------------------------------------------------------------


def _volume(name: str, size: int, *, available: bool = True, **kw: object) -> Volume:
    return Volume(
        name, capacity=size, access_modes=frozenset({RWO, ROX}), phase="Available" if available
        else "", **kw,  # type: ignore[arg-type]
    )  # fmt: skip


VOLUMES = (
    _volume("local001", 5 * G),
    _volume("local002", 200 * 1000**6, storage_class="large"),
    _volume("affinity001", 100 * G, storage_class="wait", node_affinity=_on("key1", "value1")),
    _volume("affinity002", 150 * G, storage_class="wait", node_affinity=_on("key1", "value1")),
    _volume("affinity003", 100 * G, storage_class="wait", node_affinity=_on("key1", "value1"),
            claim=ClaimRef("myns", "claim02")),
    _volume("affinity003", 200 * G, storage_class="wait", node_affinity=_on("key1", "value3")),
    _volume("affinity004", 200 * G, storage_class="wait", node_affinity=_on("key1", "value4"),
            available=False),
)  # fmt: skip


def _claim(name: str, *, modes: tuple[str, ...] = (RWO,), **kw: object) -> Claim:
    return Claim("myns", name, storage_class="wait", requested=100 * G,
                 access_modes=frozenset(modes), **kw)  # type: ignore[arg-type]  # fmt: skip


def _node(value: str):
    return node(f"node-{value}", labels={"key1": value})


EXCLUDED = {
    "success-exclusion": frozenset({"affinity001"}),
    "fail-exclusion": frozenset({"affinity001", "affinity002"}),
}


@pytest.mark.parametrize(
    ("case", "claim", "on", "volumes", "expected"),
    [
        ("success-match", _claim("claim01"), "value1", VOLUMES, "affinity001"),
        ("success-prebound", _claim("claim02"), "value1", VOLUMES, "affinity003"),
        ("success-exclusion", _claim("claim01"), "value1", VOLUMES,
         "affinity002"),
        ("fail-exclusion", _claim("claim01"), "value1", VOLUMES,
         None),
        ("fail-accessmode", _claim("claim01", modes=(RWX,)), "value1", VOLUMES, None),
        ("fail-nodeaffinity", _claim("claim01"), "value2", VOLUMES, None),
        ("fail-prebound-node-affinity", _claim("claim02"), "value3", VOLUMES, None),
        ("fail-nonavaliable", _claim("claim04"), "value4", VOLUMES, None),
        ("success-bad-and-good-node-affinity", _claim("claim03"), "value3", VOLUMES,
         "affinity003"),
        ("success-match-with-vac", _claim("claim01", attributes_class="gold"), "value1",
         tuple(replace(v, attributes_class="gold") for v in VOLUMES), "affinity001"),
        ("fail-vac", _claim("claim01", attributes_class="silver"), "value1", VOLUMES, None),
        ("fail-prebound-vac", _claim("claim02", attributes_class="silver"), "value1",
         tuple(replace(v, attributes_class="gold") for v in VOLUMES), None),
    ],
)  # fmt: skip
def test_find_matching_volume_with_node(case, claim, on, volumes, expected) -> None:
    # Two volumes share the name affinity003 upstream too (they differ by uid there): the
    # one found is told apart by its size.
    taken = EXCLUDED.get(case, frozenset())
    found = matching_volume(claim, volumes, node=_node(on), taken=taken)
    assert (found.name if found else None) == expected, case
    if case == "success-bad-and-good-node-affinity":
        assert found is not None
        assert found.capacity == 200 * G


def test_the_volume_a_claims_selector_names_is_the_only_one_it_takes() -> None:
    fast = replace(VOLUMES[2], name="fast", labels={"tier": "fast"}, capacity=120 * G)
    claim = _claim("claim01", selector=LabelSelector(match_labels=(("tier", "fast"),)))
    found = matching_volume(claim, (*VOLUMES, fast), node=_node("value1"))
    assert found is not None
    assert found.name == "fast"


def test_a_block_claim_takes_no_filesystem_volume_and_a_deleted_volume_is_taken_by_none() -> None:
    assert matching_volume(_claim("claim01", block=True), VOLUMES, node=_node("value1")) is None
    gone = tuple(replace(v, deleting=True) for v in VOLUMES)
    assert matching_volume(_claim("claim01"), gone, node=_node("value1")) is None


# -- FindPodVolumes --------------------------------------------------------------------------

CLASSES = {
    "waitClass": StorageClass("waitClass", WAIT_FOR_FIRST_CONSUMER, NO_PROVISIONER),
    "immediateClass": StorageClass("immediateClass", IMMEDIATE),
    "waitClassWithProvisioner": StorageClass(
        "waitClassWithProvisioner", WAIT_FOR_FIRST_CONSUMER, "test-provisioner"
    ),
    "topoMismatchClass": StorageClass(
        "topoMismatchClass", WAIT_FOR_FIRST_CONSUMER, "test-provisioner",
        (TopologyTerm((("nodeKey", ("node2",)),)),),
    ),
}  # fmt: skip


def _pvc(name: str, size: int, storage_class: str, *, volume: str = "", **kw: object) -> Claim:
    return Claim("testns", name, volume=volume, storage_class=storage_class, requested=size,
                 bind_completed=bool(volume), uid=f"uid-{name}", **kw)  # type: ignore[arg-type]  # fmt: skip


def _pv(name: str, on: str, size: int, claim: Claim | None, storage_class: str) -> Volume:
    return Volume(
        name, node_affinity=_on("nodeKey", on), capacity=size, storage_class=storage_class,
        claim=ClaimRef(claim.namespace, claim.name, claim.uid) if claim else None,
        phase="Bound" if claim else "Available",
    )  # fmt: skip


BOUND = _pvc("bound-pvc", G, "waitClass", volume="pv-bound")
UNBOUND = _pvc("unbound-pvc", G, "waitClass")
UNBOUND2 = _pvc("unbound-pvc2", 5 * G, "waitClass")
PREBOUND = replace(_pvc("prebound-pvc", G, "waitClass", volume="pv-node1a"), bind_completed=False)
IMMEDIATE_UNBOUND = _pvc("immediate-unbound-pvc", G, "immediateClass")
IMMEDIATE_BOUND = _pvc("immediate-bound-pvc", G, "immediateClass", volume="pv-bound-immediate")
PROVISIONED = _pvc("provisioned-pvc", 2**30, "waitClassWithProvisioner")
NO_PROVISIONER_PVC = _pvc("no-provisioner-pvc", 2**30, "waitClass")
TOPO_MISMATCH = _pvc("topo-mismatch-pvc", 2**30, "topoMismatchClass")
SELECTED_NODE = replace(PROVISIONED, selected_node="node1")

PV_NODE1A = _pv("pv-node1a", "node1", 5 * G, None, "waitClass")
PV_NODE1B = _pv("pv-node1b", "node1", 10 * G, None, "waitClass")
PV_NODE2 = _pv("pv-node2", "node2", G, None, "waitClass")
PV_BOUND = _pv("pv-bound", "node1", G, BOUND, "waitClass")
PV_BOUND_IMMEDIATE = _pv("pv-bound-immediate", "node1", G, IMMEDIATE_BOUND, "immediateClass")
PV_BOUND_IMMEDIATE_NODE2 = _pv("pv-bound-immediate", "node2", G, IMMEDIATE_BOUND, "immediateClass")

NODE1 = node("node1", labels={"nodeKey": "node1"})


def _find(claims: list[Claim], volumes: list[Volume]) -> VolumePlan | tuple[str, ...] | str:
    """kube-scheduler's test helper ``findPodVolumes``: a pod with these claims on node1;
    a pod with unbound immediate claims fails before any node is looked at."""
    names = [c.name for c in claims]
    sorted_claims = pod_claims(
        pod("test-pod", namespace="testns", spec={"volumes": [
            {"name": n, "persistentVolumeClaim": {"claimName": n}} for n in names]}),
        claims={c.key: c for c in claims}, classes=CLASSES,
    )  # fmt: skip
    if isinstance(sorted_claims, str):
        return sorted_claims
    if sorted_claims.immediate:
        return "pod has unbound immediate PersistentVolumeClaims"
    by_class: dict[str, list[Volume]] = {}
    for v in sorted(volumes, key=lambda v: v.name):
        by_class.setdefault(v.storage_class, []).append(v)
    world = VolumeWorld(claims={}, volumes={v.name: v for v in volumes}, classes=CLASSES)
    return plan_volumes(
        sorted_claims, node=NODE1, volumes={v.name: v for v in volumes}, classes=CLASSES,
        by_class={k: tuple(v) for k, v in by_class.items()}, prebound=world.prebound,
    )  # fmt: skip


FAILS = "pod has unbound immediate PersistentVolumeClaims"


@pytest.mark.parametrize(
    ("case", "claims", "volumes", "expected"),
    [
        ("bound-pvc", [BOUND], [PV_BOUND], EMPTY),
        ("bound-pvc,pv-not-exists", [BOUND], [], (VOLUME_MISSING,)),
        ("prebound-pvc", [PREBOUND], [replace(PV_NODE1A, claim=ClaimRef("testns", "unbound-pvc"))],
         FAILS),
        ("unbound-pvc,pv-same-node", [UNBOUND], [PV_NODE2, PV_NODE1A, PV_NODE1B],
         VolumePlan(((UNBOUND, PV_NODE1A),))),
        ("unbound-pvc,pv-different-node", [UNBOUND], [PV_NODE2], (BIND_CONFLICT,)),
        ("two-unbound-pvcs", [UNBOUND, UNBOUND2], [PV_NODE1A, PV_NODE1B],
         VolumePlan(((UNBOUND, PV_NODE1A), (UNBOUND2, PV_NODE1B)))),
        ("two-unbound-pvcs,order-by-size", [UNBOUND2, UNBOUND], [PV_NODE1A, PV_NODE1B],
         VolumePlan(((UNBOUND, PV_NODE1A), (UNBOUND2, PV_NODE1B)))),
        ("two-unbound-pvcs,partial-match", [UNBOUND, UNBOUND2], [PV_NODE1A], (BIND_CONFLICT,)),
        ("one-bound,one-unbound", [UNBOUND, BOUND], [PV_BOUND, PV_NODE1A],
         VolumePlan(((UNBOUND, PV_NODE1A),))),
        ("one-bound,one-unbound,no-match", [UNBOUND, BOUND], [PV_BOUND, PV_NODE2],
         (BIND_CONFLICT,)),
        ("one-prebound,one-unbound", [UNBOUND, PREBOUND], [PV_NODE1A, PV_NODE1B], FAILS),
        ("immediate-bound-pvc", [IMMEDIATE_BOUND], [PV_BOUND_IMMEDIATE], EMPTY),
        ("immediate-bound-pvc-wrong-node", [IMMEDIATE_BOUND], [PV_BOUND_IMMEDIATE_NODE2],
         (NODE_CONFLICT,)),
        ("immediate-unbound-pvc", [IMMEDIATE_UNBOUND], [], FAILS),
        ("immediate-unbound-pvc,delayed-mode-bound", [IMMEDIATE_UNBOUND, BOUND], [PV_BOUND],
         FAILS),
        ("immediate-unbound-pvc,delayed-mode-unbound", [IMMEDIATE_UNBOUND, UNBOUND], [], FAILS),
        # WithProvisioning
        ("one-provisioned", [PROVISIONED], [], VolumePlan((), (PROVISIONED,))),
        ("two-unbound-pvcs,one-matched,one-provisioned", [UNBOUND, PROVISIONED], [PV_NODE1A],
         VolumePlan(((UNBOUND, PV_NODE1A),), (PROVISIONED,))),
        ("one-bound,one-provisioned", [BOUND, PROVISIONED], [PV_BOUND],
         VolumePlan((), (PROVISIONED,))),
        ("one-binding,one-selected-node", [BOUND, SELECTED_NODE], [PV_BOUND],
         VolumePlan((), (SELECTED_NODE,))),
        ("one-immediate-bound,one-provisioned", [IMMEDIATE_BOUND, PROVISIONED],
         [PV_BOUND_IMMEDIATE], VolumePlan((), (PROVISIONED,))),
        ("invalid-provisioner", [NO_PROVISIONER_PVC], [], (BIND_CONFLICT,)),
        ("volume-topology-unsatisfied", [TOPO_MISMATCH], [], (BIND_CONFLICT,)),
    ],
)  # fmt: skip
def test_find_pod_volumes(case, claims, volumes, expected) -> None:
    assert _find(claims, volumes) == expected, case


def test_a_claim_asked_for_on_another_node_fails_there_at_once() -> None:
    elsewhere = replace(PROVISIONED, selected_node="node2")
    assert _find([elsewhere], []) == (BIND_CONFLICT,)


def test_a_claim_with_a_volume_made_for_it_elsewhere_is_not_provisioned_again() -> None:
    """Where kube-scheduler would ask its provisioner for another volume (and fail at
    PreBind when the PV controller binds the claim to the one made for it), the node is
    one the claim's volume cannot be reached from."""
    made = _pv("pv-made", "node2", 2**30, PROVISIONED, "waitClassWithProvisioner")
    assert _find([PROVISIONED], [made]) == (NODE_CONFLICT,)
    here = replace(made, node_affinity=_on("nodeKey", "node1"))
    assert _find([PROVISIONED], [here]) == VolumePlan(((PROVISIONED, here),))
    # The PV controller binds a pre-bound volume of any class, not one of modes too few.
    other_class = replace(made, storage_class="waitClass")
    assert _find([PROVISIONED], [other_class]) == (NODE_CONFLICT,)
    bound_far = _pv("pv-bound", "node2", G, BOUND, "waitClass")
    assert _find([BOUND, PROVISIONED], [bound_far, made]) == (NODE_CONFLICT,), "said once"
    writer = replace(PROVISIONED, access_modes=frozenset({RWO}))
    too_few = replace(made, access_modes=frozenset({ROX}))
    assert _find([writer], [too_few]) == VolumePlan((), (writer,))


def test_a_claim_not_found_or_being_deleted_is_said_by_name() -> None:
    test_pod = pod(
        "p", spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]}
    )
    assert pod_claims(test_pod, claims={}, classes=CLASSES) == (
        'persistentvolumeclaim "d" not found'
    )
    deleting = Claim("default", "d", deleting=True)
    assert pod_claims(test_pod, claims={deleting.key: deleting}, classes=CLASSES) == (
        'persistentvolumeclaim "d" is being deleted'
    )


def _mounting(name: str, *claims: str):
    volumes = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    return pod(name, namespace="testns", spec={"volumes": volumes})


def _world(claims: list[Claim], volumes: list[Volume]) -> VolumeWorld:
    return VolumeWorld(
        claims={c.key: c for c in claims}, volumes={v.name: v for v in volumes}, classes=CLASSES
    )


def test_a_volume_taken_by_another_pod_of_the_turn_is_not_chosen_again() -> None:
    layer = VolumeLayer(_world([UNBOUND, UNBOUND2], [PV_NODE1A, PV_NODE1B]))
    assert layer.place(_mounting("first", "unbound-pvc"), NODE1) == ""
    second = layer.plan(_mounting("second", "unbound-pvc2"), NODE1)
    assert second == VolumePlan(((UNBOUND2, PV_NODE1B),))


def test_pods_sharing_a_claim_share_the_volume_chosen_for_it() -> None:
    """Review of e88abb9: each pod of a shared claim got a volume of its own."""
    node2 = node("node2", labels={"nodeKey": "node2"})
    layer = VolumeLayer(_world([UNBOUND], [PV_NODE1A, PV_NODE2]))
    assert layer.place(_mounting("a", "unbound-pvc"), NODE1) == ""
    assert layer.plan(_mounting("b", "unbound-pvc"), NODE1) == VolumePlan(((UNBOUND, PV_NODE1A),))
    assert layer.plan(_mounting("b", "unbound-pvc"), node2) == (BIND_CONFLICT,), "there or nowhere"
    made = VolumeLayer(_world([PROVISIONED], []))
    assert made.place(_mounting("a", "provisioned-pvc"), NODE1) == ""
    assert made.plan(_mounting("b", "provisioned-pvc"), node2) == (BIND_CONFLICT,)


def test_a_choice_undone_for_one_pod_stays_for_the_other_that_shares_it() -> None:
    layer = VolumeLayer(_world([UNBOUND], [PV_NODE1A, PV_NODE1B]))
    a, b = _mounting("a", "unbound-pvc"), _mounting("b", "unbound-pvc")
    layer.place(a, NODE1)
    layer.place(b, NODE1)
    layer.unplace(a, "node1")
    assert "pv-node1a" in layer
    layer.unplace(b, "node1")
    assert "pv-node1a" not in layer


def test_a_scratch_layer_reaches_its_parent_only_when_committed() -> None:
    root = VolumeLayer(_world([UNBOUND, UNBOUND2], [PV_NODE1A, PV_NODE1B]))
    scratch = root.child()
    scratch.place(_mounting("a", "unbound-pvc"), NODE1)
    assert "pv-node1a" in scratch
    assert "pv-node1a" not in root
    scratch.commit()
    assert "pv-node1a" in root


def test_choices_set_aside_in_a_what_if_are_free_there_only() -> None:
    root = VolumeLayer(_world([UNBOUND], [PV_NODE1A]))
    held = _mounting("held", "unbound-pvc")
    root.place(held, NODE1)
    what_if = root.child()
    what_if.set_aside(held, "node1")
    assert "pv-node1a" not in what_if
    assert what_if.volume_for(UNBOUND.key) is None
    assert "pv-node1a" in root
    assert what_if.place(held, NODE1) == "", "its own volume is its to take again"
    assert what_if.volume_for(UNBOUND.key) == PV_NODE1A
