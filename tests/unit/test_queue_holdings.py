"""What the queues' pods hold, summed by the cache node by node (#22): a pass's queue book
no longer walks every bound pod (122 ms at 5,000 nodes and 50,000 pods). The sums must be
what the walk gives, whatever happened in between: random histories of pods coming, binding,
finishing, leaving and going, assumptions made and forgotten, PodGroups naming a queue,
another or none, nodes going unready, cordoned, deleted (their pods still there) and back,
and the Queues' API going away and coming back."""

from __future__ import annotations

import random
from dataclasses import replace

from scheduler.cache.cluster import QUEUES, ClusterCache
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.holdings import holdings
from scheduler.model.pods import GangKey, PodRef
from tests.unit.builders import SCHEDULER, T0, node, pod, podgroup
from tests.unit.test_queues import queue

NODES = ("n0", "n1", "n2", "n3")
GANGS = ("g0", "g1", "g2")
QUEUE_NAMES = ("q-a", "q-b", "")


def _walked(cache: ClusterCache):
    snap = cache.snapshot(now=T0)
    return snap.queue_holdings, holdings(
        snap.nodes, snap.node_infos or {}, ours=frozenset({SCHEDULER}), podgroups=snap.podgroups
    )


def _step(cache: ClusterCache, rng: random.Random, refs: dict[str, PodRef], n: int) -> None:
    """One random change of the cluster, as the watches (or the binder) would make it."""
    what = rng.randrange(9)
    if what <= 2:  # a pod comes or changes
        name = f"p{rng.randrange(12)}"
        labels = {}
        queue_name = rng.choice(QUEUE_NAMES)
        if queue_name:
            labels[names.QUEUE] = queue_name
        made = pod(
            name,
            gpu=rng.randrange(3),
            pod_group=rng.choice((*GANGS, None)),
            scheduler=rng.choice((SCHEDULER, SCHEDULER, "default-scheduler")),
            node_name=rng.choice(("", *NODES)),
            phase=rng.choice(("Pending", "Running", "Running", "Succeeded")),
            labels=labels,
        )
        if rng.random() < 0.2:
            made = replace(made, deleting=True)
        refs[name] = made.ref
        cache.upsert_pod(made)
    elif what == 3 and refs:  # a pod goes
        name = rng.choice(sorted(refs))
        cache.remove_pod(refs.pop(name).uid)
    elif what == 4 and refs:  # an assumption, or one forgotten
        ref = refs[rng.choice(sorted(refs))]
        if rng.random() < 0.5:
            cache.assume(ref, rng.choice(NODES))
        else:
            cache.forget(ref)
    elif what == 5:  # a PodGroup names a queue, another, none, or goes
        gang = rng.choice(GANGS)
        if rng.random() < 0.25:
            cache.remove_podgroup(GangKey("default", gang))
        else:
            queue_name = rng.choice(QUEUE_NAMES)
            notes = {names.VOLCANO_QUEUE_NAME: queue_name} if queue_name else {}
            cache.upsert_podgroup(podgroup(gang, annotations=notes))
    elif what == 6:  # a node changes: unready, cordoned, deleted (pods stay), back
        name = rng.choice(NODES)
        how = rng.randrange(4)
        if how == 0:
            cache.remove_node(name)
        else:
            cache.upsert_node(node(name, gpu=8, ready=how != 1, unschedulable=how == 2))
    elif what == 7 and rng.random() < 0.15:  # the Queues' API goes or comes back
        cache.serve(QUEUES, rng.random() < 0.7)
    else:  # a snapshot in between: the sums move on from there
        cache.snapshot(now=T0 + n)


def test_the_cache_sums_what_the_queues_hold_as_the_walk_over_every_pod_does() -> None:
    compared = 0
    for seed in range(300):
        rng = random.Random(seed)
        cache = ClusterCache(scheduler_name=SCHEDULER)
        for name in NODES:
            cache.upsert_node(node(name, gpu=8))
        cache.serve(QUEUES, True)
        for name in ("q-a", "q-b"):
            cache.upsert_queue(queue(name))
        refs: dict[str, PodRef] = {}
        for n in range(40):
            _step(cache, rng, refs, n)
            if rng.random() < 0.3:
                summed, walked = _walked(cache)
                if summed is not None:
                    assert summed == walked, f"seed {seed}, step {n}"
                    compared += 1
    assert compared > 1000  # the histories reached the comparison, with queues served


def test_without_queues_served_nothing_is_summed_and_the_pass_walks() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_node(node("n0", gpu=8))
    cache.upsert_pod(pod("a", gpu=2, node_name="n0", phase="Running", labels={names.QUEUE: "q"}))
    assert cache.snapshot(now=T0).queue_holdings is None
    cache.serve(QUEUES, True)
    held = cache.snapshot(now=T0).queue_holdings
    assert held is not None
    assert held.held["q"]["nvidia.com/gpu"] == 2
    assert held.room["nvidia.com/gpu"] == 8


def test_a_podgroup_that_moves_its_gang_to_another_queue_moves_what_its_bound_pods_hold() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.serve(QUEUES, True)
    cache.upsert_node(node("n0", gpu=8))
    cache.upsert_podgroup(podgroup("g", annotations={names.VOLCANO_QUEUE_NAME: "q-a"}))
    cache.upsert_pod(pod("a", gpu=4, pod_group="g", node_name="n0", phase="Running"))
    assert set(cache.snapshot(now=T0).queue_holdings.held) == {"q-a"}
    cache.upsert_podgroup(podgroup("g", annotations={names.VOLCANO_QUEUE_NAME: "q-b"}))
    assert set(cache.snapshot(now=T0).queue_holdings.held) == {"q-b"}
    cache.remove_podgroup(GangKey("default", "g"))
    assert set(cache.snapshot(now=T0).queue_holdings.held) == {"default"}


def test_pods_coming_to_and_leaving_a_packed_node_keep_the_sums_the_walk_gives() -> None:
    """Pods that come to and go from a node change its part by themselves (the node's
    other pods are not walked again), and the sums stay what the walk gives."""
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.serve(QUEUES, True)
    cache.upsert_node(node("n0", gpu=8))
    cache.upsert_podgroup(podgroup("g", annotations={names.VOLCANO_QUEUE_NAME: "q-a"}))
    for i in range(6):
        cache.upsert_pod(pod(f"a{i}", gpu=1, pod_group="g", node_name="n0", phase="Running"))
    cache.upsert_pod(pod("other", gpu=1, scheduler="default-scheduler", node_name="n0"))
    summed, walked = _walked(cache)
    assert summed == walked
    assert summed.held["q-a"]["nvidia.com/gpu"] == 6
    cache.upsert_pod(pod("a6", gpu=1, pod_group="g", node_name="n0", phase="Running"))
    cache.remove_pod(pod("a0", pod_group="g").ref.uid)
    cache.remove_pod(pod("other", scheduler="default-scheduler").ref.uid)
    summed, walked = _walked(cache)
    assert summed == walked
    assert summed.held["q-a"]["nvidia.com/gpu"] == 6
    assert summed.room["nvidia.com/gpu"] == 8


def test_a_member_gone_while_its_podgroup_moves_queue_leaves_nothing_in_the_old_one() -> None:
    """Counted in q-a, the member is deleted and its PodGroup names q-b before the next
    snapshot: it is no member of the gang any more, and q-a must not keep its GPUs."""
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.serve(QUEUES, True)
    cache.upsert_node(node("n0", gpu=8))
    cache.upsert_podgroup(podgroup("g", annotations={names.VOLCANO_QUEUE_NAME: "q-a"}))
    cache.upsert_pod(pod("a", gpu=4, pod_group="g", node_name="n0", phase="Running"))
    assert cache.snapshot(now=T0).queue_holdings.held["q-a"]["nvidia.com/gpu"] == 4
    cache.remove_pod(pod("a", pod_group="g").ref.uid)
    cache.upsert_podgroup(podgroup("g", annotations={names.VOLCANO_QUEUE_NAME: "q-b"}))
    summed, walked = _walked(cache)
    assert summed == walked
    assert summed.held == {}


def test_a_pass_on_the_caches_sums_decides_as_one_that_walks() -> None:
    """The same cluster, one snapshot with the cache's sums and one without: the same
    decisions (a queue at its capability holds its gang back in both)."""
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.serve(QUEUES, True)
    cache.upsert_queue(queue("q-a", capability={"nvidia.com/gpu": "8"}))
    for name in ("n0", "n1"):
        cache.upsert_node(node(name, gpu=8))
    cache.upsert_pod(
        pod("run", gpu=6, node_name="n0", phase="Running", labels={names.QUEUE: "q-a"})
    )
    for i in range(2):
        cache.upsert_pod(
            pod(f"w{i}", gpu=2, gang="w", min_available=2, labels={names.QUEUE: "q-a"})
        )
    summed = cache.snapshot(now=T0)
    assert summed.queue_holdings is not None
    walked = replace(summed, queue_holdings=None)
    one, other = schedule(summed, now=T0), schedule(walked, now=T0)
    assert one.bindings == other.bindings == ()
    assert [e.message for e in one.events] == [e.message for e in other.events]
    assert any("capability" in e.message for e in one.events)
