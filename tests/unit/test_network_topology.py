"""A gang kept inside one unit of a tier (#23): Volcano's PodGroup ``spec.networkTopology``.
Bind maps, as Volcano's tests state their expectations."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.codecs.gangs import read_options
from scheduler.codecs.podgroups import volcano_podgroup_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.pods import GangKey, NetworkTopology
from scheduler.model.snapshot import Snapshot
from scheduler.model.topology import Topology
from tests.unit.builders import T0, gang_pods, node, pod, snapshot, tree_topology
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_arranging import deep_cases
from tests.unit.test_owner_gangs import jobset, jobset_pods
from tests.unit.test_pod_constraints import one_per_node
from tests.unit.test_queue_sharing import with_queues
from tests.unit.test_queues import queue
from tests.unit.test_subgroups import PARTITION, replicas

RACKS = tree_topology(
    {
        "rack-0": {"n0": {}, "n1": {}},
        "rack-1": {"n2": {}, "n3": {}},
        "rack-2": {"n4": {}, "n5": {}},
    },
    ("rack", "node"),
)
ZONES = tree_topology(
    {
        "zone-a": {"rack-0": {"n0": {}, "n1": {}}, "rack-1": {"n2": {}, "n3": {}}},
        "zone-b": {"rack-2": {"n4": {}, "n5": {}}, "rack-3": {"n6": {}, "n7": {}}},
    },
    ("zone", "rack", "node"),
)


def group(
    name: str, *, min_member: int, mode: str | None = "hard", tier: int = 1, **spec: Any
) -> Any:
    """A Volcano PodGroup with a networkTopology (none when ``mode`` is None)."""
    if mode is not None:
        spec["networkTopology"] = {"mode": mode, "highestTierAllowed": tier}
    return volcano_podgroup_from_dict(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"minMember": min_member, **spec},
        }
    )


def members(name: str, count: int, **kw: Any) -> list[Any]:
    kw.setdefault("gpu", 1)
    return gang_pods(name, count, annotations={names.VOLCANO_GROUP_NAME: name}, created=T0, **kw)


def running(pods: list[Any], nodes: list[str]) -> list[Any]:
    return [replace(p, node_name=n, phase="Running") for p, n in zip(pods, nodes, strict=True)]


def on(topology: Topology, nodes: list[Any], pods: list[Any], *groups: Any, **kw: Any) -> Any:
    return schedule(replace(snapshot(nodes, pods, podgroups=list(groups)), topology=topology), **kw)


def units_of(result: Any, topology: Topology, level: str) -> set[str]:
    at = topology.levels.index(level)
    return {topology.paths[n][at] for n in bind_map(result).values()}


def test_a_hard_tier_1_gang_lands_in_one_rack_where_packing_alone_would_split_it() -> None:
    """n0 is taken: packing alone puts the gang on n1 (rack-0) and n2 (rack-1)."""
    taken = running(gang_pods("other", 1, gpu=1, created=T0), ["n0"])
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    result = on(RACKS, nodes, [*members("dp", 2), *taken], group("dp", min_member=2), now=T0)
    assert bind_map(result) == {"dp-0": "n2", "dp-1": "n3"}
    plain = on(
        RACKS, nodes, [*members("dp", 2), *taken], group("dp", min_member=2, mode=None), now=T0
    )
    assert set(bind_map(plain).values()) == {"n1", "n2"}  # what the tier prevents


def test_a_hard_gang_that_no_rack_holds_waits_and_says_so_a_soft_one_is_placed() -> None:
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    hard = on(RACKS, nodes, members("dp", 3), group("dp", min_member=3), now=T0)
    assert bind_map(hard) == {}
    (message,) = set(events(hard, "FailedScheduling"))
    assert "no rack has room for the gang in one unit" in message
    assert "PodGroup spec.networkTopology mode hard" in message
    soft = on(RACKS, nodes, members("dp", 3), group("dp", min_member=3, mode="soft"), now=T0)
    assert len(bind_map(soft)) == 3


def test_the_lowest_tier_is_tried_first_the_gang_takes_one_rack_of_its_zone() -> None:
    """Tier 2 allows the whole zone; n0 and n2 are half full (packing alone: n0 and n2, two
    racks). Racks are tried before zones: rack-0 holds both."""
    half = running(gang_pods("half", 2, gpu=1, created=T0), ["n0", "n2"])
    nodes = [node(f"n{i}", gpu=2) for i in range(8)]
    result = on(ZONES, nodes, [*members("dp", 2), *half], group("dp", min_member=2, tier=2), now=T0)
    assert units_of(result, ZONES, "rack") == {"rack-0"}


def test_a_gang_too_big_for_a_rack_is_kept_inside_one_zone() -> None:
    """n0 and n2 are taken: packing alone puts the gang of 3 on n1, n3 and n4 (two zones)."""
    taken = running(gang_pods("other", 2, gpu=1, created=T0), ["n0", "n2"])
    nodes = [node(f"n{i}", gpu=1) for i in range(8)]
    pods = [*members("dp", 3), *taken]
    result = on(ZONES, nodes, pods, group("dp", min_member=3, tier=2), now=T0)
    assert len(bind_map(result)) == 3
    assert units_of(result, ZONES, "zone") == {"zone-b"}


def test_the_fullest_rack_that_holds_the_gang_is_chosen() -> None:
    """4 GPUs a node. rack-0 has 5 free (n0 has 1: the fullest node), rack-1 has 4 (2 on
    each node), rack-2 has 8: the gang of 2 fills rack-1, where packing node by node alone
    would take n0 and then n2."""
    used = running(gang_pods("used", 7, gpu=1, created=T0), ["n0"] * 3 + ["n2"] * 2 + ["n3"] * 2)
    nodes = [node(f"n{i}", gpu=4) for i in range(6)]
    result = on(RACKS, nodes, [*members("dp", 2), *used], group("dp", min_member=2), now=T0)
    assert units_of(result, RACKS, "rack") == {"rack-1"}
    plain = on(
        RACKS, nodes, [*members("dp", 2), *used], group("dp", min_member=2, mode=None), now=T0
    )
    assert units_of(plain, RACKS, "rack") == {"rack-0", "rack-1"}


def test_pod_anti_affinity_still_holds_inside_the_rack() -> None:
    """One per node, 2 nodes a rack: the gang of 2 takes both nodes of one rack; a gang of 3
    fits no rack one per node and waits (the topology solver, used for this at first,
    ignored anti-affinity)."""
    nodes = [node(f"n{i}", gpu=2, labels={"kubernetes.io/hostname": f"n{i}"}) for i in range(6)]
    spread = {"labels": {"app": "dp"}, "spec": one_per_node("dp")}
    two = on(RACKS, nodes, members("dp", 2, **spread), group("dp", min_member=2), now=T0)
    assert len(set(bind_map(two).values())) == 2
    assert len(units_of(two, RACKS, "rack")) == 1
    three = on(RACKS, nodes, members("dp", 3, **spread), group("dp", min_member=3), now=T0)
    assert bind_map(three) == {}


def test_nodes_outside_the_topology_serve_a_soft_gang_not_a_hard_one() -> None:
    """The racks are full; n9 is in no rack."""
    full = running(gang_pods("full", 6, gpu=1, created=T0), [f"n{i}" for i in range(6)])
    nodes = [*(node(f"n{i}", gpu=1) for i in range(6)), node("n9", gpu=2)]
    for mode, bound in (("hard", {}), ("soft", {"dp-0": "n9", "dp-1": "n9"})):
        got = on(
            RACKS, nodes, [*members("dp", 2), *full], group("dp", min_member=2, mode=mode), now=T0
        )
        assert bind_map(got) == bound, mode


def test_a_tier_above_the_topology_is_said_and_names_its_levels() -> None:
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    result = on(RACKS, nodes, members("dp", 2), group("dp", min_member=2, tier=2), now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "PodGroup spec.networkTopology highestTierAllowed 2 is above every level" in message


def test_a_running_gangs_new_member_joins_the_rack_where_it_runs() -> None:
    """dp-0 runs on n2 (rack-1); dp-1 comes later. n1 is the fullest node with room (n0 is
    half used): packing alone would take it. Hard: rack-1; with rack-1 full, hard waits
    and says where it is kept, soft goes to n1."""
    first, second = members("dp", 2)
    base = [running([first], ["n2"])[0], second]
    half = running(gang_pods("half", 1, gpu=1, created=T0), ["n1"])
    nodes = [node(f"n{i}", gpu=2) for i in range(6)]
    hard = group("dp", min_member=1)
    assert bind_map(on(RACKS, nodes, [*base, *half], hard, now=T0)) == {"dp-1": "n2"}
    full = running(gang_pods("full", 3, gpu=1, created=T0), ["n2", "n3", "n3"])
    waits = on(RACKS, nodes, [*base, *half, *full], hard, now=T0)
    assert bind_map(waits) == {}
    (message,) = set(events(waits, "FailedScheduling"))
    assert "kept to rack rack-1, where the gang runs" in message
    soft = on(RACKS, nodes, [*base, *half, *full], group("dp", min_member=1, mode="soft"), now=T0)
    assert bind_map(soft) == {"dp-1": "n1"}


def test_replicas_each_in_one_rack_and_the_gang_in_one_zone() -> None:
    """Subgroups of 2 with a rack tier inside a gang with a zone tier: in zone-a only
    rack-0 can hold a replica (n2 is taken), zone-b has room for both. Without the gang's
    tier one replica goes to rack-0 and the other to zone-b; with it, both to zone-b."""
    taken = running(gang_pods("other", 1, gpu=1, created=T0), ["n2"])
    nodes = [node(f"n{i}", gpu=1) for i in range(8)]
    policy = [{
        "name": "replica", "subGroupSize": 2, "minSubGroups": 2, "matchLabelKeys": [PARTITION],
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }]  # fmt: skip
    pods = [*replicas("dp", 2, 2), *taken]
    pg = group("dp", min_member=4, tier=2, subGroupPolicy=policy)
    result = on(ZONES, nodes, pods, pg, now=T0)
    assert len(bind_map(result)) == 4
    assert units_of(result, ZONES, "zone") == {"zone-b"}
    plain = on(
        ZONES, nodes, pods, group("dp", min_member=4, mode=None, subGroupPolicy=policy), now=T0
    )
    assert units_of(plain, ZONES, "zone") == {"zone-a", "zone-b"}
    for r in ("dp-0", "dp-1"):
        racks = {ZONES.paths[n][1] for p, n in bind_map(result).items() if p.startswith(r)}
        assert len(racks) == 1, (r, racks)


def test_a_rack_that_fell_short_gives_its_queue_room_back_to_the_next() -> None:
    """The queue's capability is 2 GPUs, the gang's 2. rack-0 looks roomy by its sum but
    n1 is tainted: one member lands on n0 and the rack is given up. Were that member's
    room still counted against the queue, rack-1 would be refused."""
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    nodes = [
        node("n0", gpu=1),
        node("n1", gpu=1, taints=taint),
        node("n2", gpu=1),
        node("n3", gpu=1),
    ]
    labels = {names.QUEUE: "team"}
    snap = replace(
        snapshot(nodes, members("dp", 2, labels=labels), podgroups=[group("dp", min_member=2)]),
        topology=RACKS,
    )
    capped = with_queues(snap, queue("team", capability={"nvidia.com/gpu": "2"}))
    assert bind_map(schedule(capped, now=T0)) == {"dp-0": "n2", "dp-1": "n3"}


def test_a_preempting_gang_frees_room_inside_one_rack() -> None:
    """Every GPU runs a lower-priority pod, the lowest on n0 and n2: the urgent gang of 2
    evicts the two of one rack, not the two lowest in two racks."""
    low = [
        replace(p, priority=0 if i in (0, 2) else 5)
        for i, p in enumerate(
            running(gang_pods("low", 6, gpu=1, created=T0), [f"n{i}" for i in range(6)])
        )
    ]
    urgent = [replace(p, priority=100) for p in members("dp", 2)]
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    result = on(RACKS, nodes, [*low, *urgent], group("dp", min_member=2), now=T0)
    evicted = {e.pod.name for e in result.evictions}
    where = {RACKS.paths[f"n{int(name.split('-')[1])}"][0] for name in evicted}
    assert len(evicted) == 2, evicted
    assert len(where) == 1, evicted


# -- on trees of three and four levels ------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(case=deep_cases(), tier=st.integers(1, 3), soft=st.booleans())
def test_on_three_and_four_levels_a_hard_gang_is_whole_inside_one_unit_of_its_tier(
    case: tuple[Topology, dict[str, int], list[int], dict[str, dict]], tier: int, soft: bool
) -> None:
    """Whatever the tree and the room: the gang binds whole or not at all, no node takes
    more than it has, a hard gang lies inside one unit of its tier, and a gang that would
    not bind without the tier does not bind with it."""
    topo, cpus, sizes, _ = case
    tier = min(tier, len(topo.levels) - 1)
    level = topo.levels[len(topo.levels) - 1 - tier]
    nodes = [node(name, cpu=str(cpu)) for name, cpu in cpus.items()]
    group_of = {names.VOLCANO_GROUP_NAME: "dp"}
    pods = [
        pod(f"dp-{i}", cpu=str(c), annotations=group_of, created=T0) for i, c in enumerate(sizes)
    ]
    mode = "soft" if soft else "hard"
    result = on(topo, nodes, pods, group("dp", min_member=len(pods), mode=mode, tier=tier), now=T0)
    placed = bind_map(result)
    assert len(placed) in (0, len(pods))
    for name, cpu in cpus.items():
        used = sum(sizes[int(p.split("-")[1])] for p, n in placed.items() if n == name)
        assert used <= cpu, (name, used, cpu)
    if placed and not soft:
        assert len(units_of(result, topo, level)) == 1
    plain = on(topo, nodes, pods, group("dp", min_member=len(pods), mode=None), now=T0)
    if not bind_map(plain):
        assert not placed


def test_a_gang_without_a_tier_is_not_refused_for_the_failure_of_one_with_it() -> None:
    """Two gangs of the same shape: the first (hard, a rack) fits no rack; the second, with
    no tier, fits across racks. A pass remembers failed shapes: the tier is part of it."""
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    pods = [*members("a", 3), *members("b", 3)]
    result = on(
        RACKS, nodes, pods, group("a", min_member=3), group("b", min_member=3, mode=None), now=T0
    )
    assert sorted(bind_map(result)) == ["b-0", "b-1", "b-2"]


# -- the annotation form: any gang, a JobSet's replicas, a LeaderWorkerSet's groups ----------

RACK_TIER = json.dumps({"mode": "hard", "highestTierAllowed": 1})


def test_the_annotation_is_read_and_a_bad_one_is_an_error_that_names_it() -> None:
    read = read_options({names.NETWORK_TOPOLOGY: RACK_TIER}, namespace="ml")
    assert read.network_topology == NetworkTopology(mode="hard", highest_tier=1)
    assert read.errors == ()
    key = f"annotation {names.NETWORK_TOPOLOGY}"
    for raw, said in [
        ("hard", f"{key} must be a JSON object such as"),
        ('{"mode": "strict"}', f"{key}.mode must be one of hard, soft; got 'strict'"),
        ('{"highestTierAllowed": -1}', f"{key}.highestTierAllowed must be a whole number"),
        ("[1]", f"{key} must be an object"),
        ("[" * 100_000, f"{key} must be a JSON object such as"),  # nested too deeply
    ]:
        errors = read_options({names.NETWORK_TOPOLOGY: raw}, namespace="ml").errors
        assert len(errors) == 1, (raw, errors)
        assert said in errors[0], (raw, errors)


def test_a_koordinator_gang_with_the_annotation_lands_in_one_rack() -> None:
    taken = running(gang_pods("other", 1, gpu=1, created=T0), ["n0"])
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    tier = {names.NETWORK_TOPOLOGY: RACK_TIER}
    pods = gang_pods("k", 2, gang="k", min_available=2, gpu=1, annotations=tier, created=T0)
    result = on(RACKS, nodes, [*pods, *taken], now=T0)
    assert bind_map(result) == {"k-0": "n2", "k-1": "n3"}


def test_each_replica_of_a_jobset_with_the_annotation_is_kept_to_one_rack() -> None:
    """Two replicas of 2 one-CPU pods, bound together (one GangGroup), each in a rack of
    its own: n0 and n2 are taken, so rack-0 and rack-1 hold no replica and rack-2 one;
    nothing binds (the JobSet is whole or nothing). With a fourth rack both bind, each
    replica whole in one rack, where packing alone would fill n1 and n3 first."""
    tier = {names.NETWORK_TOPOLOGY: RACK_TIER}
    llama = jobset("llama", ("workers", 2, 2), annotations=tier)
    pods = jobset_pods("llama", "workers", 2, 2, cpu="1")
    taken = running(gang_pods("other", 2, cpu="1", created=T0), ["n0", "n2"])
    three = [node(f"n{i}", cpu="1") for i in range(6)]
    snap = replace(cluster_of([*pods, *taken], [llama], three), topology=RACKS)
    assert bind_map(schedule(snap, now=T0)) == {}
    racks = {f"rack-{r}": {f"n{2 * r}": {}, f"n{2 * r + 1}": {}} for r in range(4)}
    four = tree_topology(racks, ("rack", "node"))
    nodes = [node(f"n{i}", cpu="1") for i in range(8)]
    result = schedule(replace(cluster_of([*pods, *taken], [llama], nodes), topology=four), now=T0)
    placed = bind_map(result)
    assert len(placed) == 4
    for replica in ("llama-workers-0", "llama-workers-1"):
        used = {four.paths[n][0] for p, n in placed.items() if p.startswith(replica)}
        assert len(used) == 1, (replica, placed)
    assert not {"n1", "n3"} & set(placed.values())


def cluster_of(pods: list[Any], owners: list[Any], nodes: list[Any]) -> Snapshot:
    return replace(snapshot(nodes, pods), owners={o.key: o for o in owners})


# -- from the review of #23 -------------------------------------------------------------------


def test_preemption_memo_does_not_refuse_a_tierless_gang_for_a_hard_tier_gangs_failure() -> None:
    """Two urgent gangs of the same shape, 3 GPUs each; every GPU runs a low pod. Gang a
    (hard, one rack of 2 nodes) can never fit, whatever is evicted; gang b (no tier) fits
    once 3 low pods go. a comes first (name order): it finds no victims and its shape is
    remembered as hopeless; that shape lacks the tier, so b is skipped too, every pass."""
    low = running(gang_pods("low", 6, gpu=1, created=T0), [f"n{i}" for i in range(6)])
    urgent = [replace(p, priority=100) for p in [*members("a", 3), *members("b", 3)]]
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    result = on(
        RACKS,
        nodes,
        [*low, *urgent],
        group("a", min_member=3),
        group("b", min_member=3, mode=None),
        now=T0,
    )
    assert len(result.evictions) == 3, [e.pod.name for e in result.evictions]


def test_control_the_tierless_gang_preempts_when_it_comes_first() -> None:
    """The same with the hard gang named z (after b): b preempts (the control)."""
    low = running(gang_pods("low", 6, gpu=1, created=T0), [f"n{i}" for i in range(6)])
    urgent = [replace(p, priority=100) for p in [*members("z", 3), *members("b", 3)]]
    nodes = [node(f"n{i}", gpu=1) for i in range(6)]
    result = on(
        RACKS,
        nodes,
        [*low, *urgent],
        group("z", min_member=3),
        group("b", min_member=3, mode=None),
        now=T0,
    )
    assert len(result.evictions) == 3


def test_racks_of_the_same_name_in_two_zones_are_two_units() -> None:
    """--topology-from-labels, racks r0..r2 in each of zones a and b (rack names repeat per
    zone, as they often do), one node a rack, a pod filling a node. A hard rack-tier gang
    of 2 fits no rack and must wait. Session.domains keys units by the rack label alone,
    so rack r0 of zone a and rack r0 of zone b are one unit, and the gang is bound across
    two zones (the topology solver's tree keys units by their path and keeps them apart)."""
    nodes = [
        node(f"{z}-{r}", cpu="1", labels={"zone": z, "rack": r})
        for z in ("a", "b")
        for r in ("r0", "r1", "r2")
    ]
    config = Config(topology_labels=(("zone", "zone"), ("rack", "rack")))
    pods = members("dp", 2, gpu=0, cpu="1")
    result = schedule(
        snapshot(nodes, pods, podgroups=[group("dp", min_member=2)]), now=T0, config=config
    )
    assert bind_map(result) == {}, bind_map(result)


def test_a_soft_tier_on_a_flat_cluster_is_no_tier_at_all() -> None:
    """No topology is described: a soft tier above every level asks for nothing. Before the
    review each node was a unit, tried tightest first: the gang went onto half-used n1
    although spread scoring puts it on the emptiest node, as it does without a tier."""
    nodes = [node("n0", cpu="8"), node("n1", cpu="8")]
    half = running(gang_pods("half", 1, cpu="4", created=T0), ["n1"])
    pods = [*members("dp", 2, gpu=0, cpu="2"), *half]
    config = Config(scoring="spread")
    plain = schedule(
        snapshot(nodes, pods, podgroups=[group("dp", min_member=2, mode=None)]),
        now=T0,
        config=config,
    )
    soft = schedule(
        snapshot(nodes, pods, podgroups=[group("dp", min_member=2, mode="soft")]),
        now=T0,
        config=config,
    )
    assert bind_map(soft) == bind_map(plain) == {"dp-0": "n0", "dp-1": "n0"}


def test_a_hopeless_hard_gang_tries_a_bounded_window_of_units_each_attempt() -> None:
    """250 racks of 8 nodes; a hard rack-tier gang of 9 pods, one per node (anti-affinity):
    every rack passes the summed-room check and fails a full placement. It tries 16 an
    attempt (the review measured 2.9 s a pass for 20 such gangs trying all 250) and says
    the others come at its next attempts."""
    count, racks = 2000, 250
    nodes = [
        node(f"n{i}", cpu="8", labels={"kubernetes.io/hostname": f"n{i}"}) for i in range(count)
    ]
    paths = {f"n{i}": (f"rack-{i // (count // racks)}", f"n{i}") for i in range(count)}
    topo = Topology(name="t", levels=("rack", "node"), paths=paths)
    spread = {"labels": {"app": "dp"}, "spec": one_per_node("dp")}
    pods = [
        pod(f"dp-{i}", cpu="1", annotations={names.VOLCANO_GROUP_NAME: "dp"}, created=T0, **spread)
        for i in range(9)
    ]
    snap = replace(snapshot(nodes, pods, podgroups=[group("dp", min_member=9)]), topology=topo)
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "FailedScheduling"))
    assert "16 tried of 250, the next ones at its next attempt" in message


# -- the units an attempt tries: the lowest tier and the fullest first -----------------------


def test_a_retried_gang_tries_its_lowest_tier_first_when_all_units_fit_the_window() -> None:
    """ZONES (zone-a: rack-0 n0 n1, rack-1 n2 n3; zone-b: rack-2 n4 n5, rack-3 n6 n7),
    n3, n5 and n7 taken. A hard zone-tier gang of 2 one-GPU pods fits rack-0 whole. Its
    units: [rack-0, zone-b, zone-a] (3, well inside MAX_UNITS). It lands in rack-0 at its
    first attempt, and again after one failed attempt (attempts=1): while all its units fit
    the window every attempt tries them all, the lowest tier first, rather than starting at
    zone-b and splitting the gang over rack-2 and rack-3 although one rack holds it."""
    nodes = [node(f"n{i}", gpu=1) for i in range(8)]
    taken = running(gang_pods("other", 3, gpu=1, created=T0), ["n3", "n5", "n7"])
    pods = [*members("dp", 2), *taken]
    pg = group("dp", min_member=2, tier=2)
    fresh = on(ZONES, nodes, pods, pg, now=T0)
    assert sorted(bind_map(fresh).values()) == ["n0", "n1"]
    # The same gang, having failed once (no zone had two free GPUs then): attempts=1.
    full = running(gang_pods("full", 3, gpu=1, created=T0), ["n1", "n2", "n6"])
    failed = on(ZONES, nodes, [*pods, *full], pg, now=T0)
    assert bind_map(failed) == {}
    key = GangKey("default", "dp")
    assert failed.memory[key].attempts == 1
    later = failed.memory[key].retry_at
    snap = replace(snapshot(nodes, pods, podgroups=[pg], memory=failed.memory), topology=ZONES)
    retried = schedule(snap, now=later)
    assert sorted(bind_map(retried).values()) == ["n0", "n1"], bind_map(retried)


def test_a_retried_gang_goes_to_a_unit_that_fits_now_among_the_first_16() -> None:
    """40 racks of two 8-CPU nodes; a hard rack-tier gang of two 5-CPU pods. In every rack
    one node has 7 CPUs free and the other 4: the summed room (11) passes, placement fails.
    The gang fails its first attempt (attempts=1). Then a pod on rack-00 finishes: its
    nodes have 5 and 5.5 free, the gang fits there, and rack-00 is the fullest unit (first
    in the list). Every attempt tries the fullest units (the first half of MAX_UNITS) and
    only the rest in turns, so the second attempt tries rack-00 and the gang lands there,
    rather than failing again ("16 tried of 40"), backing off, and reaching rack-00 only
    after a full turn of the list."""
    racks = 40
    nodes = [node(f"n{i}", cpu="8") for i in range(2 * racks)]
    paths = {f"n{i}": (f"rack-{i // 2:02d}", f"n{i}") for i in range(2 * racks)}
    topo = Topology(name="t", levels=("rack", "node"), paths=paths)

    def fillers(first: str) -> list[Any]:
        out = []
        for r in range(racks):
            a, b = ("3", "2500m") if (r == 0 and first == "fits") else ("1", "4")
            out.append(pod(f"fa-{r}", cpu=a, node_name=f"n{2 * r}", phase="Running"))
            out.append(pod(f"fb-{r}", cpu=b, node_name=f"n{2 * r + 1}", phase="Running"))
        return out

    pg = group("dp", min_member=2, tier=1)
    dp = members("dp", 2, gpu=0, cpu="5")
    failed = schedule(
        replace(snapshot(nodes, [*dp, *fillers("no")], podgroups=[pg]), topology=topo), now=T0
    )
    assert bind_map(failed) == {}
    key = GangKey("default", "dp")
    assert failed.memory[key].attempts == 1
    later = failed.memory[key].retry_at
    snap = snapshot(nodes, [*dp, *fillers("fits")], podgroups=[pg], memory=failed.memory)
    retried = schedule(replace(snap, topology=topo), now=later)
    assert sorted(bind_map(retried).values()) == ["n0", "n1"], [
        e.message for e in retried.events if e.reason == "FailedScheduling"
    ]
