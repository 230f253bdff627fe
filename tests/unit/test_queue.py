"""The queue: a gang that failed for want of room waits for a change that could help it,
and a failed attempt is cheap. Snapshots come from the real cache, as in the scheduler."""

from __future__ import annotations

from dataclasses import replace

from scheduler.cache import kinds
from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.decisions import Result
from tests.unit.builders import SCHEDULER, T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_dra import (
    DRIVER,
    SELECTORS,
    claim,
    device_class,
    exactly,
    gang_of_claimers,
    gpu_slice,
)

CONFIG = Config(unschedulable_flush_seconds=60.0)


class Loop:
    """The shell's part, in memory: snapshot, pass, remember, assume."""

    def __init__(self, *pods, nodes) -> None:
        self.cache = ClusterCache(scheduler_name=SCHEDULER)
        for n in nodes:
            self.cache.upsert_node(n)
        for p in pods:
            self.cache.upsert_pod(p)

    def run(self, now: float) -> Result:
        result = schedule(self.cache.snapshot(now=now), now=now, config=CONFIG)
        self.cache.remember(dict(result.memory))
        for group in result.bindings:
            for b in group.bindings:
                self.cache.assume(b.pod, b.node, by=SCHEDULER)
        return result


def test_gang_that_did_not_fit_is_not_tried_again_until_a_node_could_take_a_member() -> None:
    loop = Loop(*gang_pods("g", 2, gang="g", min_available=2, cpu="3"), nodes=[node("n0", cpu="4")])
    assert loop.run(T0).attempts  # tried, failed
    assert not loop.run(T0 + 20).attempts  # backoff over, but nothing changed: parked
    loop.cache.upsert_pod(pod("t", scheduler="x", node_name="n0", phase="Running", cpu="2"))
    assert not loop.run(T0 + 25).attempts  # n0 changed, but no member fits there now
    loop.cache.upsert_node(node("n1", cpu="8"))
    assert bind_map(loop.run(T0 + 30)) == {"g-0": "n1", "g-1": "n1"}


def test_parked_gang_is_tried_again_when_a_pod_finishes_and_frees_its_room() -> None:
    busy = pod("busy", scheduler="x", node_name="n0", phase="Running", cpu="4")
    loop = Loop(busy, *gang_pods("g", 2, gang="g", min_available=2, cpu="3"),
                nodes=[node("n0", cpu="4"), node("n1", cpu="4")])  # fmt: skip
    assert not bind_map(loop.run(T0))
    assert not loop.run(T0 + 20).attempts
    loop.cache.upsert_pod(replace(busy, phase="Succeeded"))
    assert len(bind_map(loop.run(T0 + 21))) == 2


def test_parked_gang_is_tried_again_when_its_own_pods_change() -> None:
    members = gang_pods("g", 2, gang="g", min_available=2, cpu="3")
    loop = Loop(*members, nodes=[node("n0", cpu="4")])
    loop.run(T0)
    assert not loop.run(T0 + 20).attempts
    smaller = pod("g-1", gang="g", min_available=2, cpu="1")
    loop.cache.upsert_pod(smaller)
    assert loop.run(T0 + 21).attempts


def test_parked_gang_is_tried_again_after_the_flush_interval() -> None:
    loop = Loop(*gang_pods("g", 2, gang="g", min_available=2, cpu="3"), nodes=[node("n0", cpu="4")])
    first = loop.run(T0)
    assert first.wake_at is not None
    assert not loop.run(T0 + 59).attempts
    assert loop.run(T0 + 61).attempts


def test_many_gangs_of_one_shape_fail_in_one_pass_each_naming_its_own_member() -> None:
    gangs = [p for g in range(50) for p in gang_pods(f"g{g}", 4, gang=f"g{g}", min_available=4,
                                                       cpu="3", created=T0 - 100 + g)]  # fmt: skip
    result = schedule(snapshot([node(f"n{i}", cpu="4") for i in range(3)], gangs), now=T0)
    assert not bind_map(result)
    failed = {e.regarding.name: e.message for e in result.events if e.reason == "FailedScheduling"}
    assert len(failed) == 200
    assert "g17-3: 0/3 nodes are available: 3 Insufficient cpu." in failed["g17-0"]
    assert "g0-3: 0/3 nodes are available" in failed["g0-0"]


def test_events_say_the_failure_once_while_parked() -> None:
    loop = Loop(*gang_pods("g", 2, gang="g", min_available=2, cpu="3"), nodes=[node("n0", cpu="4")])
    said = [len(events(loop.run(T0 + t), "FailedScheduling")) for t in (0, 20, 40, 61)]
    assert said == [2, 0, 0, 0]


def test_parked_gang_left_out_of_a_snapshot_still_wakes_the_loop_for_its_timeout() -> None:
    members = gang_pods("g", 2, gang="g", min_available=2, cpu="3", waiting_time="30s")
    loop = Loop(*members, nodes=[node("n0", cpu="4")])
    loop.run(T0)
    loop.cache.upsert_pod(pod("other", cpu="2"))  # another gang's pass: g is not in it
    later = loop.run(T0 + 20)
    assert "uid-default-g-0" not in {p.ref.uid for p in loop.cache.snapshot(now=T0 + 20).pods}
    assert later.wake_at is not None
    assert later.wake_at <= T0 + 30
    timed_out = loop.run(T0 + 31)
    assert events(timed_out, "GangTimeout")


def test_holds_a_timed_out_nonstrict_gang_lets_go_wake_a_parked_gang() -> None:
    holder = gang_pods("a", 3, gang="a", min_available=3, cpu="2", mode="NonStrict",
                       waiting_time="20s", created=T0 - 200)  # fmt: skip
    loop = Loop(*holder, nodes=[node("n0", cpu="4")])
    loop.run(T0)  # a holds two members' room: 4 cpu
    loop.cache.upsert_pod(pod("b", cpu="2"))
    assert not bind_map(loop.run(T0 + 1))  # b does not fit beside the holds: parked
    assert events(loop.run(T0 + 21), "GangTimeout")  # a lets go of its holds
    assert bind_map(loop.run(T0 + 25)) == {"b": "n0"}  # long before the 60 s flush


def test_the_room_a_head_gang_held_wakes_a_parked_gang_when_the_head_goes() -> None:
    """Fairness bench through the simulator: room held for a gang (a starving head's, a
    preemptor's nominated room) and let go changes no node, and a gang parked for want of
    it waited for the 60 s flush."""
    head = gang_pods("h", 2, gang="h", min_available=2, cpu="4")
    theirs = pod("theirs", scheduler="x", node_name="n1", phase="Running", cpu="4")
    loop = Loop(*head, theirs, nodes=[node("n0", cpu="4"), node("n1", cpu="4")])
    loop.run(T0)  # h does not fit
    starving = loop.run(T0 + 301)  # past the starvation bound: it holds n0 as it waits
    assert any(s.head_target for s in starving.memory.values())
    loop.cache.upsert_pod(pod("small", cpu="2"))
    assert not bind_map(loop.run(T0 + 302))  # n0 is held for h: small is parked
    assert not [a for a in loop.run(T0 + 306).attempts if a.gangs[0].name == "small"]
    for member in head:
        loop.cache.remove_pod(member.ref.uid)  # h is deleted: nothing of it was bound
    assert bind_map(loop.run(T0 + 307)) == {"small": "n0"}  # long before the 60 s flush


def test_parked_gang_asking_devices_is_tried_again_once_a_claim_lets_them_go() -> None:
    """Chaos seed 11332: a pod that went freed its node's room before the ResourceClaim
    controller took its claim's allocation off; the gang tried then, found no devices and
    was parked, and the allocation going changed no node: it waited for the flush.
    kube-scheduler's DynamicResources requeues a pod on such a claim change."""
    results = [
        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": f"gpu-{i}"} for i in range(8)
    ]
    held = claim(
        "old-gpus", exactly(count=8), status={"allocation": {"devices": {"results": results}}}
    )
    loop = Loop(nodes=[node("n0")])
    loop.cache.selectors = SELECTORS.evaluate
    loop.cache.upsert(kinds.RESOURCE_SLICES, slice_from_dict(gpu_slice("n0")))
    loop.cache.upsert(kinds.DEVICE_CLASSES, device_class_from_dict(device_class()))
    loop.cache.upsert_resource_claim(resource_claim_from_dict(held))
    pods, claims = gang_of_claimers("g", 1)
    for c in claims:
        loop.cache.upsert_resource_claim(resource_claim_from_dict(c))
    for p in pods:
        loop.cache.upsert_pod(p)
    assert not bind_map(loop.run(T0))  # every device taken: parked
    assert not loop.run(T0 + 20).attempts  # nothing changed
    freed = replace(resource_claim_from_dict(held), allocation=None)
    loop.cache.upsert_resource_claim(freed)  # no node changed
    assert bind_map(loop.run(T0 + 25)) == {"g-0": "n0"}, "before the flush at T0 + 60"
