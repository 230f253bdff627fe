"""Fragmentation (#26): what is free but of no use to what waits, on plain data and through
``explain --cluster``'s reading of a snapshot."""

from __future__ import annotations

from scheduler.core.explaining import explain_cluster
from scheduler.core.fragmentation import measure
from scheduler.model.config import Config
from scheduler.model.resources import GPU, Resources
from tests.unit.builders import T0, gang_pods, node, pod, snapshot


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
