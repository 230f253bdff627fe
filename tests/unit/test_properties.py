"""Invariants of a pass over random clusters and workloads (hypothesis)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.scheduling import schedule
from scheduler.model.pods import Pod
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, node, pod, snapshot


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    nodes = [
        node(f"n{i}", cpu=str(draw(st.integers(1, 16))), gpu=draw(st.integers(0, 8)))
        for i in range(draw(st.integers(1, 6)))
    ]
    pods: list[Pod] = []
    # Some capacity is already in use, by us or by another scheduler.
    for i in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(nodes)).name
        pods.append(
            pod(
                f"busy-{i}",
                cpu="1",
                node_name=where,
                phase="Running",
                scheduler=draw(st.sampled_from(["gang-scheduler", "default-scheduler"])),
            )
        )
    for g in range(draw(st.integers(1, 5))):
        size = draw(st.integers(1, 6))
        minimum = draw(st.integers(1, size))
        mode = draw(st.sampled_from(["Strict", "NonStrict"]))
        cpu, gpu = draw(st.integers(1, 8)), draw(st.integers(0, 4))
        created = T0 - draw(st.integers(1, 1000))
        priority = draw(st.integers(0, 2))
        pods.extend(
            pod(f"g{g}-{i}", gang=f"g{g}", min_available=minimum, mode=mode, cpu=str(cpu),
                gpu=gpu, created=created, priority=priority)
            for i in range(size)
        )  # fmt: skip
    return snapshot(nodes, pods)


def _new_bindings(snap: Snapshot) -> dict[str, str]:
    return {b.pod.name: b.node for g in schedule(snap, now=T0).bindings for b in g.bindings}


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_a_gang_is_bound_whole_or_not_at_all(snap: Snapshot) -> None:
    bound = _new_bindings(snap)
    per_gang: dict[str, int] = defaultdict(int)
    minimum: dict[str, int] = {}
    for p in snap.pods:
        if p.gang is not None:
            minimum[p.gang.key.name] = p.gang.min_available or 1
            per_gang[p.gang.key.name] += p.ref.name in bound
    for gang, count in per_gang.items():
        assert count == 0 or count >= minimum[gang], f"{gang}: {count} of {minimum[gang]}"


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_no_node_is_ever_over_committed(snap: Snapshot) -> None:
    bound = _new_bindings(snap)
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for p in snap.pods:
        where = p.node_name or bound.get(p.ref.name)
        if where:
            for resource, amount in p.requests.items():
                used[where][resource] += amount
    # Capacity already in use may exceed allocatable (allocatable can shrink under running
    # pods); what the pass adds must never make a node exceed it.
    for name in set(bound.values()):
        amounts = used[name]
        allocatable = snap.nodes[name].allocatable
        for resource, amount in amounts.items():
            assert amount <= allocatable.get(resource, 0), f"{name} over-committed on {resource}"


@settings(max_examples=100, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_same_snapshot_gives_the_same_decisions_whatever_the_order_of_pods(snap, rnd) -> None:
    shuffled = list(snap.pods)
    rnd.shuffle(shuffled)
    again = Snapshot(nodes=snap.nodes, pods=tuple(shuffled))
    first, second = schedule(snap, now=T0), schedule(again, now=T0)
    assert first.bindings == second.bindings
    assert first.events == second.events
    assert first.memory == second.memory
