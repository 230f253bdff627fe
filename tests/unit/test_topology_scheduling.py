"""Topology-placed gangs through a whole pass: Sakkara groups, the constraint annotation,
labels as topology, and what is decided for write-back."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import replace
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.objects import pod_from_dict
from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, GangBinding, GroupBinding, Placement, Result
from scheduler.model.pods import GangKey
from scheduler.model.topology import Topology
from scheduler.shell.binding import Binder
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder
from tests.unit.builders import T0, group, node, pod, podgroup, snapshot, tree_topology
from tests.unit.servers import server

SEED_TREE = {
    "rack-0": {"node-0": {}, "node-1": {}, "node-2": {}},
    "rack-1": {"node-3": {}, "node-4": {}, "node-5": {}},
}
SEED = tree_topology(SEED_TREE, ("rack", "node"))
GROUP_A = '{"rack": {"type": "pack"}, "node": {"type": "spread"}}'


def six_nodes(cpu: str = "8") -> list:
    return [node(f"node-{i}", cpu=cpu) for i in range(6)]


def group_pods(name: str, count: int, **kw: object) -> list:
    return [
        pod(f"{name}-{i}", labels={names.SAKKARA_GROUP_NAME: name}, **kw)  # type: ignore[arg-type]
        for i in range(count)
    ]


def bind_map(result: Result) -> dict[str, str]:
    return {b.pod.name: b.node for g in result.bindings for b in g.bindings}


def reasons(result: Result) -> set[str]:
    return {e.reason for e in result.events}


def test_group_pods_without_their_configmap_stay_pending_with_an_event() -> None:
    result = schedule(snapshot(six_nodes(), group_pods("group-a", 8), topology=SEED), now=T0)
    assert bind_map(result) == {}
    assert "GroupNotFound" in reasons(result)
    message = next(e.message for e in result.events if e.reason == "GroupNotFound")
    assert "sakkara.group" in message


def test_seed_group_a_lands_on_one_rack_spread_three_three_two() -> None:
    result = schedule(
        snapshot(
            six_nodes(),
            group_pods("group-a", 8),
            topology=SEED,
            groups=[group("group-a", size=8, constraints=GROUP_A)],
        ),
        now=T0,
    )
    placed = bind_map(result)
    assert len(placed) == 8
    assert {SEED.unit(n, "rack") for n in placed.values()} == {"rack-0"}
    assert sorted(Counter(placed.values()).values()) == [2, 3, 3]


def test_group_waits_until_all_of_its_size_exist() -> None:
    result = schedule(
        snapshot(
            six_nodes(),
            group_pods("group-a", 5),
            topology=SEED,
            groups=[group("group-a", size=8)],
        ),
        now=T0,
    )
    assert bind_map(result) == {}
    assert "GangWaiting" in reasons(result)


def test_placement_for_write_back_ranks_every_member_once_and_names_the_configmap() -> None:
    members = [
        *group_pods("group-a", 7),
        pod("group-a-master", labels={names.SAKKARA_GROUP_NAME: "group-a"}),
    ]
    result = schedule(
        snapshot(
            six_nodes(),
            members,
            topology=SEED,
            groups=[group("group-a", size=8, constraints=GROUP_A)],
        ),
        now=T0,
    )
    ((gang_binding,),) = (g.gangs for g in result.bindings)
    placement = gang_binding.placement
    assert placement is not None
    assert placement.group == ("default", "group-a")
    ranked = dict((ref.name, rank) for ref, rank in placement.ranks)
    assert sorted(ranked.values()) == list(range(8))
    assert ranked["group-a-master"] == 0
    tree = json.loads(placement.tree)
    assert sum(len(pods) for pods in tree["root"]["rack-0"].values()) == 8
    assert placement.retries == 1


def test_podgroup_with_the_constraint_annotation_partitions_over_racks() -> None:
    constraints = '{"rack": {"type": "spread", "partitions": 2, "isHard": true}}'
    result = schedule(
        snapshot(
            six_nodes(),
            [pod(f"train-{i}", pod_group="train") for i in range(4)],
            podgroups=[
                podgroup(
                    "train", min_member=4, annotations={names.TOPOLOGY_CONSTRAINTS: constraints}
                )
            ],
            topology=SEED,
        ),
        now=T0,
    )
    placed = bind_map(result)
    assert Counter(SEED.unit(n, "rack") for n in placed.values()) == {"rack-0": 2, "rack-1": 2}
    ((gang_binding,),) = (g.gangs for g in result.bindings)
    assert gang_binding.placement is not None
    assert gang_binding.placement.podgroup is not None


def test_annotation_only_gang_reads_its_constraints_from_the_pods() -> None:
    notes = {names.TOPOLOGY_CONSTRAINTS: '{"node": {"type": "pack", "max": 1, "isHard": true}}'}
    members = [pod(f"w-{i}", gang="w", min_available=3, annotations=notes) for i in range(3)]
    result = schedule(snapshot(six_nodes(), members, topology=SEED), now=T0)
    assert len(set(bind_map(result).values())) == 3


def test_hard_constraint_that_cannot_be_met_binds_nothing_and_names_the_level() -> None:
    constraints = '{"rack": {"type": "pack", "min": 8, "isHard": true}}'
    result = schedule(
        snapshot(
            six_nodes(cpu="2"),  # 6 per rack, 12 in all
            group_pods("g", 8),
            topology=SEED,
            groups=[group("g", size=8, constraints=constraints)],
        ),
        now=T0,
    )
    assert bind_map(result) == {}
    failed = next(e.message for e in result.events if e.reason == "FailedScheduling")
    assert "'rack'" in failed
    assert "min 8" in failed


def test_constraint_on_a_level_the_topology_lacks_is_an_invalid_spec() -> None:
    result = schedule(
        snapshot(
            six_nodes(),
            group_pods("g", 2),
            topology=SEED,
            groups=[group("g", size=2, constraints='{"zone": {"type": "spread"}}')],
        ),
        now=T0,
    )
    assert bind_map(result) == {}
    invalid = next(e.message for e in result.events if e.reason == "InvalidGangSpec")
    assert "'zone'" in invalid
    assert "rack, node" in invalid


def test_partitions_larger_than_the_gang_are_an_invalid_spec() -> None:
    result = schedule(
        snapshot(
            six_nodes(),
            group_pods("g", 2),
            topology=SEED,
            groups=[group("g", size=2, constraints='{"rack": {"partitions": 3}}')],
        ),
        now=T0,
    )
    assert "InvalidGangSpec" in reasons(result)


def test_an_unusable_topology_configmap_holds_topology_gangs_but_not_plain_ones() -> None:
    result = schedule(
        snapshot(
            six_nodes(),
            [*group_pods("g", 2), pod("plain")],
            groups=[group("g", size=2)],
            topology_errors=("gang-scheduler-system/tree: topology key 'tree' is missing",),
        ),
        now=T0,
    )
    assert bind_map(result) == {"plain": "node-0"}
    assert "InvalidTopology" in reasons(result)


def test_without_any_topology_a_group_is_placed_on_the_flat_tree() -> None:
    result = schedule(
        snapshot(six_nodes(), group_pods("g", 4), groups=[group("g", size=4)]), now=T0
    )
    assert len(bind_map(result)) == 4


def test_nodes_outside_the_tree_are_not_used_and_said_once() -> None:
    small = tree_topology({"rack-0": {"node-0": {}}}, ("rack", "node"))
    result = schedule(
        snapshot(
            six_nodes(cpu="2"), group_pods("g", 4), topology=small, groups=[group("g", size=4)]
        ),
        now=T0,
    )
    assert bind_map(result) == {}
    assert any("5 nodes are not in topology" in note for note in result.topology_notes)


def test_topology_from_node_labels_puts_partitions_in_different_zones() -> None:
    nodes = [
        node(f"n-{z}-{i}", labels={"zone": f"zone-{z}", "rack": f"rack-{z}{i // 2}"})
        for z in range(2)
        for i in range(4)
    ]
    config = Config(topology_labels=(("rack", "rack"), ("zone", "zone")))
    constraints = '{"zone": {"type": "spread", "partitions": 2, "isHard": true}}'
    result = schedule(
        snapshot(nodes, group_pods("g", 4), groups=[group("g", size=4, constraints=constraints)]),
        now=T0,
        config=config,
    )
    placed = bind_map(result)
    assert Counter(n.split("-")[1] for n in placed.values()) == {"0": 2, "1": 2}


def test_soft_constraint_not_met_is_said_in_a_normal_event() -> None:
    result = schedule(
        snapshot(
            six_nodes(cpu="2"),
            group_pods("g", 6),
            topology=SEED,
            groups=[group("g", size=6, constraints='{"node": {"type": "pack", "factor": 4}}')],
        ),
        now=T0,
    )
    assert len(bind_map(result)) == 6
    relaxed = next(e for e in result.events if e.reason == "TopologyRelaxed")
    assert relaxed.type == "Normal"
    assert "factor 4" in relaxed.message


def test_same_snapshot_gives_the_same_topology_placement() -> None:
    shot = snapshot(
        six_nodes(),
        group_pods("g", 7),
        topology=SEED,
        groups=[group("g", size=7, constraints=GROUP_A)],
    )
    assert schedule(shot, now=T0) == schedule(shot, now=T0)


def test_flat_topology_is_one_level_of_nodes() -> None:
    assert Topology.flat(["b", "a"]).levels == ("node",)


def test_a_tree_naming_only_nodes_that_do_not_exist_places_nothing_and_says_why() -> None:
    ghost = tree_topology({"rack-0": {"gone-0": {}, "gone-1": {}}}, ("rack", "node"))
    result = schedule(
        snapshot(six_nodes(), group_pods("g", 2), topology=ghost, groups=[group("g", size=2)]),
        now=T0,
    )
    assert bind_map(result) == {}
    failed = next(e.message for e in result.events if e.reason == "FailedScheduling")
    assert "room for 0 of 2" in failed
    assert "6 nodes outside the topology" in failed
    assert any("names 2 nodes that do not exist" in n for n in result.topology_notes)


def test_explain_shows_the_tree_and_each_level_with_its_constraint_and_room() -> None:
    shot = snapshot(
        six_nodes(),
        group_pods("g", 4),
        topology=SEED,
        groups=[group("g", size=4, constraints='{"rack": {"type": "spread", "isHard": true}}')],
    )
    lines = explain(shot, GangKey("default", "g"), now=T0, config=Config())
    assert "topology cluster-topology (ConfigMap): rack > node; 6 of 6 nodes in it" in lines
    assert any(line.startswith("level rack [spread, hard]: 2 of 2 units") for line in lines)
    assert any(line.startswith("level node [pack]: 6 of 6 units") for line in lines)
    assert lines[-1].startswith("a pass now would bind 4 members")


def test_factor_that_no_count_up_to_max_meets_is_an_invalid_spec_naming_both() -> None:
    result = schedule(
        snapshot(
            six_nodes(),
            group_pods("g", 4),
            topology=SEED,
            groups=[group("g", size=4, constraints='{"node": {"factor": 4, "max": 3}}')],
        ),
        now=T0,
    )
    assert bind_map(result) == {}
    invalid = next(e.message for e in result.events if e.reason == "InvalidGangSpec")
    assert "factor 4" in invalid
    assert "group ConfigMap default/g" in invalid


def test_a_gang_that_breaks_the_pass_is_skipped_and_the_others_are_still_placed() -> None:
    broken = replace(pod("broken"), requests=None)  # no codec makes this: a stand-in for a bug
    result = schedule(snapshot(six_nodes(), [broken, pod("fine")]), now=T0)
    assert bind_map(result) == {"fine": "node-0"}
    failed = next(e.message for e in result.events if e.regarding.name == "broken")
    assert "internal error" in failed
    assert result.wake_at is not None  # tried again after a backoff


def test_a_bad_constraint_annotation_is_said_once_naming_the_annotation() -> None:
    notes = {names.TOPOLOGY_CONSTRAINTS: '{"node": {"factor": 4, "max": 3}}'}
    result = schedule(
        snapshot(six_nodes(), [pod("a", gang="g", min_available=1, annotations=notes)]), now=T0
    )
    (invalid,) = [e.message for e in result.events if e.reason == "InvalidGangSpec"]
    assert invalid.count("factor 4") == 1
    assert names.TOPOLOGY_CONSTRAINTS in invalid


# -- healing (#23): a lost member made again goes back where its gang runs, with its rank ----


def _member(i: int, *, hard: bool = False, **kw: Any) -> Any:
    """Member w-<i> of gang w (3 needed), a whole 8-CPU node each, packed by rack."""
    pack = json.dumps({"rack": {"type": "pack", "isHard": hard}})
    notes = {names.TOPOLOGY_CONSTRAINTS: pack}
    return pod(f"w-{i}", gang="w", min_available=3, annotations=notes, cpu="8", **kw)


def _ranks(result: Result) -> dict[str, int]:
    """The ranks the pass hands out for write-back, by member."""
    out = {}
    for g in result.bindings:
        for gb in g.gangs:
            if gb.placement is not None:
                out.update({ref.name: rank for ref, rank in gb.placement.ranks})
    return out


def _healing(*, hard: bool, rack_0_room: bool) -> Result:
    """A gang of 3 whole-node members packed in rack-0 (w-0 rank 0 on node-0, w-2 rank 2
    on node-1); w-1 (rank 1) was lost and made again. node-3 (rack-1) runs a pod (its
    memory): the fullest node with room, packing alone would take it. node-2 (rack-0) is
    free unless ``rack_0_room`` is False."""
    running = [
        _member(
            0, hard=hard, node_name="node-0", phase="Running", labels={names.SAKKARA_RANK: "0"}
        ),
        _member(
            2, hard=hard, node_name="node-1", phase="Running", labels={names.SAKKARA_RANK: "2"}
        ),
    ]
    others = [pod("half", cpu="0", node_name="node-3", phase="Running")]
    if not rack_0_room:
        others.append(pod("filler", cpu="8", node_name="node-2", phase="Running"))
    pods = [*running, _member(1, hard=hard), *others]
    return schedule(snapshot(six_nodes(), pods, topology=SEED), now=T0)


def test_a_lost_member_of_a_packed_gang_goes_back_into_its_rack_with_its_old_rank() -> None:
    result = _healing(hard=True, rack_0_room=True)
    assert bind_map(result) == {"w-1": "node-2"}
    ((gang_binding,),) = (g.gangs for g in result.bindings)
    assert gang_binding.placement is not None
    assert [(r.name, rank) for r, rank in gang_binding.placement.ranks] == [("w-1", 1)]
    assert gang_binding.placement.tree == ""  # the gang's placement tree is left as it was
    assert gang_binding.placement.podgroup is None
    assert gang_binding.placement.group is None


def test_a_hard_packed_gang_waits_for_room_in_its_rack_a_soft_one_goes_elsewhere() -> None:
    hard = _healing(hard=True, rack_0_room=False)
    assert bind_map(hard) == {}
    message = next(e.message for e in hard.events if e.reason == "FailedScheduling")
    assert "kept to rack rack-0, where the gang runs" in message
    assert bind_map(_healing(hard=False, rack_0_room=False)) == {"w-1": "node-3"}


def test_a_member_healed_in_an_earlier_pass_keeps_its_rank_from_the_next_replacement() -> None:
    """Gang of 4 packed in rack-0 with ranks 0..3; w-1 and w-3 were lost. Pass 1 places
    the replacement w-1 (rank 1). Pass 2: w-1 is bound (the cache's assumption, or the API
    server's) but its rank label is not there yet (it is written after the bind, if at
    all), and w-3's replacement comes. The unlabelled w-1 holds the rank it was given, so
    w-3 gets rank 3: no two pods of the gang carry rank 1, and no rank is left vacant."""
    base = [
        _member(0, node_name="node-0", phase="Running", labels={names.SAKKARA_RANK: "0"}),
        _member(2, node_name="node-1", phase="Running", labels={names.SAKKARA_RANK: "2"}),
    ]
    first = schedule(snapshot(six_nodes(), [*base, _member(1)], topology=SEED), now=T0)
    assert _ranks(first) == {"w-1": 1}
    healed = _member(1, node_name=bind_map(first)["w-1"], phase="Running")  # no label yet
    second = schedule(
        snapshot(six_nodes(), [*base, healed, _member(3)], topology=SEED, memory=first.memory),
        now=T0 + 1,
    )
    assert "w-3" in bind_map(second)
    assert _ranks(second) == {"w-3": 3}, _ranks(second)


def test_a_finished_members_rank_is_not_given_to_a_replacement() -> None:
    """Gang of 4 with ranks 0..3: w-1 (rank 1) finished (Succeeded), w-3 (rank 3) was lost
    and made again. The finished member keeps its rank (its pod and label are still
    there), so the replacement gets rank 3 back, not rank 1."""
    pods = [
        _member(0, node_name="node-0", phase="Running", labels={names.SAKKARA_RANK: "0"}),
        _member(1, node_name="node-1", phase="Succeeded", labels={names.SAKKARA_RANK: "1"}),
        _member(2, node_name="node-2", phase="Running", labels={names.SAKKARA_RANK: "2"}),
        _member(3),
    ]
    result = schedule(snapshot(six_nodes(), pods, topology=SEED), now=T0)
    assert "w-3" in bind_map(result)
    assert _ranks(result) == {"w-3": 3}, _ranks(result)


def test_the_rank_labels_of_a_healed_member_are_written_back() -> None:
    """A healed member's refilled rank comes to the shell in a GroupBinding with
    all_or_nothing=False: the Binder still hands its Placement to on_bound (the write-back
    of rank labels), as it does for all-or-nothing groups, so the member gets its label."""
    cache = ClusterCache(scheduler_name="gang-scheduler")
    healed = pod_from_dict(
        {
            "metadata": {"name": "w-1", "namespace": "ns", "uid": "u1"},
            "spec": {"schedulerName": "gang-scheduler"},
        }
    )
    cache.upsert_pod(healed)
    placement = Placement(ranks=((healed.ref, 1),), tree="", retries=1, begin=T0)
    group_ = GroupBinding(
        (GangBinding(GangKey("ns", "w"), (Binding(healed.ref, "n0"),), placement=placement),),
        all_or_nothing=False,
    )
    written: list[GangBinding] = []

    async def on_bound(gang_binding: GangBinding, seconds: float) -> None:
        written.append(gang_binding)

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({}, status=201)

    async def run() -> None:
        async with server(handler) as api:
            binder = Binder(
                api, cache, EventRecorder(api, component="test"),
                config=Config(), metrics=Metrics.create(), on_bound=on_bound,
            )  # fmt: skip
            binder.assume(group_)
            await binder.apply(group_)

    asyncio.run(run())
    assert [b.placement for b in written] == [placement]
