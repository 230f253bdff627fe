"""Gangs of gangs (#23): Volcano's ``spec.subGroupPolicy`` read field by field, and placed
whole subgroup by whole subgroup. Bind maps, as Volcano's tests state their expectations."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.codecs.podgroups import volcano_podgroup_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.pods import LabelSelector, NetworkTopology, SubGroupPolicy
from tests.unit.builders import T0, gang_pods, node, snapshot, tree_topology
from tests.unit.builders import podgroup as our_podgroup
from tests.unit.test_allocation import bind_map, events


def read(*policies: Any, **spec: Any) -> Any:
    return volcano_podgroup_from_dict(
        {
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {"minMember": 4, "subGroupPolicy": list(policies), **spec},
        }
    )


def test_a_subgroup_policy_is_read_with_volcanos_defaults() -> None:
    podgroup = read(
        {
            "name": "replica",
            "subGroupSize": 8,
            "minSubGroups": 6,
            "matchLabelKeys": ["volcano.sh/partition-id"],
            "labelSelector": {"matchLabels": {"role": "worker"}},
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
        },
        {"name": "decode"},
    )
    assert podgroup.errors == ()
    assert podgroup.subgroup_policy == (
        SubGroupPolicy(
            name="replica",
            size=8,
            min_subgroups=6,
            match_label_keys=("volcano.sh/partition-id",),
            selector=LabelSelector(match_labels=(("role", "worker"),)),
            topology=NetworkTopology(mode="hard", highest_tier=1),
        ),
        SubGroupPolicy(name="decode"),  # size 1, no minimum, every pod, no topology
    )


def test_hostile_subgroup_policies_are_errors_that_name_the_field_never_exceptions() -> None:
    first = "spec.subGroupPolicy[0]"
    cases = [
        ("not a list", "spec.subGroupPolicy must be a list"),
        (["x"], f"{first} must be an object"),
        ([{"subGroupSize": 0}], f"{first}.subGroupSize must be a whole number from 1"),
        ([{"subGroupSize": "8"}], "subGroupSize must be a whole number from 1, got '8'"),
        ([{"minSubGroups": -1}], f"{first}.minSubGroups must be a whole number from 0"),
        ([{"minSubGroups": 2**31}], "minSubGroups must be a whole number from 0"),
        ([{"matchLabelKeys": "k"}], "matchLabelKeys must be a list of label keys"),
        ([{"matchLabelKeys": [""]}], "matchLabelKeys must be a list of label keys"),
        ([{"name": "a"}, {"name": "a"}], "spec.subGroupPolicy[1].name 'a' is used twice"),
        ([{"name": 5}], f"{first}.name must be a string"),
        ([{"networkTopology": {"mode": "strict"}}], "mode must be one of hard, soft; got 'strict'"),
        ([{"networkTopology": {"highestTierAllowed": -1}}], "highestTierAllowed must be a whole"),
        ([{"networkTopology": {"highestTierAllowed": 1, "highestTierName": "r"}}], "cannot both"),
        ([{"networkTopology": "hard"}], f"{first}.networkTopology must be an object"),
    ]  # fmt: skip
    for raw, said in cases:
        podgroup = volcano_podgroup_from_dict(
            {"metadata": {"name": "pg"}, "spec": {"minMember": 1, "subGroupPolicy": raw}}
        )
        assert len(podgroup.errors) == 1, (raw, podgroup.errors)
        assert said in podgroup.errors[0], (raw, podgroup.errors)


# -- placed whole subgroup by whole subgroup -------------------------------------------------

PARTITION = "volcano.sh/partition-id"


def replicas(name: str, count: int, size: int, *, gpu: int = 1, first: int = 0) -> list[Any]:
    """``count`` replicas of ``size`` members of a Volcano gang ``name``, labelled with their
    replica index (``first`` on)."""
    pods = []
    for r in range(first, first + count):
        for m in range(size):
            (member,) = gang_pods(
                f"{name}-{r}-{m}", 1, annotations={names.VOLCANO_GROUP_NAME: name},
                labels={PARTITION: str(r)}, gpu=gpu, created=T0,
            )  # fmt: skip
            pods.append(replace(member, ref=replace(member.ref, name=f"{name}-{r}-{m}")))
    return pods


def podgroup(name: str, *, min_member: int, size: int, min_subgroups: int, **policy: Any) -> Any:
    return volcano_podgroup_from_dict(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {
                "minMember": min_member,
                "subGroupPolicy": [
                    {
                        "name": "replica",
                        "subGroupSize": size,
                        "minSubGroups": min_subgroups,
                        "matchLabelKeys": [PARTITION],
                        **policy,
                    }
                ],
            },
        }
    )


def by_replica(result: Any) -> dict[str, int]:
    """How many members of each replica were bound."""
    counts: dict[str, int] = {}
    for name in bind_map(result):
        replica = name.rsplit("-", 1)[0]
        counts[replica] = counts.get(replica, 0) + 1
    return counts


def test_a_gang_of_eight_replicas_needing_six_binds_as_many_whole_replicas_as_fit() -> None:
    """8 replicas of 2 one-GPU members, minSubGroups 6, 7 GPUs: three whole replicas fit,
    not six: nothing binds. With 13 GPUs: six whole replicas (12 GPUs), never a seventh
    half placed."""
    pods = replicas("dp", 8, 2)
    group = podgroup("dp", min_member=12, size=2, min_subgroups=6)
    small = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(7)], pods, podgroups=[group]), now=T0
    )
    assert bind_map(small) == {}
    (message,) = set(events(small, "FailedScheduling"))
    assert "only 3 of the 6 subgroups of policy replica that the gang needs fit whole" in message
    big = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(13)], pods, podgroups=[group]), now=T0
    )
    assert by_replica(big) == {f"dp-{r}": 2 for r in range(6)}


def test_an_elastic_gang_takes_every_whole_replica_that_fits_beyond_its_minimum() -> None:
    pods = replicas("dp", 8, 2)
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(11)], pods, podgroups=[group]), now=T0
    )
    assert by_replica(result) == {f"dp-{r}": 2 for r in range(5)}  # 10 of 11 GPUs: 5 whole


def test_a_replica_that_does_not_fit_whole_gives_its_room_back_to_the_next() -> None:
    """Replica 0's second member needs 4 GPUs (no node has 4): its first member, placed,
    is undone, and replicas 1 and 2 take the room; nothing of replica 0 binds."""
    (first,) = replicas("dp", 1, 1)
    (second,) = gang_pods(
        "dp-0-1", 1, annotations={names.VOLCANO_GROUP_NAME: "dp"}, labels={PARTITION: "0"},
        gpu=4, created=T0,
    )  # fmt: skip
    second = replace(second, ref=replace(second.ref, name="dp-0-1"))
    small = replicas("dp", 2, 2, first=1)
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    nodes = [node("n0", gpu=3), node("n1", gpu=1)]
    result = schedule(snapshot(nodes, [first, second, *small], podgroups=[group]), now=T0)
    assert by_replica(result) == {"dp-1": 2, "dp-2": 2}


def test_a_replica_with_fewer_members_than_its_size_is_never_placed() -> None:
    pods = [*replicas("dp", 2, 2), *replicas("dp", 1, 1, first=2)]  # replica 2 has 1 of 2
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(8)], pods, podgroups=[group]), now=T0
    )
    assert by_replica(result) == {"dp-0": 2, "dp-1": 2}


def test_a_gang_short_of_replicas_says_why_a_whole_one_did_not_fit_not_that_one_lacks_members() -> (
    None
):
    """Seed 11520's message: replica 0 lost a member for good; replica 1 is whole but finds
    no room. The reason that helps is replica 1's."""
    pods = [*replicas("dp", 1, 1), *replicas("dp", 1, 2, first=1, gpu=4)]  # replica 0: 1 of 2
    group = podgroup("dp", min_member=2, size=2, min_subgroups=1)
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(4)], pods, podgroups=[group]), now=T0
    )
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "subgroup replica-1:" in message, message
    assert "Insufficient nvidia.com/gpu" in message, message


RACKS = tree_topology(
    {
        "rack-0": {"n0": {}, "n1": {}},
        "rack-1": {"n2": {}, "n3": {}},
        "rack-2": {"n4": {}, "n5": {}},
    },
    ("rack", "node"),
)


def racks_of(result: Any) -> dict[str, set[str]]:
    """The racks each replica was bound in."""
    placed: dict[str, set[str]] = {}
    for name, where in bind_map(result).items():
        placed.setdefault(name.rsplit("-", 1)[0], set()).add(RACKS.paths[where][0])
    return placed


def test_each_replica_with_a_hard_tier_1_topology_lands_in_one_rack() -> None:
    """n0 is taken: rack-0 has one GPU left. Packed by room alone, replica 0 would take n1
    and a GPU of rack-1; with highestTierAllowed 1 (the racks) each replica has a rack."""
    taken = _running(gang_pods("other", 1, gpu=1, created=T0), ["n0"])
    pods = [*replicas("dp", 2, 2), *taken]
    group = podgroup(
        "dp", min_member=4, size=2, min_subgroups=2,
        networkTopology={"mode": "hard", "highestTierAllowed": 1},
    )  # fmt: skip
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    snap = replace(snapshot(nodes, pods, podgroups=[group]), topology=RACKS)
    result = schedule(snap, now=T0)
    assert {r: len(racks) for r, racks in racks_of(result).items()} == {"dp-0": 1, "dp-1": 1}
    assert "rack-0" not in set().union(*racks_of(result).values())


def test_a_hard_replica_that_no_rack_can_hold_is_not_placed_a_soft_one_is() -> None:
    """Replicas of 3 on racks of 2 GPUs: hard, nothing binds and the Event says which
    replica and why; soft, they are placed across racks."""
    pods = replicas("dp", 2, 3)
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    for mode, bound in (("hard", 0), ("soft", 6)):
        group = podgroup(
            "dp", min_member=6, size=3, min_subgroups=2,
            networkTopology={"mode": mode, "highestTierAllowed": 1},
        )  # fmt: skip
        snap = replace(snapshot(nodes, pods, podgroups=[group]), topology=RACKS)
        result = schedule(snap, now=T0)
        assert len(bind_map(result)) == bound, mode
    (message,) = set(events(schedule(replace(snapshot(nodes, pods, podgroups=[
        podgroup("dp", min_member=6, size=3, min_subgroups=2,
                 networkTopology={"mode": "hard", "highestTierAllowed": 1}),
    ]), topology=RACKS), now=T0), "FailedScheduling"))  # fmt: skip
    assert "subgroup replica-0" in message


def test_a_tier_above_the_topology_is_said_and_names_the_levels() -> None:
    pods = replicas("dp", 2, 2)
    group = podgroup(
        "dp", min_member=4, size=2, min_subgroups=2,
        networkTopology={"mode": "hard", "highestTierAllowed": 2},
    )  # fmt: skip
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    snap = replace(snapshot(nodes, pods, podgroups=[group]), topology=RACKS)
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "highestTierAllowed 2 is above every level of topology" in message
    assert "its levels: rack, node" in message


def test_a_tier_name_is_a_level_of_the_topology() -> None:
    pods = replicas("dp", 2, 2)
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    for name, bound in (("rack", 4), ("zone", 0)):
        group = podgroup(
            "dp", min_member=4, size=2, min_subgroups=2,
            networkTopology={"mode": "hard", "highestTierName": name},
        )  # fmt: skip
        snap = replace(snapshot(nodes, pods, podgroups=[group]), topology=RACKS)
        result = schedule(snap, now=T0)
        assert len(bind_map(result)) == bound, name
    assert (
        "highestTierName 'zone' is no level of topology"
        in set(events(result, "FailedScheduling")).pop()
    )


def _running(pods: list[Any], nodes: list[str]) -> list[Any]:
    return [replace(p, node_name=n, phase="Running") for p, n in zip(pods, nodes, strict=True)]


def test_a_running_gang_takes_a_further_replica_only_whole() -> None:
    """Replicas 0 and 1 run (the minimum); replica 2 follows whole when two GPUs are free,
    and not at all when one is."""
    running = _running(replicas("dp", 2, 2), ["n0", "n1", "n2", "n3"])
    waiting = replicas("dp", 1, 2, first=2)
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    one_free = [node(f"n{i}", gpu=1) for i in range(5)]
    result = schedule(snapshot(one_free, [*running, *waiting], podgroups=[group]), now=T0)
    assert bind_map(result) == {}
    two_free = [*one_free, node("n5", gpu=1)]
    result = schedule(snapshot(two_free, [*running, *waiting], podgroups=[group]), now=T0)
    assert bind_map(result) == {"dp-2-0": "n4", "dp-2-1": "n5"}


def test_a_replica_that_lost_a_member_gets_it_back_while_the_gang_runs() -> None:
    """Replica 1 lost one member (its node went); the controller made it again: it goes
    back, and replica 1 is whole again."""
    running = _running(replicas("dp", 2, 2), ["n0", "n1", "n2", "n3"])
    lost = next(p for p in running if p.ref.name == "dp-1-1")
    again = replace(lost, node_name="", phase="Pending")
    pods = [*(p for p in running if p is not lost), again]
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    nodes = [node(n, gpu=1) for n in ("n0", "n1", "n2", "n4")]  # n3 is gone
    result = schedule(snapshot(nodes, pods, podgroups=[group]), now=T0)
    assert bind_map(result) == {"dp-1-1": "n4"}


def test_preemption_takes_a_whole_replica_beyond_the_minimum_never_a_member_of_two() -> None:
    """4 replicas of 2 run on 8 one-GPU nodes (minSubGroups 2); a higher-priority gang of 2
    needs 2 GPUs: one replica goes whole, not one member each of two."""
    running = _running(replicas("dp", 4, 2), [f"n{i}" for i in range(8)])
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    urgent = gang_pods("urgent", 2, gang="urgent", min_available=2, gpu=1, priority=100, created=T0)
    nodes = [node(f"n{i}", gpu=1) for i in range(8)]
    result = schedule(snapshot(nodes, [*running, *urgent], podgroups=[group]), now=T0)
    evicted = sorted(e.pod.name for e in result.evictions)
    assert evicted in (["dp-2-0", "dp-2-1"], ["dp-3-0", "dp-3-1"]), evicted


def test_preemption_keeps_a_gang_at_its_minimum_of_subgroups() -> None:
    """At its minimum (2 of 2 replicas), the gang goes whole or not at all."""
    running = _running(replicas("dp", 2, 2), [f"n{i}" for i in range(4)])
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    urgent = gang_pods("urgent", 1, gang="urgent", min_available=1, gpu=1, priority=100, created=T0)
    nodes = [node(f"n{i}", gpu=1) for i in range(4)]
    result = schedule(snapshot(nodes, [*running, *urgent], podgroups=[group]), now=T0)
    assert sorted(e.pod.name for e in result.evictions) == ["dp-0-0", "dp-0-1", "dp-1-0", "dp-1-1"]


HEAL_RACKS = tree_topology(
    {"rack-0": {"n0": {}, "n1": {}, "n2": {}}, "rack-1": {"n3": {}, "n4": {}, "n5": {}}},
    ("rack", "node"),
)


def _lost_one(mode: str, *, rack_0_room: bool) -> Any:
    """Replica 0 (two 1-GPU members) ran on n0 and n1 in rack-0; n1 is gone and its member
    made again. n3 in rack-1 is half full (packing would pick it first)."""
    running = _running(replicas("dp", 1, 2), ["n0", "n1"])
    again = replace(running[1], node_name="", phase="Pending")
    other = _running(gang_pods("other", 1, gpu=1, created=T0), ["n3"])
    filler = _running(gang_pods("filler", 2, gpu=1, created=T0), ["n2", "n2"])
    pods = [running[0], again, *other, *([] if rack_0_room else filler)]
    group = podgroup(
        "dp", min_member=2, size=2, min_subgroups=1,
        networkTopology={"mode": mode, "highestTierAllowed": 1},
    )  # fmt: skip
    nodes = [node("n0", gpu=1), *(node(n, gpu=2) for n in ("n2", "n3", "n4", "n5"))]
    return schedule(replace(snapshot(nodes, pods, podgroups=[group]), topology=HEAL_RACKS), now=T0)


def test_a_lost_member_goes_back_into_the_rack_where_the_rest_of_its_replica_runs() -> None:
    assert bind_map(_lost_one("hard", rack_0_room=True)) == {"dp-0-1": "n2"}


def test_a_hard_replica_waits_for_room_in_its_rack_a_soft_one_goes_elsewhere() -> None:
    hard = _lost_one("hard", rack_0_room=False)
    assert bind_map(hard) == {}
    (message,) = set(events(hard, "FailedScheduling"))
    assert "the rest of the subgroup runs in rack rack-0" in message
    soft = _lost_one("soft", rack_0_room=False)
    assert set(bind_map(soft)) == {"dp-0-1"}


# -- the annotation form: our PodGroups, upstream ones, Koordinator-annotated pods -----------

POLICY = json.dumps(
    [{"name": "replica", "subGroupSize": 2, "minSubGroups": 2, "matchLabelKeys": [PARTITION]}]
)


def _labelled(prefix: str, replica: int, size: int, **kw: Any) -> list[Any]:
    pods = []
    for m in range(size):
        (member,) = gang_pods(f"{prefix}-{replica}-{m}", 1, created=T0, **kw)
        pods.append(replace(member, ref=replace(member.ref, name=f"{prefix}-{replica}-{m}")))
    return pods


def test_our_podgroup_states_subgroups_by_annotation() -> None:
    group = our_podgroup("pg", min_member=4, annotations={names.SUBGROUP_POLICY: POLICY})
    pods = [
        p
        for r in range(3)
        for p in _labelled(
            "pg", r, 2, gpu=1, labels={names.POD_GROUP_LABEL: "pg", PARTITION: str(r)}
        )
    ]
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(5)], pods, podgroups=[group]), now=T0
    )
    assert by_replica(result) == {"pg-0": 2, "pg-1": 2}  # the third never in part


def test_koordinator_pods_state_subgroups_by_annotation() -> None:
    notes = {names.KOORD_NAME: "kg", names.KOORD_MIN_AVAILABLE: "4", names.SUBGROUP_POLICY: POLICY}
    pods = [
        p
        for r in range(3)
        for p in _labelled("kg", r, 2, gpu=1, annotations=notes, labels={PARTITION: str(r)})
    ]
    result = schedule(snapshot([node(f"n{i}", gpu=1) for i in range(5)], pods), now=T0)
    assert by_replica(result) == {"kg-0": 2, "kg-1": 2}


def test_a_malformed_subgroup_annotation_is_an_error_that_names_it() -> None:
    for raw, said in (
        ("[{", "annotation gang-scheduler.io/subgroup-policy must be a JSON list"),
        ('[{"subGroupSize": 0}]', "subgroup-policy: policy[0].subGroupSize must be a whole"),
        ('{"name": "x"}', "subgroup-policy: policy must be a list"),
    ):
        notes = {names.KOORD_NAME: "kg", names.KOORD_MIN_AVAILABLE: "2", names.SUBGROUP_POLICY: raw}
        pods = _labelled("kg", 0, 2, gpu=1, annotations=notes, labels={PARTITION: "0"})
        result = schedule(snapshot([node(f"n{i}", gpu=1) for i in range(2)], pods), now=T0)
        assert bind_map(result) == {}, raw
        (message,) = set(events(result, "InvalidGangSpec"))
        assert said in message, (raw, message)


def test_explain_counts_the_subgroups_the_gang_needs_has_and_runs() -> None:
    from scheduler.core.explaining import explain  # noqa: PLC0415
    from scheduler.model.config import Config  # noqa: PLC0415
    from scheduler.model.pods import GangKey  # noqa: PLC0415

    running = _running(replicas("dp", 1, 2), ["n0", "n1"])
    pods = [*running, *replicas("dp", 1, 2, first=1), *replicas("dp", 1, 1, first=2)]
    group = podgroup("dp", min_member=2, size=2, min_subgroups=2)
    snap = snapshot([node(f"n{i}", gpu=1) for i in range(2)], pods, podgroups=[group])
    lines = explain(snap, GangKey("default", "dp"), now=T0, config=Config())
    assert (
        "subgroups of policy replica: needs 2 whole; 3 exist, 2 with all their members, "
        "1 running whole"
    ) in lines
    assert "  replica-2: 0 of 2 running, 1 members" in lines


# -- found in review: preemptors, order, finished members, Volcano's keyless policies --------


def _member(gang: str, name: str, labels: dict[str, str], **kw: Any) -> Any:
    (p,) = gang_pods(
        name, 1, annotations={names.VOLCANO_GROUP_NAME: gang}, labels=labels, gpu=1,
        created=T0, **kw,
    )  # fmt: skip
    return replace(p, ref=replace(p.ref, name=name))


def test_a_preempting_gang_of_subgroups_binds_on_its_held_room_at_the_next_pass() -> None:
    dp = [replace(p, priority=100) for p in replicas("dp", 2, 2)]
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    nodes = [node(f"n{i}", gpu=1) for i in range(4)]
    low = _running(gang_pods("low", 4, gpu=1, priority=0, created=T0), [f"n{i}" for i in range(4)])
    first = schedule(snapshot(nodes, [*low, *dp], podgroups=[group]), now=T0)
    assert len(first.evictions) == 4
    second = schedule(snapshot(nodes, dp, podgroups=[group], memory=dict(first.memory)), now=T0 + 5)
    assert by_replica(second) == {"dp-0": 2, "dp-1": 2}  # not after the nomination lapses


def test_a_held_member_whose_subgroup_mate_lost_its_room_is_not_bound_alone() -> None:
    """dp-0 preempted n0 and n1; n1's room went to another scheduler's pod meanwhile, two
    nodes came: dp-0 binds whole or not at all, never dp-0-0 alone beside dp-1."""
    dp = [replace(p, priority=100) for p in replicas("dp", 2, 2)]
    group = podgroup("dp", min_member=2, size=2, min_subgroups=1)
    nodes = [node("n0", gpu=1), node("n1", gpu=1)]
    low = _running(gang_pods("low", 2, gpu=1, priority=0, created=T0), ["n0", "n1"])
    first = schedule(snapshot(nodes, [*low, *dp], podgroups=[group]), now=T0)
    intruder = _running(
        gang_pods("intruder", 1, gpu=1, scheduler="default-scheduler", created=T0), ["n1"]
    )
    later = [*nodes, node("n5", gpu=1), node("n6", gpu=1)]
    snap = snapshot(later, [*intruder, *dp], podgroups=[group], memory=dict(first.memory))
    counts = by_replica(schedule(snap, now=T0 + 5))
    assert all(n == 2 for n in counts.values()), counts


def test_a_subgroup_undone_in_a_preemption_trial_gives_its_nodes_back_to_the_next() -> None:
    """In the trial, the 3-member subgroup places 2 and is undone; the 2-member one must
    still find those nodes (the finder's cursors go back with the undo)."""
    group = volcano_podgroup_from_dict(
        {
            "metadata": {"name": "g", "namespace": "default", "uid": "uid-g"},
            "spec": {"minMember": 2, "subGroupPolicy": [
                {"name": "big", "subGroupSize": 3, "matchLabelKeys": ["r"],
                 "labelSelector": {"matchLabels": {"role": "big"}}},
                {"name": "small", "subGroupSize": 2, "minSubGroups": 1, "matchLabelKeys": ["r"],
                 "labelSelector": {"matchLabels": {"role": "small"}}},
            ]},
        }
    )  # fmt: skip
    pods = [_member("g", f"big-{i}", {"role": "big", "r": "0"}, priority=100) for i in range(3)]
    pods += [
        _member("g", f"small-{i}", {"role": "small", "r": "0"}, priority=100) for i in range(2)
    ]
    low = _running(gang_pods("low", 2, gpu=1, priority=0, created=T0), ["n0", "n1"])
    nodes = [node("n0", gpu=1), node("n1", gpu=1)]
    result = schedule(snapshot(nodes, [*low, *pods], podgroups=[group]), now=T0)
    assert sorted(n.pod.name for n in result.nominations) == ["small-0", "small-1"]


def test_every_policys_minimum_is_placed_before_any_elastic_subgroup() -> None:
    """3 prefill subgroups and 1 decode, each of one pod and minSubGroups 1, on 3 GPUs:
    prefill-0 and decode-0 first, then a further prefill; never 3 prefills and no decode."""
    group = volcano_podgroup_from_dict(
        {
            "metadata": {"name": "pd", "namespace": "default", "uid": "uid-pd"},
            "spec": {"minMember": 2, "subGroupPolicy": [
                {"name": "prefill", "minSubGroups": 1, "matchLabelKeys": ["idx"],
                 "labelSelector": {"matchLabels": {"role": "prefill"}}},
                {"name": "decode", "minSubGroups": 1, "matchLabelKeys": ["idx"],
                 "labelSelector": {"matchLabels": {"role": "decode"}}},
            ]},
        }
    )  # fmt: skip
    pods = [_member("pd", f"prefill-{i}", {"role": "prefill", "idx": str(i)}) for i in range(3)]
    pods.append(_member("pd", "decode-0", {"role": "decode", "idx": "0"}))
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(3)], pods, podgroups=[group]), now=T0
    )
    assert set(bind_map(result)) == {"prefill-0", "decode-0", "prefill-1"}


def test_a_subgroup_takes_its_size_first_and_its_extra_members_after_the_minimum() -> None:
    """Replica 0 has 3 members, replica 1 has 2 (size 2, minimum 2), 4 GPUs: 2 + 2."""
    pods = [*replicas("dp", 1, 3), *replicas("dp", 1, 2, first=1)]
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(4)], pods, podgroups=[group]), now=T0
    )
    assert by_replica(result) == {"dp-0": 2, "dp-1": 2}


def test_a_finished_member_counts_for_its_subgroup_so_its_remade_mate_goes_back() -> None:
    running = _running(replicas("dp", 2, 2), ["n0", "n1", "n2", "n3"])
    done = next(p for p in running if p.ref.name == "dp-1-0")
    failed = next(p for p in running if p.ref.name == "dp-1-1")
    pods = [
        *(p for p in running if p not in (done, failed)),
        replace(done, phase="Succeeded"),
        replace(failed, node_name="", phase="Pending"),
    ]
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    nodes = [node(n, gpu=1) for n in ("n0", "n1", "n2", "n4")]
    result = schedule(snapshot(nodes, pods, podgroups=[group]), now=T0)
    assert set(bind_map(result)) == {"dp-1-1"}


def test_a_policy_without_match_label_keys_takes_no_pod_as_in_volcano() -> None:
    """Volcano lets such a pod fall through to the next policy; with a minSubGroups the
    policy could never be met, which is said."""
    pods = replicas("dp", 2, 2)
    keyless = {"name": "all", "subGroupSize": 4}
    replica = {
        "name": "replica",
        "subGroupSize": 2,
        "minSubGroups": 2,
        "matchLabelKeys": [PARTITION],
    }
    group = read(keyless, replica)
    result = schedule(snapshot([node(f"n{i}", gpu=1) for i in range(4)], pods, podgroups=[
        replace(group, key=replace(group.key, namespace="default", name="dp"))
    ]), now=T0)  # fmt: skip
    assert by_replica(result) == {"dp-0": 2, "dp-1": 2}
    never = read({"name": "all", "minSubGroups": 1})
    result = schedule(snapshot([node("n0", gpu=4)], pods, podgroups=[
        replace(never, key=replace(never.key, namespace="default", name="dp"))
    ]), now=T0)  # fmt: skip
    (message,) = set(events(result, "InvalidGangSpec"))
    assert "subgroup policy all has no matchLabelKeys" in message


def test_a_non_ascii_digit_in_a_label_value_orders_as_0_and_crashes_nothing() -> None:
    pods = [_member("dp", f"dp-{i}", {PARTITION: "\u00b2"}) for i in range(2)]
    group = podgroup("dp", min_member=2, size=2, min_subgroups=1)
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(2)], pods, podgroups=[group]), now=T0
    )
    assert len(bind_map(result)) == 2


def test_a_gang_that_asks_less_still_preempts_after_one_of_the_same_shapes_that_asks_more() -> None:
    """Review of #23: preemption's memo of shapes that found no victims keyed on the pods
    alone; a gang needing one member was skipped after one needing a subgroup of four."""

    def members(name: str) -> list[Any]:  # x before y: by name, at the same age
        return [_member(name, f"{name}-{i}", {"r": "0"}, priority=100) for i in range(4)]

    def group(name: str, spec: dict[str, Any]) -> Any:
        return volcano_podgroup_from_dict(
            {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}",
                          "creationTimestamp": "2020-01-01T00:00:00Z"}, "spec": spec}
        )  # fmt: skip

    nodes = [node("n0", gpu=1), node("n1", gpu=1)]
    low = _running(gang_pods("low", 2, gpu=1, priority=0, created=T0), ["n0", "n1"])
    x_spec = {"minMember": 1, "subGroupPolicy": [
        {"name": "p", "subGroupSize": 4, "minSubGroups": 1, "matchLabelKeys": ["r"]}]}  # fmt: skip
    groups = [group("x", x_spec), group("y", {"minMember": 1})]
    both = schedule(
        snapshot(nodes, [*low, *members("x"), *members("y")], podgroups=groups),
        now=T0,
    )
    assert len(both.evictions) >= 1


def test_holds_of_a_gang_that_became_strict_are_never_bound_onto_full_nodes() -> None:
    """Review of #23: a NonStrict gang holding n0 and n1 gains a subGroupPolicy (Strict
    now); another scheduler's pod took n0: nothing of it binds over that pod."""

    def members() -> list[Any]:
        notes = {names.VOLCANO_GROUP_NAME: "g", names.KOORD_MODE: "NonStrict"}
        out = []
        for i in range(3):
            (p,) = gang_pods(
                f"g-{i}", 1, annotations=notes, labels={"idx": str(i)}, gpu=1, created=T0
            )
            out.append(replace(p, ref=replace(p.ref, name=f"g-{i}")))
        return out

    def group(spec: dict[str, Any]) -> Any:
        return volcano_podgroup_from_dict(
            {"metadata": {"name": "g", "namespace": "default", "uid": "u-g"}, "spec": spec}
        )

    first = schedule(
        snapshot(
            [node("n0", gpu=1), node("n1", gpu=1)], members(), podgroups=[group({"minMember": 3})]
        ),
        now=T0,
    )
    assert any(s.reservations for s in first.memory.values())
    intruder = _running(
        gang_pods("intruder", 1, gpu=1, scheduler="default-scheduler", created=T0), ["n0"]
    )
    strict = group({"minMember": 3, "subGroupPolicy": [
        {"name": "one", "subGroupSize": 1, "matchLabelKeys": ["idx"]}]})  # fmt: skip
    nodes = [node("n0", gpu=1), node("n1", gpu=1), node("n2", gpu=1)]
    second = schedule(
        snapshot(nodes, [*intruder, *members()], podgroups=[strict], memory=dict(first.memory)),
        now=T0 + 5,
    )
    assert "n0" not in bind_map(second).values()


def test_a_subgroup_that_starts_in_a_running_gang_is_one_commit_point() -> None:
    running = _running(replicas("dp", 2, 2), ["n0", "n1", "n2", "n3"])
    waiting = replicas("dp", 1, 2, first=2)
    group = podgroup("dp", min_member=4, size=2, min_subgroups=2)
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    result = schedule(snapshot(nodes, [*running, *waiting], podgroups=[group]), now=T0)
    (binding,) = result.bindings
    assert binding.all_or_nothing
    assert sorted(b.pod.name for b in binding.bindings) == ["dp-2-0", "dp-2-1"]


# -- second review --------------------------------------------------------------------------


def test_a_member_that_fits_nowhere_does_not_sink_a_subgroup_that_others_make_whole() -> None:
    """Size 2, three members, the first has a nodeSelector no node has: the other two make
    the subgroup whole, for a new gang and for a running one."""
    group = podgroup("dp", min_member=2, size=2, min_subgroups=1)
    pods = [
        _member("dp", "dp-0-0", {PARTITION: "0"}, node_selector={"zone": "nowhere"}),
        _member("dp", "dp-0-1", {PARTITION: "0"}),
        _member("dp", "dp-0-2", {PARTITION: "0"}),
    ]
    result = schedule(
        snapshot([node(f"n{i}", gpu=1) for i in range(3)], pods, podgroups=[group]), now=T0
    )
    assert set(bind_map(result)) == {"dp-0-1", "dp-0-2"}


def test_a_preemptors_held_plain_member_binds_with_its_subgroups() -> None:
    """Two workers (a subgroup) and a launcher (no policy takes it) preempt four nodes;
    at the next pass all three bind on the held room, not after the nomination lapses."""
    group = volcano_podgroup_from_dict(
        {
            "metadata": {"name": "g", "namespace": "default", "uid": "uid-g"},
            "spec": {"minMember": 3, "subGroupPolicy": [
                {"name": "replica", "subGroupSize": 2, "minSubGroups": 1, "matchLabelKeys": ["r"],
                 "labelSelector": {"matchLabels": {"role": "worker"}}}]},
        }
    )  # fmt: skip
    pods = [_member("g", f"w-{i}", {"role": "worker", "r": "0"}, priority=100) for i in range(2)]
    pods.append(_member("g", "launcher", {}, priority=100))
    nodes = [node(f"n{i}", gpu=1) for i in range(3)]
    low = _running(gang_pods("low", 3, gpu=1, priority=0, created=T0), ["n0", "n1", "n2"])
    first = schedule(snapshot(nodes, [*low, *pods], podgroups=[group]), now=T0)
    assert len(first.evictions) == 3
    second = schedule(
        snapshot(nodes, pods, podgroups=[group], memory=dict(first.memory)), now=T0 + 5
    )
    assert set(bind_map(second)) == {"w-0", "w-1", "launcher"}


def test_explain_says_how_a_podgroups_own_network_topology_keeps_the_gang() -> None:
    from scheduler.core.explaining import explain  # noqa: PLC0415
    from scheduler.model.config import Config  # noqa: PLC0415
    from scheduler.model.pods import GangKey  # noqa: PLC0415

    group = volcano_podgroup_from_dict(
        {
            "metadata": {"name": "dp", "namespace": "default", "uid": "uid-dp"},
            "spec": {"minMember": 2, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
        }
    )
    pods = [_member("dp", f"dp-{i}", {}) for i in range(2)]
    snap = snapshot([node("n0", gpu=2)], pods, podgroups=[group])
    lines = explain(snap, GangKey("default", "dp"), now=T0, config=Config())
    assert any(
        "networkTopology hard, highestTierAllowed 1: the gang is kept inside one unit" in line
        for line in lines
    )


def test_a_subgroup_policy_nested_deeper_than_the_stack_is_an_error_not_a_crash() -> None:
    from scheduler.codecs.gangs import read_options  # noqa: PLC0415

    read = read_options({names.SUBGROUP_POLICY: "[" * 100_000}, namespace="ml")
    assert read.errors == (
        f"annotation {names.SUBGROUP_POLICY} must be a JSON list of subgroup policies: "
        "nested too deeply",
    )


# -- properties: whatever the cluster, never a partial subgroup -------------------------------


@st.composite
def subgroup_cases(draw: st.DrawFn) -> tuple[list[Any], list[Any], Any, int, int]:
    """Nodes of 1 to 4 GPUs (some taken), and a Volcano gang of 1 to 4 replicas of 1 to 3
    one- or two-GPU members, needing 1 or more whole replicas; some replicas short a member,
    some members running already (a gang that runs)."""
    gpus = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))
    nodes = [node(f"n{i}", gpu=g) for i, g in enumerate(gpus)]
    count, size = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    least = draw(st.integers(1, count))
    pods = []
    for r in range(count):
        members = size - (1 if draw(st.integers(0, 5)) == 0 else 0)
        for m in range(members):
            (member,) = replicas("dp", 1, 1, gpu=draw(st.integers(1, 2)), first=r)
            pods.append(replace(member, ref=replace(member.ref, name=f"dp-{r}-{m}")))
    group = podgroup("dp", min_member=least * size, size=size, min_subgroups=least)
    return nodes, pods, group, size, least


def _gpus_of(pod: Any) -> int:
    return pod.requests.get("nvidia.com/gpu", 0)


@settings(max_examples=200, deadline=None)
@given(case=subgroup_cases())
def test_a_subgroup_is_bound_whole_or_not_at_all_and_the_minimum_whole(
    case: tuple[list[Any], list[Any], Any, int, int],
) -> None:
    nodes, pods, group, size, least = case
    result = schedule(snapshot(nodes, pods, podgroups=[group]), now=T0)
    placed = bind_map(result)
    per_replica: dict[str, int] = {}
    for name in placed:
        replica = name.rsplit("-", 1)[0]
        per_replica[replica] = per_replica.get(replica, 0) + 1
    assert all(n >= size for n in per_replica.values()), per_replica  # none in part
    if placed:
        assert len(per_replica) >= least, per_replica  # the minimum in whole replicas
    room = {n.name: n.allocatable.get("nvidia.com/gpu", 0) for n in nodes}
    by_name = {p.ref.name: p for p in pods}
    for name, where in placed.items():
        room[where] -= _gpus_of(by_name[name])
    assert all(free >= 0 for free in room.values()), room


def test_a_gang_tried_rack_by_rack_leaves_the_node_finder_right_for_the_gangs_after_it() -> None:
    """g's two replicas of one pod (3 GPUs, then 1) must go in one rack. In rack-0 (2+2
    GPUs) the first finds no node and the second fits; the gang falls short there, and
    rack-2 takes it whole. Undoing rack-0's try must put the node finder's cursors back as
    they stood outside the rack, not as the try left them inside it: h's 3-GPU pod, of the
    same shape, then still finds n6, the fullest node and the one with room left."""
    nodes = [node("n0", gpu=2), node("n1", gpu=2), node("n2"), node("n3"),
             node("n4", gpu=4), node("n5"), node("n6", gpu=4)]  # fmt: skip
    taken = _running(gang_pods("other", 1, gpu=1, created=T0 - 500), ["n6"])
    g = [
        replace(p, ref=replace(p.ref, name=f"g-{r}-0"))
        for r, gpu in enumerate((3, 1))
        for p in gang_pods("g", 1, gpu=gpu, annotations={names.VOLCANO_GROUP_NAME: "g"},
                           labels={PARTITION: str(r)}, created=T0 - 10)
    ]  # fmt: skip
    group = volcano_podgroup_from_dict({
        "metadata": {"name": "g", "namespace": "default", "uid": "uid-g"},
        "spec": {
            "minMember": 2,
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
            "subGroupPolicy": [{"name": "replica", "subGroupSize": 1, "minSubGroups": 2,
                                "matchLabelKeys": [PARTITION]}],
        },
    })  # fmt: skip
    h = gang_pods("h", 1, gang="h", min_available=1, gpu=3, created=T0)
    snap = replace(snapshot(nodes, [*g, *h, *taken], podgroups=[group]), topology=RACKS)
    placed = bind_map(schedule(snap, now=T0))
    assert placed == {"g-0-0": "n4", "g-1-0": "n4", "h-0": "n6"}
