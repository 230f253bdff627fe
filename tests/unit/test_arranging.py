"""The topology solver alone: seed 004's stories and each constraint, on plain data."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.codecs.topology import read_constraints
from scheduler.core.arranging import (
    Arrangement,
    Arranger,
    Parts,
    Tree,
    placement_tree,
    ranks,
    share_parts,
    split,
)
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.model.nodes import Node
from scheduler.model.pods import Pod
from scheduler.model.topology import LevelConstraint, Topology
from tests.unit.builders import node, pod


def topology(tree: Mapping[str, object], levels: tuple[str, ...]) -> Topology:
    paths: dict[str, tuple[str, ...]] = {}

    def walk(sub: Mapping[str, object], prefix: tuple[str, ...]) -> None:
        for unit, kids in sub.items():
            if len(prefix) + 1 == len(levels):
                paths[unit] = (*prefix, unit)
            else:
                walk(kids, (*prefix, unit))  # type: ignore[arg-type]

    walk(tree, ())
    return Topology(name="test", levels=levels, paths=paths)


def racks(count: int, per_rack: int) -> dict[str, object]:
    return {
        f"rack-{r}": {f"node-{r * per_rack + i}": {} for i in range(per_rack)} for r in range(count)
    }


def arrange(
    nodes: Iterable[Node],
    members: list[Pod],
    topo: Topology,
    constraints: str,
    *,
    running: Iterable[Pod] = (),
) -> tuple[dict[str, str], Arrangement]:
    by_name = {n.name: n for n in nodes}
    ledger = Ledger.of(by_name, running)
    arranger = Arranger(Tree.of(topo, by_name), NodeFinder(by_name, ledger))
    parsed = read_constraints(constraints)
    assert parsed.errors == ()
    result = arranger.arrange(members, constraints=parsed, ledger=ledger.scratch())
    return {p.ref.name: n for p, n in result.placements}, result


def per(placement: Mapping[str, str], topo: Topology, level: str) -> Counter[str]:
    return Counter(topo.unit(n, level) for n in placement.values())


# -- seed 004's stories -----------------------------------------------------------------------


def test_seed_group_a_packs_on_one_rack_and_spreads_over_its_nodes() -> None:
    topo = topology(racks(2, 3), ("rack", "node"))
    nodes = [node(f"node-{i}", cpu="8") for i in range(6)]
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, _ = arrange(
        nodes, members, topo, '{"rack": {"type": "pack"}, "node": {"type": "spread"}}'
    )
    assert per(placed, topo, "rack") == {"rack-0": 8}
    assert sorted(Counter(placed.values()).values()) == [2, 3, 3]


def test_seed_degraded_capacity_packs_node_0_and_fills_node_1() -> None:
    """rack-1 cannot take the group, node-2 has no room, node-1 room for 3: 5 and 3."""
    topo = topology(racks(2, 3), ("rack", "node"))
    nodes = [
        node("node-0", cpu="16"),
        node("node-1", cpu="3"),
        node("node-2", cpu="0"),
        *(node(f"node-{i}", cpu="2") for i in (3, 4, 5)),
    ]
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, _ = arrange(
        nodes, members, topo, '{"rack": {"type": "pack"}, "node": {"type": "spread"}}'
    )
    assert Counter(placed.values()) == {"node-0": 5, "node-1": 3}


def test_user_a_two_partitions_on_separate_racks_packed_within_each() -> None:
    topo = topology(racks(3, 4), ("rack", "node"))
    nodes = [node(f"node-{i}", cpu="4") for i in range(12)]
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, _ = arrange(
        nodes,
        members,
        topo,
        '{"rack": {"type": "spread", "partitions": 2}, "node": {"type": "pack"}}',
    )
    by_rack = per(placed, topo, "rack")
    assert sorted(by_rack.values()) == [4, 4]
    assert len(Counter(placed.values())) == 2  # each partition on a single 4-cpu node


def test_user_b_six_pods_on_one_server_two_to_four_per_node() -> None:
    tree = {f"server-{s}": {f"node-{s * 4 + i}": {} for i in range(4)} for s in range(2)}
    topo = topology(tree, ("server", "node"))
    nodes = [node(f"node-{i}", cpu="8") for i in range(8)]
    members = [pod(f"pod-{i}", cpu="1") for i in range(6)]
    placed, _ = arrange(
        nodes,
        members,
        topo,
        '{"server": {"type": "pack"}, "node": {"type": "spread", "min": 2, "max": 4}}',
    )
    assert len(per(placed, topo, "server")) == 1
    assert sorted(Counter(placed.values()).values()) == [2, 2, 2]


# -- each constraint alone --------------------------------------------------------------------


def test_pack_alone_uses_the_fewest_units() -> None:
    assert split(10, [4, 8, 6], LevelConstraint("node")) == {1: 8, 2: 2}


def test_pack_prefers_the_tightest_unit_that_holds_everything() -> None:
    assert split(5, [9, 5, 7], LevelConstraint("node")) == {1: 5}


def test_spread_alone_is_as_even_as_capacity_allows() -> None:
    assert split(8, [10, 3, 10], LevelConstraint("node", type="spread")) == {0: 3, 1: 2, 2: 3}


def test_partitions_alone_give_near_equal_parts_on_distinct_units() -> None:
    counts = split(7, [7, 7, 7], LevelConstraint("rack", type="spread", partitions=3))
    assert sorted(counts.values()) == [2, 2, 3]


def test_range_alone_keeps_every_used_unit_within_bounds() -> None:
    counts = split(9, [9, 9, 9, 9], LevelConstraint("node", min=2, max=4))
    assert counts is not None
    assert sum(counts.values()) == 9
    assert all(2 <= k <= 4 for k in counts.values())


def test_factor_alone_puts_multiples_on_each_unit() -> None:
    counts = split(12, [6, 9, 9], LevelConstraint("node", factor=4))
    assert counts == {1: 8, 2: 4}


def test_factor_with_spread_uses_as_many_units_as_multiples_allow() -> None:
    counts = split(12, [9, 9, 9, 9], LevelConstraint("node", type="spread", factor=2))
    assert counts is not None
    assert sorted(counts.values()) == [2, 2, 4, 4]


def test_factor_that_cannot_add_up_has_no_split() -> None:
    assert split(6, [8, 8], LevelConstraint("node", factor=4)) is None


# -- hard and soft ----------------------------------------------------------------------------


def test_soft_constraint_that_cannot_be_met_still_places_and_says_so() -> None:
    topo = topology(racks(2, 2), ("rack", "node"))
    nodes = [node(f"node-{i}", cpu="4") for i in range(4)]
    members = [pod(f"pod-{i}", cpu="1") for i in range(6)]
    placed, result = arrange(nodes, members, topo, '{"node": {"type": "pack", "factor": 4}}')
    assert len(placed) == 6
    assert any("factor 4 not met" in note for note in result.relaxed)


def test_hard_constraint_that_cannot_be_met_places_nothing_and_names_the_level() -> None:
    topo = topology(racks(2, 2), ("rack", "node"))
    nodes = [node(f"node-{i}", cpu="2") for i in range(4)]  # 8 in all, 4 per rack
    members = [pod(f"pod-{i}", cpu="1") for i in range(6)]
    placed, result = arrange(
        nodes, members, topo, '{"rack": {"type": "pack", "min": 6, "isHard": true}}'
    )
    assert placed == {}
    message = result.status.message
    assert "rack" in message
    assert "min 6" in message


def test_hard_range_below_is_respected_when_choosing_the_rack() -> None:
    """rack-0 has more room, but only as 1+1+1; rack-1 holds 2 per node."""
    topo = topology(racks(2, 3), ("rack", "node"))
    nodes = [
        *(node(f"node-{i}", cpu="1") for i in range(3)),
        *(node(f"node-{i}", cpu="2") for i in range(3, 6)),
    ]
    members = [pod(f"pod-{i}", cpu="1") for i in range(4)]
    placed, _ = arrange(
        nodes, members, topo, '{"node": {"type": "pack", "min": 2, "isHard": true}}'
    )
    assert per(placed, topo, "rack") == {"rack-1": 4}
    assert set(Counter(placed.values()).values()) == {2}


# -- partitions over the whole gang -----------------------------------------------------------

ZONE_RACK_NODE = ("zone", "rack", "node")


def zones(count: int, racks_per_zone: int, nodes_per_rack: int) -> dict[str, object]:
    return {
        f"zone-{z}": {
            f"rack-{z}-{r}": {f"node-{z}-{r}-{i}": {} for i in range(nodes_per_rack)}
            for r in range(racks_per_zone)
        }
        for z in range(count)
    }


def test_hard_rack_partitions_count_over_the_whole_gang_not_per_zone() -> None:
    """Two racks hold at most 6 of these 8: read per zone, 2 racks in each zone took all 8."""
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    busy = {"node-0-0-0", "node-1-0-0"}  # one node per zone: 10 free cpus, 3 per rack at most
    nodes = [node(name, cpu="0" if name in busy else "1") for name in topo.paths]
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, result = arrange(
        nodes, members, topo, '{"rack": {"type": "spread", "partitions": 2, "isHard": true}}'
    )
    assert placed == {}
    assert not result.status.ok
    message = result.status.message
    assert "'rack'" in message
    assert "partitions 2" in message


def test_rack_partitions_over_two_zones_use_one_rack_in_each_two_in_all() -> None:
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    nodes = [node(name, cpu="2") for name in topo.paths]  # 6 per rack
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, result = arrange(
        nodes,
        members,
        topo,
        '{"zone": {"type": "spread", "isHard": true},'
        ' "rack": {"type": "spread", "partitions": 2, "isHard": true}}',
    )
    assert result.status.ok
    assert per(placed, topo, "zone") == {"zone-0": 4, "zone-1": 4}
    assert sorted(per(placed, topo, "rack").values()) == [4, 4]


def test_rack_partitions_under_a_zone_pack_share_one_zone() -> None:
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    nodes = [node(name, cpu="2") for name in topo.paths]
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, _ = arrange(
        nodes,
        members,
        topo,
        '{"zone": {"type": "pack"}, "rack": {"type": "spread", "partitions": 2, "isHard": true}}',
    )
    assert per(placed, topo, "zone") == {"zone-0": 8}
    assert per(placed, topo, "rack") == {"rack-0-0": 4, "rack-0-1": 4}


def test_node_partitions_count_nodes_over_every_rack_and_zone() -> None:
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    nodes = [node(name, cpu="1") for name in topo.paths]  # one member per node
    members = [pod(f"pod-{i}", cpu="1") for i in range(7)]
    placed, result = arrange(
        nodes,
        members,
        topo,
        '{"zone": {"type": "spread"}, "node": {"type": "pack", "partitions": 7, "isHard": true}}',
    )
    assert result.status.ok
    assert len(set(placed.values())) == 7
    assert sorted(per(placed, topo, "zone").values()) == [3, 4]


def test_partitions_of_a_level_are_near_equal_over_the_whole_gang() -> None:
    """7 in 3 parts is 3, 2, 2 wherever the zones put them."""
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    nodes = [node(name, cpu="2") for name in topo.paths]
    members = [pod(f"pod-{i}", cpu="1") for i in range(7)]
    placed, _ = arrange(
        nodes,
        members,
        topo,
        '{"zone": {"type": "spread"}, "rack": {"type": "spread", "partitions": 3, "isHard": true}}',
    )
    assert sorted(per(placed, topo, "rack").values()) == [2, 2, 3]
    assert sorted(per(placed, topo, "zone").values()) == [3, 4]


def test_partitions_that_cannot_nest_name_both_levels() -> None:
    """6 as 2 zone parts of 3 cannot be made of whole rack parts of 2."""
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    nodes = [node(name, cpu="2") for name in topo.paths]
    members = [pod(f"pod-{i}", cpu="1") for i in range(6)]
    placed, result = arrange(
        nodes,
        members,
        topo,
        '{"zone": {"type": "spread", "partitions": 2, "isHard": true},'
        ' "rack": {"type": "spread", "partitions": 3, "isHard": true}}',
    )
    assert placed == {}
    assert "'zone'" in result.status.message
    assert "'rack'" in result.status.message


def test_soft_rack_partitions_that_cannot_be_met_over_the_gang_are_dropped_and_said() -> None:
    topo = topology(zones(2, 2, 3), ZONE_RACK_NODE)
    busy = {"node-0-0-0", "node-1-0-0"}
    nodes = [node(name, cpu="0" if name in busy else "1") for name in topo.paths]
    members = [pod(f"pod-{i}", cpu="1") for i in range(8)]
    placed, result = arrange(nodes, members, topo, '{"rack": {"type": "spread", "partitions": 2}}')
    assert len(placed) == 8
    assert any("rack: spread, partitions 2 not met" in note for note in result.relaxed)


def test_parts_go_whole_to_the_units_above_them() -> None:
    """3 rack parts of 2 (6 members) over zones with room for 1, 2 and 2 such racks: spread
    gives one part to each zone, pack two to the first roomy one and one to the next."""
    parts = Parts.of(depth=1, count=3, members=6)
    caps, small, big = [6, 6, 6], [1, 2, 2], [1, 2, 2]
    spread = share_parts(
        6, caps, LevelConstraint("zone", type="spread"), parts=parts, quota=3, small=small, big=big
    )
    assert spread == {0: (2, 1), 1: (2, 1), 2: (2, 1)}
    pack = share_parts(6, caps, LevelConstraint("zone"), parts=parts, quota=3, small=small, big=big)
    assert pack == {1: (4, 2), 0: (2, 1)}


# -- members of different shapes ----------------------------------------------------------------


def test_heterogeneous_master_and_workers_all_fit_where_their_shapes_allow() -> None:
    topo = topology(racks(2, 2), ("rack", "node"))
    nodes = [
        node("node-0", cpu="8", gpu=0),
        *(node(f"node-{i}", cpu="8", gpu=4) for i in (1, 2, 3)),
    ]
    master = pod("job-master", cpu="4")
    workers = [pod(f"job-worker-{i}", cpu="1", gpu=2) for i in range(4)]
    placed, result = arrange(nodes, [master, *workers], topo, '{"rack": {"type": "pack"}}')
    assert result.status.ok
    assert len(placed) == 5
    gpu_nodes = {"node-1", "node-2", "node-3"}
    assert all(placed[w.ref.name] in gpu_nodes for w in workers)


# -- write-back ------------------------------------------------------------------------------


def test_ranks_start_at_the_master_and_stay_together_by_domain() -> None:
    topo = topology(racks(2, 2), ("rack", "node"))
    placed = [
        (pod("w-0").ref, "node-2"),
        (pod("w-1").ref, "node-0"),
        (pod("the-master").ref, "node-1"),
        (pod("w-2").ref, "node-1"),
        (pod("w-3").ref, "node-3"),
    ]
    ranked = {ref.name: rank for ref, rank in ranks(placed, topo)}
    assert ranked == {"the-master": 0, "w-2": 1, "w-1": 2, "w-0": 3, "w-3": 4}


def test_placement_tree_is_domain_then_node_then_pods() -> None:
    topo = topology(racks(2, 2), ("rack", "node"))
    placed = [(pod("b").ref, "node-2"), (pod("a").ref, "node-0"), (pod("c").ref, "node-0")]
    assert placement_tree(placed, topo) == {
        "root": {"rack-0": {"node-0": ["a", "c"]}, "rack-1": {"node-2": ["b"]}}
    }


# -- properties ------------------------------------------------------------------------------

level_constraints = st.fixed_dictionaries(
    {"type": st.sampled_from(["pack", "spread"])},
    optional={
        "min": st.integers(1, 3),
        "max": st.integers(2, 5),
        "factor": st.integers(1, 3),
        "partitions": st.integers(1, 3),
        "isHard": st.booleans(),
    },
).filter(lambda c: c.get("min", 0) <= c.get("max", 99))


def check_whole_gang(
    placed: Mapping[str, str],
    members: list[Pod],
    topo: Topology,
    chosen: Mapping[str, dict],
    cpus: Mapping[str, int],
) -> None:
    """Every member placed, no node over its cpus, and each hard constraint read over the
    whole gang: ``partitions`` near-equal parts on that many distinct units of its level, every
    used unit of the level within [min, max] and a multiple of factor."""
    assert len(placed) == len(members)
    used: Counter[str] = Counter()
    for member in members:
        used[placed[member.ref.name]] += member.requests["cpu"]
    for name, millis in used.items():
        assert millis <= cpus[name] * 1000
    for level, spec in chosen.items():
        if not spec.get("isHard"):
            continue
        counts = per(placed, topo, level)
        for k in counts.values():
            assert k >= spec.get("min", 1)
            assert k <= spec.get("max", k)
            assert k % spec.get("factor", 1) == 0
        if "partitions" in spec:
            assert len(counts) == spec["partitions"]
            size = len(members) // spec["partitions"]
            assert set(counts.values()) <= {size, size + 1}


@settings(max_examples=150, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    cpus=st.lists(st.integers(0, 6), min_size=12, max_size=12),
    sizes=st.lists(st.integers(1, 2), min_size=1, max_size=10),
    rack=st.none() | level_constraints,
    per_node=st.none() | level_constraints,
)
def test_hard_constraints_and_capacity_always_hold_and_placement_is_repeatable(
    shape: tuple[int, int],
    cpus: list[int],
    sizes: list[int],
    rack: dict | None,
    per_node: dict | None,
) -> None:
    rack_count, per_rack = shape
    topo = topology(racks(rack_count, per_rack), ("rack", "node"))
    nodes = [node(f"node-{i}", cpu=str(cpus[i])) for i in range(rack_count * per_rack)]
    members = [pod(f"pod-{i}", cpu=str(c)) for i, c in enumerate(sizes)]
    chosen = {k: v for k, v in (("rack", rack), ("node", per_node)) if v is not None}
    text = json.dumps(chosen)
    parsed = read_constraints(text)
    if parsed.errors:
        return  # inconsistent constraints are rejected before the solver sees them
    placed, result = arrange(nodes, members, topo, text)
    again, _ = arrange(nodes, members, topo, text)
    assert placed == again
    if not result.status.ok:
        assert placed == {}
        return
    check_whole_gang(placed, members, topo, chosen, {n.name: cpus[i] for i, n in enumerate(nodes)})


@st.composite
def deep_cases(draw: st.DrawFn) -> tuple[Topology, dict[str, int], list[int], dict[str, dict]]:
    """A tree of three or four levels with uneven fan-out, each node's free cpus, the members'
    cpus, and constraints (often hard) on random levels."""
    levels = draw(st.sampled_from([("zone", "rack", "node"), ("region", "zone", "rack", "node")]))
    widest = 3 if len(levels) == 3 else 2
    cpus: dict[str, int] = {}

    def grow(prefix: str, depth: int) -> dict[str, object]:
        sub: dict[str, object] = {}
        for i in range(draw(st.integers(1, widest if depth < len(levels) - 1 else 3))):
            name = f"{levels[depth]}-{prefix}{i}"
            if depth == len(levels) - 1:
                cpus[name] = draw(st.integers(0, 4))
                sub[name] = {}
            else:
                sub[name] = grow(f"{prefix}{i}-", depth + 1)
        return sub

    topo = topology(grow("", 0), levels)
    sizes = draw(st.lists(st.integers(1, 2), min_size=1, max_size=12))
    hard = level_constraints.map(lambda c: {**c, "isHard": True})
    chosen = {}
    for level in levels:
        spec = draw(st.none() | level_constraints | hard)
        if spec is not None:
            chosen[level] = spec
    return topo, cpus, sizes, chosen


@settings(max_examples=200, deadline=None)
@given(case=deep_cases())
def test_on_three_and_four_levels_hard_constraints_hold_over_the_whole_gang(
    case: tuple[Topology, dict[str, int], list[int], dict[str, dict]],
) -> None:
    topo, cpus, sizes, chosen = case
    nodes = [node(name, cpu=str(cpu)) for name, cpu in cpus.items()]
    members = [pod(f"pod-{i}", cpu=str(c)) for i, c in enumerate(sizes)]
    text = json.dumps(chosen)
    if read_constraints(text).errors:
        return  # inconsistent constraints are rejected before the solver sees them
    placed, result = arrange(nodes, members, topo, text)
    again, repeated = arrange(nodes, members, topo, text)
    assert placed == again
    assert result.status == repeated.status
    if not result.status.ok:
        assert placed == {}
        assert result.status.message
        return
    check_whole_gang(placed, members, topo, chosen, cpus)
