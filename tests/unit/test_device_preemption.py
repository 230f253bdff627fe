"""Preemption frees devices: in the what-if, the devices of a claim only victims hold are
free for the preemptor's claims; a claim a pod that stays also holds keeps its devices; and
nothing is allocated on a victim's devices before the ResourceClaim controller has let go
of them (the preemptor is nominated, not bound)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler.core.scheduling import schedule
from scheduler.model.pods import Pod
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, node
from tests.unit.test_allocation import bind_map
from tests.unit.test_dra import (
    DRIVER,
    claim,
    claiming_pod,
    dra_snapshot,
    exactly,
    gpu_slice,
    written,
)
from tests.unit.test_preemption import evicted


def _held(on: str, *holders: str, count: int = 8) -> dict[str, Any]:
    """A claim's status: ``count`` GPUs of node ``on`` allocated, reserved for ``holders``."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": on, "device": f"gpu-{i}"}
                    for i in range(count)
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [on]}]}
                ]
            },
        },
        "reservedFor": [
            {"resource": "pods", "name": h, "uid": f"uid-default-{h}"} for h in holders
        ],
    }


def _running(name: str, claim_name: str, *, on: str, priority: int, created: float) -> Pod:
    p = claiming_pod(name, claim_name, template=False, node_name=on, phase="Running",
                     priority=priority, created=created, cpu="1")  # fmt: skip
    return replace(p, gang=None) if p.gang is not None else p


def _preemptor(name: str = "high") -> tuple[Pod, dict[str, Any]]:
    p = claiming_pod(name, f"{name}-gpus", gang=name, min_available=1, priority=100,
                     created=T0, cpu="1")  # fmt: skip
    return p, claim(f"{name}-gpus", exactly(count=8), owner=name)


def test_a_high_priority_pod_preempts_the_pod_whose_claim_holds_the_gpus_it_needs() -> None:
    low_a = _running("low-a", "a-gpus", on="n0", priority=10, created=T0 - 500)
    low_b = _running("low-b", "b-gpus", on="n1", priority=10, created=T0 - 100)
    high, high_claim = _preemptor()
    snap = dra_snapshot(
        [node("n0"), node("n1")],
        [low_a, low_b, high],
        slices=[gpu_slice("n0"), gpu_slice("n1")],
        claims=[
            claim("a-gpus", exactly(count=8), status=_held("n0", "low-a")),
            claim("b-gpus", exactly(count=8), status=_held("n1", "low-b")),
            high_claim,
        ],
    )
    result = schedule(snap, now=T0)
    assert evicted(result) == ["low-b"], "the younger of the two"
    assert {n.pod.name: n.node for n in result.nominations} == {"high": "n1"}
    assert bind_map(result) == {}, "bound only once the victim's claim lets its GPUs go"
    assert written(result) == {}, "no claim is written on devices another claim holds"


def test_a_claim_a_pod_that_stays_also_holds_keeps_its_gpus_and_nothing_is_evicted() -> None:
    low = _running("low", "shared", on="n0", priority=10, created=T0 - 100)
    keeper = _running("keeper", "shared", on="n0", priority=1000, created=T0 - 100)
    high, high_claim = _preemptor()
    snap = dra_snapshot(
        [node("n0")],
        [low, keeper, high],
        slices=[gpu_slice("n0")],
        claims=[claim("shared", exactly(count=8), status=_held("n0", "low", "keeper")), high_claim],
    )
    result = schedule(snap, now=T0)
    assert evicted(result) == []
    assert result.nominations == ()


def test_the_preemptor_binds_on_the_freed_gpus_once_the_victims_claim_is_gone() -> None:
    low_a = _running("low-a", "a-gpus", on="n0", priority=10, created=T0 - 500)
    high, high_claim = _preemptor()
    high = replace(high, nominated_node="n1")
    snap = dra_snapshot(
        [node("n0"), node("n1")],
        [low_a, high],
        slices=[gpu_slice("n0"), gpu_slice("n1")],
        claims=[claim("a-gpus", exactly(count=8), status=_held("n0", "low-a")), high_claim],
    )
    result = schedule(snap, now=T0 + 5)
    assert bind_map(result) == {"high": "n1"}
    devices, reserved = written(result)["high-gpus"]
    assert devices == [f"{DRIVER}/n1/gpu-{i}" for i in range(8)]
    assert reserved == ["high"]


@st.composite
def gpu_cluster(draw: st.DrawFn) -> tuple[Snapshot, dict[str, set[str]]]:
    """One to three nodes of 8 GPUs; running pods of random priority each holding a claim
    of 1 to 4 GPUs of their node (some claims shared by two pods); pending pods of random
    priority claiming 1 to 8 GPUs from claims not yet allocated. Returns the snapshot and
    what each allocated claim holds."""
    count = draw(st.integers(1, 3))
    nodes = [node(f"n{i}") for i in range(count)]
    pods: list[Pod] = []
    claims: list[dict[str, Any]] = []
    held: dict[str, set[str]] = {}
    for i in range(count):
        at, free = f"n{i}", 8
        for j in range(draw(st.integers(0, 4))):
            size = draw(st.integers(1, 4))
            if size > free:
                break
            first = 8 - free
            free -= size
            name = f"c{i}{j}"
            holders = [f"r{i}{j}"] + ([f"s{i}{j}"] if draw(st.booleans()) else [])
            status = _held(at, *holders, count=size)
            for result, k in zip(
                status["allocation"]["devices"]["results"], range(first, first + size), strict=True
            ):
                result["device"] = f"gpu-{k}"
            claims.append(claim(name, exactly(count=size), status=status))
            held[name] = {f"{DRIVER}/{at}/gpu-{k}" for k in range(first, first + size)}
            for h in holders:
                pods.append(_running(h, name, on=at, priority=draw(st.integers(0, 200)),
                                     created=T0 - draw(st.integers(1, 500))))  # fmt: skip
    for w in range(draw(st.integers(1, 3))):
        p = claiming_pod(f"w{w}", f"w{w}-gpus", gang=f"w{w}", min_available=1,
                         priority=draw(st.integers(0, 200)), created=T0, cpu="1")  # fmt: skip
        pods.append(p)
        claims.append(claim(f"w{w}-gpus", exactly(count=draw(st.integers(1, 8))), owner=p.ref.name))
    snap = dra_snapshot(nodes, pods, slices=[gpu_slice(f"n{i}") for i in range(count)],
                        claims=claims)  # fmt: skip
    return snap, held


@settings(max_examples=200, deadline=None)
@given(gpu_cluster())
def test_no_claim_is_written_with_a_device_another_claim_holds(
    case: tuple[Snapshot, dict[str, set[str]]],
) -> None:
    snap, held = case
    result = schedule(snap, now=T0)
    taken = set().union(*held.values()) if held else set()
    written_now: set[str] = set()
    for group in result.bindings:
        for write in group.claims:
            if write.allocation is None or write.name in held:
                continue
            devices = {str(d) for d in write.allocation.devices}
            assert not devices & taken, f"{write.name} given {devices & taken}, held by a claim"
            assert not devices & written_now, f"{write.name} given a device twice in a pass"
            written_now |= devices
    event(f"evicted {min(len(result.evictions), 3)}, bound {min(len(bind_map(result)), 3)}")


def test_the_gpus_holder_is_found_behind_more_younger_victims_than_are_tried_in_order() -> None:
    """Preemption's order (lowest priority, fewest pods, youngest) tries MAX_TRIES units;
    then it goes node by node, weighing what the preemptor asks. Its GPUs, asked by claim,
    are weighed too: the node whose victims free them is planned first (it was judged by
    cpu alone, found room without victims everywhere, and no one was preempted)."""
    from scheduler.core.solvers.victims import MAX_TRIES  # noqa: PLC0415
    from tests.unit.builders import pod  # noqa: PLC0415

    holder = _running("low-a", "a-gpus", on="n0", priority=10, created=T0 - 500)
    younger = [
        pod(f"web-{i}", cpu="1", node_name="busy", phase="Running", priority=10,
            created=T0 - 50 + i)
        for i in range(MAX_TRIES + 2)
    ]  # fmt: skip
    high, high_claim = _preemptor()
    snap = dra_snapshot(
        [node("n0"), node("busy", cpu="128")],
        [holder, *younger, high],
        slices=[gpu_slice("n0")],
        claims=[claim("a-gpus", exactly(count=8), status=_held("n0", "low-a")), high_claim],
    )
    result = schedule(snap, now=T0)
    assert evicted(result) == ["low-a"]
    assert {n.pod.name: n.node for n in result.nominations} == {"high": "n0"}
