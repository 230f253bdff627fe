"""1.37's claims for a whole PodGroup (spec.resourceClaims, DRAWorkloadResourceClaims): a
member's claim entry equal to one of its PodGroup's is that group's claim, allocated once,
reserved for the group (one reservedFor entry, whatever its size, as
``resourceclaim.BindTo`` does), and made from a template for the group, not the pod."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.codecs.podgroups import workload_podgroup_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model.devices import MAX_RESERVED, group_consumer
from scheduler.model.pods import PodClaim
from tests.unit.builders import T0, gang_pods, node
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_dra import claim, dra_snapshot, exactly, gpu_slice

GROUP_UID = "uid-train"


def podgroup(claims: list[dict[str, Any]], min_count: int = 3) -> Any:
    return workload_podgroup_from_dict(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "train", "namespace": "default", "uid": GROUP_UID},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": min_count}},
                "resourceClaims": claims,
            },
        }
    )


def members(count: int, entry: PodClaim) -> list:
    return [
        replace(p, resource_claims=(entry,))
        for p in gang_pods(
            "train", count, cpu="1", spec={"schedulingGroup": {"podGroupName": "train"}}
        )
    ]


def shared_snapshot(count: int, *, entry: PodClaim, group_claims: list, claims: list) -> Any:
    snap = dra_snapshot(
        [node("n0", cpu="8"), node("n1", cpu="8")],
        members(count, entry),
        slices=[gpu_slice("n0"), gpu_slice("n1")],
        claims=claims,
    )
    return replace(snap, podgroups={podgroup(group_claims).key: podgroup(group_claims)})


def test_a_podgroups_claims_are_read_and_a_malformed_entry_is_said() -> None:
    read = podgroup([{"name": "gpus", "resourceClaimTemplateName": "eight"}])
    assert read.claims == (PodClaim(name="gpus", template="eight"),)
    assert read.errors == ()
    both = podgroup([{"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}])
    assert both.errors[0].startswith("spec.resourceClaims must be a list of at most 4 objects")
    assert podgroup([{"name": f"c{i}", "resourceClaimName": "a"} for i in range(5)]).errors


def test_the_members_of_a_group_sharing_its_claim_bind_and_it_is_reserved_for_the_group() -> None:
    entry = PodClaim(name="gpus", claim="shared")
    snap = shared_snapshot(
        3,
        entry=entry,
        group_claims=[{"name": "gpus", "resourceClaimName": "shared"}],
        claims=[claim("shared", exactly(count=2))],
    )
    result = schedule(snap, now=T0)
    binds = bind_map(result)
    assert sorted(binds) == ["train-0", "train-1", "train-2"]
    assert len(set(binds.values())) == 1  # where the claim's devices are
    (write,) = [w for g in result.bindings for w in g.claims]
    assert write.groups == (group_consumer("train", GROUP_UID),)
    assert write.grouped == {p.ref.uid for p in snap.pods}
    assert write.allocation is not None


def test_a_member_naming_the_claim_differently_from_the_group_reserves_it_for_itself() -> None:
    """BindTo compares the entries whole: same claim, other entry name, not the group's."""
    snap = shared_snapshot(
        3,
        entry=PodClaim(name="devices", claim="shared"),
        group_claims=[{"name": "gpus", "resourceClaimName": "shared"}],
        claims=[claim("shared", exactly(count=2))],
    )
    (write,) = [w for g in schedule(snap, now=T0).bindings for w in g.claims]
    assert (write.groups, write.grouped) == ((), frozenset())
    assert len(write.pods) == 3


def test_a_claim_full_of_other_reservations_still_takes_a_group_already_in_it() -> None:
    """A claim reservedFor 256 entries refuses a new consumer; the group's members, once the
    group is among them, are not new."""
    others = [
        {"resource": "pods", "name": f"o{i}", "uid": f"o{i}"} for i in range(MAX_RESERVED - 1)
    ]
    group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train",
             "uid": GROUP_UID}  # fmt: skip
    allocated = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.example.com", "pool": "n0",
                     "device": f"gpu-{i}"}
                    for i in range(2)
                ]
            },
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]},
        },
    }  # fmt: skip
    entry = PodClaim(name="gpus", claim="shared")
    full = shared_snapshot(
        3,
        entry=entry,
        group_claims=[{"name": "gpus", "resourceClaimName": "shared"}],
        claims=[
            claim("shared", exactly(count=2), status={**allocated, "reservedFor": [*others, group]})
        ],
    )
    assert sorted(bind_map(schedule(full, now=T0))) == ["train-0", "train-1", "train-2"]
    others.append({"resource": "pods", "name": "last", "uid": "last"})
    refused = replace(
        full,
        resource_claims={
            c.key: c
            for c in dra_snapshot(
                [], [], slices=[], claims=[claim("shared", exactly(count=2),
                                                 status={**allocated, "reservedFor": others})]
            ).resource_claims.values()
        },
    )  # fmt: skip
    result = schedule(refused, now=T0)
    assert bind_map(result) == {}
    said = " ".join(events(result, "FailedScheduling"))
    assert "in use" in said, said


def test_a_claim_made_from_the_groups_template_is_the_groups_own_not_another_pods() -> None:
    entry = PodClaim(name="gpus", claim="train-gpus-x7", template="eight")
    made = claim("train-gpus-x7", exactly(count=2))
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "train",
         "uid": GROUP_UID, "controller": True}
    ]  # fmt: skip
    snap = shared_snapshot(
        3,
        entry=entry,
        group_claims=[{"name": "gpus", "resourceClaimTemplateName": "eight"}],
        claims=[made],
    )
    assert sorted(bind_map(schedule(snap, now=T0))) == ["train-0", "train-1", "train-2"]
    # The same claim, to members of a PodGroup that does not share it: another's claim.
    unshared = podgroup([])
    alone = replace(snap, podgroups={unshared.key: unshared})
    said = " ".join(events(schedule(alone, now=T0), "FailedScheduling"))
    assert "ResourceClaim default/train-gpus-x7 was not created for Pod" in said


def _group(name: str, claims: list[dict[str, Any]]) -> Any:
    return workload_podgroup_from_dict(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": claims},
        }
    )


def _members_of(name: str, entry: PodClaim) -> list:
    return [
        replace(p, resource_claims=(entry,))
        for p in gang_pods(name, 2, cpu="1", spec={"schedulingGroup": {"podGroupName": name}})
    ]


def _writes(result: Any) -> dict[str, Any]:
    """Which PodGroups (names) each pod's write reserves the claim for, by pod."""
    return {
        ref.name: sorted(g.name for g in w.groups if ref.uid in w.grouped) or ["(itself)"]
        for b in result.bindings
        for w in b.claims
        for ref in w.pods
    }


def test_two_podgroups_sharing_one_claim_each_reserve_it_for_themselves() -> None:
    """Found in review: the claim was tied to one of the groups by its name alone, and the
    other group's members were reserved as the first group's (the kubelet refuses that)."""
    entry = PodClaim(name="gpus", claim="shared")
    listed = [{"name": "gpus", "resourceClaimName": "shared"}]
    a, b = _group("a", listed), _group("b", listed)
    snap = dra_snapshot(
        [node("n0", cpu="8")],
        _members_of("a", entry) + _members_of("b", entry),
        slices=[gpu_slice("n0")],
        claims=[claim("shared", exactly(count=2))],
    )
    result = schedule(replace(snap, podgroups={a.key: a, b.key: b}), now=T0)
    assert _writes(result) == {"a-0": ["a"], "a-1": ["a"], "b-0": ["b"], "b-1": ["b"]}


def test_a_pod_outside_the_group_naming_its_claim_reserves_it_for_itself() -> None:
    entry = PodClaim(name="gpus", claim="shared")
    a = _group("a", [{"name": "gpus", "resourceClaimName": "shared"}])
    (lone,) = gang_pods("lone", 1, cpu="1")
    snap = dra_snapshot(
        [node("n0", cpu="8")],
        [*_members_of("a", entry), replace(lone, resource_claims=(entry,))],
        slices=[gpu_slice("n0")],
        claims=[claim("shared", exactly(count=2))],
    )
    writes = _writes(schedule(replace(snap, podgroups={a.key: a}), now=T0))
    assert writes == {"a-0": ["a"], "a-1": ["a"], "lone-0": ["(itself)"]}
