"""The topology solver alone: seed 004's stories and each constraint, on plain data."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.codecs.topology import read_constraints
from scheduler.core.arranging import Arrangement, Arranger, Tree, placement_tree, ranks, split
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
    assert len(placed) == len(members)
    used = Counter()
    for member in members:
        used[placed[member.ref.name]] += int(member.requests["cpu"])
    for name, millis in used.items():
        assert millis <= cpus[int(name.split("-")[1])] * 1000
    for level, spec in chosen.items():
        if not spec.get("isHard"):
            continue
        counts = per(placed, topo, level)
        if level == "node":  # per node within its rack; the counts are the same
            counts = Counter(placed.values())
        for k in counts.values():
            assert k >= spec.get("min", 1)
            assert k <= spec.get("max", k)
            assert k % spec.get("factor", 1) == 0
        if "partitions" in spec and level == "rack":
            assert len(counts) == spec["partitions"]
