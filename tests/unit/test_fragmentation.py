"""Fragmentation (#26): what is free but of no use to what waits, on plain data and through
``explain --cluster``'s reading of a snapshot."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.podgroups import volcano_podgroup_from_dict
from scheduler.core.explaining import explain_cluster
from scheduler.core.fragmentation import measure, tier_needs
from scheduler.core.gangs import resolve
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.nodes import Node
from scheduler.model.pods import GangKey, Pod
from scheduler.model.resources import GPU, Resources
from scheduler.model.snapshot import GangState
from scheduler.model.topology import topology_from_labels
from scheduler.shell.looping import measure_fragmentation
from scheduler.shell.metrics import Metrics
from tests.unit.builders import SCHEDULER, T0, gang_pods, node, pod, snapshot
from tests.unit.test_subgroups import podgroup as subgroup_podgroup
from tests.unit.test_subgroups import replicas


def gpus(n: int, cpu: int = 8000) -> Resources:
    return Resources({GPU: n, "cpu": cpu})


def test_gpus_free_on_nodes_that_cannot_take_the_smallest_waiting_member_are_stranded() -> None:
    """Four 8-GPU nodes: n0 has 3 free, n1 2, n2 8, n3 none. The smallest waiting member
    asks for 4: n0's 3 and n1's 2 are stranded; n2 takes two of it; n2 is a whole GPU node."""
    allocatable = {n: gpus(8) for n in ("n0", "n1", "n2", "n3")}
    free = {"n0": gpus(3), "n1": gpus(2), "n2": gpus(8), "n3": gpus(0)}
    found = measure(free, allocatable=allocatable, waiting=[gpus(8, 1000), gpus(4, 1000)])
    assert found.stranded[GPU] == 5
    assert found.stranded["cpu"] == 3 * 8000  # n0, n1 and n3 take none of it
    assert found.placeable == 2
    assert found.whole_gpu_nodes == 1
    assert found.smallest == gpus(4, 1000)
    assert found.waiting == 2


def test_nothing_is_stranded_while_nothing_waits() -> None:
    found = measure({"n0": gpus(3)}, allocatable={"n0": gpus(8)}, waiting=[])
    assert found.stranded == {}
    assert found.placeable == 0
    assert found.smallest is None


def test_a_node_over_committed_counts_no_negative_room() -> None:
    found = measure({"n0": gpus(-2, -500)}, allocatable={"n0": gpus(8)}, waiting=[gpus(1)])
    assert found.stranded[GPU] == 0
    assert found.stranded["cpu"] == 0
    assert found.placeable == 0


def test_room_a_waiting_member_can_use_is_not_stranded() -> None:
    """Waiting members whose shapes do not compare (one asks more CPU, the other more
    memory): room the second fits in is not stranded, though the first, the smallest by
    GPUs, then CPU, then memory, does not fit it ("room nothing that waits can use")."""
    free = {"n1": Resources({"cpu": 4000, "memory": 8 * 2**30, "pods": 100})}
    waiting = [
        Resources({"cpu": 1000, "memory": 100 * 2**30, "pods": 1}),  # the "smallest"
        Resources({"cpu": 2000, "memory": 2**30, "pods": 1}),  # fits n1
    ]
    found = measure(free, allocatable=free, waiting=waiting)
    assert found.stranded["cpu"] == 0


def test_explain_cluster_reads_the_snapshot_as_the_gauges_do() -> None:
    """Two 4-GPU nodes, 3 GPUs used on n0: a gang of 2-GPU members waits; n0's one free GPU
    is stranded, n1 takes two members and is a whole GPU node. Another scheduler's pending
    pod is not ours and does not count."""
    used = pod("used", gpu=3, node_name="n0", phase="Running")
    waiting = gang_pods("g", 2, gang="g", min_available=2, gpu=2, created=T0)
    theirs = pod("theirs", gpu=1, scheduler="default-scheduler")
    snap = snapshot([node("n0", gpu=4), node("n1", gpu=4)], [used, *waiting, theirs])
    lines = explain_cluster(snap, config=Config())
    assert lines[0] == "cluster: 2 ready, schedulable nodes"
    assert "whole GPU nodes free: 1" in lines
    assert "2 members wait; the smallest asks for" in lines[2]
    assert "2 of that shape fit now, node by node" in lines
    assert "nvidia.com/gpu: 1" in lines[-1]


# Stranded by topology: free GPUs in units too small for the gangs held to one unit.

RACK_LABEL = "topology.example/rack"
RACKS_BY_LABEL = Config(topology_labels=(("rack", RACK_LABEL),))


def rack_nodes(gpu: int = 4) -> list[Node]:
    """Six nodes of ``gpu`` GPUs, two in each of rack-0, rack-1 and rack-2."""
    return [node(f"n{i}", gpu=gpu, labels={RACK_LABEL: f"rack-{i // 2}"}) for i in range(6)]


def users(*gpus_on: tuple[str, int]) -> list[Pod]:
    """Another scheduler's running pods, using GPUs on nodes."""
    return [
        pod(f"used-{n}", gpu=g, node_name=n, phase="Running", scheduler="default-scheduler")
        for n, g in gpus_on
    ]


def rack_gang(name: str, count: int, *, gpu: int = 2, mode: str = "hard") -> tuple[Any, list[Pod]]:
    """A Volcano PodGroup of ``count`` members of ``gpu`` GPUs held to one rack (tier 1)."""
    group = volcano_podgroup_from_dict(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {
                "minMember": count,
                "networkTopology": {"mode": mode, "highestTierAllowed": 1},
            },
        }
    )
    pods = gang_pods(name, count, gpu=gpu, annotations={names.VOLCANO_GROUP_NAME: name}, created=T0)
    return group, pods


def test_gpus_free_in_racks_too_small_for_the_smallest_rack_bound_gang_are_stranded() -> None:
    """Racks of 8 GPUs with 3, 5 and 0 free; a gang needing 6 in one rack waits and one
    needing 4 too: only rack-0's 3 are of no use to either (rack-1's 5 hold the 4)."""
    free = {
        "n0": gpus(1),
        "n1": gpus(2),
        "n2": gpus(4),
        "n3": gpus(1),
        "n4": gpus(0),
        "n5": gpus(0),
    }
    topology = topology_from_labels(
        (("rack", RACK_LABEL),), {n.name: n.labels for n in rack_nodes()}
    )
    found = measure(
        free,
        allocatable={name: gpus(4) for name in free},
        waiting=[gpus(2)],
        topology=topology,
        needs=[("rack", 6), ("rack", 4), ("zone", 2)],  # no zone level: not measured
    )
    assert found.stranded_by_tier == {"rack": 3}
    assert found.tier_needs == {"rack": 4}
    assert found.stranded[GPU] == 2  # n0 and n3 take no 2-GPU member


def test_a_pass_remembers_what_a_waiting_rack_bound_gang_needs_and_the_cache_measures_it() -> None:
    """Racks of two 4-GPU nodes with 3, 5 and 2 free: a gang of 3 two-GPU members held to
    one rack needs 6 and waits, though 10 GPUs are free: all 10 are stranded at the rack
    level. The gauge reads it as the shell does, from the cache the pass left."""
    group, pods = rack_gang("train", 3)
    cache = ClusterCache(scheduler_name=SCHEDULER)
    for n in rack_nodes():
        cache.upsert_node(n)
    for p in [*users(("n0", 4), ("n1", 1), ("n2", 3), ("n4", 3), ("n5", 3)), *pods]:
        cache.upsert_pod(p)
    cache.upsert_podgroup(group)
    result = schedule(cache.snapshot(now=T0), now=T0, config=RACKS_BY_LABEL)
    assert not result.bindings
    assert result.memory[group.key].tier_needs == (("rack", 6),)
    cache.remember(dict(result.memory))
    cache.placed_on = result.topology

    asyncio.run(measured_twice(cache, group.key))


async def measured(landed: Callable[[], bool], *, within: float = 5.0) -> None:
    """Until the gauges say what ``landed`` looks for, or ``within`` seconds (the test's
    assertion then says what they said)."""
    deadline = time.monotonic() + within
    while not landed() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


async def measured_twice(cache: ClusterCache, key: GangKey) -> None:
    """The shell's fragmentation task, measuring as the test's passes change the cache."""
    metrics = Metrics.create()
    task = asyncio.create_task(measure_fragmentation(cache, metrics, interval=0.01))
    # The measure runs in a worker thread: the first is read once it has landed.
    await measured(
        lambda: sample(metrics, "gang_scheduler_stranded_by_topology", level="rack") is not None,
    )
    assert sample(metrics, "gang_scheduler_stranded_by_topology", level="rack") == 10
    assert sample(metrics, "gang_scheduler_stranded", resource=GPU) == 3  # n2, n4, n5: 1 each

    # A rack frees up: the gang binds, nothing waits held to a level, the label goes.
    cache.remove_pod(users(("n2", 3))[0].ref.uid)
    result = schedule(cache.snapshot(now=T0 + 1), now=T0 + 1, config=RACKS_BY_LABEL)
    assert result.bindings
    assert result.memory[key].tier_needs == ()
    cache.remember(dict(result.memory))
    await measured(
        lambda: sample(metrics, "gang_scheduler_stranded_by_topology", level="rack") is None,
    )
    assert sample(metrics, "gang_scheduler_stranded_by_topology", level="rack") is None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_a_soft_tier_a_running_gang_and_a_cpu_only_gang_need_nothing_held_to_a_unit() -> None:
    topology = topology_from_labels(
        (("rack", RACK_LABEL),), {n.name: n.labels for n in rack_nodes()}
    )
    for group, pods in (
        rack_gang("soft", 2, mode="soft"),
        rack_gang("cpu", 2, gpu=0),
    ):
        snap = snapshot(rack_nodes(), pods, podgroups=[group])
        gang = resolve(snap, RACKS_BY_LABEL).gangs[group.key]
        assert tier_needs(gang, topology) == ()
    group, pods = rack_gang("running", 3)
    pods[0] = replace(pods[0], node_name="n0", phase="Running")
    snap = snapshot(rack_nodes(), pods, podgroups=[group])
    assert tier_needs(resolve(snap, RACKS_BY_LABEL).gangs[group.key], topology) == ()


def test_explain_cluster_says_what_is_stranded_by_topology() -> None:
    group, pods = rack_gang("train", 3)
    used = users(("n0", 4), ("n1", 1), ("n2", 3), ("n4", 3), ("n5", 3))
    snap = snapshot(rack_nodes(), [*used, *pods], podgroups=[group])
    lines = explain_cluster(snap, config=RACKS_BY_LABEL)
    assert lines[-1] == (
        "stranded by topology at rack: 10 GPUs free in racks with fewer than 6 free, "
        "the least a gang held to one rack needs"
    )


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_each_subgroup_held_to_a_rack_needs_its_own_size_in_one_rack() -> None:
    """Two replicas of 2 one-GPU members, each held to one rack (the subgroup policy's
    networkTopology): each needs 2 GPUs inside one rack; the gang as a whole needs none."""
    group = subgroup_podgroup(
        "llm",
        min_member=4,
        size=2,
        min_subgroups=2,
        networkTopology={"mode": "hard", "highestTierAllowed": 1},
    )
    snap = snapshot(rack_nodes(), replicas("llm", 2, 2), podgroups=[group])
    gang = resolve(snap, RACKS_BY_LABEL).gangs[group.key]
    topology = topology_from_labels(
        (("rack", RACK_LABEL),), {n.name: n.labels for n in rack_nodes()}
    )
    assert tier_needs(gang, topology) == (("rack", 2), ("rack", 2))


def test_a_pass_with_no_gang_stating_a_tier_builds_no_tree() -> None:
    """A flat tree sorts every node (10,000 at the bench's biggest tier): it is built only
    for a pass that places a gang held to a tier, and only then handed to the gauge."""
    plain = gang_pods("plain", 2, gang="plain", min_available=2, gpu=1, created=T0)
    assert schedule(snapshot(rack_nodes(), plain), now=T0, config=RACKS_BY_LABEL).topology is None
    group, pods = rack_gang("train", 2)
    held = schedule(
        snapshot(rack_nodes(), [*plain, *pods], podgroups=[group]), now=T0, config=RACKS_BY_LABEL
    )
    assert held.topology is not None
    assert held.topology.levels == ("rack", "node")


def test_a_timed_out_gang_needs_nothing_held_to_a_unit() -> None:
    """It is not tried again until its pods are made anew, as the pending-gangs gauge says."""
    group, pods = rack_gang("train", 3)
    cache = ClusterCache(scheduler_name=SCHEDULER)
    for p in pods:
        cache.upsert_pod(p)
    cache.upsert_podgroup(group)
    cache.remember({group.key: GangState(tier_needs=(("rack", 6),))})
    assert cache.tier_needs() == [("rack", 6)]
    cache.remember({group.key: GangState(tier_needs=(("rack", 6),), timed_out=True)})
    assert cache.tier_needs() == []
