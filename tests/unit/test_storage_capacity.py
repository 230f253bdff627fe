"""A volume is made only where its driver says there is room (kube-scheduler's
hasEnoughCapacity, for CSI drivers that publish CSIStorageCapacity objects), and the volumes
one pass asks to be made count against the capacity they were checked against, so that a
gang's members do not all count on the same free space."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.volumes import csi_driver_from_dict, storage_capacity_from_dict
from scheduler.core.scheduling import schedule
from scheduler.core.volume_binding import (
    NOT_ENOUGH_SPACE,
    Capacities,
    PodClaims,
    VolumePlan,
    plan_volumes,
)
from scheduler.model.config import Config
from scheduler.model.pods import LabelSelector, NodeSelectorTerm, Requirement
from scheduler.model.volumes import (
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    ClaimRef,
    CsiDriver,
    StorageCapacity,
    StorageClass,
    Volume,
)
from tests.unit.builders import T0, node, pod, snapshot

GI = 2**30
HOST = "kubernetes.io/hostname"
DRIVER = "lvm.example.com"
LVM = StorageClass("lvm", WAIT_FOR_FIRST_CONSUMER, DRIVER)
PUBLISHING = {DRIVER: CsiDriver(DRIVER, storage_capacity=True)}


def _claim(name: str = "data", size: int = 10 * GI) -> Claim:
    return Claim("default", name, storage_class="lvm", uid=f"c-{name}", requested=size)


def _on(host: str, *, capacity: int | None = None, largest: int | None = None) -> StorageCapacity:
    return StorageCapacity(
        "kube-system", f"cap-{host}", "lvm",
        node_topology=LabelSelector(match_labels=((HOST, host),)),
        capacity=capacity, maximum_volume_size=largest,
    )  # fmt: skip


def _plan(claim: Claim, *capacities: StorageCapacity, drivers=PUBLISHING, host: str = "n0"):
    return plan_volumes(
        PodClaims(delayed=(claim,)),
        node=node(host, labels={HOST: host}),
        volumes={},
        classes={"lvm": LVM},
        by_class={},
        capacities=Capacities(drivers, capacities),
    )


def test_a_driver_that_publishes_no_capacity_makes_volumes_anywhere() -> None:
    assert _plan(_claim(), drivers={}) == VolumePlan((), (_claim(),))
    quiet = {DRIVER: CsiDriver(DRIVER, storage_capacity=False)}
    assert _plan(_claim(), drivers=quiet) == VolumePlan((), (_claim(),))


def test_a_driver_that_publishes_capacity_makes_a_volume_only_where_it_has_room() -> None:
    assert _plan(_claim()) == (NOT_ENOUGH_SPACE,)  # no capacity published at all
    assert _plan(_claim(), _on("n1", capacity=100 * GI)) == (NOT_ENOUGH_SPACE,)  # elsewhere
    assert _plan(_claim(), _on("n0", capacity=5 * GI)) == (NOT_ENOUGH_SPACE,)  # too little
    fits = _plan(_claim(), _on("n0", capacity=100 * GI))
    assert fits == VolumePlan((), (_claim(),), ((("kube-system", "cap-n0"), 10 * GI),))


def test_the_largest_volume_a_capacity_allows_is_its_maximum_volume_size_where_given() -> None:
    assert _plan(_claim(), _on("n0", capacity=100 * GI, largest=5 * GI)) == (NOT_ENOUGH_SPACE,)
    assert isinstance(_plan(_claim(), _on("n0", largest=20 * GI)), VolumePlan)


def test_a_capacity_with_no_topology_reaches_no_node_and_a_claim_of_no_size_asks_none() -> None:
    nowhere = replace(_on("n0", capacity=100 * GI), node_topology=None)
    assert _plan(_claim(), nowhere) == (NOT_ENOUGH_SPACE,)
    assert isinstance(_plan(_claim(size=0)), VolumePlan)


def test_a_capacity_is_read_with_its_sizes_and_a_driver_with_its_opt_in() -> None:
    raw = {
        "metadata": {"name": "cap", "namespace": "kube-system"},
        "storageClassName": "lvm",
        "nodeTopology": {"matchLabels": {HOST: "n0"}},
        "capacity": "100Gi",
        "maximumVolumeSize": "hostile",
    }
    capacity = storage_capacity_from_dict(raw)
    assert (capacity.capacity, capacity.maximum_volume_size) == (100 * GI, None)
    assert capacity.node_topology == LabelSelector(match_labels=((HOST, "n0"),))
    assert csi_driver_from_dict({"metadata": {"name": "d"}, "spec": {"storageCapacity": True}})
    assert not csi_driver_from_dict({"spec": {"storageCapacity": "yes"}}).storage_capacity


def _gang(count: int, size: int):
    pods = [
        pod(f"w-{i}", gang="w", min_available=count, cpu="1",
            spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": f"d-{i}"}}]})
        for i in range(count)
    ]  # fmt: skip
    claims = {("default", f"d-{i}"): _claim(f"d-{i}", size) for i in range(count)}
    return pods, claims


def _snap(pods, claims, capacities, nodes: int = 2):
    return replace(
        snapshot([node(f"n{i}", cpu="8", labels={HOST: f"n{i}"}) for i in range(nodes)], pods),
        claims=claims,
        storage_classes={"lvm": LVM},
        csi_drivers=PUBLISHING,
        storage_capacities=tuple(capacities),
    )


def test_a_gangs_volumes_are_spread_over_pools_none_of_which_holds_them_all() -> None:
    """Each node's pool holds two of the three volumes: packing would put the whole gang on
    one node, each member weighed alone against the same 100Gi."""
    pods, claims = _gang(3, 40 * GI)
    shot = _snap(pods, claims, [_on("n0", capacity=100 * GI), _on("n1", capacity=100 * GI)])
    result = schedule(shot, now=T0, config=Config(bind_volumes=True))
    placed = [b.node for g in result.bindings for b in g.bindings]
    assert sorted(placed) in (["n0", "n0", "n1"], ["n0", "n1", "n1"])


def test_a_gang_whose_volumes_no_pool_holds_binds_nothing_and_says_why() -> None:
    pods, claims = _gang(3, 60 * GI)
    shot = _snap(pods, claims, [_on("n0", capacity=100 * GI), _on("n1", capacity=100 * GI)])
    result = schedule(shot, now=T0, config=Config(bind_volumes=True))
    assert [b for g in result.bindings for b in g.bindings] == []
    failed = {e.message for e in result.events if e.reason == "FailedScheduling"}
    assert any(f"0/2 nodes are available: 2 {NOT_ENOUGH_SPACE}." in m for m in failed), failed


def test_a_node_a_bound_volume_cannot_reach_says_what_the_other_claims_find_there_too() -> None:
    """kube-scheduler's VolumeBinding gives every reason it has for a node at once (oracle
    case 900015): the bound volume out of reach, and no room for the claim to be made."""
    fixed = StorageClass("fixed", "Immediate", "kubernetes.io/no-provisioner")
    bound = Claim("default", "c1", storage_class="fixed", uid="u1", volume="pv",
                  bind_completed=True, requested=GI)  # fmt: skip
    pv = Volume("pv", capacity=GI, storage_class="fixed", phase="Bound",
                claim=ClaimRef("default", "c1", "u1"),
                node_affinity=(NodeSelectorTerm((Requirement(HOST, "In", ("n0",)),)),))  # fmt: skip
    volumes = [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in ("c0", "c1")]
    asked = pod("asked", spec={"nodeSelector": {HOST: "n1"}, "volumes": volumes})
    shot = replace(
        _snap([asked], {("default", "c0"): _claim("c0", 2 * GI), bound.key: bound},
              [_on("n0", capacity=3 * GI)]),
        volumes={"pv": pv},
        storage_classes={"lvm": LVM, "fixed": fixed},
    )  # fmt: skip
    [said] = [e.message for e in schedule(shot, now=T0).events]
    assert said.endswith(
        "asked: 0/2 nodes are available: 1 node(s) did not have enough free storage, "
        "1 node(s) didn't match PersistentVolume's node affinity, "
        "1 node(s) didn't match Pod's node affinity/selector."
    ), said


def test_a_maximum_volume_size_above_the_capacity_is_taken_as_kube_scheduler_takes_it() -> None:
    """Oracle case 2100022: 1Gi left but volumes of up to 2Gi, and a claim of 2Gi:
    kube-scheduler looks at the maximum alone, and so does a pass that asked nothing yet."""
    assert isinstance(
        _plan(_claim(size=2 * GI), _on("n0", capacity=GI, largest=2 * GI)), VolumePlan
    )


def test_one_pods_claims_are_each_weighed_against_the_capacity_as_kube_scheduler_weighs_them() -> (
    None
):
    """Oracle case 2200074: two claims of 1Gi of one pod, 1Gi left: kube-scheduler weighs
    each alone and binds the pod; only other pods' volumes asked in the pass count."""
    both = PodClaims(delayed=(_claim("c0", GI), _claim("c1", GI)))
    plan = plan_volumes(
        both, node=node("n0", labels={HOST: "n0"}), volumes={}, classes={"lvm": LVM},
        by_class={}, capacities=Capacities(PUBLISHING, [_on("n0", capacity=GI)]),
    )  # fmt: skip
    assert isinstance(plan, VolumePlan)
