"""The cache keeps nothing of what is gone: a gang whose pods and PodGroup are gone names
no group, and a node gone leaves no generation behind (found while tracing the soak's
memory growth: each kept an entry per gang or node ever seen)."""

from __future__ import annotations

from scheduler.cache.cluster import ClusterCache
from tests.unit.builders import SCHEDULER, T0, node, pod


def test_a_gang_gone_names_no_group_any_more() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    members = [pod(f"a-{i}", gang="a", min_available=2, groups=["default/a", "default/b"])
               for i in range(2)]  # fmt: skip
    for member in members:
        cache.upsert_pod(member)
    assert cache.gangs.named_by, "gang a names its group"
    cache.remove_pod(members[0].ref.uid)
    assert cache.gangs.named_by, "a member is left"
    cache.remove_pod(members[1].ref.uid)
    assert cache.gangs.named_by == {}


def test_a_node_gone_leaves_no_generation_behind() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_node(node("n0"))
    cache.snapshot(now=T0)
    cache.remove_node("n0")
    cache.snapshot(now=T0)
    assert "n0" not in cache.nodes._node_generation
